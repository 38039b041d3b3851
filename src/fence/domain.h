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

#include "fence/token.h"

namespace fencefs::fence {

// Why an operation was refused; indexes the per-domain counters.
enum class Reason : int { Stale, Missing, Malformed, Unauthorised, TooFar, Rollback, Io, kCount };
const char* reason_name(Reason r);

struct Domain {
  uint32_t id = 0;
  std::string path;  // "/" or "/a/b" relative to the mount root
  dev_t dev = 0;     // identity of the domain's root directory in BACKING
  ino_t ino = 0;

  // Shared: operations admitted under the current epoch, held across their syscall.
  // Exclusive: an advance, so nothing admitted under epoch N lands after N+1 acted.
  mutable std::shared_mutex mu;
  std::atomic<Epoch> epoch{0};      // durable: only this admits mutations
  std::atomic<Epoch> max_stamp{0};  // highest last-epoch stamp seen above `epoch` (rollback)
  // Cluster mode: `epoch` raised by an advance that not every member acknowledged yet; tokens at
  // or above it wait for the commit (0: none pending).
  std::atomic<Epoch> uncommitted{0};

  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> advances{0};
  std::atomic<int64_t> last_advance_unix_ns{0};
  std::atomic<uint64_t> refused[static_cast<int>(Reason::kCount)] = {};
};

class DomainTable {
 public:
  Domain* root() const;
  Domain* by_path(std::string_view path) const;
  Domain* by_id(uint32_t id) const;
  Domain* by_root_inode(dev_t dev, ino_t ino) const;
  // The deepest domain containing `rel` ("/a/b/c" relative to the mount root).
  Domain* deepest(std::string_view rel) const;
  // Domains are never removed, so pointers stay valid for the life of the table.
  Domain* add(uint32_t id, std::string path, Epoch epoch, dev_t dev, ino_t ino);
  std::vector<Domain*> all() const;
  uint32_t next_id() const;
  size_t size() const;
  // Bumped whenever a path may have changed domain (domain added, cross-domain rename).
  uint64_t generation() const { return gen_.load(std::memory_order_acquire); }
  void bump_generation() { gen_.fetch_add(1, std::memory_order_acq_rel); }

 private:
  mutable std::shared_mutex mu_;
  std::vector<std::unique_ptr<Domain>> domains_;
  std::atomic<uint64_t> gen_{1};
};

}  // namespace fencefs::fence
