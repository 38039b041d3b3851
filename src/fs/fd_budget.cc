#include "fs/fd_budget.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"

namespace fencefs::fs {

// Each handle costs up to two fds (its own and its inode's). A quarter of the limit is kept out
// of every handle's reach; a sixteenth is the most one unprivileged uid holds, a quarter all of
// them together.
FdBudget::FdBudget(size_t limit)
    : per_uid_(std::max<size_t>(8, limit / 16)),
      shared_(std::max<size_t>(16, limit / 4)),
      ceiling_(std::max<size_t>(32, limit * 3 / 8)) {}

int FdBudget::take(uid_t uid, const std::function<bool()>& exempt) {
  common::UniqueLock lk(mu_);
  size_t& mine = by_uid_[uid];
  int err = 0;
  if (mine >= per_uid_)
    err = EMFILE;
  else if (ordinary_ >= shared_)
    err = ENFILE;
  if (!err) {
    mine++;
    ordinary_++;
    total_++;
    return 0;
  }
  if (mine == 0) by_uid_.erase(uid);
  lk.unlock();
  bool ok = exempt();
  lk.lock();
  if (ok && total_.load() < ceiling_) {
    exempt_by_uid_[uid]++;
    total_++;
    return 0;
  }
  refused_++;
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count();
  int64_t last = last_log_.load();
  if (now != last && last_log_.compare_exchange_strong(last, now))
    log::warn(
        "open refused ({}): uid {} holds {} open files (at most {} per user, {} for all "
        "users together; {} refused so far)",
        err == EMFILE ? "EMFILE" : "ENFILE", uid, by_uid_.count(uid) ? by_uid_[uid] : 0, per_uid_,
        shared_, refused_.load());
  return err;
}

void FdBudget::give(uid_t uid) {
  common::MutexLock lk(mu_);
  total_--;
  // Exempt handles are given back first: the ordinary share refills last.
  if (auto it = exempt_by_uid_.find(uid); it != exempt_by_uid_.end()) {
    if (--it->second == 0) exempt_by_uid_.erase(it);
    return;
  }
  if (auto it = by_uid_.find(uid); it != by_uid_.end()) {
    ordinary_--;
    if (--it->second == 0) by_uid_.erase(it);
  }
}

}  // namespace fencefs::fs
