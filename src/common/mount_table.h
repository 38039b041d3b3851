// This mount namespace's mount table, read with libmount (which decodes the escaped paths).
#pragma once
#include <libmount/libmount.h>

#include <functional>
#include <optional>
#include <string>

namespace fencefs::common {

// The entries of TABLE, newest first, until `stop` returns true: whether one did; nullopt (with
// *error) when the table cannot be read. Targets are compared as strings by the callers:
// libmount's lookups canonicalize, which would stat them (a FUSE mount not yet answering INIT
// would not answer).
std::optional<bool> any_mount(const std::string& table, const std::function<bool(libmnt_fs*)>& stop,
                              std::string* error);

// Whether the filesystem of `fd` (O_PATH included) is a FUSE mount that a user other than root
// made (its user_id), or may be (it cannot be told): its daemon answers every xattr, trusted.*
// included, as that user likes. A stamp there is no evidence of anything. Trust goes by who
// mounted: a mount root made, whatever serves it, counts.
bool on_user_fuse(int fd);

}  // namespace fencefs::common
