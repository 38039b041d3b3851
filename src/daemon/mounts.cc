#include "daemon/mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <libmount/libmount.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace fencefs::daemon {

std::optional<bool> is_mountpoint(const std::string& dir, std::string* error,
                                  const std::string& table) {
  libmnt_table* tb = mnt_new_table_from_file(table.c_str());
  if (!tb) {
    *error = fmt::format("cannot read the mount table ({})", table);
    return std::nullopt;
  }
  libmnt_iter* it = mnt_new_iter(MNT_ITER_FORWARD);
  libmnt_fs* fs = nullptr;
  bool found = false;
  while (!found && mnt_table_next_fs(tb, it, &fs) == 0) {
    const char* target = mnt_fs_get_target(fs);
    found = target && dir == target;
  }
  mnt_free_iter(it);
  mnt_unref_table(tb);
  return found;
}

bool set_readahead(const std::string& dir, unsigned kib, std::string* error) {
  // The device of the last mount at DIR: stat(DIR) would wait for the INIT not yet answered.
  libmnt_table* tb = mnt_new_table_from_file("/proc/self/mountinfo");
  if (!tb) {
    *error = "cannot read the mount table";
    return false;
  }
  // Compared as strings: libmount's lookups canonicalize, which would stat DIR too.
  libmnt_iter* it = mnt_new_iter(MNT_ITER_BACKWARD);
  libmnt_fs* fs = nullptr;
  while (mnt_table_next_fs(tb, it, &fs) == 0) {
    const char* target = mnt_fs_get_target(fs);
    if (target && dir == target) break;
    fs = nullptr;
  }
  mnt_free_iter(it);
  const char* type = fs ? mnt_fs_get_fstype(fs) : nullptr;
  bool fuse = type && strncmp(type, "fuse", 4) == 0;
  dev_t dev = fs ? mnt_fs_get_devno(fs) : 0;
  mnt_unref_table(tb);
  if (!fuse) {
    *error = fmt::format("no FUSE mount at {}", dir);
    return false;
  }
  std::string knob = fmt::format("/sys/class/bdi/{}:{}/read_ahead_kb", major(dev), minor(dev));
  std::string value = fmt::format("{}\n", kib);
  int fd = open(knob.c_str(), O_WRONLY | O_CLOEXEC);
  bool ok = fd >= 0 && write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  if (!ok) *error = fmt::format("{}: {}", knob, common::errstr(errno));
  if (fd >= 0) close(fd);
  return ok;
}

std::optional<bool> dir_has_entries(const std::string& dir, std::string* error) {
  DIR* d = opendir(dir.c_str());
  if (!d) {
    *error = fmt::format("{}: {}", dir, common::errstr(errno));
    return std::nullopt;
  }
  bool any = false;
  while (dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      any = true;
      break;
    }
  }
  closedir(d);
  return any;
}

}  // namespace fencefs::daemon
