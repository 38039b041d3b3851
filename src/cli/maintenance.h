// What verify, recover and audit share: the fencefs mounts of this machine, a mount's status,
// and the privileges a scan of BACKING needs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace fencefs::cli {

constexpr uint64_t kMaxToken = 9223372036854775807ull;

// A JSON string literal (quoted and escaped) for the --json outputs.
std::string q(std::string_view s);
// realpath, or the path itself (minus trailing slashes) when it does not resolve.
std::string canonical(const std::string& p);

struct FencefsMount {
  std::string backing;  // fsname= of the mount: the canonical BACKING
  std::string dir;      // mountpoint
};
std::vector<FencefsMount> fencefs_mounts();
const FencefsMount* mount_of_backing(const std::vector<FencefsMount>& mounts,
                                     const std::string& backing);
// The daemon's status JSON of a mount (nullopt when unreadable).
std::optional<json::Value> mount_status(const std::string& mnt);

bool has_cap_sys_admin();
// Raises the soft limit of open files to the hard one: a deep tree holds one fd per level.
void raise_fd_limit();

}  // namespace fencefs::cli
