// The handles the kernel holds open. An advance stamps the files that writers open under the
// epoch it ends: a holder superseded before it closes never restamps, and its admitted writes
// would otherwise look to `fencectl verify` like writes that bypassed the mount. When the session
// ends, the daemon closes those the kernel never released: a stop (SIGTERM) with files still open,
// or a last close after a lazy unmount whose RELEASE went with the connection.
#pragma once
#include <functional>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"

namespace fencefs::fs {

struct Handle;
struct DirHandle;

class OpenHandles {
 public:
  void track(Handle* h, bool writable) {
    common::MutexLock lk(mu_);
    files_.insert(h);
    if (writable) writers_.insert(h);
  }
  // Before the handle's fd is closed: each_writer() never meets a closed (or reused) one.
  void untrack(Handle* h) {
    common::MutexLock lk(mu_);
    files_.erase(h);
    writers_.erase(h);
  }
  void track(DirHandle* d) {
    common::MutexLock lk(mu_);
    dirs_.insert(d);
  }
  void untrack(DirHandle* d) {
    common::MutexLock lk(mu_);
    dirs_.erase(d);
  }
  void each_writer(const std::function<void(Handle&)>& fn) {
    common::MutexLock lk(mu_);
    for (Handle* h : writers_) fn(*h);
  }
  // Once no request can come: the handles still open, for the caller to close.
  std::vector<Handle*> files() {
    common::MutexLock lk(mu_);
    return {files_.begin(), files_.end()};
  }
  std::vector<DirHandle*> dirs() {
    common::MutexLock lk(mu_);
    return {dirs_.begin(), dirs_.end()};
  }

 private:
  common::Mutex mu_;
  std::unordered_set<Handle*> files_ GUARDED_BY(mu_);
  std::unordered_set<Handle*> writers_ GUARDED_BY(mu_);
  std::unordered_set<DirHandle*> dirs_ GUARDED_BY(mu_);
};

}  // namespace fencefs::fs
