// Reading process facts from /proc: thread group, parent, start time, command, groups.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fencefs::proc {

struct Stat {
  pid_t pid = 0;
  pid_t ppid = 0;
  uint64_t start_time = 0;  // clock ticks since boot: with pid, identifies a process
  std::string comm;
};

// /proc/PID/stat. nullopt when the process is gone.
std::optional<Stat> read_stat(pid_t pid);
// Thread group id of a thread id (from /proc/TID/status), nullopt when gone.
std::optional<pid_t> tgid_of(pid_t tid);
// Supplementary groups of a process (from /proc/PID/status).
std::vector<gid_t> groups_of(pid_t pid);
std::string comm_of(pid_t pid);

// Thread group and command of a thread, from one read of /proc/TID/status.
struct Identity {
  pid_t tgid = 0;
  std::string comm;
};
std::optional<Identity> identity_of(pid_t tid);

}  // namespace fencefs::proc
