// Directory reading and statfs: never fenced.
#include <dirent.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "fs/ops.h"

namespace fencefs::fs {
namespace {

DirHandle* dir_of(fuse_file_info* fi) { return reinterpret_cast<DirHandle*>(fi->fh); }

bool dot_or_dotdot(const char* n) { return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])); }

void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info* fi,
                bool plus) {
  Fs& f = fs(req);
  DirHandle* d = dir_of(fi);
  if (d->ctl) return ctl_readdir(req, size, offset, plus);
  std::unique_ptr<char[]> buf(new char[size]);
  char* p = buf.get();
  size_t rem = size;
  if (offset != d->offset) {
    seekdir(d->dp, offset);
    d->entry = nullptr;
    d->offset = offset;
  }
  for (;;) {
    if (!d->entry) {
      errno = 0;
      d->entry = readdir(d->dp);
      if (!d->entry) {
        if (errno && rem == size) return (void)fuse_reply_err(req, errno);
        break;
      }
    }
    const char* name = d->entry->d_name;
    off_t next = d->entry->d_off;
    if (d->is_root && strcmp(name, ".fencefs") == 0) {  // the state is not part of the tree
      d->entry = nullptr;
      d->offset = next;
      continue;
    }
    size_t entsize;
    fuse_ino_t looked_up = 0;
    if (plus) {
      fuse_entry_param e;
      memset(&e, 0, sizeof e);
      if (dot_or_dotdot(name)) {
        e.attr.st_ino = d->entry->d_ino;
        e.attr.st_mode = static_cast<mode_t>(d->entry->d_type) << 12;
      } else {
        int err = f.do_lookup(ino, name, &e);
        if (err == ENOENT) {  // vanished since readdir saw it
          d->entry = nullptr;
          d->offset = next;
          continue;
        }
        if (err) return (void)fuse_reply_err(req, err);
        looked_up = e.ino;
      }
      entsize = fuse_add_direntry_plus(req, p, rem, name, &e, next);
    } else {
      struct stat st;
      memset(&st, 0, sizeof st);
      st.st_ino = d->entry->d_ino;
      st.st_mode = static_cast<mode_t>(d->entry->d_type) << 12;
      entsize = fuse_add_direntry(req, p, rem, name, &st, next);
    }
    if (entsize > rem) {
      if (looked_up) f.forget_one(looked_up, 1);
      break;
    }
    p += entsize;
    rem -= entsize;
    d->entry = nullptr;
    d->offset = next;
  }
  fuse_reply_buf(req, buf.get(), size - rem);
}

}  // namespace

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  auto d = std::make_unique<DirHandle>();
  if (i.kind == Kind::CtlDir) {
    d->ctl = true;
  } else {
    if (int err = f.charge_open(req, nullptr)) return (void)fuse_reply_err(req, err);
    d->charged_uid = fuse_req_ctx(req)->uid;
    int fd = openat(i.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0 && !(d->dp = fdopendir(fd))) {
      int err = errno;
      ::close(fd);
      errno = err;
    }
    if (!d->dp) {
      int err = errno;
      f.budget().give(d->charged_uid);
      return (void)fuse_reply_err(req, err);
    }
    d->is_root = &i == &f.root();
    // The kernel keeps the listing across opens and drops it when the directory changes through
    // this mount (its iversion) or its mtime moved (checked at each opendir once the attributes
    // expire): as sound as the attribute cache, so only where that cache is on (timeout > 0).
    fi->cache_readdir = f.opts().timeout > 0;
    fi->keep_cache = fi->cache_readdir;
  }
  DirHandle* dh = d.release();
  f.opened(dh);
  fi->fh = reinterpret_cast<uint64_t>(dh);
  if (fuse_reply_open(req, fi) == -ENOENT) f.close_dir(dh);
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  do_readdir(req, ino, size, off, fi, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  do_readdir(req, ino, size, off, fi, true);
}

void op_releasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  fs(req).close_dir(dir_of(fi));
  fuse_reply_err(req, 0);
}

void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) {
  DirHandle* d = dir_of(fi);
  if (!d->dp) return (void)fuse_reply_err(req, 0);
  int fd = dirfd(d->dp);
  int res = datasync ? fdatasync(fd) : fsync(fd);
  fuse_reply_err(req, res == 0 ? 0 : errno);
}

void op_statfs(fuse_req_t req, fuse_ino_t ino) {
  struct statvfs st;
  if (fstatvfs(fs(req).root().fd, &st) != 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_statfs(req, &st);
}

}  // namespace fencefs::fs
