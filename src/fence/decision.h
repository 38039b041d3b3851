// What a request gets from the rule: verdict, errno, reason and message, for every kind of
// request (a mutation's admission, an advance, a bind, a handle's token). The one place where
// the rule's consequences are written; Fence, the control file and the ioctls only carry them out.
#pragma once
#include <string>
#include <string_view>

#include "fence/domain.h"
#include "fence/rule.h"

namespace fencefs::fence {

enum class RequestKind {
  Admit,    // a mutation presenting a token
  Advance,  // the coordinated step: raise the epoch now
  Bind,     // a process binds a token it will present later
  Ioctl,    // a handle is rebound to a token (FENCEFS_IOC_SET_TOKEN)
};

struct Request {
  RequestKind kind = RequestKind::Admit;
  Epoch token = 0;
  Epoch epoch = 0;      // the domain's durable epoch
  Epoch max_stamp = 0;  // the highest stamp seen in the domain (rollback evidence)
  Epoch max_jump = 0;
  bool force = false;         // an issuer's advance: max_jump does not apply
  bool stale_handle = false;  // Ioctl: the handle was already refused as stale
  std::string_view domain;    // for messages
};

struct Decision {
  Verdict verdict = Verdict::Missing;
  int err = 0;                    // 0: allowed
  Reason reason = Reason::Stale;  // why, when refused
  std::string message;
  bool raise = false;  // allowed once the epoch was raised durably to the token
  bool refused() const { return err != 0; }
};

Decision decide(const Request& r);
// The refusal when the new epoch could not be made durable (err from the journal).
Decision durability_failure(Epoch token, int err);

}  // namespace fencefs::fence
