// Domains: directory subtrees, each with its own epoch (high-water mark) and a reader/writer lock
// that makes check-and-mutate atomic with respect to advances.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "fence/rwlock.h"
#include "fence/token.h"

namespace fencefs::fence {

// Why an operation was refused; indexes the per-domain counters.
enum class Reason : int { Stale, Missing, Malformed, Unauthorised, TooFar, Rollback, Io, kCount };
const char* reason_name(Reason r);

// One step of the place a domain is declared at: a directory name below the previous step (the
// first below BACKING's root) and the identity of the directory found there (0, 0: missing).
struct PlaceStep {
  std::string name;
  dev_t dev = 0;
  ino_t ino = 0;
};

struct Domain {
  uint32_t id = 0;
  std::string path;  // "/" or "/a/b" relative to the mount root
  // Identity of the domain's root directory in BACKING, and of every directory on the way to it.
  // A domain is the directory at its declared place: the daemon follows that place by identity,
  // step by step, never by reading a path back. Guarded by the DomainTable's lock.
  dev_t dev = 0;
  ino_t ino = 0;
  std::vector<PlaceStep> place;  // empty for "/"

  // Shared: operations admitted under the current epoch, held across their syscall.
  // Exclusive: an advance, so nothing admitted under epoch N lands after N+1 acted. Writer
  // preferring: an advance waits only for the operations admitted before it.
  mutable WriterPreferringLock mu;
  std::atomic<Epoch> epoch{0};      // durable: only this admits mutations
  std::atomic<Epoch> max_stamp{0};  // highest last-epoch stamp seen above `epoch` (rollback)
  // Cluster mode: `epoch` raised by an advance that not every member acknowledged yet; tokens at
  // or above it wait for the commit (0: none pending).
  std::atomic<Epoch> uncommitted{0};

  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> advances{0};
  std::atomic<int64_t> last_advance_unix_ns{0};
  // Advances waiting for operations admitted before them to finish, and since when the first of
  // them waits (Unix ns; 0: none): a stuck admitted operation keeps an advance waiting, by design,
  // and operators see it in the status page and the metrics.
  std::atomic<int> advances_waiting{0};
  std::atomic<int64_t> advance_waiting_since_unix_ns{0};
  std::atomic<uint64_t> refused[static_cast<int>(Reason::kCount)] = {};
};

class DomainTable {
 public:
  Domain* root() const;
  Domain* by_path(std::string_view path) const;
  Domain* by_id(uint32_t id) const;
  Domain* by_root_inode(dev_t dev, ino_t ino) const;
  // A directory (dev, ino) was found at entry `name` of directory (pdev, pino). When that is a step
  // of a domain's place but another directory was recorded there (replaced in BACKING, or created
  // where a missing one was declared), the place now leads through the new one: a replaced domain
  // root stays the domain. Returns the domains whose root moved this way.
  std::vector<Domain*> follow(dev_t pdev, ino_t pino, std::string_view name, dev_t dev, ino_t ino);
  // Does renaming or removing entry `name` of (pdev, pino) (identity (dev, ino), or 0, 0 if none)
  // touch a domain's place: a domain root, a directory above one, or the name a missing one
  // would take?
  bool on_place(dev_t pdev, ino_t pino, std::string_view name, dev_t dev, ino_t ino) const;
  // Re-declares d at the directories of `place` (the operator's `domain add` of an existing path).
  void rebind(Domain& d, std::vector<PlaceStep> place);
  // The deepest domain containing `rel` ("/a/b/c" relative to the mount root).
  Domain* deepest(std::string_view rel) const;
  // Domains are never removed, so pointers stay valid for the life of the table.
  // max_stamp: set before the domain is visible (a mark it must not be admitted below).
  Domain* add(uint32_t id, std::string path, Epoch epoch, dev_t dev, ino_t ino,
              Epoch max_stamp = 0);
  Domain* add(uint32_t id, std::string path, Epoch epoch, std::vector<PlaceStep> place,
              Epoch max_stamp = 0);
  // The identity of d's root directory (0, 0: missing).
  std::pair<dev_t, ino_t> root_of(const Domain& d) const;
  std::vector<Domain*> all() const;
  uint32_t next_id() const;
  size_t size() const;
  // Bumped whenever a path may have changed domain (domain added, cross-domain rename).
  uint64_t generation() const { return gen_.load(std::memory_order_acquire); }
  void bump_generation() { gen_.fetch_add(1, std::memory_order_acq_rel); }

 private:
  mutable common::SharedMutex mu_;
  std::vector<std::unique_ptr<Domain>> domains_ GUARDED_BY(mu_);
  std::atomic<uint64_t> gen_{1};
};

// Walks `rel` ("/a/b") from BACKING's root (root_fd) one directory at a time, never following a
// symlink. Fills one step per component (0, 0 from the first missing one on). Returns an O_PATH fd
// of the final directory, or -errno (ENOENT when missing, EINVAL for "."/".."/empty components).
int resolve_place(int root_fd, std::string_view rel, std::vector<PlaceStep>* place);

}  // namespace fencefs::fence
