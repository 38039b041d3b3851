// Shared mappings and the kernel's page cache.
//
// Without the writeback cache the kernel's FUSE client sends every write(2) as a WRITE of the
// writer's own handle, from the writer's thread, also for handles that use the page cache (those
// opened for reading and writing, which can be mapped). Pages dirtied through a shared writable
// mapping are written back later as WRITEs marked `writepage` that carry some mapped, writable
// handle of the inode, not the dirtier's: a page does not remember who dirtied it. So such a
// WRITE presents the lowest token among every handle of the inode that could have mapped it
// writable (O_RDWR): it lands only while all of them hold the current epoch.
//
// Bytes the daemon refuses stay behind in the kernel's cache (a refused write(2) has already been
// copied there, a refused writeback leaves its pages clean), where a later writeback by the owner
// would carry them. So every refusal drops the inode's cached pages, on a thread of its own (the
// kernel may need this daemon to answer WRITEs and READs while it drops them), and until that is
// done no writeback of the inode lands.
//
// A store into a mapped page reaches no daemon: until writeback (30 s by default), whatever a
// superseded holder stores shows to every reader of the cached page. So an advance starts a sweep
// that drops the pages of every inode with a tracked handle it superseded, and while such a
// handle stays open its inode's pages are dropped again every sweep (kSweep, longer with many such
// inodes): a store made after the advance shows until the next sweep, not until writeback.
#pragma once
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fence/token.h"

namespace fencefs::fence {
struct Domain;
}

namespace fencefs::fs {

struct Inode;
struct Handle;

class PageCache {
 public:
  PageCache() = default;
  ~PageCache() { stop(); }
  PageCache(const PageCache&) = delete;
  PageCache& operator=(const PageCache&) = delete;

  // Starts the thread that drops cached pages (after daemonising); stop() before the session ends.
  void start(fuse_session* se);
  void stop();

  // A handle that may map the file shared and writable (opened O_RDWR). It stays tracked until it
  // is destroyed; if it was superseded by then, leaving requests a drop of the inode's pages.
  void track(Handle& h, fuse_ino_t ino);
  void untrack(Handle& h);

  // The token a writeback WRITE of inode i presents: the lowest among its tracked handles. 0 and
  // *token, or EIO with *why when none may land now (refused bytes not yet dropped, handles of
  // the inode in different domains).
  int writeback_token(const Inode& i, const fence::Domain& d, fence::Epoch* token,
                      const char** why);

  // Bytes written to inode i were refused: drop its cached pages.
  void refused(const Inode& i, fuse_ino_t ino);

  // An epoch moved: a sweep soon drops the pages of every inode with a tracked handle below it.
  void advanced();
  // A tracked handle whose token is below its domain's epoch, or refused as stale.
  static bool superseded(const Handle& h);

  // How often the pages of inodes with a superseded handle open are dropped: every kSweep, or
  // every kSweepPerInode per such inode when there are more (at most 1,000 drops a second).
  static constexpr std::chrono::milliseconds kSweep{100};
  static constexpr std::chrono::milliseconds kSweepPerInode{1};

 private:
  struct Entry {
    std::vector<Handle*> handles;
    fuse_ino_t ino = 0;
    uint64_t serial = 0;   // tells a re-created entry from the one a drop started on
    uint64_t wanted = 0;   // refusals so far
    uint64_t dropped = 0;  // refusals whose drop has completed
  };
  void run();
  void request_drop_locked(const Inode& i, fuse_ino_t ino);
  bool has_superseded_locked(const Entry& e) const;
  void sweep_locked(std::chrono::steady_clock::time_point now);
  void sweep_soon_locked();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<const Inode*, Entry> inodes_;
  struct Drop {
    const Inode* inode;
    fuse_ino_t ino;
    int attempts;
  };
  std::deque<Drop> queue_;
  std::unordered_set<const Inode*> queued_;  // in queue_, not started
  // The next sweep; max() while no tracked handle is known to be superseded.
  std::chrono::steady_clock::time_point next_sweep_ = std::chrono::steady_clock::time_point::max();
  fuse_session* se_ = nullptr;
  std::thread thread_;
  bool stopping_ = false;
  uint64_t serial_ = 0;
};

}  // namespace fencefs::fs
