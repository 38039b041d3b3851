// The last-epoch stamps of inodes (fence/stamp.h): read lazily, written under the inode's lock.
#include <sys/stat.h>
#include <sys/xattr.h>

#include <string>

#include "common/error.h"
#include "common/log.h"
#include "common/mount_table.h"
#include "fence/stamp.h"
#include "fs/fs.h"

namespace fencefs::fs {

using fence::kStampXattr;

void Fs::load_stamp_locked(Inode& i, int fd) {
  if (i.stamp.load(std::memory_order_acquire) != kStampUnknown) return;
  Epoch e = 0;
  uint32_t dom = fence::kAnyDomain;
  if (opts_.stamps && i.type == S_IFREG) {
    char buf[128];
    ssize_t n = fd >= 0 ? fgetxattr(fd, kStampXattr, buf, sizeof buf)
                        : getxattr(proc_path(i.fd).c_str(), kStampXattr, buf, sizeof buf);
    if (n > 0 && stamps_count(i, fd)) {
      auto st = fence::decode_stamp(std::string_view(buf, static_cast<size_t>(n)));
      if (st) {
        e = st->epoch;
        dom = st->domain;
      }
    }
  }
  i.stamp_domain.store(dom, std::memory_order_release);
  i.stamp.store(e, std::memory_order_release);
}

bool Fs::stamps_count(const Inode& i, int fd) {
  // A user's FUSE daemon answers trusted.* as it likes: a stamp there could claim any epoch and
  // lock the domain as a rollback. BACKING's own root is the operator's choice.
  if (i.dev == root_.dev || !common::on_user_fuse(fd >= 0 ? fd : i.fd.load())) return true;
  common::MutexLock lk(untrusted_mu_);
  // Said once per device, for the first few: a user mounting ever new ones floods nothing.
  if (untrusted_said_.size() < 16 && untrusted_said_.insert(i.dev).second)
    log::warn(
        "stamps on {} are not evidence: a FUSE filesystem that a user mounted (or one "
        "that cannot be told from one)",
        fence_.describe({i.fd, nullptr}));
  return false;
}

Epoch Fs::stamp_of(Inode& i, int fd, const Domain* in) {
  if (i.type != S_IFREG) return 0;
  const Domain& d = in ? *in : domain_of(i);
  common::MutexLock lk(inode_mutex(i));
  load_stamp_locked(i, fd);
  uint32_t sd = i.stamp_domain.load(std::memory_order_acquire);
  // Another domain's epochs say nothing about this one's: not evidence of a rollback here.
  if (sd != fence::kAnyDomain && sd != d.id) return 0;
  return i.stamp.load(std::memory_order_acquire);
}

void Fs::stamp(Inode& i, int fd, Epoch e, const Domain& d) {
  if (!opts_.stamps || i.type != S_IFREG) return;
  Pinned pin(*this, fd >= 0 ? nullptr : &i);
  if (pin.error()) return;
  common::MutexLock lk(inode_mutex(i));
  struct stat st;
  if ((fd >= 0 ? fstat(fd, &st) : fstatat(i.fd, "", &st, AT_EMPTY_PATH)) != 0) return;
  stamp_locked(i, fd, e, d, st);
}

int Fs::stamp_created(Inode& i, int fd, Epoch e, const Domain& d, bool fresh, OwedStamp* owed) {
  *owed = OwedStamp();
  common::MutexLock lk(inode_mutex(i));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_ino != i.ino || st.st_dev != i.dev) return EAGAIN;
  bool stamps = opts_.stamps && i.type == S_IFREG;
  if (fresh) {
    // It carries no stamp yet: the one it is owed is written by the handle at release (or by the
    // advance that supersedes it), one fsetxattr per created file, not two.
    i.stamp_domain.store(stamps ? d.id : fence::kAnyDomain, std::memory_order_release);
    i.stamp.store(stamps ? e : 0, std::memory_order_release);
    if (stamps) *owed = OwedStamp{true, e, st.st_size, st.st_mtim};
  } else if (stamps) {
    stamp_locked(i, fd, e, d, st);
  }
  return 0;
}

void Fs::stamp_owed(Handle& h) {
  if (!h.owed.pending || h.wrote_at.load() != 0 || !opts_.stamps) return;
  Inode& i = *h.inode;
  common::MutexLock lk(inode_mutex(i));
  struct stat st {};
  st.st_size = h.owed.size;
  st.st_mtim = h.owed.mtime;
  stamp_locked(i, h.fd, h.owed.epoch, *h.domain, st, true);
}

void Fs::stamp_locked(Inode& i, int fd, Epoch e, const Domain& d, const struct stat& st,
                      bool first) {
  load_stamp_locked(i, fd);
  uint32_t sd = i.stamp_domain.load(std::memory_order_acquire);
  Epoch cur = i.stamp.load(std::memory_order_acquire);
  // Within one domain stamps never go down, whatever order handles close in.
  if ((sd == d.id || sd == fence::kAnyDomain) && e < cur) e = cur;
  std::string v = fence::encode_stamp(e, static_cast<uint64_t>(st.st_size), st.st_mtim.tv_sec,
                                      st.st_mtim.tv_nsec, d.id);
  int flags = first ? XATTR_CREATE : 0;
  int r = fd >= 0 ? fsetxattr(fd, kStampXattr, v.data(), v.size(), flags)
                  : setxattr(proc_path(i.fd).c_str(), kStampXattr, v.data(), v.size(), flags);
  if (r != 0 && first && errno == EEXIST) {  // the later file's stamp stands: read it when needed
    i.stamp.store(kStampUnknown, std::memory_order_release);
    return;
  }
  if (r != 0) {
    log::warn("cannot stamp {}: {}", fence_.describe({i.fd, nullptr}), common::errstr(errno));
    return;
  }
  i.stamp_domain.store(d.id, std::memory_order_release);
  i.stamp.store(e, std::memory_order_release);
}

void Fs::stamp_writers(const Domain& d, Epoch old) {
  handles.each_writer([&](Handle& h) {
    if (h.domain != &d) return;
    if (Epoch w = h.wrote_at.load();
        w != 0 && w == old && !h.stale.load() && &domain_of(*h.inode) == &d)
      stamp(*h.inode, h.fd, old, d);
    stamp_owed(h);  // before a new holder can act: its first mutation stamps anew
  });
}

}  // namespace fencefs::fs
