// The FUSE handlers and the two admission helpers they share.
#pragma once
#include "fs/fs.h"

namespace fencefs::fs {

// Admits a path operation on `obj` (or on entry `name` below it) with the caller's bound token,
// in the domain obj is in while the admission holds; *where (if given) is that domain.
// stamped: obj's stamp in that domain counts as evidence of a rollback.
int admit_at(fuse_req_t req, Inode& obj, const char* name, const char* opname,
             fence::Admission* out, bool stamped = false, Domain** where = nullptr);
// Opens a BACKING file for a caller without waiting out a lease (fcntl F_SETLEASE) on it: natively
// open(2) and truncate(2) wait up to /proc/sys/fs/lease-break-time (45 s) for the holder, here
// they would hold a worker and, for a writer, its domain's lock meanwhile. The break is started
// and the open retried for 100 ms; then -1 with EWOULDBLOCK, as an O_NONBLOCK open gives.
int open_unleased(const char* path, int flags);
// Admits an operation through an open handle with the token the handle captured.
int admit_handle(fuse_req_t req, Handle& h, const char* opname, fence::Admission* out);

void op_lookup(fuse_req_t, fuse_ino_t, const char*);
void op_forget(fuse_req_t, fuse_ino_t, uint64_t);
void op_forget_multi(fuse_req_t, size_t, fuse_forget_data*);
void op_getattr(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_setattr(fuse_req_t, fuse_ino_t, struct stat*, int, fuse_file_info*);
void op_readlink(fuse_req_t, fuse_ino_t);
void op_mknod(fuse_req_t, fuse_ino_t, const char*, mode_t, dev_t);
void op_mkdir(fuse_req_t, fuse_ino_t, const char*, mode_t);
void op_symlink(fuse_req_t, const char*, fuse_ino_t, const char*);
void op_link(fuse_req_t, fuse_ino_t, fuse_ino_t, const char*);
void op_unlink(fuse_req_t, fuse_ino_t, const char*);
void op_rmdir(fuse_req_t, fuse_ino_t, const char*);
void op_rename(fuse_req_t, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned int);

void op_open(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_create(fuse_req_t, fuse_ino_t, const char*, mode_t, fuse_file_info*);
void op_read(fuse_req_t, fuse_ino_t, size_t, off_t, fuse_file_info*);
void op_write(fuse_req_t, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*);
void op_flush(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_release(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_fsync(fuse_req_t, fuse_ino_t, int, fuse_file_info*);
void op_fallocate(fuse_req_t, fuse_ino_t, int, off_t, off_t, fuse_file_info*);
void op_copy_file_range(fuse_req_t, fuse_ino_t, off_t, fuse_file_info*, fuse_ino_t, off_t,
                        fuse_file_info*, size_t, int);
void op_lseek(fuse_req_t, fuse_ino_t, off_t, int, fuse_file_info*);
void op_ioctl(fuse_req_t, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned, const void*,
              size_t, size_t);

void op_opendir(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_readdir(fuse_req_t, fuse_ino_t, size_t, off_t, fuse_file_info*);
void op_readdirplus(fuse_req_t, fuse_ino_t, size_t, off_t, fuse_file_info*);
void op_releasedir(fuse_req_t, fuse_ino_t, fuse_file_info*);
void op_fsyncdir(fuse_req_t, fuse_ino_t, int, fuse_file_info*);
void op_statfs(fuse_req_t, fuse_ino_t);

void op_setxattr(fuse_req_t, fuse_ino_t, const char*, const char*, size_t, int);
void op_getxattr(fuse_req_t, fuse_ino_t, const char*, size_t);
void op_listxattr(fuse_req_t, fuse_ino_t, size_t);
void op_removexattr(fuse_req_t, fuse_ino_t, const char*);

}  // namespace fencefs::fs
