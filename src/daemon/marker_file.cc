#include "daemon/marker_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace fencefs::daemon {

bool write_marker(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = pwrite(fd, text.data() + off, text.size() - off, static_cast<off_t>(off));
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return ftruncate(fd, static_cast<off_t>(text.size())) == 0 && fsync(fd) == 0;
}

// Emptying the marker freed its block (the sync made it free again on ext4 and XFS, whose
// journals hold freed blocks until they commit); the marker written at the next start goes into
// the range kept here and needs no new one.
bool keep_marker_block(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 &&
         fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, std::max<blksize_t>(st.st_blksize, 4096)) == 0 &&
         fsync(fd) == 0;
}

}  // namespace fencefs::daemon
