// The handles open for writing. An advance stamps the files they wrote under the epoch it ends:
// a holder superseded before it closes never restamps, and its admitted writes would otherwise
// look to `fencectl verify` like writes that bypassed the mount.
#pragma once
#include <functional>
#include <unordered_set>

#include "common/mutex.h"

namespace fencefs::fs {

struct Handle;

class OpenWriters {
 public:
  void track(Handle* h) {
    common::MutexLock lk(mu_);
    set_.insert(h);
  }
  // Before the handle's fd is closed: each() never meets a closed (or reused) one.
  void untrack(Handle* h) {
    common::MutexLock lk(mu_);
    set_.erase(h);
  }
  void each(const std::function<void(Handle&)>& fn) {
    common::MutexLock lk(mu_);
    for (Handle* h : set_) fn(*h);
  }

 private:
  common::Mutex mu_;
  std::unordered_set<Handle*> set_ GUARDED_BY(mu_);
};

}  // namespace fencefs::fs
