#include "daemon/binding_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <tuple>

#include "common/anchored.h"
#include "common/proc.h"

namespace fencefs::daemon {
namespace {

constexpr const char* kMagic = "fencefs-bindings 2";

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

std::string line_for(char op, pid_t pid, const Identity& id, uint32_t domain, uint64_t token) {
  return fmt::format("{} {} {} {} {} {}\n", op, pid, id.start_time, id.pidfs_ino, domain, token);
}

}  // namespace

BindingStore::BindingStore(std::string state_dir) : path_(std::move(state_dir) + "/bindings") {}

BindingStore::~BindingStore() {
  if (fd_ >= 0) close(fd_);
}

BindingStore::Restored BindingStore::restore(fence::Bindings& bindings,
                                             const std::function<bool(uint32_t)>& domain_exists) {
  Restored r;
  // (pid, start time, pidfs inode) -> domain -> token, replayed in order.
  std::map<std::tuple<long long, unsigned long long, unsigned long long>,
           std::map<uint32_t, uint64_t>>
      saved;
  int rfd = common::anchored_open(path_, O_RDONLY | O_CLOEXEC);
  FILE* f = rfd >= 0 ? fdopen(rfd, "re") : nullptr;
  if (rfd >= 0 && !f) close(rfd);
  if (f) {
    char line[256];
    bool same_boot = false;
    if (fgets(line, sizeof line, f)) {
      std::string head(line);
      while (!head.empty() && head.back() == '\n') head.pop_back();
      same_boot = head == std::string(kMagic) + " " + boot_id();
    }
    while (same_boot && fgets(line, sizeof line, f)) {
      char op = 0;
      long long pid = 0;
      unsigned long long start = 0, ino = 0, domain = 0, token = 0;
      if (sscanf(line, "%c %lld %llu %llu %llu %llu", &op, &pid, &start, &ino, &domain, &token) !=
          6)
        continue;  // a line cut short by a crash
      auto& tokens = saved[{pid, start, ino}];
      if (op == 'B')
        tokens[static_cast<uint32_t>(domain)] = token;
      else
        tokens.erase(static_cast<uint32_t>(domain));
    }
    fclose(f);
  }
  for (const auto& [key, tokens] : saved) {
    auto [pid, start, ino] = key;
    Identity now;
    bool same = identity_of(static_cast<pid_t>(pid), &now) && now.start_time == start &&
                now.pidfs_ino == ino;
    for (const auto& [domain, token] : tokens) {
      if (same && domain_exists(domain) &&
          bindings.bind(static_cast<pid_t>(pid), domain, token) == 0)
        r.restored++;
      else
        r.dropped++;
    }
  }
  std::lock_guard lk(mu_);
  rewrite_locked(bindings);
  return r;
}

void BindingStore::record(fence::Bindings& bindings, pid_t pid, uint32_t domain, uint64_t token,
                          bool bound) {
  Identity id;
  if (!identity_of(pid, &id)) return;  // gone already: nothing to carry over
  std::string line = line_for(bound ? 'B' : 'U', pid, id, domain, token);
  std::lock_guard lk(mu_);
  if (fd_ < 0 || write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    rewrite_locked(bindings);  // start over from the live bindings
    return;
  }
  // Unbinds and exited processes accumulate: rewrite once the log is well past what is live.
  if (++lines_ > 2 * live_ + 1024) rewrite_locked(bindings);
}

void BindingStore::rewrite_locked(fence::Bindings& bindings) {
  std::string out = std::string(kMagic) + " " + boot_id() + "\n";
  size_t n = 0;
  for (const auto& e : bindings.list()) {
    Identity id;
    if (!identity_of(e.pid, &id)) continue;
    for (const auto& [domain, token] : e.tokens) {
      out += line_for('B', e.pid, id, domain, token);
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
