#include "fs/pagecache.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "fs/fs.h"

namespace fencefs::fs {

void PageCache::start(fuse_session* se) {
  std::lock_guard lk(mu_);
  if (thread_.joinable()) return;
  se_ = se;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void PageCache::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lk(mu_);
  se_ = nullptr;
}

void PageCache::track(Handle& h, fuse_ino_t ino) {
  std::lock_guard lk(mu_);
  Entry& e = inodes_[h.inode];
  if (e.handles.empty()) {
    e.ino = ino;
    e.serial = ++serial_;
  }
  e.handles.push_back(&h);
  h.tracker = this;
  // Opened while an advance superseded its token (after the advance asked for a sweep).
  if (superseded(h)) sweep_soon_locked();
}

void PageCache::untrack(Handle& h) {
  std::lock_guard lk(mu_);
  h.tracker = nullptr;
  auto it = inodes_.find(h.inode);
  if (it == inodes_.end()) return;
  Entry& e = it->second;
  // A superseded handle may have left refused bytes in the cache (its mapping dirtied pages after
  // the advance): they are dropped before the handle stops holding writeback back.
  if (superseded(h)) request_drop_locked(*h.inode, e.ino);
  std::erase(e.handles, &h);
  // With no such handle left nothing can be written back, and the next open drops the cache
  // anyway (no open keeps it once a writable handle was open: ReadCache): what was pending is
  // settled.
  if (e.handles.empty()) inodes_.erase(it);
}

int PageCache::writeback_token(const Inode& i, const fence::Domain& d, fence::Epoch* token,
                               const char** why) {
  std::lock_guard lk(mu_);
  auto it = inodes_.find(&i);
  if (it == inodes_.end() || it->second.handles.empty()) {
    *why = "no handle of the file may write through a mapping";
    return EIO;
  }
  const Entry& e = it->second;
  if (e.dropped < e.wanted) {
    *why = "refused bytes of the file are still in the page cache (being dropped)";
    return EIO;
  }
  fence::Epoch lowest = ~fence::Epoch{0};
  for (const Handle* h : e.handles) {
    if (h->domain != &d) {
      *why = "the file's writable handles belong to different domains";
      return EIO;
    }
    lowest = std::min(lowest, h->stale.load() ? fence::Epoch{0} : h->token.load());
  }
  if (lowest == 0) {
    *why = "a handle of the file was refused as stale";
    return EIO;
  }
  *token = lowest;
  return 0;
}

void PageCache::refused(const Inode& i, fuse_ino_t ino) {
  std::lock_guard lk(mu_);
  request_drop_locked(i, ino);
}

bool PageCache::superseded(const Handle& h) {
  return h.tracker != nullptr &&
         (h.stale.load() || h.token.load() < h.domain->epoch.load(std::memory_order_acquire));
}

bool PageCache::has_superseded_locked(const Entry& e) const {
  return std::any_of(e.handles.begin(), e.handles.end(),
                     [](const Handle* h) { return superseded(*h); });
}

void PageCache::advanced() {
  std::lock_guard lk(mu_);
  // No tracked handle: nothing to sweep, and one tracked from now on sees the new epoch (track()
  // reads it under mu_, after the advance stored it). A sweep already due reads it too.
  if (inodes_.empty() || next_sweep_ == std::chrono::steady_clock::time_point::min()) return;
  sweep_soon_locked();
}

void PageCache::sweep_soon_locked() {
  next_sweep_ = std::chrono::steady_clock::time_point::min();
  cv_.notify_one();
}

void PageCache::sweep_locked(std::chrono::steady_clock::time_point now) {
  size_t n = 0;
  for (auto& [inode, e] : inodes_)
    if (has_superseded_locked(e)) {
      request_drop_locked(*inode, e.ino);
      n++;
    }
  next_sweep_ = n == 0 ? std::chrono::steady_clock::time_point::max()
                       : now + std::max<std::chrono::steady_clock::duration>(
                                   kSweep, kSweepPerInode * static_cast<int64_t>(n));
}

void PageCache::request_drop_locked(const Inode& i, fuse_ino_t ino) {
  auto it = inodes_.find(&i);
  if (it != inodes_.end()) it->second.wanted++;
  if (!queued_.insert(&i).second) return;  // not started yet: it covers this refusal too
  queue_.push_back(Drop{&i, ino, 0});
  cv_.notify_one();
}

void PageCache::run() {
  std::unique_lock lk(mu_);
  while (true) {
    cv_.wait_until(lk, next_sweep_, [&] {
      return stopping_ || !queue_.empty() || std::chrono::steady_clock::now() >= next_sweep_;
    });
    if (stopping_) return;
    if (auto t = std::chrono::steady_clock::now(); t >= next_sweep_) sweep_locked(t);
    if (queue_.empty()) continue;
    Drop drop = queue_.front();
    queue_.pop_front();
    queued_.erase(drop.inode);
    const Inode* inode = drop.inode;
    fuse_ino_t ino = drop.ino;
    uint64_t serial = 0, covers = 0;
    if (auto it = inodes_.find(inode); it != inodes_.end()) {
      serial = it->second.serial;
      covers = it->second.wanted;
    }
    fuse_session* se = se_;
    lk.unlock();
    // The kernel unmaps the pages from every mapping, writes dirty ones back first (those
    // WRITEs are refused while the drop is pending) and forgets them.
    int err = fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);
    lk.lock();
    if (err == 0 || err == -ENOENT) {  // ENOENT: the kernel holds nothing of that inode
      auto it = inodes_.find(inode);
      if (it != inodes_.end() && it->second.serial == serial)
        it->second.dropped = std::max(it->second.dropped, covers);
      continue;
    }
    // Left pending, writeback of the inode stays refused until its writable handles are closed.
    log::warn("cannot drop cached pages of inode {:#x}: {}", ino, common::errstr(-err));
    if (++drop.attempts < 20 && queued_.insert(drop.inode).second) {
      queue_.push_back(drop);
      cv_.wait_for(lk, std::chrono::milliseconds(50), [&] { return stopping_; });
    }
  }
}

}  // namespace fencefs::fs
