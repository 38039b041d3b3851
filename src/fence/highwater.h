// A copy of every domain's epoch kept beside the data, in xattrs of BACKING's directories: the
// journal is the authority; this copy is how a restored older state is noticed at mount, even
// before any stamped file is touched.
//
// BACKING's root holds every domain's epoch ("v1\n/ 5\n/a 7\n" in trusted.fencefs.hwm), and each
// domain's root directory on the root's filesystem its own ("v1\n/a 7\n" in
// trusted.fencefs.hwm.own). One xattr of every domain does not scale: ext4 keeps all of an
// inode's xattrs in one block, 1 or 4 KiB, some 15 or 50 domains with long paths. When the
// root's copy no longer fits, it keeps the domains whose own copy does not read back as high.
#pragma once
#include <sys/types.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "fence/token.h"

namespace fencefs::fence {

// The identity of a domain's root directory (0, 0: unknown, or "/").
struct DomainRoot {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const DomainRoot&) const = default;
};

class HighWater {
 public:
  static constexpr const char* kXattr = "trusted.fencefs.hwm";
  static constexpr const char* kOwnXattr = "trusted.fencefs.hwm.own";
  using Root = DomainRoot;
  // dir_fd: an O_RDONLY fd of BACKING's root (kept open).
  explicit HighWater(int dir_fd);
  ~HighWater();
  HighWater(const HighWater&) = delete;
  HighWater& operator=(const HighWater&) = delete;
  // Epochs recorded so far: the root's copy, and the own copies of `domains`.
  std::map<std::string, Epoch> load(const std::vector<std::string>& domains);
  // Raises the recorded epoch of a domain whose root directory is `root`; every write keeps the
  // higher of each domain's epoch in the xattrs (another member may have written it) and ours.
  // Best effort: a failure is logged, not fatal. A writer thread batches the xattr writes, at
  // most one pass per 20 ms, with no lock held that record() takes: a copy for spotting a
  // restored *older* state need not be exact to the millisecond, and the journal is the
  // authority. Never waits for I/O once start() was called.
  void record(const std::string& domain, Epoch epoch, Root root = {});
  // As record(), but written with the next pass or flush(), even before start().
  void note(const std::string& domain, Epoch epoch, Root root);
  void flush();
  // Starts the writer thread (after the daemon forked into the background: threads do not
  // survive fork). Until then every record is written at once.
  void start();

  static std::string encode(const std::map<std::string, Epoch>& m);
  static std::map<std::string, Epoch> decode(std::string_view text);
  // The copies below the directory `root_fd`: the root's, and the own copies of `domains`
  // ("/a/b"; looked up beneath root_fd on its filesystem, never through a symlink). *err: errno
  // of a failed read of the root's copy (0 when read or absent).
  static std::map<std::string, Epoch> read(int root_fd, const std::vector<std::string>& domains,
                                           int* err);

 private:
  struct Own {
    Root root;
    Epoch written = 0;  // what its own copy is known to hold at least
  };
  // One pass: reads the root's copy, writes the own copies that are behind, then the root's.
  void write_pass() EXCLUDES(mu_);
  bool write_own(const std::string& domain, Root root, Epoch* epoch);
  // True when this made the copy dirty.
  bool note_locked(const std::string& domain, Epoch epoch, Root root) REQUIRES(mu_);
  void writer();

  int fd_;
  common::Mutex io_mu_;  // one pass at a time; never taken by record() after start()
  common::Mutex mu_;
  std::map<std::string, Epoch> cur_ GUARDED_BY(mu_);
  std::map<std::string, Own> own_ GUARDED_BY(mu_);
  bool root_full_ GUARDED_BY(io_mu_) = false;  // the whole map did not fit the root's copy
  int last_err_ GUARDED_BY(io_mu_) = 0;
  std::set<std::string> warned_ GUARDED_BY(io_mu_);
  bool dirty_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  bool started_ GUARDED_BY(mu_) = false;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace fencefs::fence
