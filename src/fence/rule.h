// The fencing rule, as a pure function: everything else calls it, nothing re-implements it.
// decision.h turns its verdict into what a request gets (errno, reason, message).
#pragma once
#include "fence/token.h"

namespace fencefs::fence {

enum class Verdict {
  Missing,   // no token presented: EPERM
  Stale,     // token < epoch: ESTALE
  Equal,     // token == epoch: allowed (subject to ordinary permissions)
  Advance,   // token > epoch: make the new epoch durable, then allow
  TooFar,    // token > epoch + max_jump: ERANGE (epoch squatting)
  Rollback,  // a stamp above the epoch, token below it: EIO (never returned by judge())
};

constexpr Verdict judge(Epoch token, Epoch epoch, Epoch max_jump) {
  if (token == 0) return Verdict::Missing;
  if (token < epoch) return Verdict::Stale;
  if (token == epoch) return Verdict::Equal;
  if (token - epoch > max_jump) return Verdict::TooFar;
  return Verdict::Advance;
}

}  // namespace fencefs::fence
