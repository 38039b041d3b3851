#include "fs/readcache.h"

#include <functional>

namespace fencefs::fs {

bool ReadCache::Seen::operator==(const Seen& o) const {
  return size == o.size && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec &&
         ctime.tv_sec == o.ctime.tv_sec && ctime.tv_nsec == o.ctime.tv_nsec;
}

ReadCache::Stripe& ReadCache::stripe(const Inode& i) {
  return stripes_[std::hash<const Inode*>{}(&i) % stripes_.size()];
}

void ReadCache::writer_opened(const Inode& i) {
  Stripe& s = stripe(i);
  common::MutexLock lk(s.mu);
  Entry& e = s.entries[&i];
  e.writers++;
  e.valid = false;
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
  auto it = s.entries.find(&i);
  if (it == s.entries.end()) return;
  it->second.valid = false;
  if (it->second.writers == 0) s.entries.erase(it);
}

bool ReadCache::keep(const Inode& i, const struct stat& st) {
  Seen now{st.st_size, st.st_mtim, st.st_ctim};
  Stripe& s = stripe(i);
  common::MutexLock lk(s.mu);
  Entry& e = s.entries[&i];
  if (e.writers > 0) return false;  // may change under the reader: drop, remember nothing
  bool keep = e.valid && e.seen == now;
  // Not kept: the kernel drops the pages after this reply, so what it caches from here on is the
  // file as of `now` or later.
  e.seen = now;
  e.valid = true;
  return keep;
}

void ReadCache::forget(const Inode& i) {
  Stripe& s = stripe(i);
  common::MutexLock lk(s.mu);
  s.entries.erase(&i);
}

}  // namespace fencefs::fs
