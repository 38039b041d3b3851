#include "daemon/marker_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

// Emptying frees the text's blocks (once the sync has committed the free, on ext4), and the same
// length is taken back at once: exactly that, for there may be nothing more free. The marker
// written at the next start goes into the range kept and needs no new block.
bool empty_marker(int fd, bool* kept) {
  struct stat st;
  off_t was = fstat(fd, &st) == 0 ? st.st_size : 0;
  *kept = false;
  if (!write_marker(fd, "")) return false;
  *kept = was > 0 && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, was) == 0 && fsync(fd) == 0;
  return true;
}

}  // namespace fencefs::daemon
