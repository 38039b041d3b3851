// This mount namespace's mount table, read with libmount (which decodes the escaped paths).
#pragma once
#include <optional>
#include <string>

namespace fencefs::daemon {

// Whether something is mounted at the canonical path DIR in TABLE (this mount namespace's by
// default; /proc/PID/mountinfo for another process'); nullopt (with *error) when the table
// cannot be read.
std::optional<bool> is_mountpoint(const std::string& dir, std::string* error,
                                  const std::string& table = "/proc/self/mountinfo");
// Sets the read-ahead (KiB) of the FUSE mount on top at the canonical path DIR, through its
// backing device info in sysfs (root only). Before INIT is answered: the kernel then lowers it to
// the reply's max_readahead, never raises it. false with *error when it could not.
bool set_readahead(const std::string& dir, unsigned kib, std::string* error);
// Whether the directory DIR holds any entry besides . and ..; nullopt (with *error) when it
// cannot be read.
std::optional<bool> dir_has_entries(const std::string& dir, std::string* error);

}  // namespace fencefs::daemon
