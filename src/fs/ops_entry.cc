// Namespace operations: lookup, attributes, and everything that adds, removes or renames entries.
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/path.h"
#include "common/proc.h"
#include "fs/kernel_io.h"
#include "fs/ops.h"

namespace fencefs::fs {

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Fs& f = fs(req);
  Inode& p = *f.inode(parent);
  if (is_virtual(p) || f.is_state_name(p, name)) return ctl_lookup(req, p, name);
  fuse_entry_param e;
  int err = f.do_lookup(parent, name, &e);
  if (err == ENOENT) {
    // Negative entries may be cached: every creation passes through this daemon.
    e.ino = 0;
    return (void)fuse_reply_entry(req, &e);
  }
  if (err) return (void)fuse_reply_err(req, err);
  fuse_reply_entry(req, &e);
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  fs(req).forget_one(ino, nlookup);
  fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  Fs& f = fs(req);
  for (size_t i = 0; i < count; i++) f.forget_one(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  struct stat st;
  if (is_virtual(i)) {
    f.fill_virtual(ino, &st);
    return (void)fuse_reply_attr(req, &st, 0);
  }
  int err = f.stat_inode(i, &st);
  if (err) return (void)fuse_reply_err(req, err);
  fuse_reply_attr(req, &st, f.opts().timeout);
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int valid, fuse_file_info* fi) {
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  if (is_virtual(i)) {
    // `echo … > ctl` truncates before writing: accept a size change, nothing else.
    if ((valid & ~(FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                   FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME)) ||
        i.kind != Kind::CtlFile)
      return (void)fuse_reply_err(req, EPERM);
    struct stat st;
    f.fill_virtual(ino, &st);
    return (void)fuse_reply_attr(req, &st, 0);
  }
  // Only ftruncate(2) passes a handle here; it presents the handle's token.
  Handle* h = fi && handle_of(fi)->writable ? handle_of(fi) : nullptr;
  fence::Admission a;
  Domain* d = h ? h->domain : nullptr;
  int err =
      h ? admit_handle(req, *h, "setattr", &a) : admit_at(req, i, nullptr, "setattr", &a, true, &d);
  if (err) return (void)fuse_reply_err(req, err);
  std::string path = f.proc_path(i.fd);
  int fd = h ? h->fd : -1;
  int res = 0;
  if (valid & FUSE_SET_ATTR_MODE) {
    res = fd >= 0 ? fchmod(fd, attr->st_mode) : fchmodat(AT_FDCWD, path.c_str(), attr->st_mode, 0);
    if (res) return (void)fuse_reply_err(req, errno);
  }
  if (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
    uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : static_cast<uid_t>(-1);
    gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : static_cast<gid_t>(-1);
    res = fchownat(i.fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    if (res) return (void)fuse_reply_err(req, errno);
  }
  if (valid & FUSE_SET_ATTR_SIZE) {
    if (fd >= 0) {
      res = ftruncate(fd, attr->st_size);
    } else if (i.type != S_IFREG) {
      // The kernel truncates regular files only; never open a FIFO or device below as root.
      return (void)fuse_reply_err(req, i.type == S_IFDIR ? EISDIR : EINVAL);
    } else {
      int tfd = open_unleased(path.c_str(), O_WRONLY | O_CLOEXEC);  // truncate(2) waits out leases
      if (tfd < 0 && errno == EMFILE) {
        f.reclaim_fds();
        tfd = open_unleased(path.c_str(), O_WRONLY | O_CLOEXEC);
      }
      res = tfd < 0 || ftruncate(tfd, attr->st_size) != 0 ? errno : 0;
      if (tfd >= 0) ::close(tfd);
      if (res) return (void)fuse_reply_err(req, res);
    }
    if (res) return (void)fuse_reply_err(req, errno);
    if (fd < 0) f.readcache.changed(i);
    if (kernel_io::kill_suidgid()) {
      int wfd = fd >= 0 ? fd : open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      if (wfd >= 0) kill_setid(req, wfd);
      if (wfd >= 0 && wfd != fd) ::close(wfd);
    }
  }
  if (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
    struct timespec tv[2];
    tv[0].tv_sec = tv[1].tv_sec = 0;
    tv[0].tv_nsec = tv[1].tv_nsec = UTIME_OMIT;
    if (valid & FUSE_SET_ATTR_ATIME_NOW)
      tv[0].tv_nsec = UTIME_NOW;
    else if (valid & FUSE_SET_ATTR_ATIME)
      tv[0] = attr->st_atim;
    if (valid & FUSE_SET_ATTR_MTIME_NOW)
      tv[1].tv_nsec = UTIME_NOW;
    else if (valid & FUSE_SET_ATTR_MTIME)
      tv[1] = attr->st_mtim;
    res = fd >= 0 ? futimens(fd, tv) : utimensat(AT_FDCWD, path.c_str(), tv, 0);
    if (res) return (void)fuse_reply_err(req, errno);
  }
  f.stamp(i, fd, a.token(), *d);
  a = fence::Admission();
  struct stat st;
  err = f.stat_inode(i, &st);
  if (err) return (void)fuse_reply_err(req, err);
  fuse_reply_attr(req, &st, f.opts().timeout);
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  char buf[PATH_MAX + 1];
  ssize_t n = readlinkat(i.fd, "", buf, sizeof buf);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  if (n >= static_cast<ssize_t>(sizeof buf)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  buf[n] = 0;
  fuse_reply_readlink(req, buf);
}

// mknod, mkdir, symlink: admit in the parent's domain, create as the caller, then look it up.
static void make_node(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev,
                      const char* link, const char* opname) {
  Fs& f = fs(req);
  Inode& p = *f.inode(parent);
  if (is_virtual(p) || f.is_state_name(p, name)) return (void)fuse_reply_err(req, EPERM);
  fence::Admission a;
  Domain* d = nullptr;
  int err = admit_at(req, p, name, opname, &a, false, &d);
  if (err) return (void)fuse_reply_err(req, err);
  int res;
  {
    AsCaller as(req, mode);
    caller_umask(req, &mode);
    if (!as.ok()) {
      res = -1;
      errno = EACCES;
    } else if (link) {
      res = symlinkat(link, p.fd, name);
    } else if (S_ISDIR(mode)) {
      res = mkdirat(p.fd, name, mode);
    } else {
      res = mknodat(p.fd, name, mode, rdev);
    }
  }
  if (res != 0) return (void)fuse_reply_err(req, errno);
  fuse_entry_param e;
  err = f.do_lookup(parent, name, &e);
  if (err) return (void)fuse_reply_err(req, err);
  if (S_ISREG(mode)) f.stamp(*f.inode(e.ino), -1, a.token(), *d);
  fuse_reply_entry(req, &e);
}

void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  make_node(req, parent, name, mode, rdev, nullptr, "mknod");
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  make_node(req, parent, name, S_IFDIR | mode, 0, nullptr, "mkdir");
}

void op_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  make_node(req, parent, name, S_IFLNK, 0, link, "symlink");
}

void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  Inode& np = *f.inode(newparent);
  if (is_virtual(i) || is_virtual(np) || f.is_state_name(np, newname))
    return (void)fuse_reply_err(req, EPERM);
  fence::Admission a;
  fence::Op op{"link", {i.fd, nullptr}, {np.fd, newname}};
  for (int tries = 0;; tries++) {
    Domain& di = f.domain_of(i);
    Domain& dn = f.domain_of(np);
    // One inode, one domain: its stamps and epoch cannot belong to two (like crossing devices).
    if (&di != &dn) return (void)fuse_reply_err(req, EXDEV);
    int err = f.fence().admit(di, f.token_for(req, di), 0, f.caller(req), op, &a);
    if (err) return (void)fuse_reply_err(req, err);
    // A `domain add` may have drawn a boundary between them while this waited for the lock.
    if (&f.domain_of(i) == &di && &f.domain_of(np) == &dn) break;
    a = fence::Admission();
    if (tries == 3) return (void)fuse_reply_err(req, ESTALE);
  }
  int res;
  {
    ChargedTo charged(req, true);  // the directory may grow
    res = linkat(i.fd, "", np.fd, newname, AT_EMPTY_PATH);
  }
  if (res != 0) return (void)fuse_reply_err(req, errno);
  fuse_entry_param e;
  int err = f.do_lookup(newparent, newname, &e);
  if (err) return (void)fuse_reply_err(req, err);
  fuse_reply_entry(req, &e);
}

// A domain's root directory is pinned, like a mount point: neither it nor a directory above it
// can be removed or renamed, nor can anything be renamed onto its place, since a domain is the
// directory at its declared place. Judged by the identity of the entry, never by its path.
static bool holds_domain_root(Fs& f, Inode& parent, const char* name) {
  if (f.fence().domains().size() <= 1) return false;
  struct stat st;
  bool exists = fstatat(parent.fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
  return f.fence().domains().on_place(parent.dev, parent.ino, name, exists ? st.st_dev : 0,
                                      exists ? st.st_ino : 0);
}

// The kernel judged the sticky rule on the entry it had cached, which may have been replaced in
// BACKING since: UNLINK, RMDIR and RENAME name their source (and an exchange its target), not the
// inode checked. So in a sticky directory the entry there now is judged again, as natively: its
// owner, the directory's owner, or a caller whose CAP_FOWNER counts over it (from /proc, never an
// io_uring worker's) may remove or move it.
// An entry may also appear between that check and the syscall: so the syscall itself runs with the
// caller's fsuid and without the daemon's CAP_FOWNER unless the caller holds one (sticky_fowner),
// and BACKING judges the rule on what it removes or replaces.
static int sticky_allows(fuse_req_t req, Inode& p, const char* name) {
  const fuse_ctx* c = fuse_req_ctx(req);
  struct stat dir, st;
  if (fstat(p.fd, &dir) != 0 || !(dir.st_mode & S_ISVTX) || dir.st_uid == c->uid) return 0;
  if (fstatat(p.fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;  // the syscall says why
  if (st.st_uid == c->uid) return 0;
  auto cr = proc::credentials(c->pid);
  return cr && (cr->caps_over(st.st_uid, st.st_gid) & (uint64_t{1} << CAP_FOWNER)) ? 0 : EPERM;
}

// Whether the daemon's CAP_FOWNER may stay effective for a removal or replacement in these
// directories: when none is sticky, or the caller holds CAP_FOWNER (in any namespace: over the
// files it does not map, sticky_allows has refused already).
static bool sticky_fowner(fuse_req_t req, Inode& p, Inode& np) {
  struct stat st;
  bool sticky = (fstat(p.fd, &st) == 0 && (st.st_mode & S_ISVTX)) ||
                (&np != &p && fstat(np.fd, &st) == 0 && (st.st_mode & S_ISVTX));
  if (!sticky) return true;
  auto cr = proc::credentials(fuse_req_ctx(req)->pid);
  return cr && ((cr->caps | cr->ns_caps) & (uint64_t{1} << CAP_FOWNER));
}

static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char* name, bool dir) {
  Fs& f = fs(req);
  Inode& p = *f.inode(parent);
  if (is_virtual(p) || f.is_state_name(p, name)) return (void)fuse_reply_err(req, EPERM);
  if (dir && holds_domain_root(f, p, name)) return (void)fuse_reply_err(req, EBUSY);
  fence::Admission a;
  int err = admit_at(req, p, name, dir ? "rmdir" : "unlink", &a);
  if (err) return (void)fuse_reply_err(req, err);
  // Again under the admission: a `domain add` (which holds the domain above exclusively) may have
  // declared this directory one while this waited.
  if (dir && holds_domain_root(f, p, name)) return (void)fuse_reply_err(req, EBUSY);
  if ((err = sticky_allows(req, p, name))) return (void)fuse_reply_err(req, err);
  int res;
  if (sticky_fowner(req, p, p)) {
    res = unlinkat(p.fd, name, dir ? AT_REMOVEDIR : 0);
  } else {
    ChargedTo charged(req, true, false);
    res = unlinkat(p.fd, name, dir ? AT_REMOVEDIR : 0);
  }
  if (res != 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_err(req, 0);
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  remove_entry(req, parent, name, false);
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  remove_entry(req, parent, name, true);
}

void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
               const char* newname, unsigned int flags) {
  Fs& f = fs(req);
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) return (void)fuse_reply_err(req, EINVAL);
  Inode& p = *f.inode(parent);
  Inode& np = *f.inode(newparent);
  if (is_virtual(p) || is_virtual(np) || f.is_state_name(p, name) || f.is_state_name(np, newname))
    return (void)fuse_reply_err(req, EPERM);
  if (holds_domain_root(f, p, name) || holds_domain_root(f, np, newname))
    return (void)fuse_reply_err(req, EBUSY);
  fence::Admission a;
  fence::Op op{"rename", {p.fd, name}, {np.fd, newname}};
  Domain* d1 = nullptr;
  Domain* d2 = nullptr;
  Epoch t2 = 0;
  for (int tries = 0;; tries++) {
    d1 = &f.domain_of(p);
    d2 = &f.domain_of(np);
    if (d1 != d2) {
      // A directory's files carry stamps of their domain's epochs: moving a tree across domains
      // is a copy (EXDEV, as across devices; mv falls back to copying). A file moves and is
      // restamped below, unless it has other names, which would stay in the old domain (one
      // inode, one domain). An exchange would move two entries: EXDEV too.
      struct stat st;
      if (fstatat(p.fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return (void)fuse_reply_err(req, errno);
      if (S_ISDIR(st.st_mode) || st.st_nlink > 1 || (flags & RENAME_EXCHANGE))
        return (void)fuse_reply_err(req, EXDEV);
    }
    t2 = f.token_for(req, *d2);
    Epoch t1 = d1 == d2 ? t2 : f.token_for(req, *d1);
    int err = f.fence().admit2(*d1, t1, *d2, t2, f.caller(req), op, &a);
    if (err) return (void)fuse_reply_err(req, err);
    // A `domain add` may have drawn a boundary here while this waited for the locks.
    if (&f.domain_of(p) == d1 && &f.domain_of(np) == d2) break;
    a = fence::Admission();
    if (tries == 3) return (void)fuse_reply_err(req, ESTALE);
  }
  // Or declared the entry itself (or one below it) a domain: its root is pinned from then on.
  if (holds_domain_root(f, p, name) || holds_domain_root(f, np, newname))
    return (void)fuse_reply_err(req, EBUSY);
  int err = sticky_allows(req, p, name);
  if (!err && (flags & RENAME_EXCHANGE)) err = sticky_allows(req, np, newname);
  if (err) return (void)fuse_reply_err(req, err);
  int res;
  {
    ChargedTo charged(req, true, sticky_fowner(req, p, np));  // the new directory may grow
    res = renameat2(p.fd, name, np.fd, newname, flags);
  }
  if (res != 0) return (void)fuse_reply_err(req, errno);
  // Within one directory no entry changes parent (or domain): nothing to record.
  if (&p != &np) f.renamed(p, name, np, newname, flags, d1 != d2 ? d2 : nullptr, t2);
  fuse_reply_err(req, 0);
}

}  // namespace fencefs::fs
