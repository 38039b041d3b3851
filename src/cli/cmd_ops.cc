// recover, verify, audit: the maintenance side. docs/audit.md is the operator's guide to them.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "audit/audit.h"
#include "cli/commands.h"
#include "cli/ctlfile.h"
#include "cli/exit_codes.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/json.h"
#include "common/path.h"
#include "common/proc.h"
#include "fence/highwater.h"
#include "fence/stamp.h"
#include "journal/file_layer.h"
#include "journal/journal.h"

namespace fencefs::cli {
namespace {

using common::under;
using fence::kStampXattr;
constexpr uint64_t kMaxToken = 9223372036854775807ull;

std::string errname(int err) {
  const char* n = strerrorname_np(err);
  return n ? n : std::to_string(err);
}

std::string q(std::string_view s) { return "\"" + audit::json_escape(s) + "\""; }

bool parse_u64(std::string_view s, uint64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// realpath, or the path itself (minus trailing slashes) when it does not resolve.
std::string canonical(const std::string& p) {
  char real[PATH_MAX];
  if (realpath(p.c_str(), real)) return real;
  std::string s = p;
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// --- mounts -----------------------------------------------------------------------------------

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

struct FencefsMount {
  std::string backing;  // fsname= of the mount: the canonical BACKING
  std::string dir;      // mountpoint
};

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

// Processes that hold files of the state directory open (the daemon keeps its journal and
// audit log open), except this one.
std::vector<std::string> state_holders(const std::string& dir, bool* incomplete) {
  std::vector<std::string> out;
  DIR* proc = opendir("/proc");
  if (!proc) {
    *incomplete = true;
    return out;
  }
  pid_t self = getpid();
  while (dirent* e = readdir(proc)) {
    std::string_view name(e->d_name);
    uint64_t v = 0;
    if (!parse_u64(name, &v) || v == 0 || v > INT_MAX) continue;
    pid_t pid = static_cast<pid_t>(v);
    if (pid == self) continue;
    std::string fddir = "/proc/" + std::string(name) + "/fd";
    DIR* fds = opendir(fddir.c_str());
    if (!fds) {
      if (errno == EACCES) *incomplete = true;
      continue;
    }
    std::string hit;
    while (dirent* f = readdir(fds)) {
      if (f->d_name[0] == '.') continue;
      char buf[PATH_MAX];
      ssize_t n = readlink((fddir + "/" + f->d_name).c_str(), buf, sizeof buf - 1);
      if (n <= 0) continue;
      std::string target(buf, static_cast<size_t>(n));
      if (under(target, dir)) {
        hit = target;
        break;
      }
    }
    closedir(fds);
    if (!hit.empty())
      out.push_back(fmt::format("pid {} ({}) has {} open", pid, proc::comm_of(pid), hit));
  }
  closedir(proc);
  return out;
}

// --- stamps and the tree walk -----------------------------------------------------------------

using fence::Stamp;

struct Entry {
  const std::string& rel;  // "/a/b" relative to BACKING
  int dir_fd;
  const char* name;
  const struct stat& st;
};

// Depth-first over the regular files below `root`, skipping the state directory at its top.
// Directories that cannot be read are reported through on_error and skipped.
void walk(const std::string& root, const std::function<void(const Entry&)>& on_file,
          const std::function<void(const std::string&, int)>& on_error) {
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
      if (S_ISDIR(st.st_mode)) {
        int cfd = openat(dirfd(d), n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cfd < 0) {
          if (errno != ENOENT) on_error(child, errno);
          continue;
        }
        rec(cfd, child);
      } else if (S_ISREG(st.st_mode)) {
        on_file(Entry{child, dirfd(d), n.c_str(), st});
      }
    }
    closedir(d);
  };
  int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    on_error("/", errno);
    return;
  }
  rec(fd, "");
}

// Reads an xattr of entry `name` below an open directory without following symlinks.
ssize_t xattr_at(int dir_fd, const char* name, const char* key, char* buf, size_t size) {
  std::string p = "/proc/self/fd/" + std::to_string(dir_fd) + "/" + name;
  return lgetxattr(p.c_str(), key, buf, size);
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

// A progress bar on stderr, drawn at most every 100 ms; nothing at all when disabled.
class Progress {
 public:
  explicit Progress(bool on) : on_(on), last_(std::chrono::steady_clock::now()) {}
  ~Progress() { clear(); }
  void set_total(uint64_t total) { total_ = total; }
  void counting(uint64_t n) {
    if (!due()) return;
    fprintf(stderr, "\r\033[Kverify: counting files... %llu", static_cast<unsigned long long>(n));
  }
  void tick(uint64_t done) {
    if (!due()) return;
    uint64_t total = std::max(total_, done);
    int pct = total ? static_cast<int>(done * 100 / total) : 100;
    int fill = pct * 30 / 100;
    fprintf(stderr, "\r\033[Kverify: [%s%s] %3d%% %llu/%llu files", std::string(fill, '#').c_str(),
            std::string(30 - fill, '.').c_str(), pct, static_cast<unsigned long long>(done),
            static_cast<unsigned long long>(total));
  }
  void clear() {
    if (on_ && drawn_) fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  bool due() {
    if (!on_) return false;
    auto now = std::chrono::steady_clock::now();
    // Nothing for a quick run; then a redraw every 100 ms.
    if (now - last_ < std::chrono::milliseconds(drawn_ ? 100 : 250)) return false;
    last_ = now;
    drawn_ = true;
    return true;
  }
  bool on_;
  bool drawn_ = false;
  uint64_t total_ = 0;
  std::chrono::steady_clock::time_point last_;
};

struct DomainEpoch {
  std::string path;
  uint64_t epoch = 0;
  uint64_t files = 0;               // stamped files found in it
  uint32_t id = fence::kAnyDomain;  // unknown for a domain only the daemon's status named
};

// The deepest domain containing rel ("/a/b"); domains sorted deepest first.
DomainEpoch* domain_for(std::vector<DomainEpoch>& domains, const std::string& rel) {
  for (auto& d : domains)
    if (d.path == "/" || under(rel, d.path)) return &d;
  return nullptr;
}

void sort_deepest_first(std::vector<DomainEpoch>& domains) {
  std::sort(domains.begin(), domains.end(), [](const DomainEpoch& a, const DomainEpoch& b) {
    return a.path.size() != b.path.size() ? a.path.size() > b.path.size() : a.path < b.path;
  });
}

std::map<std::string, uint64_t> read_highwater(const std::string& backing, int* err) {
  char buf[65536];
  ssize_t n = lgetxattr(backing.c_str(), fence::HighWater::kXattr, buf, sizeof buf);
  *err = n < 0 && errno != ENODATA && errno != ENOTSUP ? errno : 0;
  if (n <= 0) return {};
  return fence::HighWater::decode(std::string_view(buf, static_cast<size_t>(n)));
}

// Highest stamp below BACKING and in its high-water copy (for recover's advice).
uint64_t highest_stamp(const std::string& backing) {
  uint64_t best = 0;
  int err = 0;
  for (auto& [p, e] : read_highwater(backing, &err)) best = std::max(best, e);
  walk(
      backing,
      [&](const Entry& e) {
        char buf[256];
        ssize_t n = xattr_at(e.dir_fd, e.name, kStampXattr, buf, sizeof buf);
        if (n <= 0) return;
        if (auto s = fence::decode_stamp(std::string_view(buf, static_cast<size_t>(n))))
          best = std::max(best, s->epoch);
      },
      [](const std::string&, int) {});
  return best;
}

// --- verify -----------------------------------------------------------------------------------

struct Finding {
  std::string kind;  // "journal", "rolled back", "changed outside fencefs", "malformed stamp"
  std::string path;  // file (or domain for a rolled-back domain), "" for the journal
  std::string domain;
  std::string message;
  std::string extra_json;  // ",\"key\":value..." specific to the kind
};

std::string mtime_str(int64_t sec, int64_t nsec) { return fmt::format("{}.{:09d}", sec, nsec); }

}  // namespace

int cmd_verify(const Args& args) {
  Parsed p = parse_command(*find_command("verify"), args);
  std::string state_arg = p.value("state");
  bool as_json = p.flag("json"), quiet = p.flag("quiet");
  if (p.positional.size() != 1) usage_error("verify: expected one BACKING");
  std::string backing_arg = p.positional[0];
  raise_fd_limit();

  std::vector<std::string> cannot;  // reasons the check could not be done (exit 2)
  std::vector<std::string> warnings;
  std::vector<Finding> findings;

  char real[PATH_MAX];
  std::string backing = backing_arg;
  struct stat bst;
  errno = 0;
  if (!realpath(backing_arg.c_str(), real) || stat(real, &bst) != 0 || !S_ISDIR(bst.st_mode)) {
    cannot.push_back(fmt::format("backing directory {}: {}", backing_arg,
                                 errno ? common::errstr(errno) : "not a directory"));
  } else {
    backing = real;
  }
  auto mounts = fencefs_mounts();
  const FencefsMount* live = cannot.empty() ? mount_of_backing(mounts, backing) : nullptr;
  std::string mnt = live ? live->dir : "";
  std::optional<json::Value> status;
  if (live) status = mount_status(mnt);
  std::string state = state_arg.empty() ? "" : canonical(state_arg);
  if (state.empty()) {
    const json::Value* s = status ? status->get("state") : nullptr;
    state = s && s->type == json::Value::Type::String ? s->str : backing + "/.fencefs";
  }
  if (cannot.empty() && !has_cap_sys_admin())
    cannot.push_back(
        "stamps live in trusted.* xattrs, which only root (CAP_SYS_ADMIN) can read: run as root");

  // 1. The journal: framing, CRCs, chaining, order. Retried once when mounted, since a record
  // being appended right now can look like a torn tail.
  journal::CheckResult jr;
  if (cannot.empty()) {
    jr = journal::check(state, journal::posix_file_layer());
    if (live && !jr.findings.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      jr = journal::check(state, journal::posix_file_layer());
    }
    if (!jr.readable) {
      cannot.push_back("cannot read the state in " + state);
      for (auto& f : jr.findings) cannot.push_back(f);
    } else {
      for (auto& f : jr.findings) findings.push_back({"journal", "", "", f, ""});
    }
  }

  std::vector<DomainEpoch> domains;
  for (auto& d : jr.domains) domains.push_back({d.path, d.epoch, 0, d.id});
  sort_deepest_first(domains);

  uint64_t scanned = 0, stamped = 0, unstamped = 0, unreadable = 0;
  if (cannot.empty()) {
    Progress bar(!quiet && isatty(STDERR_FILENO));
    if (isatty(STDERR_FILENO) && !quiet) {
      uint64_t total = 0;
      walk(
          backing,
          [&](const Entry&) {
            total++;
            bar.counting(total);
          },
          [](const std::string&, int) {});
      bar.set_total(total);
    }
    struct Pending {
      std::string path;
      Stamp s;
      struct stat st;
    };
    std::vector<Pending> stamped_files;
    bool root_failed = false;
    walk(
        backing,
        [&](const Entry& e) {
          scanned++;
          bar.tick(scanned);
          char buf[256];
          ssize_t n = xattr_at(e.dir_fd, e.name, kStampXattr, buf, sizeof buf);
          if (n < 0) {
            if (errno == ENODATA || errno == ENOTSUP) {
              unstamped++;
            } else {
              unreadable++;
              warnings.push_back(
                  fmt::format("{}: cannot read its stamp: {}", e.rel, common::errstr(errno)));
            }
            return;
          }
          std::string_view v(buf, static_cast<size_t>(n));
          auto s = fence::decode_stamp(v);
          if (!s) {
            findings.push_back({"malformed stamp", e.rel, "",
                                fmt::format("{}: malformed stamp '{}'", e.rel, v),
                                ",\"stamp\":" + q(v)});
            return;
          }
          stamped++;
          stamped_files.push_back({e.rel, *s, e.st});
        },
        [&](const std::string& rel, int err) {
          if (rel == "/") {
            root_failed = true;
            cannot.push_back(fmt::format("cannot read {}: {}", backing, common::errstr(err)));
          } else {
            unreadable++;
            warnings.push_back(fmt::format("{}: {}", rel, common::errstr(err)));
          }
        });
    bar.clear();

    // 2. Mounted: epochs may have advanced while we walked; the daemon's durable epochs count
    // too (a stamp is written only after its epoch is durable).
    if (live && !root_failed) {
      if (auto st2 = mount_status(mnt)) {
        if (const json::Value* ds = st2->get("domains")) {
          for (const auto& d : ds->arr) {
            const json::Value* p = d.get("path");
            const json::Value* ep = d.get("epoch");
            if (!p || !ep) continue;
            auto it = std::find_if(domains.begin(), domains.end(),
                                   [&](const DomainEpoch& x) { return x.path == p->str; });
            if (it == domains.end()) {
              domains.push_back({p->str, ep->as_u64(), 0});
            } else {
              it->epoch = std::max(it->epoch, ep->as_u64());
            }
          }
          sort_deepest_first(domains);
        }
      } else {
        warnings.push_back("mounted at " + mnt + " but its status could not be read");
      }
    }

    // 3. BACKING's high-water copy of every domain's epoch.
    int hwerr = 0;
    for (auto& [path, hw] : read_highwater(backing, &hwerr)) {
      auto it = std::find_if(domains.begin(), domains.end(),
                             [&p = path](const DomainEpoch& x) { return x.path == p; });
      if (it == domains.end()) {
        warnings.push_back(fmt::format(
            "BACKING's high-water copy names domain {} (epoch {}), unknown to the state", path,
            hw));
      } else if (hw > it->epoch) {
        findings.push_back(
            {"rolled back", path, path,
             fmt::format("domain {}: BACKING's high-water copy says epoch {}, the state only {}: "
                         "the state was rolled back (restored from an older copy?)",
                         path, hw, it->epoch),
             fmt::format(",\"stamp_epoch\":{},\"domain_epoch\":{}", hw, it->epoch)});
      }
    }
    if (hwerr)
      warnings.push_back(
          fmt::format("cannot read the high-water copy on {}: {}", backing, common::errstr(hwerr)));

    // 4. Every stamp against its domain's epoch, and the file against its stamp.
    for (const auto& f : stamped_files) {
      DomainEpoch* d = domain_for(domains, f.path);
      if (!d) {
        warnings.push_back(f.path + ": no domain holds it (the state has no root domain)");
        continue;
      }
      d->files++;
      // A stamp is judged against the domain that issued it (older stamps name none: the file's
      // domain); another domain's epoch is no evidence about this one's.
      const DomainEpoch* issuer = d;
      if (f.s.domain != fence::kAnyDomain && f.s.domain != d->id) {
        issuer = nullptr;
        for (const auto& x : domains)
          if (x.id == f.s.domain) issuer = &x;
      }
      if (issuer && f.s.epoch > issuer->epoch) {
        findings.push_back(
            {"rolled back", f.path, issuer->path,
             fmt::format("{}: stamp epoch {} > epoch {} of domain {}: the state was rolled back",
                         f.path, f.s.epoch, issuer->epoch, issuer->path),
             fmt::format(",\"stamp_epoch\":{},\"domain_epoch\":{}", f.s.epoch, issuer->epoch)});
      }
      bool size_diff = f.s.has_size && f.s.size != static_cast<uint64_t>(f.st.st_size);
      bool mtime_diff = f.s.has_mtime && (f.s.mtime_sec != f.st.st_mtim.tv_sec ||
                                          f.s.mtime_nsec != f.st.st_mtim.tv_nsec);
      if (size_diff || mtime_diff) {
        std::string what;
        if (size_diff) what += fmt::format("size {} (stamp {})", f.st.st_size, f.s.size);
        if (mtime_diff)
          what += fmt::format("{}mtime {} (stamp {})", what.empty() ? "" : ", ",
                              mtime_str(f.st.st_mtim.tv_sec, f.st.st_mtim.tv_nsec),
                              mtime_str(f.s.mtime_sec, f.s.mtime_nsec));
        findings.push_back(
            {"changed outside fencefs", f.path, d->path,
             fmt::format("{}: changed outside fencefs: {}{}", f.path, what,
                         live ? " (or still open for writing through the mount)" : ""),
             fmt::format(",\"size\":{},\"stamp_size\":{},\"mtime\":\"{}\",\"stamp_mtime\":\"{}\"",
                         f.st.st_size, f.s.size,
                         mtime_str(f.st.st_mtim.tv_sec, f.st.st_mtim.tv_nsec),
                         mtime_str(f.s.mtime_sec, f.s.mtime_nsec))});
      }
    }
  }

  int rc = !cannot.empty() ? 2 : findings.empty() ? 0 : 1;
  if (as_json) {
    std::string out = fmt::format(
        "{{\"backing\":{},\"state\":{},\"mounted\":{},\"mountpoint\":{},\"status\":\"{}\","
        "\"exit\":{},\"clean\":{}",
        q(backing), q(state), live ? "true" : "false", q(mnt),
        rc == 0   ? "clean"
        : rc == 1 ? "findings"
                  : "error",
        rc, rc == 0 ? "true" : "false");
    out += ",\"errors\":[";
    for (size_t i = 0; i < cannot.size(); i++) out += (i ? "," : "") + q(cannot[i]);
    out += fmt::format("],\"journal\":{{\"readable\":{},\"findings\":[",
                       jr.readable ? "true" : "false");
    for (size_t i = 0; i < jr.findings.size(); i++) out += (i ? "," : "") + q(jr.findings[i]);
    out += "]},\"domains\":[";
    std::vector<DomainEpoch> by_path = domains;
    std::sort(by_path.begin(), by_path.end(),
              [](const DomainEpoch& a, const DomainEpoch& b) { return a.path < b.path; });
    for (size_t i = 0; i < by_path.size(); i++)
      out += fmt::format("{}{{\"path\":{},\"epoch\":{},\"stamped_files\":{}}}", i ? "," : "",
                         q(by_path[i].path), by_path[i].epoch, by_path[i].files);
    out += fmt::format(
        "],\"files\":{{\"regular\":{},\"stamped\":{},\"unstamped\":{},\"unreadable\":{}}}", scanned,
        stamped, unstamped, unreadable);
    out += ",\"findings\":[";
    for (size_t i = 0; i < findings.size(); i++) {
      const Finding& f = findings[i];
      out +=
          fmt::format("{}{{\"kind\":{},\"path\":{},\"domain\":{},\"message\":{}{}}}", i ? "," : "",
                      q(f.kind), q(f.path), q(f.domain), q(f.message), f.extra_json);
    }
    out += "],\"warnings\":[";
    for (size_t i = 0; i < warnings.size(); i++) out += (i ? "," : "") + q(warnings[i]);
    out += "]}\n";
    std::cout << out;
    return rc;
  }
  for (const auto& c : cannot) fail("verify: " + c);
  for (const auto& f : findings) std::cout << f.kind << ": " << f.message << "\n";
  if (!quiet) {
    for (const auto& w : warnings) std::cerr << "fencectl: verify: warning: " << w << "\n";
    if (rc != 2) {
      std::cout << fmt::format(
          "verify {}{}: journal {}, {} domain(s), {} regular file(s): {} stamped, {} without a "
          "stamp{}\n",
          backing, live ? " (mounted at " + mnt + ")" : "", jr.findings.empty() ? "ok" : "DAMAGED",
          domains.size(), scanned, stamped, unstamped,
          unreadable ? fmt::format(", {} unreadable", unreadable) : "");
      std::cout << (rc == 0 ? "clean\n" : fmt::format("{} finding(s)\n", findings.size()));
    }
  }
  return rc;
}

// --- recover ----------------------------------------------------------------------------------

int cmd_recover(const Args& args) {
  Parsed p = parse_command(*find_command("recover"), args);
  std::string state_arg = p.value("state"), floor_arg = p.value("floor"),
              backing_arg = p.value("backing");
  bool as_json = p.flag("json");
  if (!p.positional.empty()) usage_error("recover: unexpected argument " + p.positional[0]);
  if (state_arg.empty() || floor_arg.empty())
    usage_error("recover: --state DIR and --floor N are required");
  uint64_t floor = 0;
  if (!parse_u64(floor_arg, &floor) || floor > kMaxToken)
    usage_error("recover: --floor must be a decimal epoch from 0 to 9223372036854775807");
  std::string dir = canonical(state_arg);

  // Never under a running daemon: it would overwrite the recovered state with its own.
  std::vector<std::string> users;
  for (const auto& m : fencefs_mounts())
    if (canonical(m.backing + "/.fencefs") == dir)
      users.push_back(
          fmt::format("it is the state of the fencefs mount at {} (backing {})", m.dir, m.backing));
  bool incomplete = false;
  for (auto& u : state_holders(dir, &incomplete)) users.push_back(u);
  if (!users.empty()) {
    if (as_json) {
      std::string out = fmt::format(
          "{{\"state\":{},\"floor\":{},\"ok\":false,\"in_use\":true,"
          "\"errno\":{},\"error\":\"EBUSY\",\"report\":[",
          q(dir), floor, EBUSY);
      for (size_t i = 0; i < users.size(); i++) out += (i ? "," : "") + q(users[i]);
      std::cout << out << "],\"domains\":[],\"warnings\":[]}\n";
    } else {
      fail("recover: " + dir + " is in use; unmount fencefs first:");
      for (auto& u : users) std::cerr << "  " << u << "\n";
    }
    return exit_code::kFailed;
  }

  std::string report;
  int rc = journal::recover_offline(dir, floor, journal::posix_file_layer(), &report);
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < report.size();) {
    size_t nl = report.find('\n', pos);
    std::string l = report.substr(pos, nl == std::string::npos ? nl : nl - pos);
    if (!l.empty()) lines.push_back(l);
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  std::vector<std::string> warnings;
  if (incomplete)
    warnings.push_back(
        "could not inspect every process (not root?): make sure no fencefs daemon "
        "uses " +
        dir);

  // The audit trail of the state records every recovery, done or failed.
  {
    struct stat st;
    if (stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      audit::Options ao;
      ao.dir = dir;
      audit::Log log(ao);
      audit::Event e;
      e.op = "recover";
      e.decision = rc == 0 ? "recovered" : "failed";
      e.epoch_after = floor;
      e.err = rc;
      e.pid = getpid();
      e.uid = getuid();
      e.gid = getgid();
      e.comm = "fencectl";
      e.message = fmt::format("fencectl recover --floor {}: ", floor);
      for (size_t i = 0; i < lines.size(); i++) e.message += (i ? "; " : "") + lines[i];
      log.record(e);
      if (log.failures()) warnings.push_back("could not append the audit record to " + dir);
    }
  }

  std::vector<journal::DomainRecord> after;
  if (rc == 0) after = journal::check(dir, journal::posix_file_layer()).domains;
  // Stamps above the floor keep their domains refusing lower tokens (EIO, "rollback").
  std::string backing = backing_arg.empty() ? "" : canonical(backing_arg);
  if (backing.empty() && dir.size() > 9 && dir.compare(dir.size() - 9, 9, "/.fencefs") == 0)
    backing = dir.substr(0, dir.size() - 9);
  uint64_t highest = 0;
  if (rc == 0 && !backing.empty() && has_cap_sys_admin()) {
    raise_fd_limit();
    highest = highest_stamp(backing);
    uint64_t lowest = UINT64_MAX;
    for (auto& d : after) lowest = std::min(lowest, d.epoch);
    if (highest > floor && !after.empty() && highest > lowest)
      warnings.push_back(fmt::format(
          "files in {} carry stamps up to epoch {}, above the floor {}: domains below it refuse "
          "tokens lower than their files' stamps (EIO, reason rollback). Run recover again with "
          "--floor {} to heal them all",
          backing, highest, floor, highest));
  }

  if (as_json) {
    std::string out = fmt::format(
        "{{\"state\":{},\"floor\":{},\"ok\":{},\"in_use\":false,\"errno\":{},\"error\":{},"
        "\"highest_stamp\":{},\"report\":[",
        q(dir), floor, rc == 0 ? "true" : "false", rc, q(rc ? errname(rc) : ""), highest);
    for (size_t i = 0; i < lines.size(); i++) out += (i ? "," : "") + q(lines[i]);
    out += "],\"domains\":[";
    for (size_t i = 0; i < after.size(); i++)
      out += fmt::format("{}{{\"id\":{},\"path\":{},\"epoch\":{}}}", i ? "," : "", after[i].id,
                         q(after[i].path), after[i].epoch);
    out += "],\"warnings\":[";
    for (size_t i = 0; i < warnings.size(); i++) out += (i ? "," : "") + q(warnings[i]);
    std::cout << out << "]}\n";
    return rc == 0 ? 0 : exit_code::kFailed;
  }
  for (auto& l : lines) std::cout << l << "\n";
  for (auto& w : warnings) std::cerr << "fencectl: recover: warning: " << w << "\n";
  if (rc != 0) {
    fail(fmt::format("recover: failed: {} ({})", errname(rc), common::errstr(rc)));
    return exit_code::kFailed;
  }
  std::cout << fmt::format(
      "recovered {}: every domain is at epoch >= {}; recorded in {}/audit.log\n", dir, floor, dir);
  return 0;
}

// --- audit ------------------------------------------------------------------------------------

// --summary: matching records counted by decision and reason, by process and by command.
template <typename Rows>
void print_audit_summary(const Rows& rows, bool as_json) {
  std::map<std::string, uint64_t> by_reason, by_process, by_comm;
  for (const auto& r : rows) {
    by_reason[r.cols[1] + "/" + r.cols[2]]++;
    by_process[r.cols[8] + " " + r.cols[9]]++;
    by_comm[r.cols[9]]++;
  }
  if (as_json) {
    auto obj = [](const std::map<std::string, uint64_t>& m) {
      std::string o = "{";
      for (const auto& [k, n] : m) o += (o.size() > 1 ? "," : "") + q(k) + ":" + std::to_string(n);
      return o + "}";
    };
    std::cout << "{\"records\":" << rows.size() << ",\"by_reason\":" << obj(by_reason)
              << ",\"by_process\":" << obj(by_process) << ",\"by_command\":" << obj(by_comm)
              << "}\n";
    return;
  }
  std::cout << "records: " << rows.size() << "\n";
  auto section = [](const char* title, const std::map<std::string, uint64_t>& m) {
    std::vector<std::pair<uint64_t, std::string>> v;
    v.reserve(m.size());
    for (const auto& [k, n] : m) v.push_back({n, k});
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::cout << "\n" << title << "\n";
    for (const auto& [n, k] : v) std::cout << fmt::format("  {:>8}  {}\n", n, k);
  };
  section("by decision/reason:", by_reason);
  section("by process (pid command):", by_process);
  section("by command:", by_comm);
}

int cmd_audit(const Args& args) {
  Parsed p = parse_command(*find_command("audit"), args);
  std::string mount = p.value("mount"), state = p.value("state"), domain = p.value("domain"),
              since_arg = p.value("since"), decisions_arg = p.value("decision");
  bool as_json = p.flag("json"), verbose = p.flag("verbose");
  bool follow = p.flag("follow"), summary = p.flag("summary");
  if (follow && summary) usage_error("audit: --follow and --summary do not go together");
  if (!p.positional.empty()) usage_error("audit: unexpected argument " + p.positional[0]);
  if (mount.empty() == state.empty()) usage_error("audit: give --mount M or --state DIR");
  if (!mount.empty()) {
    std::string root = mount_or_exit(mount, "audit");
    auto st = mount_status(root);
    const json::Value* s = st ? st->get("state") : nullptr;
    if (!s || s->type != json::Value::Type::String) {
      fail("audit: cannot read the state directory from " + root + "/.fencefs/status");
      return exit_code::kFailed;
    }
    state = s->str;
  }
  struct stat sst;
  errno = 0;
  if (stat(state.c_str(), &sst) != 0 || !S_ISDIR(sst.st_mode)) {
    fail("audit: state directory " + state + ": " +
         (errno ? common::errstr(errno) : "not a directory"));
    return exit_code::kFailed;
  }
  std::optional<int64_t> since;
  if (!since_arg.empty()) {
    since = audit::parse_since(since_arg, audit::now_unix_ns());
    if (!since)
      usage_error(
          "audit: --since takes an ISO 8601 time (2026-12-02T10:00:00Z) or a duration "
          "(90s, 10m, 2h, 1d, 1w)");
  }
  // The decisions a record can carry (docs/audit.md); "accepted" is counted, never logged.
  static const char* const kDecisions[] = {"refused",  "advanced", "bound",     "unbound",
                                           "declared", "info",     "recovered", "failed",
                                           "detected", "accepted"};
  std::vector<std::string> decisions;
  for (size_t pos = 0; !decisions_arg.empty() && pos <= decisions_arg.size();) {
    size_t c = decisions_arg.find(',', pos);
    std::string d = decisions_arg.substr(pos, c == std::string::npos ? c : c - pos);
    if (!d.empty()) {
      if (std::find_if(std::begin(kDecisions), std::end(kDecisions),
                       [&](const char* k) { return d == k; }) == std::end(kDecisions))
        usage_error("audit: unknown decision '" + d +
                    "' (refused, advanced, bound, unbound, declared, info, recovered, failed, "
                    "detected, accepted)");
      decisions.push_back(d);
    }
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  // An unreadable trail is an error, not an empty one.
  if (access(state.c_str(), R_OK | X_OK) != 0) {
    fail("audit: cannot read the audit trail in " + state + ": " + common::errstr(errno) +
         " (the state directory is readable by root only)");
    return exit_code::kFailed;
  }
  bool unreadable = false;
  if (!domain.empty()) {
    while (domain.size() > 1 && domain.back() == '/') domain.pop_back();
    if (domain[0] != '/') usage_error("audit: --domain takes a domain path such as / or /jobs/a");
  }

  struct Row {
    std::string cols[10];
    std::string message;
  };
  // The row of a record that passes the filters; nullopt for one that does not.
  auto match = [&](const json::Value& v) -> std::optional<Row> {
    auto str = [&](const char* k) {
      const json::Value* x = v.get(k);
      return x ? x->as_string() : std::string();
    };
    if (!decisions.empty() &&
        std::find(decisions.begin(), decisions.end(), str("decision")) == decisions.end())
      return std::nullopt;
    if (!domain.empty() && str("domain") != domain) return std::nullopt;
    if (since) {
      auto t = audit::parse_iso_time(str("time"));
      if (!t || *t < *since) return std::nullopt;
    }
    Row r;
    std::string t = str("time");
    if (t.size() > 23 && t.back() == 'Z') t = t.substr(0, 23) + "Z";  // milliseconds
    std::string before = str("epoch_before"), after = str("epoch_after");
    std::string path = str("path");
    if (!str("path2").empty()) path += " -> " + str("path2");
    auto dash = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
    r.cols[0] = t;
    r.cols[1] = dash(str("decision"));
    r.cols[2] = dash(str("reason"));
    r.cols[3] = dash(str("op"));
    r.cols[4] = dash(str("domain"));
    r.cols[5] = dash(path);
    r.cols[6] = dash(str("token"));
    r.cols[7] = before == after ? dash(after) : before + "->" + after;
    r.cols[8] = dash(str("pid"));
    r.cols[9] = dash(str("comm"));
    r.message = str("message");
    if (!str("error").empty()) r.message = str("error") + ": " + r.message;
    // Every field as the terminal will show it: a name cannot forge a row or send escapes.
    for (auto& col : r.cols) col = audit::display_escape(col);
    r.message = audit::display_escape(r.message);
    return r;
  };
  std::vector<Row> rows;
  uint64_t bad = 0;
  std::string first_bad;
  // Where the reading stopped in the current file (audit.log), for --follow.
  std::string current = state + "/audit.log";
  ino_t current_ino = 0;
  off_t current_off = 0;
  // Epoch changes rotated out of the logs come from the epochs trail, then the logs.
  for (const std::string& u : audit::for_each_record(
           state, [&](const std::string&line, const std::string&where, bool complete) {
             bool in_current = where.compare(0, current.size() + 1, current + ":") == 0;
             if (in_current && complete) current_off += static_cast<off_t>(line.size() + 1);
             auto v = json::parse(line);
             if (!v || v->type != json::Value::Type::Object) {
               if (complete && bad++ == 0) first_bad = where;
               return;
             }
             auto r = match(*v);
             if (!r) return;
             if (as_json && !summary)
               std::cout << line << "\n";
             else
               rows.push_back(std::move(*r));
           })) {
    fail("audit: cannot read " + u);
    unreadable = true;
  }
  if (struct stat fst; stat(current.c_str(), &fst) == 0) current_ino = fst.st_ino;
  if (bad)
    fail(fmt::format("audit: {} unreadable line(s) skipped (the first at {})", bad, first_bad));
  int status = unreadable ? exit_code::kFailed : 0;
  if (summary) {
    print_audit_summary(rows, as_json);
    return status;
  }
  static const char* kHead[10] = {"TIME", "DECISION", "REASON", "OP",  "DOMAIN",
                                  "PATH", "TOKEN",    "EPOCH",  "PID", "COMM"};
  size_t w[10];
  for (int c = 0; c < 10; c++) {
    w[c] = strlen(kHead[c]);
    for (auto& r : rows) w[c] = std::max(w[c], r.cols[c].size());
  }
  auto print = [&](const std::string* cols) {
    std::string l;
    for (int c = 0; c < 10; c++) {
      l += cols[c];
      if (c < 9) l += std::string(w[c] > cols[c].size() ? w[c] - cols[c].size() + 2 : 2, ' ');
    }
    std::cout << l << "\n";
  };
  if (!as_json) {
    std::string head[10];
    for (int c = 0; c < 10; c++) head[c] = kHead[c];
    print(head);
    for (auto& r : rows) {
      print(r.cols);
      if (verbose && !r.message.empty()) std::cout << "    " << r.message << "\n";
    }
    if (rows.empty() && !unreadable && !follow)
      std::cerr << "fencectl: audit: no matching records in " << state << "\n";
  }
  if (!follow) return status;

  // --follow: new records of audit.log as they come, across rotation. A rotation renames
  // audit.log to audit.log.1 (and so on) and starts a new one, maybe several times between two
  // looks: the file followed is read to its end, then every rotated file not read yet, oldest
  // first, then the new audit.log.
  std::cout << std::flush;
  auto emit = [&](const std::string& line) {
    auto v = json::parse(line);
    if (!v || v->type != json::Value::Type::Object) return;
    auto r = match(*v);
    if (!r) return;
    if (as_json) {
      std::cout << line << "\n";
    } else {
      print(r->cols);
      if (verbose && !r->message.empty()) std::cout << "    " << r->message << "\n";
    }
  };
  std::set<ino_t> done;  // files read to their end
  for (const std::string& f : audit::log_files(state)) {
    struct stat fst;
    if (f != current && stat(f.c_str(), &fst) == 0) done.insert(fst.st_ino);
  }
  int fd = open(current.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat fst;
  if (fd >= 0 && (fstat(fd, &fst) != 0 || fst.st_ino != current_ino)) current_off = 0;
  std::string pending;
  for (;;) {
    char buf[65536];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf, current_off) : 0;
    if (n > 0) {
      current_off += n;
      pending.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        emit(pending.substr(0, nl));
        pending.erase(0, nl + 1);
      }
      std::cout << std::flush;
      continue;
    }
    struct stat now;
    if (stat(current.c_str(), &now) == 0 &&
        (fd < 0 || fstat(fd, &fst) != 0 || now.st_ino != fst.st_ino)) {
      if (fd >= 0) {
        // What was appended to the old file after the last look, before the rotation.
        for (ssize_t m; (m = pread(fd, buf, sizeof buf, current_off)) > 0;) {
          current_off += m;
          pending.append(buf, static_cast<size_t>(m));
        }
        for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
          emit(pending.substr(0, nl));
          pending.erase(0, nl + 1);
        }
        done.insert(fst.st_ino);
        close(fd);
      }
      for (const std::string& f : audit::log_files(state)) {
        struct stat rst;
        if (f == current || stat(f.c_str(), &rst) != 0 || done.count(rst.st_ino)) continue;
        std::ifstream in(f, std::ios::binary);
        std::string line;
        while (std::getline(in, line))
          if (!in.eof()) emit(line);
        done.insert(rst.st_ino);
      }
      fd = open(current.c_str(), O_RDONLY | O_CLOEXEC);
      current_off = 0;
      pending.clear();
      std::cout << std::flush;
      continue;
    }
    usleep(100 * 1000);
  }
}

}  // namespace fencefs::cli
