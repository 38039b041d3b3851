#include "daemon/nesting.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "daemon/claim.h"
#include "daemon/mounts.h"

namespace fencefs::daemon {
namespace {

// The backings whose lock under /run/fencefs a daemon holds: taken before its mount exists, so
// a daemon mid-start is seen too. Its path is written just after the lock: read again briefly.
std::vector<std::string> locked_backings() {
  std::vector<std::string> out;
  int dfd = open("/run/fencefs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR* d = dfd >= 0 ? fdopendir(dfd) : nullptr;
  if (!d) {
    if (dfd >= 0) close(dfd);
    return out;
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("backing-", 0) != 0) continue;
    int fd = openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && fcntl(fd, F_OFD_GETLK, &fl) == 0 &&
        fl.l_type != F_UNLCK) {
      char buf[4097];
      for (int tries = 0; tries < 10; tries++) {
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        if (n > 1 && buf[n - 1] == '\n') {
          out.emplace_back(buf, static_cast<size_t>(n - 1));
          break;
        }
        usleep(20'000);
      }
    }
    close(fd);
  }
  closedir(d);
  return out;
}

}  // namespace

std::string nested_backing(const std::string& backing) {
  for (std::string p = backing; p != "/";) {
    size_t slash = p.rfind('/');
    if (slash == std::string::npos) break;
    p = slash == 0 ? "/" : p.substr(0, slash);
    if (std::string who = served_by(p, true); !who.empty())
      return fmt::format(
          "backing {} is inside {}, which a fencefs daemon serves ({}): its files would be fenced "
          "twice, with two epochs per domain; serve {} alone (`domain add` gives {} epochs of "
          "its own), or unmount that daemon first",
          backing, p, who, p, backing.substr(p == "/" ? 0 : p.size()));
  }
  const std::string below = backing == "/" ? backing : backing + "/";
  std::vector<std::string> served = locked_backings();
  for (std::string& src : fencefs_backings()) served.push_back(std::move(src));
  for (const std::string& src : served)
    if (src.size() > below.size() && src.compare(0, below.size(), below) == 0)
      if (std::string who = served_by(src, true); !who.empty())
        return fmt::format(
            "backing {} holds {}, which a fencefs daemon serves ({}): its files would be fenced "
            "twice, with two epochs per domain; unmount that daemon first (then `domain add` "
            "gives {} epochs of its own)",
            backing, src, who, src.substr(backing == "/" ? 0 : backing.size()));
  return "";
}

}  // namespace fencefs::daemon
