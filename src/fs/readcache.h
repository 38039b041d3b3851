// Whether a read-only open may keep what the kernel cached of a file (FOPEN_KEEP_CACHE).
//
// Without it every open drops the file's cached pages. They still show the file when nothing
// changed its data since the open that last dropped them:
// - no handle that could change the data was open in between: write(2), mapped writeback,
//   ftruncate, fallocate and copy_file_range all go through one, and so do the bytes the daemon
//   refused (PageCache drops those, but only a later open is sure to see them gone);
// - no truncate by path;
// - BACKING's size, mtime and ctime are what they were then (a change made beside the mount).
// Reads are never fenced, so keeping the cache only skips READs the daemon would answer alike.
#pragma once
#include <sys/stat.h>

#include <array>
#include <cstdint>
#include <unordered_map>

#include "common/mutex.h"

namespace fencefs::fs {

struct Inode;

class ReadCache {
 public:
  // A handle that may change the data was opened / released (before its fd is closed).
  void writer_opened(const Inode& i);
  void writer_closed(const Inode& i);
  // The data changed without such a handle (truncate by path).
  void changed(const Inode& i);
  // A read-only open of i, whose BACKING file is st now: true when the kernel may keep its pages.
  bool keep(const Inode& i, const struct stat& st);
  // The kernel forgot the inode, and with it the pages.
  void forget(const Inode& i);

 private:
  struct Seen {
    off_t size = 0;
    struct timespec mtime = {}, ctime = {};
    bool operator==(const Seen& o) const;
  };
  struct Entry {
    uint32_t writers = 0;
    bool valid = false;  // `seen` is the file as of the kernel's last drop, unchanged since
    Seen seen;
  };
  struct Stripe {
    common::Mutex mu;
    std::unordered_map<const Inode*, Entry> entries GUARDED_BY(mu);
  };
  Stripe& stripe(const Inode& i);
  std::array<Stripe, 16> stripes_;
};

}  // namespace fencefs::fs
