// File data: open and create capture the caller's token in the handle; every later mutation
// through the handle presents that token.
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <shared_mutex>

#include "common/proc.h"
#include "fencefs/ioctl.h"
#include "fs/kernel_io.h"
#include "fs/ops.h"

namespace fencefs::fs {

int admit_at(fuse_req_t req, Inode& obj, const char* name, const char* opname,
             fence::Admission* out, bool stamped, Domain** where) {
  Fs& f = fs(req);
  fence::Op op{opname, {obj.fd, name}, {}};
  for (int tries = 0; tries < 4; tries++) {
    Domain& d = f.domain_of(obj);
    Epoch stamp = stamped ? f.stamp_of(obj, -1, &d) : 0;
    int err = f.fence().admit(d, f.token_for(req, d), stamp, f.caller(req), op, out);
    if (err) return err;
    // `domain add` holds the parent domain exclusively while it declares: once admitted, obj's
    // domain cannot change under us, but it may have changed while we waited. Judge it anew.
    if (&f.domain_of(obj) == &d) {
      if (where) *where = &d;
      return 0;
    }
    *out = fence::Admission();
  }
  return ESTALE;
}

// A handle carries a token of the domain its file was in at open. When the file is in another
// domain now (`domain add` above it, or renamed across), that token says nothing there: the
// handle is refused for good, like a superseded one; opening the file again binds it anew.
static int refuse_moved(fuse_req_t req, Handle& h, Domain& now, const char* opname) {
  Fs& f = fs(req);
  std::string tok = std::to_string(h.token.load());
  h.stale = true;
  return f.fence().refuse(
      f.caller(req), {opname, &now, {}, tok, {h.fd, nullptr}}, fence::Reason::Stale, ESTALE,
      fmt::format("handle opened in domain {}; the file is in domain {} now: open it again there",
                  h.domain->path, now.path));
}

int admit_handle(fuse_req_t req, Handle& h, const char* opname, fence::Admission* out) {
  Fs& f = fs(req);
  if (Domain& now = f.domain_of(*h.inode); &now != h.domain)
    return refuse_moved(req, h, now, opname);
  fence::Op op{opname, {h.fd, nullptr}, {}};
  int err = f.fence().admit(*h.domain, h.token.load(), 0, f.caller(req), op, out);
  if (err == ESTALE) h.stale = true;
  if (err) return err;
  // Checked again under the admission: the file may have moved while this waited for the lock.
  if (Domain& now = f.domain_of(*h.inode); &now != h.domain) {
    *out = fence::Admission();
    return refuse_moved(req, h, now, opname);
  }
  if (f.stamp_of(*h.inode, h.fd) < out->token()) f.stamp(*h.inode, h.fd, out->token(), *h.domain);
  h.wrote_at.store(out->token());
  return 0;
}

// Dirty pages of a shared mapping are written back with some mapped handle of the inode, not the
// dirtier's: the write presents the lowest token among all of them (see PageCache).
static int admit_writeback(fuse_req_t req, Handle& h, fence::Admission* out) {
  Fs& f = fs(req);
  if (Domain& now = f.domain_of(*h.inode); &now != h.domain) {
    refuse_moved(req, h, now, "writeback");
    return EIO;
  }
  fence::Op op{"writeback", {h.fd, nullptr}, {}};
  Epoch token = 0;
  const char* why = "";
  if (int err = f.pagecache.writeback_token(*h.inode, *h.domain, &token, &why))
    return f.fence().refuse(f.caller(req), {op.name, h.domain, {}, {}, op.target},
                            fence::Reason::Stale, err, why);
  if (f.fence().admit(*h.domain, token, 0, f.caller(req), op, out) != 0)
    return EIO;  // reported by msync, fsync or close of the mapping's file
  // Checked again under the admission: a domain may have been declared above the file meanwhile.
  if (Domain& now = f.domain_of(*h.inode); &now != h.domain) {
    *out = fence::Admission();
    refuse_moved(req, h, now, "writeback");
    return EIO;
  }
  if (f.stamp_of(*h.inode, h.fd) < out->token()) f.stamp(*h.inode, h.fd, out->token(), *h.domain);
  h.wrote_at.store(out->token());
  return 0;
}

int open_unleased(const char* path, int flags) {
  for (int tries = 0;; tries++) {
    int fd = open(path, flags | O_NONBLOCK);
    if (fd >= 0) {
      int fl = (flags & O_NONBLOCK) ? -1 : fcntl(fd, F_GETFL);
      if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
      return fd;
    }
    if (errno != EWOULDBLOCK || tries == 10) return -1;
    usleep(10000);
  }
}

static bool wants_write(int flags) { return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC); }

static Handle* new_handle(fuse_req_t req, int fd, Inode& i, Domain* d, Epoch token, bool writable) {
  i.open_handles++;  // an open file's inode keeps its fd: it may be unlinked, beyond reopening
  auto* h = new Handle;
  h->charged_uid = fuse_req_ctx(req)->uid;
  h->charged = true;
  h->fd = fd;
  h->inode = &i;
  h->domain = d;
  h->token = token;
  h->writable = writable;
  fs(req).opened(h);
  return h;
}

static void set_open_flags(Fs& f, fuse_file_info* fi, bool writable) {
  // Handles that can map the file use the page cache. Without the writeback cache a write(2)
  // still reaches the daemon at once as a WRITE of its own handle; writeback of mapped pages is
  // judged by PageCache. O_WRONLY handles cannot be mapped and bypass the cache: their writes
  // cost no copy.
  fi->direct_io = (fi->flags & O_ACCMODE) == O_WRONLY;
  Handle& h = *handle_of(fi);
  // A read-only open keeps what the kernel cached of the file while nothing changed it since
  // (ReadCache), where the attribute cache is on; every other open drops it.
  struct stat st;
  uint64_t drop = 0;
  auto max_age = std::chrono::duration_cast<ReadCache::Clock::duration>(
      std::chrono::duration<double>(f.opts().timeout));
  fi->keep_cache = !writable && f.opts().timeout > 0 && fstat(h.fd, &st) == 0 &&
                   f.readcache.keep(*h.inode, st, max_age, &drop);
  h.drop.store(drop, std::memory_order_relaxed);
  if (!writable) f.readcache.count(fi->keep_cache);
  // No FLUSH at close where it could report nothing. Only for direct-I/O handles: at the close of
  // a cached one the kernel writes back mapped pages, whose refusal close(2) reports.
  fi->noflush = fi->direct_io && f.flush_is_noop(*h.inode);
  if (writable && (fi->flags & O_ACCMODE) == O_RDWR) f.pagecache.track(h, f.ino_of(h.inode));
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  if (is_virtual(i)) return ctl_open(req, i, fi);
  // The kernel opens special files itself; never let a reopen below reach one as root.
  if (i.type != S_IFREG && i.type != S_IFDIR) return (void)fuse_reply_err(req, ENXIO);
  bool writable = wants_write(fi->flags);
  Domain* d = &f.domain_of(i);
  fence::Admission a;
  Epoch token = 0;
  if (writable) {
    int err = admit_at(req, i, nullptr, "open", &a, true, &d);
    if (err) return (void)fuse_reply_err(req, err);
    token = a.token();
  }
  // No O_APPEND below: the kernel puts appends at its i_size and sends the offset, and fcntl()
  // may drop O_APPEND later without telling us. No O_DIRECT: the request's buffer is not aligned
  // for it, and the kernel already bypasses its cache for such a handle.
  int flags = fi->flags & ~(O_NOFOLLOW | O_CREAT | O_EXCL | O_NOCTTY | O_APPEND | O_DIRECT);
  if (int err = f.charge_open(req, d)) return (void)fuse_reply_err(req, err);
  if (writable) f.readcache.writer_opened(i);  // before O_TRUNC can change the data
  int fd = open_unleased(f.proc_path(i.fd).c_str(), flags | O_CLOEXEC);
  if (fd < 0 && errno == EMFILE) {
    f.reclaim_fds();
    fd = open_unleased(f.proc_path(i.fd).c_str(), flags | O_CLOEXEC);
  }
  // An execve's open (the kernel's __FMODE_EXEC, 0x20) of a file on a noexec filesystem mounted
  // below BACKING: refused as natively. The mount itself is noexec only if BACKING's root is.
  struct statvfs sv;
  if (fd >= 0 && (fi->flags & 0x20) && fstatvfs(fd, &sv) == 0 && (sv.f_flag & ST_NOEXEC)) {
    ::close(fd);
    fd = -1;
    errno = EACCES;
  }
  if (fd < 0) {
    int err = errno;
    if (writable) f.readcache.writer_closed(i);
    f.budget().give(fuse_req_ctx(req)->uid);
    return (void)fuse_reply_err(req, err);
  }
  Handle* h = new_handle(req, fd, i, d, token, writable);
  if (writable && (fi->flags & O_TRUNC)) {
    if (kernel_io::kill_suidgid() && kill_setid(req, fd)) kernel_io::attributes_changed(ino);
    f.stamp(i, fd, token, *d);
    h->wrote_at.store(token);
  }
  a = fence::Admission();
  fi->fh = reinterpret_cast<uint64_t>(h);
  set_open_flags(f, fi, writable);
  // Interrupted: the kernel will not release it.
  if (fuse_reply_open(req, fi) == -ENOENT) f.close_handle(h);
}

// The open of CREATE. The kernel sends it on a cached negative entry, so whatever was put at the
// name in BACKING since is met here, with root's privileges: never follow a symlink, never open
// (and block on) a FIFO or device, and open an existing file only with the caller's own
// permissions, which the kernel has not checked. Returns the fd, or -1 with *err.
static int create_or_open(fuse_req_t req, Inode& p, const char* name, mode_t mode, int fl, int* err,
                          bool* created) {
  Fs& f = fs(req);
  int flags = (fl | O_CREAT) & ~(O_NOFOLLOW | O_APPEND | O_DIRECT | O_EXCL);
  int fd;
  {
    AsCaller as(req, mode);
    caller_umask(req, &mode);
    if (!as.ok()) {
      *err = EACCES;
      *created = false;
      return -1;
    }
    fd = openat(p.fd, name, flags | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno == EMFILE) {
      f.reclaim_fds();
      fd = openat(p.fd, name, flags | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    }
  }
  *created = fd >= 0;
  if (fd >= 0) return fd;
  *err = errno;
  if (*err != EEXIST || (fl & O_EXCL)) return -1;
  int opath = openat(p.fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (opath < 0) {
    *err = errno;
    return -1;
  }
  struct stat st;
  if (fstat(opath, &st) != 0) {
    *err = errno;
  } else if (S_ISLNK(st.st_mode)) {
    *err = ELOOP;
  } else if (S_ISDIR(st.st_mode)) {
    *err = EISDIR;
  } else if (!S_ISREG(st.st_mode)) {
    *err = ENXIO;
  } else {
    AsCaller as(req, 0, false, &st);
    fd = as.ok() ? open_unleased(f.proc_path(opath).c_str(), (flags & ~O_CREAT) | O_CLOEXEC) : -1;
    if (fd < 0) *err = as.ok() ? errno : EACCES;
  }
  ::close(opath);
  return fd;
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi) {
  Fs& f = fs(req);
  Inode& p = *f.inode(parent);
  if (is_virtual(p) || f.is_state_name(p, name)) return (void)fuse_reply_err(req, EPERM);
  fence::Admission a;
  Domain* d = nullptr;
  int err = admit_at(req, p, name, "create", &a, false, &d);
  if (err) return (void)fuse_reply_err(req, err);
  if ((err = f.charge_open(req, &f.domain_of(p)))) return (void)fuse_reply_err(req, err);
  struct Uncharge {  // until a handle holds the charge
    Fs& f;
    uid_t uid;
    bool armed = true;
    ~Uncharge() {
      if (armed) f.budget().give(uid);
    }
  } uncharge{f, fuse_req_ctx(req)->uid};
  int fd = -1;
  bool created = false;
  OwedStamp owed;
  fuse_entry_param e;
  // The name may change in BACKING at any moment: retry (a few times) until the entry looked up
  // is the file opened.
  for (int attempt = 0; fd < 0 && attempt < 4; attempt++) {
    fd = create_or_open(req, p, name, mode, fi->flags, &err, &created);
    if (fd < 0) {
      if (err == ENOENT) continue;  // appeared, then vanished: create again
      return (void)fuse_reply_err(req, err);
    }
    err = f.do_lookup(parent, name, &e);
    // Stamped now, under the admission: a holder superseded before it closes does not restamp.
    // Not dirty: the stamp is the file as created; a mutation through the handle marks it. A
    // file this CREATE made is stamped once, at release (owed).
    if (!err && (err = f.stamp_created(*f.inode(e.ino), fd, a.token(), *d, created, &owed)))
      f.forget_one(e.ino, 1);
    if (err) {
      ::close(fd);
      fd = -1;
      if (err != ENOENT && err != EAGAIN) return (void)fuse_reply_err(req, err);
    }
  }
  if (fd < 0) return (void)fuse_reply_err(req, err);
  Inode& i = *f.inode(e.ino);
  // Only now, after an O_TRUNC of an existing file: an open racing it still sees the size change
  // (a file that was empty has no pages to hide).
  f.readcache.writer_opened(i);
  struct stat now;  // the entry's attributes go back in the reply: the mode as it is now
  if (!created && (fi->flags & O_TRUNC) && kernel_io::kill_suidgid() && kill_setid(req, fd) &&
      fstat(fd, &now) == 0) {
    e.attr.st_mode = now.st_mode;
    e.attr.st_ctim = now.st_ctim;
  }
  Handle* h = new_handle(req, fd, i, d, a.token(), true);
  h->owed = owed;  // before the admission ends: an advance past it stamps through the handle
  uncharge.armed = false;
  a = fence::Admission();
  fi->fh = reinterpret_cast<uint64_t>(h);
  set_open_flags(f, fi, true);
  if (fuse_reply_create(req, &e, fi) == -ENOENT) f.close_handle(h);
}

// The open that dropped the kernel's pages has completed: pages cached from here on show the file.
static void confirm_drop(Fs& f, Handle& h) {
  if (h.drop.load(std::memory_order_relaxed) == 0) return;
  if (uint64_t d = h.drop.exchange(0)) f.readcache.dropped(*h.inode, d);
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  Handle& h = *handle_of(fi);
  if (h.inode->kind != Kind::Real) return ctl_read(req, h, size, off);
  confirm_drop(fs(req), h);
  // Read where the reply goes from, when libfuse would copy it through a buffer of its own.
  if (char* place = kernel_io::reply_buffer(size)) {
    ssize_t n = pread(h.fd, place, size, off);
    if (n < 0) return (void)fuse_reply_err(req, errno);
    return (void)fuse_reply_buf(req, place, static_cast<size_t>(n));
  }
  fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
  buf.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  buf.buf[0].fd = h.fd;
  buf.buf[0].pos = off;
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

// Clears set-user-ID, and set-group-ID when the group may execute or the caller is not in the
// file's group, as the kernel does natively for a caller without CAP_FSETID. The kernel says when
// (kernel_io: FUSE_WRITE_KILL_SUIDGID on direct writes, and with FUSE_HANDLE_KILLPRIV_V2 on every
// write, truncate and O_TRUNC open); the daemon acts as root, which would keep them.
bool kill_setid(fuse_req_t req, int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !(st.st_mode & (S_ISUID | S_ISGID)))
    return false;
  const fuse_ctx* c = fuse_req_ctx(req);
  mode_t mode = st.st_mode & 07777 & ~S_ISUID;
  if (st.st_mode & S_ISGID) {
    bool in_group = c->gid == st.st_gid;
    if (!in_group) {  // none for an io_uring worker, whose /proc shows the groups it started with
      auto cr = proc::credentials(c->pid, false);
      in_group =
          cr && std::find(cr->groups.begin(), cr->groups.end(), st.st_gid) != cr->groups.end();
    }
    if ((st.st_mode & S_IXGRP) || !in_group) mode &= ~S_ISGID;
  }
  return mode != (st.st_mode & 07777) && fchmod(fd, mode) == 0;
}

void op_write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off,
              fuse_file_info* fi) {
  Handle& h = *handle_of(fi);
  if (h.inode->kind != Kind::Real) return ctl_write(req, h, data, size, off);
  Fs& f = fs(req);
  fence::Admission a;
  int err = fi->writepage ? admit_writeback(req, h, &a) : admit_handle(req, h, "write", &a);
  if (!err) {
    // Without FUSE_HANDLE_KILLPRIV_V2 the kernel clears them itself (a setattr) before a cached
    // write; the uid stands in for CAP_FSETID where the kernel said nothing.
    if ((kernel_io::kill_suidgid() || (!kernel_io::killpriv_v2() && fuse_req_ctx(req)->uid != 0)) &&
        kill_setid(req, h.fd))
      kernel_io::attributes_changed(ino);
    ssize_t n;
    {
      ChargedTo charged(fi->writepage ? h.charged_uid : fuse_req_ctx(req)->uid);
      n = pwrite(h.fd, data, size, off);
    }
    if (n >= 0) return (void)fuse_reply_write(req, static_cast<size_t>(n));
    err = errno;
  }
  // The kernel already holds the refused bytes in its page cache: drop them before anything could
  // write them back or read them (queued before the reply, so nothing is admitted in between).
  f.pagecache.refused(*h.inode, ino);
  fuse_reply_err(req, err);
}

void op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Handle& h = *handle_of(fi);
  if (h.inode->kind != Kind::Real) return (void)fuse_reply_err(req, 0);
  // Like close(2) of a dup: reports delayed errors of the backing filesystem (NFS and such).
  int fd = dup(h.fd);
  int res = fd >= 0 ? ::close(fd) : -1;
  fuse_reply_err(req, res == 0 ? 0 : errno);
}

void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  fs(req).close_handle(handle_of(fi));
  fuse_reply_err(req, 0);
}

void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) {
  Handle& h = *handle_of(fi);
  if (h.inode->kind != Kind::Real) return (void)fuse_reply_err(req, 0);
  int res = datasync ? fdatasync(h.fd) : fsync(h.fd);
  fuse_reply_err(req, res == 0 ? 0 : errno);
}

// fallocate and copy_file_range carry no kill flag. A non-root caller's run as it (ChargedTo),
// so BACKING clears set-ID bits natively; a root caller's run with the daemon's CAP_FSETID, which
// keeps them: cleared here unless the caller holds CAP_FSETID itself (never an io_uring worker).
static void kill_setid_for_root(fuse_req_t req, int fd, fuse_ino_t ino) {
  struct stat st;
  const fuse_ctx* c = fuse_req_ctx(req);
  if (c->uid != 0 || fstat(fd, &st) != 0 || !(st.st_mode & (S_ISUID | S_ISGID))) return;
  auto cr = proc::credentials(c->pid);
  if (cr && (cr->caps & (uint64_t{1} << CAP_FSETID))) return;
  if (kill_setid(req, fd)) kernel_io::attributes_changed(ino);
}

void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                  fuse_file_info* fi) {
  Handle& h = *handle_of(fi);
  if (h.inode->kind != Kind::Real) return (void)fuse_reply_err(req, EPERM);
  fence::Admission a;
  int err = admit_handle(req, h, "fallocate", &a);
  if (err) return (void)fuse_reply_err(req, err);
  int res;
  {
    ChargedTo charged(req);
    res = fallocate(h.fd, mode, off, len);
  }
  if (res != 0) return (void)fuse_reply_err(req, errno);
  kill_setid_for_root(req, h.fd, ino);
  fuse_reply_err(req, 0);
}

void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, fuse_file_info* fi_in,
                        fuse_ino_t ino_out, off_t off_out, fuse_file_info* fi_out, size_t len,
                        int flags) {
  Handle& in = *handle_of(fi_in);
  Handle& out = *handle_of(fi_out);
  if (in.inode->kind != Kind::Real || out.inode->kind != Kind::Real)
    return (void)fuse_reply_err(req, EXDEV);
  fence::Admission a;
  int err = admit_handle(req, out, "copy_file_range", &a);
  if (err) return (void)fuse_reply_err(req, err);
  ssize_t n;
  {
    ChargedTo charged(req);
    n = copy_file_range(in.fd, &off_in, out.fd, &off_out, len, static_cast<unsigned>(flags));
  }
  if (n < 0) return (void)fuse_reply_err(req, errno);
  kill_setid_for_root(req, out.fd, ino_out);
  fuse_reply_write(req, static_cast<size_t>(n));
}

void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info* fi) {
  Handle& h = *handle_of(fi);
  if (h.inode->kind != Kind::Real) return (void)fuse_reply_err(req, ESPIPE);
  off_t res = lseek(h.fd, off, whence);
  if (res < 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_lseek(req, res);
}

void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void* arg, fuse_file_info* fi,
              unsigned flags, const void* in_buf, size_t in_bufsz, size_t out_bufsz) {
  if (flags & FUSE_IOCTL_COMPAT) return (void)fuse_reply_err(req, ENOSYS);
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  int err = ENOTTY;
  if (is_virtual(i)) {
    err = ENOTTY;
  } else if (cmd == FENCEFS_IOC_ADVANCE) {
    return ctl_ioctl_advance(req, f.domain_of(i), in_buf, in_bufsz);
  } else if (cmd == FENCEFS_IOC_SET_TOKEN && S_ISREG(i.type)) {
    err = ctl_ioctl_set_token(req, *handle_of(fi), in_buf, in_bufsz);  // fi is a file's handle
  } else if (cmd == FENCEFS_IOC_BIND) {
    err = ctl_ioctl_bind(req, f.domain_of(i), in_buf, in_bufsz);
  } else if (cmd == FENCEFS_IOC_ACQUIRE && out_bufsz == sizeof(fencefs_acquire)) {
    fencefs_acquire out;
    err = ctl_ioctl_acquire(req, f.domain_of(i), in_buf, in_bufsz, &out);
    if (!err) return (void)fuse_reply_ioctl(req, 0, &out, sizeof out);
  }
  if (err) return (void)fuse_reply_err(req, err);
  fuse_reply_ioctl(req, 0, nullptr, 0);
}

}  // namespace fencefs::fs
