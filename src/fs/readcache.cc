#include "fs/readcache.h"

#include <cstdint>

namespace fencefs::fs {

bool ReadCache::Seen::operator==(const Seen& o) const {
  return size == o.size && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec &&
         ctime.tv_sec == o.ctime.tv_sec && ctime.tv_nsec == o.ctime.tv_nsec;
}

ReadCache::Stripe& ReadCache::stripe(const Inode& i) {
  // Inodes sit at one offset in equally aligned table nodes: mix the address, take the top bits.
  uint64_t a = reinterpret_cast<uintptr_t>(&i) >> 4;
  return stripes_[(a * 0x9E3779B97F4A7C15ull) >> 60];
}

void ReadCache::writer_opened(const Inode& i) {
  Stripe& s = stripe(i);
  common::MutexLock lk(s.mu);
  Entry& e = s.entries[&i];
  e.writers++;
  e.valid = false;
  e.drop = 0;
}

void ReadCache::writer_closed(const Inode& i) {
  Stripe& s = stripe(i);
  common::MutexLock lk(s.mu);
  auto it = s.entries.find(&i);
  if (it == s.entries.end()) return;
  // What it wrote may not be in the kernel's pages: the next read-only open drops them.
  if (--it->second.writers == 0) s.entries.erase(it);
}

void ReadCache::changed(const Inode& i) {
  Stripe& s = stripe(i);
  common::MutexLock lk(s.mu);
  // With a writer open the entry already keeps nothing (writer_opened); without one it goes.
  auto it = s.entries.find(&i);
  if (it != s.entries.end() && it->second.writers == 0) s.entries.erase(it);
}

bool ReadCache::keep(const Inode& i, const struct stat& st, Clock::duration max_age,
                     uint64_t* drop) {
  Seen now{st.st_size, st.st_mtim, st.st_ctim};
  Clock::time_point t = Clock::now();
  *drop = 0;
  Stripe& s = stripe(i);
  common::MutexLock lk(s.mu);
  Entry& e = s.entries[&i];
  if (e.writers > 0) return false;  // may change under the reader: drop, remember nothing
  if (e.valid && e.seen == now && t - e.seen_at < max_age) return true;
  // Not kept: the kernel drops the pages after this reply, so what it caches once this open has
  // completed is the file as of `now` or later.
  e.valid = false;
  e.seen = now;
  e.seen_at = t;
  e.drop = *drop = ++s.next_drop;
  return false;
}

void ReadCache::dropped(const Inode& i, uint64_t drop) {
  Stripe& s = stripe(i);
  common::MutexLock lk(s.mu);
  auto it = s.entries.find(&i);
  if (it != s.entries.end() && it->second.drop == drop && it->second.writers == 0)
    it->second.valid = true;
}

void ReadCache::forget(const Inode& i) {
  Stripe& s = stripe(i);
  common::MutexLock lk(s.mu);
  s.entries.erase(&i);
}

}  // namespace fencefs::fs
