// What verify, recover and audit share.
#include "cli/maintenance.h"

#include <fmt/format.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>

#include "audit/audit.h"
#include "cli/ctlfile.h"

namespace fencefs::cli {
namespace {

// /proc/mounts escapes space, tab, newline and backslash as \ooo.
std::string unescape_mounts(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; k++) {
        if (s[i + k] < '0' || s[i + k] > '7') {
          ok = false;
          break;
        }
        v = v * 8 + (s[i + k] - '0');
      }
      if (ok) {
        out += static_cast<char>(v);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

}  // namespace

std::string q(std::string_view s) { return "\"" + audit::json_escape(s) + "\""; }

// realpath, or the path itself (minus trailing slashes) when it does not resolve.
std::string canonical(const std::string& p) {
  char real[PATH_MAX];
  if (realpath(p.c_str(), real)) return real;
  std::string s = p;
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::vector<FencefsMount> fencefs_mounts() {
  std::vector<FencefsMount> out;
  std::ifstream in("/proc/mounts");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string_view> f;
    std::string_view rest(line);
    while (!rest.empty() && f.size() < 3) {
      size_t sp = rest.find(' ');
      f.push_back(rest.substr(0, sp));
      if (sp == std::string_view::npos) break;
      rest.remove_prefix(sp + 1);
    }
    if (f.size() == 3 && f[2] == "fuse.fencefs")
      out.push_back({unescape_mounts(f[0]), unescape_mounts(f[1])});
  }
  return out;
}

const FencefsMount* mount_of_backing(const std::vector<FencefsMount>& mounts,
                                     const std::string& backing) {
  for (const auto& m : mounts)
    if (m.backing == backing) return &m;
  return nullptr;
}

// The daemon's status JSON of a mount (nullopt when unreadable).
std::optional<json::Value> mount_status(const std::string& mnt) {
  std::string text;
  if (read_ctl_file(mnt, "status", &text) != 0) return std::nullopt;
  return json::parse(text);
}

bool has_cap_sys_admin() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return geteuid() == 0;
  return (data[CAP_SYS_ADMIN / 32].effective & (1u << (CAP_SYS_ADMIN % 32))) != 0;
}

void raise_fd_limit() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace fencefs::cli
