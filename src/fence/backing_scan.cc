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
                  const std::function<void(const std::string&, int)>& on_error,
                  const std::function<void(const std::string&)>& on_skipped,
                  const std::function<void(const ScanEntry&)>& on_dir) {
  // Per device below the root's: whether it is walked (not a FUSE mount a user made, whose files
  // say what that user likes, stamps included), and a descriptor that keeps its superblock, so
  // that its number cannot be given to another mount during the walk.
  struct Device {
    bool walked;
    int pin;
  };
  std::map<dev_t, Device> devices;
  dev_t root_dev = 0;
  auto walked = [&](int fd, dev_t dev) {
    if (dev == root_dev) return true;
    auto it = devices.find(dev);
    if (it == devices.end())
      it = devices.emplace(dev, Device{!common::on_user_fuse(fd), fcntl(fd, F_DUPFD_CLOEXEC, 0)})
               .first;
    return it->second.walked;
  };
  std::function<void(int, const std::string&)> rec = [&](int dfd, const std::string& rel) {
    DIR* d = fdopendir(dfd);
    if (!d) {
      on_error(rel.empty() ? "/" : rel, errno);
      ::close(dfd);
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
      std::string child = rel + "/" + n;
      int fd = openat(dirfd(d), n.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
      struct stat st;
      if (fd < 0 || fstat(fd, &st) != 0) {
        if (errno != ENOENT) on_error(child, errno);
        if (fd >= 0) ::close(fd);
        continue;
      }
      if (!walked(fd, st.st_dev)) {
        if (on_skipped) on_skipped(child);
      } else if (S_ISDIR(st.st_mode)) {
        if (on_dir) on_dir(ScanEntry{child, fd, st});
        int cfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cfd < 0)
          on_error(child, errno);
        else
          rec(cfd, child);
      } else if (S_ISREG(st.st_mode)) {
        on_file(ScanEntry{child, fd, st});
      }
      ::close(fd);
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
  for (auto& [dev, device] : devices)
    if (device.pin >= 0) ::close(device.pin);
}

ssize_t entry_xattr(const ScanEntry& e, const char* key, char* buf, size_t size) {
  std::string p = "/proc/self/fd/" + std::to_string(e.fd);
  return getxattr(p.c_str(), key, buf, size);
}

uint64_t own_mark(const ScanEntry& e) {
  char buf[4096];
  ssize_t n = entry_xattr(e, HighWater::kOwnXattr, buf, sizeof buf);
  if (n <= 0) return 0;
  auto own = HighWater::decode(std::string_view(buf, static_cast<size_t>(n)));
  auto it = own.find(e.rel);
  return it == own.end() ? 0 : it->second;
}

std::map<std::string, uint64_t> read_highwater(const std::string& backing,
                                               const std::vector<std::string>& domains, int* err) {
  int fd = open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return {};
  }
  auto m = HighWater::read(fd, domains, err);
  ::close(fd);
  return m;
}

StampScan scan_stamps(const std::string& backing) {
  StampScan out;
  int err = 0;
  out.highwater = read_highwater(backing, {}, &err);
  walk_backing(
      backing,
      [&](const ScanEntry& e) {
        char buf[256];
        ssize_t n = entry_xattr(e, kStampXattr, buf, sizeof buf);
        if (n <= 0) return;
        if (auto s = decode_stamp(std::string_view(buf, static_cast<size_t>(n)))) {
          out.highest = std::max(out.highest, s->epoch);
          out.stamped_files++;
        }
      },
      [](const std::string&, int) {}, {},
      [&](const ScanEntry& e) {
        if (uint64_t mark = own_mark(e); mark > out.highwater[e.rel]) out.highwater[e.rel] = mark;
      });
  std::erase_if(out.highwater, [](const auto& kv) { return kv.second == 0; });
  for (auto& [p, e] : out.highwater) out.highest = std::max(out.highest, e);
  return out;
}

}  // namespace fencefs::fence
