// What the state store and the offline tools share about the files of a state directory: their
// names, how messages name a place in them, and the bytes of a fresh snapshot and journal.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "journal/format.h"
#include "journal/journal.h"

namespace fencefs::journal {

std::string parent_dir(const std::string& dir);

// Root creates, opens and truncates files in a state directory: it must belong to this process as
// the storage sees it (NFS root_squash maps root to nobody: a probe file made in it tells) and be
// writable by nobody else. An O_RDONLY descriptor of it (its files are then reached through that,
// common/anchored.h), or -1 with the reason, naming the fix, in *error. nofollow: refuse a link
// as its last component.
int open_private_state_dir(const std::string& dir, bool nofollow, std::string* error);
// The state directory as named (`named`: its parent made canonical, its last component as given)
// against where it resolved (`canonical`). When they differ, the last component is a link, which
// is followed only where nobody else may have put it: not inside `backing` (whoever may write its
// root may; "" when unknown) nor in a directory writable by anyone but this user and root. False
// with the reason in *error.
bool state_link_acceptable(const std::string& named, const std::string& canonical,
                           const std::string& backing, std::string* error);

struct Paths {
  explicit Paths(const std::string& d);
  std::string dir, snapshot, journal, snapshot_tmp, journal_tmp;
};

// "FILE: reason at byte N"
std::string at(const std::string& file, uint64_t offset, const std::string& reason);

// A whole snapshot holding `domains` (sorted by id).
std::string snapshot_bytes(const format::Incarnation& inc, uint64_t generation,
                           const std::vector<DomainRecord>& domains);
// An empty journal; *chain receives the seed of its first record.
std::string journal_header(const format::Incarnation& inc, uint64_t generation, uint32_t* chain);

}  // namespace fencefs::journal
