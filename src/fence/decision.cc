#include "fence/decision.h"

#include <cstring>

#include "common/error.h"
#include "common/log.h"

namespace fencefs::fence {
namespace {

Decision refuse(Verdict v, int err, Reason r, std::string message) {
  return Decision{v, err, r, std::move(message)};
}

}  // namespace

Decision decide(const Request& r) {
  const bool mutation = r.kind == RequestKind::Admit;
  const bool advance = r.kind == RequestKind::Advance;
  if ((mutation || advance) && r.max_stamp > r.epoch && r.token < r.max_stamp) {
    return refuse(Verdict::Rollback, EIO, Reason::Rollback,
                  fmt::format("rollback detected: a file carries epoch {} but the domain's "
                              "recorded epoch is {} (state restored from an older copy?); "
                              "see `fencectl recover`",
                              r.max_stamp, r.epoch));
  }
  if (r.kind == RequestKind::Ioctl && r.stale_handle) {
    return refuse(Verdict::Stale, ESTALE, Reason::Stale,
                  "this handle was refused as stale; open the file again");
  }
  Verdict v = judge(r.token, r.epoch, advance && r.force ? kMaxToken : r.max_jump);
  switch (v) {
    case Verdict::Missing:
      if (mutation)
        return refuse(v, EPERM, Reason::Missing,
                      "no fence token: bind one for this domain (fencectl run, or write "
                      "'bind DOMAIN TOKEN' to .fencefs/ctl)");
      return refuse(v, EINVAL, Reason::Malformed, "no token");
    case Verdict::Stale:
      // Refused at bind time as well: a superseded owner learns it before it writes. A token
      // bound while current and superseded later is still refused at each mutation.
      return refuse(v, ESTALE, Reason::Stale,
                    fmt::format("stale token {} < epoch {}", r.token, r.epoch));
    case Verdict::TooFar:
      return refuse(v, ERANGE, Reason::TooFar,
                    fmt::format("token {} is more than max_jump {} above epoch {} of domain {}",
                                r.token, r.max_jump, r.epoch, r.domain));
    case Verdict::Equal:
      if (advance)
        return Decision{v, 0, Reason::Stale,
                        fmt::format("domain {} already at epoch {}", r.domain, r.epoch)};
      break;
    case Verdict::Advance:
      // A bound token raises nothing until a mutation presents it.
      if (advance)
        return Decision{v, 0, Reason::Stale,
                        fmt::format("domain {} advanced to epoch {}", r.domain, r.token), true};
      return Decision{v, 0, Reason::Stale, {}, mutation};
    case Verdict::Rollback:
      break;
  }
  return Decision{v, 0, Reason::Stale, {}};
}

Decision durability_failure(Epoch token, int err) {
  return refuse(Verdict::Advance, err, Reason::Io,
                fmt::format("could not make epoch {} durable: {}", token, common::errstr(err)));
}

}  // namespace fencefs::fence
