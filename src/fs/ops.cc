// The operations table and session setup.
#include "fs/ops.h"

namespace fencefs::fs {
namespace {

void op_init(void* userdata, fuse_conn_info* conn) {
  // Never the writeback cache: it would let writes reach the disk without passing the fence.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Clearing set-id bits on write stays with the kernel, which sends a (fenced) setattr.
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  conn->max_write = 1u << 20;
  conn->max_readahead = 1u << 20;
}

fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops o{};
  o.init = op_init;
  o.lookup = op_lookup;
  o.forget = op_forget;
  o.forget_multi = op_forget_multi;
  o.getattr = op_getattr;
  o.setattr = op_setattr;
  o.readlink = op_readlink;
  o.mknod = op_mknod;
  o.mkdir = op_mkdir;
  o.symlink = op_symlink;
  o.link = op_link;
  o.unlink = op_unlink;
  o.rmdir = op_rmdir;
  o.rename = op_rename;
  o.open = op_open;
  o.create = op_create;
  o.read = op_read;
  o.write = op_write;
  o.flush = op_flush;
  o.release = op_release;
  o.fsync = op_fsync;
  o.fallocate = op_fallocate;
  o.copy_file_range = op_copy_file_range;
  o.lseek = op_lseek;
  o.ioctl = op_ioctl;
  o.opendir = op_opendir;
  o.readdir = op_readdir;
  o.readdirplus = op_readdirplus;
  o.releasedir = op_releasedir;
  o.fsyncdir = op_fsyncdir;
  o.statfs = op_statfs;
  o.setxattr = op_setxattr;
  o.getxattr = op_getxattr;
  o.listxattr = op_listxattr;
  o.removexattr = op_removexattr;
  return o;
}

}  // namespace

Fs& fs(fuse_req_t req) { return *static_cast<Fs*>(fuse_req_userdata(req)); }

const fuse_lowlevel_ops& operations() {
  static const fuse_lowlevel_ops ops = make_ops();
  return ops;
}

}  // namespace fencefs::fs
