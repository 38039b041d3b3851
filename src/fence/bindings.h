// Process bindings: which token a process (and every descendant) presents for a domain.
// A process presents, per domain, the token of the nearest bound process among its current
// ancestors (itself included); no depth limit. Processes are identified exactly (pidfs identity
// through a ProcessInfo handle), so a recycled pid never inherits a dead binder's token.
// Resolutions are cached per thread and dropped when the thread, or any ancestor up to the
// farthest one that gave a token, exits: its descendants are then reparented (to a subreaper
// or init, always an existing ancestor) and resolve again along their new, shorter chain.
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

#include "common/proc.h"
#include "fence/token.h"

namespace fencefs::fence {

class Bindings {
 public:
  explicit Bindings(proc::ProcessInfo& procs = proc::system());
  ~Bindings();
  Bindings(const Bindings&) = delete;
  Bindings& operator=(const Bindings&) = delete;

  // Binds the thread group of `tid` for a domain. ESRCH if the process is gone.
  int bind(pid_t tid, uint32_t domain, Epoch token);
  // Removes the binding of the thread group of `tid` (0 even if there was none).
  int unbind(pid_t tid, uint32_t domain);
  // The token of the nearest bound ancestor-or-self of `tid` for `domain`; 0 when none.
  Epoch resolve(pid_t tid, uint32_t domain);

  struct Entry {
    pid_t pid = 0;
    uint64_t id = 0;  // exact process identity (ProcessInfo::id)
    std::string comm;
    std::map<uint32_t, Epoch> tokens;  // domain id -> token
  };
  // Live bindings (dead processes are dropped).
  std::vector<Entry> list();

  // Handles held by the resolution cache (for tests and metrics).
  size_t cached_handles() const;
  // Called after every bind and unbind of a thread group (bound: false for unbind), outside the
  // lock: the daemon keeps the bindings across restarts.
  std::function<void(pid_t pid, uint32_t domain, Epoch token, bool bound)> on_change;

 private:
  struct Resolved {
    std::vector<int> handles;  // the thread, then ancestors up to the farthest contributor
    uint64_t gen = 0;          // bindings generation the result was computed at
    std::map<uint32_t, Epoch> tokens;
  };
  // Resolves the chain of `tid`; *watch receives handles of the processes whose exit changes
  // the result (caller closes them), unless the chain is too long to watch (*cacheable false).
  // False when the caller vanished meanwhile.
  bool walk(pid_t tid, std::map<uint32_t, Epoch>* tokens, std::vector<int>* watch, bool* cacheable);
  bool alive_locked(pid_t pid, const Entry& e);
  void sweep_dead_locked();
  void drop_locked(Resolved& r);
  void clear_cache_locked();

  proc::ProcessInfo& procs_;
  mutable std::shared_mutex mu_;  // bindings_
  std::unordered_map<pid_t, Entry> bindings_;
  size_t swept_size_ = 0;
  std::atomic<uint64_t> gen_{1};
  std::atomic<bool> empty_{true};

  mutable std::mutex cache_mu_;
  std::unordered_map<pid_t, Resolved> cache_;
  size_t cache_handles_ = 0;
};

}  // namespace fencefs::fence
