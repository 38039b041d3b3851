/* Preloaded into fencefs by tests ("--preload-unshare-fails"): unshare(CLONE_FS) works for the
 * first thread that asks (the first FUSE worker) and fails with ENOMEM for every later one, as
 * when the kernel cannot allocate a thread its own filesystem context. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

int unshare(int flags) {
  static atomic_int calls;
  if ((flags & CLONE_FS) && atomic_fetch_add(&calls, 1) >= 1) {
    errno = ENOMEM;
    return -1;
  }
  return (int)syscall(SYS_unshare, flags);
}
