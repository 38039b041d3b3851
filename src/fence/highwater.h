// A copy of every domain's epoch kept beside the data, in xattrs of BACKING's directories: the
// journal is the authority; this copy is how a restored older state is noticed at mount, even
// before any stamped file is touched.
//
// BACKING's root holds every domain's epoch ("v1\n/ 5\n/a 7\n" in trusted.fencefs.hwm), and each
// domain's root directory its own ("v1\n/a 7\n"). One xattr of every domain does not scale: ext4
// keeps all of an inode's xattrs in one 4 KiB block, some 50 domains with long paths. When the
// root's copy no longer fits, it keeps only the domains whose own copy is not known to be written.
#pragma once
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "fence/token.h"

namespace fencefs::fence {

class HighWater {
 public:
  static constexpr const char* kXattr = "trusted.fencefs.hwm";
  // dir_fd: an O_RDONLY fd of BACKING's root (kept open).
  explicit HighWater(int dir_fd);
  ~HighWater();
  // Epochs recorded so far: the root's copy, and the own copies of `domains`.
  std::map<std::string, Epoch> load(const std::vector<std::string>& domains);
  // Raises the recorded epoch of a domain; every write keeps the higher of each domain's epoch in
  // the xattrs (another member may have written it) and ours. Best effort: a failure is logged,
  // not fatal. A writer
  // thread batches the xattr writes, at most one per 20 ms: a copy for spotting a restored
  // *older* state need not be exact to the millisecond, and the journal is the authority.
  void record(const std::string& domain, Epoch epoch);
  void flush();
  // Starts the writer thread (after the daemon forked into the background: threads do not
  // survive fork). Until then every record is written at once.
  void start();

  static std::string encode(const std::map<std::string, Epoch>& m);
  static std::map<std::string, Epoch> decode(std::string_view text);
  // The epoch a directory's own copy gives `domain` (0: none). `dir`: the domain's root.
  static Epoch own_copy(int dir, const std::string& domain);
  // The copies below the directory `root_fd`: the root's, and the own copies of `domains`
  // ("/a/b"; looked up beneath root_fd, never through a symlink, and not on a FUSE mount a user
  // made). *err: errno of a failed read of the root's copy (0 when read or absent).
  static std::map<std::string, Epoch> read(int root_fd, const std::vector<std::string>& domains,
                                           int* err);

 private:
  int fd_;
  common::Mutex mu_;
  void load_locked() REQUIRES(mu_);
  void write_locked() REQUIRES(mu_);
  bool write_own(const std::string& domain, Epoch* epoch) REQUIRES(mu_);
  void writer();
  std::map<std::string, Epoch> cur_ GUARDED_BY(mu_);
  // What each domain's own copy is known to hold at least (written by us).
  std::map<std::string, Epoch> own_ GUARDED_BY(mu_);
  int last_err_ GUARDED_BY(mu_) = 0;
  bool loaded_ GUARDED_BY(mu_) = false;
  bool dirty_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace fencefs::fence
