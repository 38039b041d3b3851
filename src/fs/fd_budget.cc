#include "fs/fd_budget.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/log.h"

namespace fencefs::fs {
namespace {

// Refusals are logged at most once a second: a flood of opens does not flood the log.
bool once_a_second(std::atomic<int64_t>& last_log) {
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count();
  int64_t last = last_log.load();
  return now != last && last_log.compare_exchange_strong(last, now);
}

}  // namespace

// Each handle costs up to two fds (its own and its inode's). A quarter of the limit is kept out
// of every handle's reach; a sixteenth is the most one unprivileged uid holds, a quarter all of
// them together.
FdBudget::FdBudget(size_t limit, std::function<size_t()> reserved)
    : limit_(limit), reserved_(std::move(reserved)) {}

size_t FdBudget::limit() const {
  return limit_ - (reserved_ ? std::min(limit_ / 2, reserved_()) : 0);
}

int FdBudget::take(uid_t uid, const std::function<bool()>& exempt) {
  const size_t per_uid = this->per_uid(), shared = this->shared();
  common::UniqueLock lk(mu_);
  size_t& mine = by_uid_[uid];
  int err = 0;
  if (mine >= per_uid)
    err = EMFILE;
  else if (ordinary_ >= shared)
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
  if (ok && total_.load() < ceiling()) {
    exempt_by_uid_[uid]++;
    total_++;
    return 0;
  }
  refused_++;
  if (once_a_second(last_log_))
    log::warn(
        "open refused ({}): uid {} holds {} open files (at most {} per user, {} for all "
        "users together; {} refused so far)",
        err == EMFILE ? "EMFILE" : "ENFILE", uid, by_uid_.count(uid) ? by_uid_[uid] : 0, per_uid,
        shared, refused_.load());
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

int PageBudget::take(uid_t uid, size_t bytes, size_t* charged, bool shared_exempt) {
  *charged = std::max(bytes, kMinCharge);
  const bool shared = in_shared_pool(uid, shared_exempt);
  common::UniqueLock lk(mu_);
  size_t& mine = by_uid_[uid];
  int err = mine + *charged > per_uid_                     ? EMFILE
            : shared && unprivileged_ + *charged > shared_ ? ENFILE
                                                           : 0;
  if (!err) {
    mine += *charged;
    if (shared) unprivileged_ += *charged;
    return 0;
  }
  size_t held = mine;
  if (mine == 0) by_uid_.erase(uid);
  lk.unlock();
  *charged = 0;
  refused_++;
  if (once_a_second(last_log_))
    log::warn(
        "open of a .fencefs file refused ({}): uid {} holds {} KiB of open status, metrics and "
        "ctl pages (at most {} KiB per user, {} KiB of status and metrics pages for all users but "
        "root and issuers together; {} refused so far)",
        err == EMFILE ? "EMFILE" : "ENFILE", uid, held / 1024, per_uid_ / 1024, shared_ / 1024,
        refused_.load());
  return err;
}

void PageBudget::give(uid_t uid, size_t charged, bool shared_exempt) {
  if (charged == 0) return;
  common::MutexLock lk(mu_);
  if (auto it = by_uid_.find(uid); it != by_uid_.end()) {
    it->second -= std::min(it->second, charged);
    if (it->second == 0) by_uid_.erase(it);
  }
  if (in_shared_pool(uid, shared_exempt)) unprivileged_ -= std::min(unprivileged_, charged);
}

}  // namespace fencefs::fs
