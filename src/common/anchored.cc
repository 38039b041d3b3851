#include "common/anchored.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string_view>

#include "common/umask.h"

namespace fencefs::common {
namespace {

std::string g_dir;  // written once by anchor_dir, before threads read it
std::atomic<int> g_fd{-1};

struct At {
  int fd;
  std::string_view rel;  // "." for the directory itself
  bool anchored;
};

// Any spelling of a path inside the directory ("DIR//x", "DIR/./x" too) goes through its
// descriptor: falling back to the name would follow whatever now stands there.
At resolve(const std::string& path) {
  int fd = g_fd.load(std::memory_order_acquire);
  if (fd < 0 || path.compare(0, g_dir.size(), g_dir) != 0) return {AT_FDCWD, path, false};
  std::string_view rest = std::string_view(path).substr(g_dir.size());
  if (!rest.empty() && rest.front() != '/' && g_dir != "/")
    return {AT_FDCWD, path, false};  // a neighbour sharing the prefix
  while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  if (rest.empty()) return {fd, ".", true};
  return {fd, rest, true};
}

// rel as a C string: a view into `path`, which ends where the view ends unless it is ".".
const char* cstr(const At& at) { return at.rel.data(); }

}  // namespace

void anchor_dir(const std::string& dir, int dirfd) {
  g_dir = dir;
  while (g_dir.size() > 1 && g_dir.back() == '/') g_dir.pop_back();
  g_fd.store(dirfd, std::memory_order_release);
}

int anchored_open(const std::string& path, int flags, mode_t mode) {
  if (flags & O_CREAT) own_files_umask();
  At at = resolve(path);
  return openat(at.fd, cstr(at), flags | (at.anchored ? O_NOFOLLOW : 0), mode);
}

DIR* anchored_opendir(const std::string& dir) {
  int fd = anchored_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  DIR* d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return d;
}

int anchored_rename(const std::string& from, const std::string& to) {
  At a = resolve(from), b = resolve(to);
  return renameat(a.fd, cstr(a), b.fd, cstr(b));
}

int anchored_unlink(const std::string& path) {
  At at = resolve(path);
  return unlinkat(at.fd, cstr(at), 0);
}

int anchored_remove(const std::string& path) {
  At at = resolve(path);
  if (unlinkat(at.fd, cstr(at), 0) == 0) return 0;
  if (errno != EISDIR) return -1;
  return unlinkat(at.fd, cstr(at), AT_REMOVEDIR);
}

int anchored_lstat(const std::string& path, struct stat* st) {
  At at = resolve(path);
  return fstatat(at.fd, cstr(at), st, AT_SYMLINK_NOFOLLOW);
}

int anchored_mkdir(const std::string& path, mode_t mode) {
  own_files_umask();
  At at = resolve(path);
  return mkdirat(at.fd, cstr(at), mode);
}

int anchored_sync_dir(const std::string& dir) {
  int fd = anchored_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc;
  while ((rc = fsync(fd)) != 0 && errno == EINTR) {
  }
  int e = errno;
  close(fd);
  errno = e;
  return rc;
}

}  // namespace fencefs::common
