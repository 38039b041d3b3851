#include "daemon/binding_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/anchored.h"
#include "common/proc.h"

namespace fencefs::daemon {
namespace {

constexpr const char* kMagic = "fencefs-bindings 3";
constexpr const char* kMagicV2 = "fencefs-bindings 2";  // B and U lines, no history

std::string boot_id() {
  std::string s;
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return s;
  char buf[64];
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  if (n > 0) s.assign(buf, static_cast<size_t>(n));
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

struct Identity {
  uint64_t start_time = 0;
  uint64_t pidfs_ino = 0;
  auto key() const { return std::tie(start_time, pidfs_ino); }
};

// The process's identity now: its pidfs inode is unique among the processes of this boot; the
// start time, read after the pidfd was opened, guards against a pid reused in between.
bool identity_of(pid_t pid, Identity* id) {
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0;
  auto ps = proc::read_stat(pid);
  close(fd);
  if (!ok || !ps) return false;
  id->start_time = ps->start_time;
  id->pidfs_ino = st.st_ino;
  return true;
}

// Whether `id`, read now, is the process of entry `e` (fence::Bindings' identity: its pidfs
// inode, or before pidfs its start time and pid), not a later one with its pid.
bool same_process(const Identity& id, const fence::Bindings::Entry& e) {
  return id.pidfs_ino == e.id || ((e.id >> 22) == id.start_time &&
                                  (e.id & ((1u << 22) - 1)) == static_cast<uint64_t>(e.pid));
}

// S PID START INO DOMAIN TOKEN|- [BEFORE:TOKEN:INHERIT ...]: one process's whole binding for a
// domain now (- : none now, only history), which replaces what earlier lines said of it.
std::string line_for(pid_t pid, const Identity& id, uint32_t domain,
                     const fence::Bindings::Entry& e) {
  auto cur = e.tokens.find(domain);
  std::string line = fmt::format("S {} {} {} {} {}", pid, id.start_time, id.pidfs_ino, domain,
                                 cur == e.tokens.end() ? "-" : std::to_string(cur->second));
  if (auto h = e.earlier.find(domain); h != e.earlier.end())
    for (const auto& s : h->second)
      line += fmt::format(" {}:{}:{}", s.before, s.token, s.inherit ? 1 : 0);
  return line + "\n";
}

struct Saved {
  std::optional<uint64_t> token;
  std::vector<fence::Bindings::Superseded> earlier;
};

// A whole decimal number of `text`, at most `max`.
template <typename T>
bool number(std::string_view text, T* out, T max = std::numeric_limits<T>::max()) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && *out <= max;
}

using Key = std::tuple<pid_t, uint64_t, uint64_t>;  // pid, start time, pidfs inode

// One line into `saved`; false for a line cut short by a crash (no newline: the last one, as
// each start rewrites the file whole), or not understood.
bool parse_line(std::string_view line, bool v2, std::map<Key, std::map<uint32_t, Saved>>* saved) {
  if (line.empty() || line.back() != '\n') return false;
  line.remove_suffix(1);
  std::vector<std::string_view> f;
  for (size_t p = 0; p <= line.size();) {
    size_t q = std::min(line.find(' ', p), line.size());
    f.push_back(line.substr(p, q - p));
    p = q + 1;
  }
  pid_t pid = 0;
  uint64_t start = 0, ino = 0;
  uint32_t domain = 0;
  Saved s;
  if (f.size() < 6 || f[0].size() != 1 || !number(f[1], &pid) || pid <= 0 ||
      !number(f[2], &start) || !number(f[3], &ino) || !number(f[4], &domain))
    return false;
  if (f[5] != "-") {
    uint64_t t = 0;
    if (!number(f[5], &t, fence::kMaxToken)) return false;
    s.token = t;
  }
  const char op = f[0][0];
  if (v2) {
    if ((op != 'B' && op != 'U') || f.size() != 6) return false;
    if (op == 'U') s.token.reset();
  } else {
    if (op != 'S') return false;
    for (size_t k = 6; k < f.size(); k++) {
      fence::Bindings::Superseded e;
      size_t c1 = f[k].find(':'), c2 = c1 == f[k].npos ? c1 : f[k].find(':', c1 + 1);
      if (c2 == f[k].npos || !number(f[k].substr(0, c1), &e.before) ||
          !number(f[k].substr(c1 + 1, c2 - c1 - 1), &e.token, fence::kMaxToken) ||
          (f[k].substr(c2 + 1) != "0" && f[k].substr(c2 + 1) != "1"))
        return false;
      e.inherit = f[k].substr(c2 + 1) == "1";
      s.earlier.push_back(e);
    }
  }
  (*saved)[{pid, start, ino}][domain] = std::move(s);
  return true;
}

}  // namespace

BindingStore::BindingStore(std::string state_dir) : path_(std::move(state_dir) + "/bindings") {}

BindingStore::~BindingStore() {
  if (fd_ >= 0) close(fd_);
}

BindingStore::Restored BindingStore::restore(fence::Bindings& bindings,
                                             const std::function<bool(uint32_t)>& domain_exists) {
  Restored r;
  // (pid, start time, pidfs inode) -> domain -> its binding, the last line of each winning.
  std::map<Key, std::map<uint32_t, Saved>> saved;
  int rfd = common::anchored_open(path_, O_RDONLY | O_CLOEXEC);
  FILE* f = rfd >= 0 ? fdopen(rfd, "re") : nullptr;
  if (rfd >= 0 && !f) close(rfd);
  if (f) {
    char* buf = nullptr;
    size_t cap = 0;
    bool same_boot = false, v2 = false;
    if (getline(&buf, &cap, f) > 0) {
      std::string head(buf);
      while (!head.empty() && head.back() == '\n') head.pop_back();
      v2 = head == std::string(kMagicV2) + " " + boot_id();
      same_boot = v2 || head == std::string(kMagic) + " " + boot_id();
    }
    for (ssize_t n; same_boot && (n = getline(&buf, &cap, f)) > 0;)
      parse_line(std::string_view(buf, static_cast<size_t>(n)), v2, &saved);
    free(buf);
    fclose(f);
  }
  for (const auto& [key, domains] : saved) {
    auto [pid, start, ino] = key;
    auto same = [pid = pid, start = start, ino = ino] {
      Identity now;
      return identity_of(pid, &now) && now.start_time == start && now.pidfs_ino == ino;
    };
    for (const auto& [domain, s] : domains) {
      if (domain_exists(domain) && bindings.restore(pid, domain, s.token, s.earlier, same) == 0)
        r.restored++;
      else
        r.dropped++;
    }
  }
  std::lock_guard lk(mu_);
  rewrite_locked(bindings);
  return r;
}

void BindingStore::record(fence::Bindings& bindings, pid_t pid, uint32_t domain) {
  Identity id;
  if (!identity_of(pid, &id)) return;  // gone already: nothing to carry over
  std::lock_guard lk(mu_);
  // Read under mu_: of two changes recorded at once, the later line holds the later state.
  auto e = bindings.find(pid);
  if (!e || !same_process(id, *e)) return;
  std::string line = line_for(pid, id, domain, *e);
  if (fd_ < 0 || write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    rewrite_locked(bindings);  // start over from the live bindings
    return;
  }
  // Changes and exited processes accumulate: rewrite once the log is well past what is live.
  if (++lines_ > 2 * live_ + 1024) rewrite_locked(bindings);
}

void BindingStore::rewrite_locked(fence::Bindings& bindings) {
  std::string out = std::string(kMagic) + " " + boot_id() + "\n";
  size_t n = 0;
  for (const auto& e : bindings.list(true)) {
    Identity id;
    if (!identity_of(e.pid, &id) || !same_process(id, e)) continue;
    std::set<uint32_t> domains;
    for (const auto& [domain, token] : e.tokens) domains.insert(domain);
    for (const auto& [domain, earlier] : e.earlier) domains.insert(domain);
    for (uint32_t domain : domains) {
      out += line_for(e.pid, id, domain, e);
      n++;
    }
  }
  std::string tmp = path_ + ".tmp";
  int fd = common::anchored_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  bool ok = write(fd, out.data(), out.size()) == static_cast<ssize_t>(out.size());
  if (!ok || common::anchored_rename(tmp, path_) != 0) {
    close(fd);
    common::anchored_unlink(tmp);
    return;
  }
  // The same description, now named by path_, continues as the append log.
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
  fcntl(fd_, F_SETFL, O_APPEND);
  lines_ = n;
  live_ = n;
}

}  // namespace fencefs::daemon
