// Process bindings: which token a process (and every descendant) presents for a domain.
// Resolution walks the parent chain in /proc; results are cached per thread, validated by a
// pidfd so a recycled thread id never inherits a dead thread's token.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fence/token.h"

namespace fencefs::fence {

class Bindings {
 public:
  Bindings();
  ~Bindings();

  // Binds the thread group of `tid` for a domain. ESRCH if the process is gone.
  int bind(pid_t tid, uint32_t domain, Epoch token);
  // Removes the binding of the thread group of `tid` (0 even if there was none).
  int unbind(pid_t tid, uint32_t domain);
  // The token of the nearest bound ancestor-or-self of `tid` for `domain`; 0 when none.
  Epoch resolve(pid_t tid, uint32_t domain);

  struct Entry {
    pid_t pid = 0;
    uint64_t start_time = 0;
    std::string comm;
    std::map<uint32_t, Epoch> tokens;  // domain id -> token
  };
  // Live bindings (dead processes are dropped).
  std::vector<Entry> list();

  // Called after every bind and unbind of a thread group (bound: false for unbind), outside the
  // lock: the daemon keeps the bindings across restarts.
  std::function<void(pid_t pid, uint32_t domain, Epoch token, bool bound)> on_change;

 private:
  struct Resolved {
    int pidfd = -1;    // of the thread; readable once it exits
    uint64_t gen = 0;  // bindings generation the result was computed at
    std::map<uint32_t, Epoch> tokens;
  };
  std::map<uint32_t, Epoch> walk(pid_t tid);
  void sweep_dead_locked();
  void clear_cache_locked();

  mutable std::shared_mutex mu_;  // bindings_
  std::unordered_map<pid_t, Entry> bindings_;
  size_t swept_size_ = 0;
  std::atomic<uint64_t> gen_{1};
  std::atomic<bool> empty_{true};

  mutable std::mutex cache_mu_;
  std::unordered_map<pid_t, Resolved> cache_;
};

}  // namespace fencefs::fence
