// The operations table and session setup.
#include "fs/ops.h"

#include "common/log.h"
#include "fs/kernel_io.h"
#include "fs/op_stats.h"

namespace fencefs::fs {
namespace {

void op_init(void* userdata, fuse_conn_info* conn) {
  // Never the writeback cache: write(2) would then land through writeback with some handle of the
  // file, not the writer's. Without it every write(2) is a WRITE of its own handle (write-through).
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Cached pages of a file are dropped when its size or mtime changed behind the kernel's back
  // (another daemon on the same BACKING): files are cached by every handle, writable ones too.
  if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
  // Not the old KILLPRIV (it would take clearing set-id bits on chown and every setattr): the
  // daemon takes FUSE_HANDLE_KILLPRIV_V2 instead, negotiated below libfuse (kernel_io.h).
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
  // Requests must be read, not spliced, for kernel_io to see their flags.
  conn->want &= ~FUSE_CAP_SPLICE_READ;
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  // A spliced reply goes to /dev/fuse, where the kernel does not look for a ring's request.
  if (kernel_io::rings_offered()) {
    conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  } else {
    if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  }
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // Creations get the caller's umask apart (caller_umask): a default ACL replaces it, as natively.
  if (conn->capable & FUSE_CAP_DONT_MASK) conn->want |= FUSE_CAP_DONT_MASK;
  conn->max_write = 1u << 20;
  conn->max_readahead = 1u << 20;
  // Without it the kernel checks mode bits alone, and an ACL in BACKING that denies a user would
  // not apply through the mount. Asked for whatever BACKING's root keeps: a filesystem mounted
  // below it may keep ACLs where the root does not (op_getxattr answers "none" where it cannot).
  Fs& f = *static_cast<Fs*>(userdata);
  if (conn->capable & FUSE_CAP_POSIX_ACL) {
    conn->want |= FUSE_CAP_POSIX_ACL;
    f.set_acls_enforced();
  } else {
    log::warn(
        "the kernel cannot enforce POSIX ACLs on this mount: an ACL in BACKING does not "
        "apply through it, and none can be set through it");
  }
}

// Pins the inode a request names for the handler's duration (see Fs::pin), then runs it.
template <auto Handler, typename... A>
void pinned(fuse_req_t req, fuse_ino_t ino, A... a) {
  Fs& f = fs(req);
  Inode* i = f.inode(ino);
  if (!i) return (void)fuse_reply_err(req, ESTALE);
  Pinned pin(f, i);
  if (pin.error()) return (void)fuse_reply_err(req, pin.error());
  Handler(req, ino, a...);
}

void pinned_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  Fs& f = fs(req);
  Inode* p = f.inode(parent);
  if (!p) return (void)fuse_reply_err(req, ESTALE);
  Pinned pin(f, p);
  if (pin.error()) return (void)fuse_reply_err(req, pin.error());
  op_symlink(req, link, parent, name);
}

void pinned_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  Fs& f = fs(req);
  Inode* i = f.inode(ino);
  Inode* np = f.inode(newparent);
  if (!i || !np) return (void)fuse_reply_err(req, ESTALE);
  Pinned pin(f, i, np);
  if (pin.error()) return (void)fuse_reply_err(req, pin.error());
  op_link(req, ino, newparent, newname);
}

void pinned_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                   const char* newname, unsigned int flags) {
  Fs& f = fs(req);
  Inode* p = f.inode(parent);
  Inode* np = f.inode(newparent);
  if (!p || !np) return (void)fuse_reply_err(req, ESTALE);
  Pinned pin(f, p, np);
  if (pin.error()) return (void)fuse_reply_err(req, pin.error());
  op_rename(req, parent, name, newparent, newname, flags);
}

fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops o{};
  o.init = op_init;
  o.lookup = pinned<op_lookup>;
  o.forget = op_forget;
  o.forget_multi = op_forget_multi;
  o.getattr = pinned<op_getattr>;
  o.setattr = pinned<op_setattr>;
  o.readlink = pinned<op_readlink>;
  o.mknod = pinned<op_mknod>;
  o.mkdir = pinned<op_mkdir>;
  o.symlink = pinned_symlink;
  o.link = pinned_link;
  o.unlink = pinned<op_unlink>;
  o.rmdir = pinned<op_rmdir>;
  o.rename = pinned_rename;
  o.open = pinned<op_open>;
  o.create = pinned<op_create>;
  o.read = op_read;
  o.write = op_write;
  o.flush = op_flush;
  o.release = op_release;
  o.fsync = op_fsync;
  o.fallocate = op_fallocate;
  o.copy_file_range = op_copy_file_range;
  o.lseek = op_lseek;
  o.ioctl = pinned<op_ioctl>;
  o.opendir = pinned<op_opendir>;
  o.readdir = pinned<op_readdir>;
  o.readdirplus = pinned<op_readdirplus>;
  o.releasedir = op_releasedir;
  o.fsyncdir = op_fsyncdir;
  o.statfs = op_statfs;
  o.setxattr = pinned<op_setxattr>;
  o.getxattr = pinned<op_getxattr>;
  o.listxattr = pinned<op_listxattr>;
  o.removexattr = pinned<op_removexattr>;
  return o;
}

}  // namespace

Fs& fs(fuse_req_t req) { return *static_cast<Fs*>(fuse_req_userdata(req)); }

const fuse_lowlevel_ops& operations() {
  static const fuse_lowlevel_ops ops = op_stats::counted(make_ops());
  return ops;
}

}  // namespace fencefs::fs
