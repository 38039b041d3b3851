// An outside authority over the domains' epochs (cluster mode): when present, the Fence asks it to
// raise an epoch instead of writing its own journal, and asks it before admitting anything.
#pragma once
#include <string>

#include "fence/domain.h"

namespace fencefs::fence {

class EpochAuthority {
 public:
  virtual ~EpochAuthority() = default;
  // Raises d to `token` everywhere (token 0: one above the cluster's epoch, an acquisition;
  // *acquired, when given, receives the epoch made). Returns 0 only once no member can admit
  // below it and this member's durable view is at least it; else an errno and *why (nothing is
  // admitted under it then). Called without d's lock held.
  virtual int advance(Domain& d, Epoch token, std::string* why, Epoch* acquired) = 0;
  // Hot path, before every admission: 0, or EIO while this member is cut off from the authority.
  virtual int admissible(std::string* why) = 0;
  // d.uncommitted is set and token >= it: waits until that epoch is committed everywhere (0) or
  // gives up (errno, *why). Called without d's lock held.
  virtual int await_commit(Domain& d, Epoch token, std::string* why) = 0;
  // A domain was declared on this member: declare it for every member.
  virtual int declare(const std::string& path, Epoch epoch, std::string* why) = 0;
  // A JSON object for the status file.
  virtual std::string status_json() = 0;
};

}  // namespace fencefs::fence
