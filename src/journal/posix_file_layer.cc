#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/anchored.h"
#include "journal/file_layer.h"

namespace fencefs::journal {
namespace {

class PosixFile : public File {
 public:
  explicit PosixFile(int fd) : fd_(fd) {}
  ~PosixFile() override { close(); }

  int append(const void* data, size_t len) override {
    if (fd_ < 0) return EBADF;
    const char* p = static_cast<const char*>(data);
    while (len > 0) {
      ssize_t n = ::write(fd_, p, len);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      if (n == 0) return EIO;  // should not happen for regular files; do not spin
      p += n;
      len -= static_cast<size_t>(n);
    }
    return 0;
  }

  // fdatasync: the journal only ever appends, so the size change is the metadata that matters,
  // and fdatasync covers it. EINTR means it did not run to completion; run it again (this is not
  // the unsafe "retry after EIO").
  int sync() override {
    if (fd_ < 0) return EBADF;
    while (::fdatasync(fd_) != 0) {
      if (errno != EINTR) return errno;
    }
    return 0;
  }

  int reserve(uint64_t end) override {
    if (fd_ < 0) return EBADF;
    return ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(end)) == 0 ? 0 : errno;
  }

  int close() override {
    if (fd_ < 0) return 0;
    int fd = fd_;
    fd_ = -1;
    // Never retry close(2) on EINTR: on Linux the descriptor is already released.
    return ::close(fd) == 0 || errno == EINTR ? 0 : errno;
  }

 private:
  int fd_;
};

class PosixFileLayer : public FileLayer {
 public:
  int read_file(const std::string& path, std::string* out) override {
    int fd = common::anchored_open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    out->clear();
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) out->reserve(static_cast<size_t>(st.st_size));
    char buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        ::close(fd);
        return e;
      }
      if (n == 0) break;
      out->append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return 0;
  }

  std::unique_ptr<File> open_append(const std::string& path, bool truncate, int* err) override {
    int flags = O_WRONLY | O_APPEND | O_CLOEXEC;
    if (truncate) flags |= O_CREAT | O_TRUNC;
    int fd;
    do {
      fd = common::anchored_open(path, flags, 0600);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      if (err != nullptr) *err = errno;
      return nullptr;
    }
    if (err != nullptr) *err = 0;
    return std::make_unique<PosixFile>(fd);
  }

  int rename(const std::string& from, const std::string& to) override {
    return common::anchored_rename(from, to) == 0 ? 0 : errno;
  }

  // A rename or a new file is durable only once its directory has been fsynced.
  int sync_dir(const std::string& dir) override {
    return common::anchored_sync_dir(dir) == 0 ? 0 : errno;
  }

  int remove(const std::string& path) override {
    return common::anchored_remove(path) == 0 ? 0 : errno;  // files and empty directories
  }

  int mkdir(const std::string& path) override {
    return common::anchored_mkdir(path, 0700) == 0 ? 0 : errno;
  }

  bool exists(const std::string& path) override {
    struct stat st;
    return common::anchored_lstat(path, &st) == 0;
  }
};

}  // namespace

FileLayer& posix_file_layer() {
  static PosixFileLayer layer;
  return layer;
}

}  // namespace fencefs::journal
