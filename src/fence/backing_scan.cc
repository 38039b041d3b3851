#include "fence/backing_scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "common/mount_table.h"
#include "fence/highwater.h"
#include "fence/stamp.h"

namespace fencefs::fence {

void walk_backing(const std::string& root, const std::function<void(const ScanEntry&)>& on_file,
                  const std::function<void(const std::string&, int)>& on_error) {
  // Per device below the root's: whether it is not a FUSE mount a user made (whose files say
  // what that user likes, stamps included: common::on_user_fuse).
  std::map<dev_t, bool> kept;
  dev_t root_dev = 0;
  auto keep = [&](int dir_fd, const char* name, dev_t dev) {
    if (dev == root_dev) return true;
    auto [it, fresh] = kept.try_emplace(dev, false);
    if (fresh) {
      int fd = openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      it->second = fd >= 0 && !common::on_user_fuse(fd);
      if (fd >= 0) ::close(fd);
    }
    return it->second;
  };
  std::function<void(int, const std::string&)> rec = [&](int fd, const std::string& rel) {
    DIR* d = fdopendir(fd);
    if (!d) {
      on_error(rel.empty() ? "/" : rel, errno);
      ::close(fd);
      return;
    }
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      if (rel.empty() && !strcmp(e->d_name, ".fencefs")) continue;
      names.emplace_back(e->d_name);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) {
      struct stat st;
      if (fstatat(dirfd(d), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) on_error(rel + "/" + n, errno);
        continue;
      }
      std::string child = rel + "/" + n;
      if (!keep(dirfd(d), n.c_str(), st.st_dev)) continue;
      if (S_ISDIR(st.st_mode)) {
        int cfd = openat(dirfd(d), n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cfd < 0) {
          if (errno != ENOENT) on_error(child, errno);
          continue;
        }
        rec(cfd, child);
      } else if (S_ISREG(st.st_mode)) {
        on_file(ScanEntry{child, dirfd(d), n.c_str(), st});
      }
    }
    closedir(d);
  };
  int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    on_error("/", errno);
    if (fd >= 0) ::close(fd);
    return;
  }
  root_dev = st.st_dev;
  rec(fd, "");
}

ssize_t xattr_at(int dir_fd, const char* name, const char* key, char* buf, size_t size) {
  std::string p = "/proc/self/fd/" + std::to_string(dir_fd) + "/" + name;
  return lgetxattr(p.c_str(), key, buf, size);
}

std::map<std::string, uint64_t> read_highwater(const std::string& backing, int* err) {
  char buf[65536];
  ssize_t n = lgetxattr(backing.c_str(), HighWater::kXattr, buf, sizeof buf);
  *err = n < 0 && errno != ENODATA && errno != ENOTSUP ? errno : 0;
  if (n <= 0) return {};
  return HighWater::decode(std::string_view(buf, static_cast<size_t>(n)));
}

StampScan scan_stamps(const std::string& backing) {
  StampScan out;
  int err = 0;
  for (auto& [p, e] : read_highwater(backing, &err)) {
    out.highest = std::max(out.highest, e);
    out.highwater_marks++;
  }
  walk_backing(
      backing,
      [&](const ScanEntry& e) {
        char buf[256];
        ssize_t n = xattr_at(e.dir_fd, e.name, kStampXattr, buf, sizeof buf);
        if (n <= 0) return;
        if (auto s = decode_stamp(std::string_view(buf, static_cast<size_t>(n)))) {
          out.highest = std::max(out.highest, s->epoch);
          out.stamped_files++;
        }
      },
      [](const std::string&, int) {});
  return out;
}

}  // namespace fencefs::fence
