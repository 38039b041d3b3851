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
// Whether the directory DIR holds any entry besides . and ..; nullopt (with *error) when it
// cannot be read.
std::optional<bool> dir_has_entries(const std::string& dir, std::string* error);

}  // namespace fencefs::daemon
