/* Preloaded into fencefs by tests: fuse_session_mount waits until the file named by
 * FENCEFS_TEST_MOUNT_WHEN exists (at most 60 s), so that a test can act while the daemon holds
 * its claim and is not yet in the mount table. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

struct fuse_session;

int fuse_session_mount(struct fuse_session* se, const char* mountpoint) {
  const char* when = getenv("FENCEFS_TEST_MOUNT_WHEN");
  for (int t = 0; when && t < 6000 && access(when, F_OK) != 0; t++) usleep(10000);
  int (*real)(struct fuse_session*, const char*) =
      (int (*)(struct fuse_session*, const char*))dlsym(RTLD_NEXT, "fuse_session_mount");
  return real ? real(se, mountpoint) : -1;
}
