// How many open files (each holds a daemon fd, and pins its inode's fd) callers may hold, so that
// no user can take every fd of the daemon: binds (pidfds), the journal, the audit trail and
// stamps always find one.
#pragma once
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "common/mutex.h"

namespace fencefs::fs {

class FdBudget {
 public:
  // limit: the daemon's RLIMIT_NOFILE; reserved: fds held elsewhere now, up to half the limit
  // (the FUSE rings', which exist only once the kernel took them).
  explicit FdBudget(size_t limit, std::function<size_t()> reserved = {});

  // One more open handle for uid: 0, EMFILE (uid over its share) or ENFILE (all unprivileged
  // callers together over theirs). Past the ordinary shares, exempt() (an issuer, or a job bound
  // in the file's domain) may go on up to a hard ceiling that still leaves the reserve.
  int take(uid_t uid, const std::function<bool()>& exempt);
  void give(uid_t uid);

  // The limit less what is reserved now.
  size_t limit() const;
  size_t per_uid() const { return std::max<size_t>(8, limit() / 16); }
  size_t shared() const { return std::max<size_t>(16, limit() / 4); }
  size_t ceiling() const { return std::max<size_t>(32, limit() * 3 / 8); }
  size_t in_use() const { return total_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  const size_t limit_;
  const std::function<size_t()> reserved_;
  common::Mutex mu_;
  std::unordered_map<uid_t, size_t> by_uid_ GUARDED_BY(mu_);
  size_t ordinary_ GUARDED_BY(mu_) = 0;  // handles within the ordinary shares
  std::unordered_map<uid_t, size_t> exempt_by_uid_ GUARDED_BY(mu_);
  std::atomic<size_t> total_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<int64_t> last_log_{0};
};

// The memory that open .fencefs files hold: each open of status or metrics keeps the page it
// rendered, and ctl keeps its last reply. They hold no fd, so without this an unprivileged user
// could make the daemon keep a copy per open(2), bounded only by the kernel's file-max.
class PageBudget {
 public:
  // Charged per open: the page, and at least kMinCharge (the handle and the longest ctl reply).
  static constexpr size_t kMinCharge = 8192;
  PageBudget(size_t per_uid, size_t shared) : per_uid_(per_uid), shared_(shared) {}

  // 0, EMFILE (uid over its share) or ENFILE (all callers together over theirs; never for root or
  // a `shared_exempt` open: an issuer's, or of ctl, so that a few users cannot keep everyone
  // else from binding or advancing). *charged: what give() must return.
  int take(uid_t uid, size_t bytes, size_t* charged, bool shared_exempt = false);
  void give(uid_t uid, size_t charged, bool shared_exempt = false);

  size_t per_uid() const { return per_uid_; }
  size_t shared() const { return shared_; }

 private:
  static bool in_shared_pool(uid_t uid, bool exempt) { return uid != 0 && !exempt; }

  const size_t per_uid_, shared_;
  common::Mutex mu_;
  std::unordered_map<uid_t, size_t> by_uid_ GUARDED_BY(mu_);
  size_t unprivileged_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> refused_{0};
  std::atomic<int64_t> last_log_{0};
};

}  // namespace fencefs::fs
