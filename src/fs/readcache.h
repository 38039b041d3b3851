// Whether a read-only open may keep what the kernel cached of a file (FOPEN_KEEP_CACHE).
//
// Without it every open drops the file's cached pages. Pages cached since an open that dropped
// them still show the file when all of these hold:
// - that open has completed, which its handle's first READ shows: the kernel drops the pages
//   inside the open(2), after the daemon's reply, and an open racing it would keep pages it had
//   not yet dropped (a RELEASE does not show it: an open that fails after the reply is released
//   without the drop);
// - no handle that could change the data was open since: write(2), mapped writeback, ftruncate,
//   fallocate and copy_file_range all go through one, and so do the bytes the daemon refused
//   (PageCache drops those, but only a later open is sure to see them gone);
// - no truncate by path since;
// - BACKING's size, mtime and ctime are what they were at that open (a change made beside the
//   mount), and that open is less than `timeout` ago: a write through a mapping of BACKING, or in
//   the same clock tick on a filesystem with coarse timestamps, changes no timestamp, so a change
//   made beside the mount shows at the next open once `timeout` has passed, as for attributes.
// Reads are never fenced, so keeping the cache only skips READs the daemon would answer alike.
#pragma once
#include <sys/stat.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <unordered_map>

#include "common/mutex.h"

namespace fencefs::fs {

struct Inode;

class ReadCache {
 public:
  using Clock = std::chrono::steady_clock;

  // A handle that may change the data was opened / released (before its fd is closed).
  void writer_opened(const Inode& i);
  void writer_closed(const Inode& i);
  // The data changed without such a handle (truncate by path).
  void changed(const Inode& i);
  // A read-only open of i, whose BACKING file is st now: true when the kernel may keep its pages.
  // Otherwise *drop is set when this open's drop, once complete (dropped()), makes them usable.
  bool keep(const Inode& i, const struct stat& st, Clock::duration max_age, uint64_t* drop);
  // The open that got `drop` from keep() has completed: the kernel dropped the pages.
  void dropped(const Inode& i, uint64_t drop);
  // The kernel forgot the inode, and with it the pages.
  void forget(const Inode& i);

  // Read-only opens, by whether they kept the pages (the metrics report both).
  void count(bool kept) { (kept ? kept_ : dropped_).fetch_add(1, std::memory_order_relaxed); }
  uint64_t kept() const { return kept_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Seen {
    off_t size = 0;
    struct timespec mtime = {}, ctime = {};
    bool operator==(const Seen& o) const;
  };
  struct Entry {
    uint32_t writers = 0;
    uint64_t drop = 0;   // the dropping open that `seen` is of; 0: none pending or done
    bool valid = false;  // that open completed and nothing changed the file since
    Seen seen;
    Clock::time_point seen_at;
  };
  struct Stripe {
    common::Mutex mu;
    std::unordered_map<const Inode*, Entry> entries GUARDED_BY(mu);
    uint64_t next_drop GUARDED_BY(mu) = 0;  // never reused: an erased entry's drop stays unknown
  };
  Stripe& stripe(const Inode& i);
  std::array<Stripe, 16> stripes_;  // stripe() takes the top 4 bits of a hash
  std::atomic<uint64_t> kept_{0}, dropped_{0};
};

}  // namespace fencefs::fs
