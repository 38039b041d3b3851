// Process bindings: which token a process (and every descendant) presents for a domain.
// A process presents, per domain, the token of the nearest bound process among its current
// ancestors (itself included); no depth limit. Processes are identified exactly (pidfs identity
// through a ProcessInfo handle), so a recycled pid never inherits a dead binder's token.
// Resolutions are cached per thread and dropped when the thread, or any ancestor up to the
// farthest one that gave a token, exits: its descendants are then reparented (to a subreaper
// or init, always an existing ancestor) and resolve again along their new, shorter chain.
//
// Why a cached resolution never outlives its processes, pid reuse included: the cache is keyed
// by the calling thread's id, and an entry holds handles (pidfds) on that thread and on each
// ancestor up to the farthest one that gave a token. A handle names one task forever; it never
// follows a recycled id. Every use polls those handles (one poll(2)), synchronously, before the
// token is returned, and any bind or unbind moves the generation the entry was computed at. So
// if the thread's id now belongs to another thread, or an ancestor exited (its handle reports
// the exit from the step of exit(2) that reparents its children), the entry is dropped and the
// chain walked afresh. An entry is shared (reference counted) by the requests using it, so its
// handles stay open until the last one has polled them: evicting it concurrently can never let a
// poll see an fd number already reused for something else.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/proc.h"
#include "common/thread_annotations.h"
#include "fence/token.h"

namespace fencefs::fence {

class Bindings {
 public:
  explicit Bindings(proc::ProcessInfo& procs = proc::system());
  ~Bindings();
  Bindings(const Bindings&) = delete;
  Bindings& operator=(const Bindings&) = delete;

  // Binds the thread group of `tid` for a domain. ESRCH if the process is gone, EAGAIN if the
  // processes it already has cannot be told from later ones.
  int bind(pid_t tid, uint32_t domain, Epoch token);
  // Removes the binding of the thread group of `tid`: 0, or ENOENT when there was none (nothing
  // changes then: no resolution is invalidated), ESRCH if the process is gone.
  int unbind(pid_t tid, uint32_t domain);
  // The token of the nearest bound ancestor-or-self of `tid` for `domain`; 0 when none.
  Epoch resolve(pid_t tid, uint32_t domain);

  // What a process presented before it bound anew or unbound: its children made before `before`
  // (ProcessInfo::id_floor() then) present `token`, or with `inherit` what its ancestors give.
  // A process rebinding hands its new token to the jobs it starts next, never to one already
  // running, which was started under the old owner (a paused job must not wake up as the new).
  struct Superseded {
    uint64_t before = 0;
    Epoch token = 0;  // 0 and not inherit: nothing (refused), when older history was folded
    bool inherit = false;
    bool operator==(const Superseded&) const = default;
  };
  static constexpr size_t kMaxSuperseded = 16;  // per process and domain; older ones fold
  struct Entry {
    pid_t pid = 0;
    uint64_t id = 0;  // exact process identity (ProcessInfo::id)
    std::string comm;
    std::map<uint32_t, Epoch> tokens;                     // domain id -> token
    std::map<uint32_t, std::vector<Superseded>> earlier;  // domain id -> oldest first
  };
  // Live bindings (dead processes are dropped); with_history: also processes bound no more
  // whose earlier children still present what they had.
  std::vector<Entry> list(bool with_history = false);
  // The binding of the live thread group of `tid`, as list(true) shows it.
  std::optional<Entry> find(pid_t tid);
  // Sets a process's binding for a domain as a daemon before a restart left it (token nullopt:
  // none now), if `same` says pid is still that process. ESRCH if it is gone or not the same.
  int restore(pid_t pid, uint32_t domain, std::optional<Epoch> token,
              std::vector<Superseded> earlier, const std::function<bool()>& same = {});

  // Handles held by the resolution cache (for tests and metrics).
  size_t cached_handles() const;
  // Called after every bind and unbind of a thread group, outside the lock: the daemon keeps the
  // bindings across restarts (find() says what they are now).
  std::function<void(pid_t pid, uint32_t domain)> on_change;

 private:
  struct Resolved {
    Resolved(proc::ProcessInfo& p, std::atomic<size_t>& count) : procs(p), open(count) {}
    ~Resolved();  // closes the handles
    Resolved(const Resolved&) = delete;
    Resolved& operator=(const Resolved&) = delete;
    proc::ProcessInfo& procs;
    std::atomic<size_t>& open;  // handles held by all entries
    std::vector<int> handles;   // the thread, then ancestors up to the farthest contributor
    uint64_t gen = 0;           // bindings generation the result was computed at
    std::map<uint32_t, Epoch> tokens;
  };
  // The cache, split by thread id so that concurrent requests rarely share a mutex; the mutex
  // guards only the map, never a poll.
  struct Shard {
    common::Mutex mu;
    std::unordered_map<pid_t, std::shared_ptr<const Resolved>> map GUARDED_BY(mu);
    size_t handles GUARDED_BY(mu) = 0;  // held by the entries in `map`
  };
  static constexpr size_t kShards = 8;
  Shard& shard(pid_t tid) { return shards_[static_cast<size_t>(tid) % kShards]; }
  // Resolves the chain of `tid`; *watch receives handles of the processes whose exit changes
  // the result (caller closes them), unless the chain is too long to watch (*cacheable false).
  // False when the caller vanished meanwhile.
  bool walk(pid_t tid, std::map<uint32_t, Epoch>* tokens, std::vector<int>* watch, bool* cacheable);
  bool alive_locked(pid_t pid, const Entry& e) REQUIRES(mu_);
  // Records that `e`'s children made before `floor` keep what `e` gave them for `domain`.
  static void supersede(Entry& e, uint32_t domain, uint64_t floor);
  static void fold(std::vector<Superseded>& earlier);
  // The exact identity of the live process `tgid`; 0 when it is gone.
  uint64_t process_id(pid_t tgid);
  void sweep_dead_locked() REQUIRES(mu_);

  proc::ProcessInfo& procs_;
  mutable common::SharedMutex mu_;
  std::unordered_map<pid_t, Entry> bindings_ GUARDED_BY(mu_);
  size_t swept_size_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> gen_{1};
  std::atomic<bool> empty_{true};

  Shard shards_[kShards];
  std::atomic<size_t> cache_handles_{0};
};

}  // namespace fencefs::fence
