// The identity (thread group, command) of calling threads, for the audit trail, without reading
// /proc/TID/status for every record: that read costs about 20 us, most of a short request.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "common/proc.h"

namespace fencefs::proc {

// Keeps an open /proc/TID/comm per recently seen thread. The open file belongs to that thread
// (its struct pid), not to the number: once the thread is gone it reads ESRCH, even if the number
// was given to another thread, and the entry is read afresh. A live thread's thread group never
// changes (a non-leader that execs takes the leader's id, and its old id dies), so the cached
// thread group stays exact; the command is read from the open file every time (it may change).
class IdentityCache {
 public:
  explicit IdentityCache(size_t capacity = 64) : capacity_(capacity) {}
  ~IdentityCache();
  IdentityCache(const IdentityCache&) = delete;
  IdentityCache& operator=(const IdentityCache&) = delete;

  // As identity_of(tid); nullopt when the thread is gone.
  std::optional<Identity> get(pid_t tid);
  size_t size();

 private:
  struct Entry {
    int fd = -1;
    pid_t tgid = 0;
    uint64_t used = 0;
  };
  // The command as /proc/TID/status shows it (newline and backslash escaped), from the open
  // comm file; false when its thread is gone.
  static bool read_comm(int fd, std::string* comm);
  std::mutex mu_;
  std::unordered_map<pid_t, Entry> entries_;
  uint64_t clock_ = 0;
  const size_t capacity_;
};

}  // namespace fencefs::proc
