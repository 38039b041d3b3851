#include "daemon/lock_file.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.h"
#include "common/log.h"

namespace fencefs::daemon {
namespace {

// Whether NAME in DIRFD is the file open as FD.
bool names(int dirfd, const std::string& name, int fd) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && fstatat(dirfd, name.c_str(), &b, AT_SYMLINK_NOFOLLOW) == 0 &&
         a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

}  // namespace

Lock lock_file(int dirfd, const std::string& name, const std::string& path, int* fd_out,
               bool* created, std::string* error, short type) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    *created = false;
    // Only its owner may open it: anyone who could read it could hold a read lock on it and keep
    // every daemon off.
    int fd = openat(dirfd, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      *created = true;
    } else if (errno == EEXIST) {
      fd = openat(dirfd, name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0 && errno == ENOENT) continue;
    }
    if (fd < 0) {
      *error = fmt::format("{}: {}", path, common::errstr(errno));
      return Lock::Error;
    }
    // Root writes the marker into it: were it a hard link (BACKING/.fencefs may be a directory
    // someone else made), root would overwrite, and at unmount empty, the file linked to. No
    // name left: its holder removed it as it exited; the path names another file now, or none.
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0) {
      close(fd);
      continue;
    }
    if (st.st_nlink != 1 || !S_ISREG(st.st_mode)) {
      close(fd);
      *error = fmt::format(
          "{} is not a regular file with a single name (a hard link?); fencefs writes its marker "
          "there as root: remove it",
          path);
      return Lock::Error;
    }
    if ((st.st_mode & 077) && st.st_uid == geteuid()) fchmod(fd, 0600);  // made 0644 before
    struct flock fl {};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    if (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
      int err = errno;
      if ((err == EAGAIN || err == EACCES) && !names(dirfd, name, fd)) {
        close(fd);  // held by a daemon that removed it as it exited: the path's file is free
        continue;
      }
      if (err == EAGAIN || err == EACCES) {
        *fd_out = fd;  // kept open so the caller can read who holds it
        return Lock::Busy;
      }
      close(fd);
      *error = fmt::format("cannot lock {}: {}", path, common::errstr(err));
      return Lock::Error;
    }
    if (names(dirfd, name, fd)) {
      *fd_out = fd;
      return Lock::Taken;
    }
    close(fd);  // replaced or removed meanwhile: lock the file the path names now
  }
  *error = fmt::format("cannot lock {}: it keeps being replaced", path);
  return Lock::Error;
}

int lock_backing_identity(const std::string& backing, bool shared, bool* busy,
                          std::string* name_out) {
  *busy = false;
  struct stat st {
  }, ds{};
  const char* dir = "/run/fencefs";
  if (stat(backing.c_str(), &st) != 0 || (mkdir(dir, 0700) != 0 && errno != EEXIST)) return -1;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), fd = -1;
  std::string name = fmt::format("backing-{}-{}.lock", st.st_dev, st.st_ino), error;
  bool created = false;
  if (dfd >= 0 && fstat(dfd, &ds) == 0 && ds.st_uid == geteuid() &&
      !(ds.st_mode & (S_IWGRP | S_IWOTH))) {
    // A cluster member leaving turns its shared lock exclusive for a moment, to remove the file
    // if it is the last: a few tries ride that out.
    Lock l = Lock::Busy;
    for (int k = 0; k < 10 && l == Lock::Busy; k++) {
      if (k > 0) usleep(20'000);
      l = lock_file(dfd, name, fmt::format("{}/{}", dir, name), &fd, &created, &error,
                    shared ? F_RDLCK : F_WRLCK);
      if (l == Lock::Busy) close(fd);
    }
    *busy = l == Lock::Busy;
    if (l == Lock::Error) log::warn("serving without the backing's lock: {}", error);
    if (l != Lock::Taken) fd = -1;
    // Its path, for a daemon starting on a tree around it (daemon/nesting.h) before it mounts.
    std::string text = backing + "\n";
    if (fd >= 0 && pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()))
      (void)!ftruncate(fd, static_cast<off_t>(text.size()));
  }
  if (dfd >= 0) close(dfd);
  if (fd >= 0) *name_out = name;
  return fd;
}

bool unlink_if_last(int dirfd, int fd, const std::string& name) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (name.empty() || fcntl(fd, F_OFD_SETLK, &fl) != 0 || !names(dirfd, name, fd)) return false;
  return unlinkat(dirfd, name.c_str(), 0) == 0;
}

void unlink_backing_identity(int fd, const std::string& name) {
  int dfd = open("/run/fencefs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return;
  unlink_if_last(dfd, fd, name);
  close(dfd);
}

}  // namespace fencefs::daemon
