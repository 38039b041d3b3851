#include "cli/ctlfile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace fencefs::cli {

std::string find_mount(const std::string& path) {
  char real[PATH_MAX];
  if (!realpath(path.c_str(), real)) return "";
  std::string p = real;
  for (;;) {
    struct stat st;
    if (stat((p + "/.fencefs/ctl").c_str(), &st) == 0 && S_ISREG(st.st_mode)) return p;
    if (p == "/" || p.empty()) return "";
    size_t slash = p.rfind('/');
    p = slash == 0 ? "/" : p.substr(0, slash);
  }
}

int send_command(const std::string& mount, const std::string& line, std::string* reply) {
  std::string ctl = mount + "/.fencefs/ctl";
  int fd = open(ctl.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    *reply = "cannot open " + ctl + " (is " + mount + " a fencefs mount?)";
    return err;
  }
  std::string cmd = line + "\n";
  ssize_t n = write(fd, cmd.data(), cmd.size());
  int err = n < 0 ? errno : 0;
  char buf[4096];
  ssize_t r = pread(fd, buf, sizeof buf, 0);
  close(fd);
  reply->clear();
  if (r > 0) reply->assign(buf, static_cast<size_t>(r));
  while (!reply->empty() && reply->back() == '\n') reply->pop_back();
  for (const char* prefix : {"ok: ", "error: "})
    if (reply->rfind(prefix, 0) == 0) reply->erase(0, strlen(prefix));
  return err;
}

int read_ctl_file(const std::string& mount, const std::string& name, std::string* out) {
  std::string p = mount + "/.fencefs/" + name;
  int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  out->clear();
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
  int err = n < 0 ? errno : 0;
  close(fd);
  return err;
}

}  // namespace fencefs::cli
