#include "cli/ctlfile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "cli/exit_codes.h"
#include "common/error.h"

namespace fencefs::cli {

std::string find_mount(const std::string& path, int* err) {
  char real[PATH_MAX];
  if (err) *err = 0;
  if (!realpath(path.c_str(), real)) {
    if (err) *err = errno;
    return "";
  }
  std::string p = real;
  for (;;) {
    struct stat st;
    if (stat((p + "/.fencefs/ctl").c_str(), &st) == 0 && S_ISREG(st.st_mode)) return p;
    if (errno == ENOTCONN) {
      if (err) *err = ENOTCONN;
      return "";
    }
    if (p == "/" || p.empty()) return "";
    size_t slash = p.rfind('/');
    p = slash == 0 ? "/" : p.substr(0, slash);
  }
}

std::string mount_or_exit(const std::string& path, const std::string& what) {
  int err = 0;
  std::string root = find_mount(path, &err);
  if (!root.empty()) return root;
  std::string prefix = what.empty() ? "" : what + ": ";
  if (err == ENOTCONN) {
    std::cerr << "fencectl: " << prefix << path
              << ": daemon gone (ENOTCONN: the fencefs daemon of this mount died); start it "
                 "again (it replaces the dead mount), or fusermount3 -u MOUNTPOINT\n";
  } else if (err) {
    // The path itself is wrong (a typo, most often): say so, not "not a fencefs mount".
    std::cerr << "fencectl: " << prefix << path << ": " << common::errstr(err) << "\n";
    exit(err == ENOENT || err == ENOTDIR ? exit_code::kUsage : exit_code::kFailed);
  } else {
    std::cerr << "fencectl: " << prefix << path << " is not a fencefs mount (no .fencefs/ctl)\n";
  }
  exit(exit_code::kUnreachable);
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
