#include "daemon/marker_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace fencefs::daemon {
namespace {

// The reserve as a daemon made it (its owner's, regular, one link): never a file linked in there,
// which root would empty.
int open_reserve(int dirfd, int flags) {
  int fd =
      openat(dirfd, kMarkerReserve, flags | O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  struct stat st;
  if (fd >= 0 &&
      (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != geteuid())) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

bool write_marker(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = pwrite(fd, text.data() + off, text.size() - off, static_cast<off_t>(off));
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return ftruncate(fd, static_cast<off_t>(text.size())) == 0 && fsync(fd) == 0;
}

// A clean unmount empties the backing's marker (the backing is free), which frees its block: on
// a backing filled meanwhile, the next start could not write the marker again, and the operator
// could not mount the backing to make room.
bool write_marker_or_reserve(int dirfd, int fd, const std::string& text, bool* took) {
  *took = false;
  if (write_marker(fd, text)) return true;
  const int err = errno;
  if (err != ENOSPC && err != EDQUOT) return false;
  int r = open_reserve(dirfd, 0);
  struct stat st;
  *took = r >= 0 && fstat(r, &st) == 0 && st.st_blocks > 0 && ftruncate(r, 0) == 0 && fsync(r) == 0;
  if (r >= 0) close(r);
  if (!*took) {
    errno = err;
    return false;
  }
  return write_marker(fd, text);
}

bool keep_marker_reserve(int dirfd, int like_fd) {
  struct stat st, like;
  int r = open_reserve(dirfd, O_CREAT);
  if (r < 0) return false;
  bool made = fstat(r, &st) == 0 && st.st_size == 0 && st.st_blocks == 0 &&
              fstat(like_fd, &like) == 0 &&
              fallocate(r, 0, 0, std::max<blksize_t>(like.st_blksize, 4096)) == 0 && fsync(r) == 0;
  close(r);
  return made;
}

}  // namespace fencefs::daemon
