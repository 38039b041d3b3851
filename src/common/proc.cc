#include "common/proc.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <iterator>
#include <string_view>
#include <system_error>
#include <thread>

#include "common/identity_cache.h"

namespace fencefs::proc {
namespace {

// records: a file of many records (uid_map), whose reads end at a record and so may be short.
bool slurp(const char* path, std::string* out, bool records = false) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // Whole: a long Groups: line pushes the later fields (CapEff:) past the first 4 KiB. procfs
  // fills each read of a one-record file, so a short one is the end.
  char buf[4096];
  out->clear();
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) {
    out->append(buf, static_cast<size_t>(n));
    if (!records && static_cast<size_t>(n) < sizeof buf) break;
  }
  ::close(fd);
  return n >= 0 && !out->empty();
}

// /proc/PID/status.
bool status_text(pid_t pid, std::string* out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  return slurp(path, out);
}

std::string_view field_line(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (line.substr(0, key.size()) == key) return line.substr(key.size());
    pos = end + 1;
  }
  return {};
}

template <typename T>
bool parse_num(std::string_view s, T* v) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc();
}

}  // namespace

std::optional<Stat> read_stat(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::string text;
  if (!slurp(path, &text)) return std::nullopt;
  // comm may hold spaces and parentheses: it ends at the last ')'.
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  Stat st;
  st.pid = pid;
  st.comm = text.substr(open + 1, close - open - 1);
  std::string_view rest(text);
  rest.remove_prefix(close + 2);  // ") "
  // Fields from 3 (state) on; ppid is field 4, minflt field 10, starttime field 22.
  int field = 3;
  size_t pos = 0;
  while (pos <= rest.size() && field <= 22) {
    size_t end = rest.find(' ', pos);
    if (end == std::string_view::npos) end = rest.size();
    std::string_view tok = rest.substr(pos, end - pos);
    if (field == 3 && !tok.empty()) st.state = tok.front();
    if (field == 4 && !parse_num(tok, &st.ppid)) return std::nullopt;
    if (field == 9 && !parse_num(tok, &st.flags)) return std::nullopt;
    if (field == 10 && !parse_num(tok, &st.minflt)) return std::nullopt;
    if (field == 22 && !parse_num(tok, &st.start_time)) return std::nullopt;
    ++field;
    pos = end + 1;
  }
  if (field <= 22) return std::nullopt;
  return st;
}

std::optional<pid_t> tgid_of(pid_t tid) {
  std::string text;
  if (!status_text(tid, &text)) return std::nullopt;
  pid_t tgid = 0;
  if (!parse_num(field_line(text, "Tgid:"), &tgid) || tgid <= 0) return std::nullopt;
  return tgid;
}

namespace {

std::vector<gid_t> parse_groups(std::string_view text) {
  std::vector<gid_t> out;
  std::string_view line = field_line(text, "Groups:");
  while (!line.empty()) {
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty()) break;
    gid_t g = 0;
    auto r = std::from_chars(line.data(), line.data() + line.size(), g);
    if (r.ec != std::errc()) break;
    out.push_back(g);
    line.remove_prefix(static_cast<size_t>(r.ptr - line.data()));
  }
  return out;
}

uint64_t parse_cap_eff(std::string_view text) {
  std::string_view hex = field_line(text, "CapEff:");
  while (!hex.empty() && (hex.front() == ' ' || hex.front() == '\t')) hex.remove_prefix(1);
  uint64_t caps = 0;
  if (std::from_chars(hex.data(), hex.data() + hex.size(), caps, 16).ec != std::errc()) return 0;
  return caps;
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

enum class UserNs { Unknown, Ours, Below };  // where a thread lives, from ours

UserNs user_ns_of(pid_t tid) {
  struct stat mine, theirs;
  std::string ns = "/proc/" + std::to_string(tid) + "/ns/user";
  int fd = open(ns.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return UserNs::Unknown;
  UserNs where = UserNs::Unknown;
  if (stat("/proc/self/ns/user", &mine) == 0 && fstat(fd, &theirs) == 0) {
    if (same_file(mine, theirs)) where = UserNs::Ours;
    // Nested 32 deep at most; NS_GET_PARENT fails above the namespace we live in.
    for (int depth = 0; where == UserNs::Unknown && depth < 33; depth++) {
      int parent = ioctl(fd, NS_GET_PARENT);
      if (parent < 0) break;
      close(fd);
      fd = parent;
      if (fstat(fd, &theirs) == 0 && same_file(mine, theirs)) where = UserNs::Below;
    }
  }
  close(fd);
  return where;
}

// /proc/TID/uid_map or gid_map, read from our namespace: the outside ids are ours.
std::vector<Credentials::IdRange> read_id_map(pid_t tid, const char* which) {
  std::vector<Credentials::IdRange> out;
  std::string text;
  std::string path = "/proc/" + std::to_string(tid) + "/" + which;
  if (!slurp(path.c_str(), &text, true)) return out;
  std::string_view rest(text);
  while (!rest.empty()) {
    size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    uint32_t v[3];
    int n = 0;
    for (; n < 3; n++) {
      while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      auto r = std::from_chars(line.data(), line.data() + line.size(), v[n]);
      if (r.ec != std::errc()) break;
      line.remove_prefix(static_cast<size_t>(r.ptr - line.data()));
    }
    if (n == 3) out.push_back({v[1], v[2]});
  }
  return out;
}

constexpr uint32_t kPfIoWorker = 0x10;  // PF_IO_WORKER

// An io_uring worker thread, or one that cannot be told apart from one.
bool io_worker(pid_t tid) {
  auto st = read_stat(tid);
  return !st || (st->flags & kPfIoWorker);
}

bool maps(const std::vector<Credentials::IdRange>& map, uint32_t id) {
  for (const auto& r : map)
    if (id >= r.first && id - r.first < r.count) return true;
  return false;
}

}  // namespace

std::vector<gid_t> groups_of(pid_t pid) {
  std::string text;
  return status_text(pid, &text) && !io_worker(pid) ? parse_groups(text) : std::vector<gid_t>{};
}

std::optional<Credentials> credentials(pid_t tid, bool with_caps) {
  std::string text;
  if (!status_text(tid, &text)) return std::nullopt;
  Credentials cr;
  // An io_uring worker's /proc shows the groups and capabilities it started with: none count.
  if (io_worker(tid)) return cr;
  cr.groups = parse_groups(text);
  // Capabilities count in the thread's own user namespace: ours (the daemon being root there)
  // makes them the kernel's capable(), one below ours only over the ids it maps.
  if (uint64_t caps = with_caps ? parse_cap_eff(text) : 0) {
    UserNs where = user_ns_of(tid);
    if (where == UserNs::Ours) {
      cr.caps = caps;
    } else if (where == UserNs::Below) {
      cr.ns_caps = caps;
      cr.uid_map = read_id_map(tid, "uid_map");
      cr.gid_map = read_id_map(tid, "gid_map");
    }
  }
  return cr;
}

uint64_t Credentials::caps_over(uid_t uid, gid_t gid) const {
  if (caps) return caps;
  return maps(uid_map, uid) && maps(gid_map, gid) ? ns_caps : 0;
}

uint64_t effective_caps(pid_t tid) {
  auto cr = credentials(tid);
  return cr ? cr->caps : 0;
}

bool sys_admin_capable(pid_t tid) {
  return (effective_caps(tid) & (uint64_t{1} << CAP_SYS_ADMIN)) != 0;
}

std::optional<Identity> identity_of(pid_t tid) {
  std::string text;
  if (!status_text(tid, &text)) return std::nullopt;
  Identity id;
  if (!parse_num(field_line(text, "Tgid:"), &id.tgid) || id.tgid <= 0) return std::nullopt;
  std::string_view name = field_line(text, "Name:");
  while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.remove_prefix(1);
  id.comm = std::string(name);  // the kernel escapes newlines and backslashes here
  return id;
}

std::string comm_of(pid_t pid) {
  auto st = read_stat(pid);
  return st ? st->comm : std::string();
}

namespace {

#ifndef PIDFD_THREAD
#define PIDFD_THREAD 0x80  // O_EXCL; Linux 6.9+
#endif

#ifndef PID_FS_MAGIC
#define PID_FS_MAGIC 0x50494446  // Linux 6.9+
#endif

// Whether pidfds are inodes of pidfs, one per process (Linux 6.9+); before, every pidfd is the
// same anonymous inode.
bool have_pidfs() {
  int fd = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
  struct statfs sf;
  bool yes = fd >= 0 && fstatfs(fd, &sf) == 0 && sf.f_type == PID_FS_MAGIC;
  if (fd >= 0) ::close(fd);
  return yes;
}

// Without pidfs: the handle's pid (its fdinfo) and that process's start time, read while the
// handle shows it alive, so that the pid is still its own. A pid is reused only after every other
// free one has been handed out, which, short of root rewinding ns_last_pid or a machine nearly
// out of pids, does not happen within the start time's 10 ms tick.
uint64_t pid_and_start(int handle) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", handle);
  std::string info;
  pid_t pid = 0;
  if (!slurp(path, &info) || !parse_num(field_line(info, "Pid:"), &pid) || pid <= 0) return 0;
  auto st = read_stat(pid);
  pollfd p{handle, POLLIN, 0};
  if (!st || ::poll(&p, 1, 0) != 0) return 0;  // exited: the pid may be another's by now
  return (st->start_time << 22) | static_cast<uint64_t>(pid);  // pids are below 2^22
}

class SystemProcesses : public ProcessInfo {
 public:
  explicit SystemProcesses(bool pidfs) : pidfs_(pidfs) {}
  std::optional<Stat> stat(pid_t pid) override { return read_stat(pid); }
  std::optional<Identity> identity(pid_t tid) override { return identities_.get(tid); }
  std::vector<gid_t> groups(pid_t pid) override { return groups_of(pid); }
  int open(pid_t pid, bool thread) override {
    if (pid <= 0) return -1;
    int fd = -1;
    if (thread) fd = static_cast<int>(syscall(SYS_pidfd_open, pid, PIDFD_THREAD));
    if (fd < 0) fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // leaders, old kernels
    return fd;
  }
  uint64_t id(int handle) override {
    if (handle < 0) return 0;
    if (!pidfs_) return pid_and_start(handle);
    struct stat st;
    if (fstat(handle, &st) != 0) return 0;
    return static_cast<uint64_t>(st.st_ino);
  }
  uint64_t id_floor() override {
    if (!pidfs_) {
      // (start time << 22 | pid): the floor is the next tick, and this waits for it, so that a
      // process started before returns is below it and any started after is not.
      timespec ts{};
      clock_gettime(CLOCK_BOOTTIME, &ts);
      const auto hz = static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
      const uint64_t tick_ns = 1000000000 / hz;
      const uint64_t next =
          (static_cast<uint64_t>(ts.tv_sec) * 1000000000 + static_cast<uint64_t>(ts.tv_nsec)) /
              tick_ns +
          1;
      timespec at{static_cast<time_t>(next * tick_ns / 1000000000),
                  static_cast<long>(next * tick_ns % 1000000000)};
      while (clock_nanosleep(CLOCK_BOOTTIME, TIMER_ABSTIME, &at, nullptr) == EINTR) {
      }
      return next << 22;
    }
    // pidfs numbers every task as it is made: a new thread's number is above all earlier ones.
    uint64_t ino = 0;
    try {
      std::thread([&ino] {
        int fd = static_cast<int>(syscall(SYS_pidfd_open, gettid(), PIDFD_THREAD));
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0) ino = static_cast<uint64_t>(st.st_ino);
        if (fd >= 0) ::close(fd);
      }).join();
    } catch (const std::system_error&) {  // no thread to be had (pid or memory limits): 0
    }
    return ino;
  }
  bool any_exited(const int* handles, size_t n) override {
    pollfd small[16];
    std::vector<pollfd> big;
    pollfd* p = small;
    if (n > std::size(small)) {
      big.resize(n);
      p = big.data();
    }
    for (size_t k = 0; k < n; k++) p[k] = pollfd{handles[k], POLLIN, 0};
    return ::poll(p, n, 0) != 0;  // readable (or an error): a process is gone
  }
  void close(int handle) override {
    if (handle >= 0) ::close(handle);
  }

 private:
  const bool pidfs_;
  IdentityCache identities_;
};

}  // namespace

ProcessInfo& system() {
  static SystemProcesses s(have_pidfs());
  return s;
}

std::unique_ptr<ProcessInfo> system_without_pidfs() {
  return std::make_unique<SystemProcesses>(false);
}

}  // namespace fencefs::proc
