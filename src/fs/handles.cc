// The end of every handle: RELEASE, an open the kernel interrupted, or the end of the session.
#include <unistd.h>

#include <mutex>
#include <shared_mutex>

#include "fs/fs.h"

namespace fencefs::fs {

Handle::~Handle() {
  if (tracker) tracker->untrack(*this);
}

void Fs::close_handle(Handle* h) {
  bool real = h->inode->kind == Kind::Real;
  if (real && h->wrote_at.load() != 0 && !h->stale.load()) {
    // The stamp is a mutation like any other: written only while the epoch the handle wrote
    // under is still the file's domain's, and under its shared lock so no advance passes
    // between (the advance past it stamped the file).
    Domain& d = *h->domain;
    std::shared_lock lk(d.mu);
    if (Epoch e = h->wrote_at.load(); e == d.epoch.load() && &domain_of(*h->inode) == &d)
      stamp(*h->inode, h->fd, e, d);
  }
  if (real) stamp_owed(*h);
  if (h->writable && real) readcache.writer_closed(*h->inode);
  handles.untrack(h);  // before its fd is closed: an advance stamps through it
  if (h->fd >= 0) ::close(h->fd);
  if (real) h->inode->open_handles--;
  if (h->charged) budget().give(h->charged_uid);
  pages().give(h->charged_uid, h->page_charge, h->page_shared_exempt);
  delete h;
}

void Fs::close_dir(DirHandle* d) {
  handles.untrack(d);
  if (d->dp) {
    closedir(d->dp);
    budget().give(d->charged_uid);
  }
  delete d;
}

size_t Fs::close_all() {
  auto files = handles.files();
  auto dirs = handles.dirs();
  for (Handle* h : files) close_handle(h);
  for (DirHandle* d : dirs) close_dir(d);
  return files.size() + dirs.size();
}

}  // namespace fencefs::fs
