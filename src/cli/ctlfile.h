// Talking to a mount's control directory.
#pragma once
#include <string>

namespace fencefs::cli {

// Finds the mount root holding `path` (walks up until .fencefs/ctl exists). "" if none.
std::string find_mount(const std::string& path);
// Sends one command; returns 0 or the errno, with the daemon's reply (or why) in *reply.
int send_command(const std::string& mount, const std::string& line, std::string* reply);
// Reads MOUNT/.fencefs/NAME.
int read_ctl_file(const std::string& mount, const std::string& name, std::string* out);

}  // namespace fencefs::cli
