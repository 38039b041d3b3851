// A copy of every domain's epoch kept beside the data, in an xattr of BACKING's root directory.
// The journal is the authority; this copy is how a restored older state is noticed at mount, even
// before any stamped file is touched.
#pragma once
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "fence/token.h"

namespace fencefs::fence {

class HighWater {
 public:
  static constexpr const char* kXattr = "trusted.fencefs.hwm";
  // dir_fd: an O_RDONLY fd of BACKING's root (kept open).
  explicit HighWater(int dir_fd);
  ~HighWater();
  // Epochs recorded so far, by domain path ("v1\n/ 5\n/a 7\n" in the xattr).
  std::map<std::string, Epoch> load();
  // Raises the recorded epoch of a domain; every write keeps the higher of each domain's epoch in
  // the xattr (another member may have written it) and ours. Best effort: a failure is logged,
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

 private:
  int fd_;
  common::Mutex mu_;
  void load_locked() REQUIRES(mu_);
  void write_locked() REQUIRES(mu_);
  void writer();
  std::map<std::string, Epoch> cur_ GUARDED_BY(mu_);
  bool loaded_ GUARDED_BY(mu_) = false;
  bool dirty_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace fencefs::fence
