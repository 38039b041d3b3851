// Talking to a mount's control directory.
#pragma once
#include <string>

namespace fencefs::cli {

// Finds the mount root holding `path` (walks up until .fencefs/ctl exists). "" if none; then
// *err (if given) is ENOTCONN when the path is on a FUSE mount whose daemon is gone.
std::string find_mount(const std::string& path, int* err = nullptr);
// find_mount, or exits with kUnreachable and a message: "daemon gone" for a mount
// whose daemon died, "not a fencefs mount" otherwise; a path that does not resolve exits kUsage
// (ENOENT, ENOTDIR) or kFailed with its errno. `what` prefixes the message.
std::string mount_or_exit(const std::string& path, const std::string& what);
// Sends one command; returns 0 or the errno, with the daemon's reply (or why) in *reply.
int send_command(const std::string& mount, const std::string& line, std::string* reply);
// Reads MOUNT/.fencefs/NAME.
int read_ctl_file(const std::string& mount, const std::string& name, std::string* out);

}  // namespace fencefs::cli
