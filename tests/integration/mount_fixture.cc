#include "integration/mount_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

namespace fencefs::testing {
namespace {

std::mutex g_mu;
std::set<std::string>& live_mounts() {
  static std::set<std::string> s;
  return s;
}

// Whatever a test does, no mount outlives the test binary.
void sweep_mounts() {
  std::lock_guard lk(g_mu);
  for (const auto& m : live_mounts()) {
    std::string cmd = "fusermount3 -u -z '" + m + "' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      // already gone
    }
  }
}

}  // namespace

bool is_mounted(const std::string& mnt) {
  std::ifstream in("/proc/mounts");
  std::string dev, dir, rest;
  while (in >> dev >> dir) {
    std::getline(in, rest);
    if (dir == mnt) return true;
  }
  return false;
}

void track_mount(const std::string& mnt) {
  static bool registered = [] {
    std::atexit(sweep_mounts);
    return true;
  }();
  (void)registered;
  std::lock_guard lk(g_mu);
  live_mounts().insert(mnt);
}

void untrack_mount(const std::string& mnt) {
  std::lock_guard lk(g_mu);
  live_mounts().erase(mnt);
}

std::vector<pid_t> threads_of(pid_t pid) {
  std::vector<pid_t> tids;
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (!d) return tids;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') tids.push_back(atoi(e->d_name));
  closedir(d);
  return tids;
}

char thread_state(pid_t pid, pid_t tid) {
  std::string st = slurp(fmt::format("/proc/{}/task/{}/stat", pid, tid));
  size_t paren = st.rfind(')');  // the name may hold one
  return paren == std::string::npos || paren + 2 >= st.size() ? 0 : st[paren + 2];
}

std::optional<uint64_t> signal_mask(pid_t pid, pid_t tid, const char* field) {
  std::string st = slurp(fmt::format("/proc/{}/task/{}/status", pid, tid));
  size_t at = st.find(std::string(field) + ":\t");
  if (at == std::string::npos) return std::nullopt;
  return std::stoull(st.substr(at + strlen(field) + 2, 16), nullptr, 16);
}

// Whether every thread of pid is in one of the states (a letter of /proc's stat), or any is.
static bool threads_in(pid_t pid, const char* states, bool every) {
  bool all = true, any = false, seen = false;
  for (pid_t tid : threads_of(pid)) {
    char state = thread_state(pid, tid);
    if (state == 0) continue;  // gone
    bool in = strchr(states, state) != nullptr;
    all = all && in;
    any = any || in;
    seen = true;
  }
  return every ? seen && all : any;
}

static bool all_stopped(pid_t pid) { return threads_in(pid, "TtZX", true); }

void thaw(pid_t pid) {
  if (threads_in(pid, "T", false)) kill(pid, SIGCONT);
}

bool freeze(pid_t pid) {
  if (kill(pid, SIGSTOP) != 0) return false;
  for (int t = 0; t < 5000; t += 5) {
    if (all_stopped(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

int finishes_within(const std::string& cmd, int ms, pid_t* left) {
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  for (int t = 0; t <= ms; t += 20) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  *left = pid;
  return -1;
}

int sh(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  if (st == -1) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string sh_out(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    if (status) *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return out;
}

std::string temp_dir(std::string_view name) {
  const char* env = getenv("FENCEFS_TEST_TMP");
  std::string tmpl = std::string(env != nullptr && *env != 0 ? env : "/tmp") + "/fencefs-" +
                     std::string(name) + "-XXXXXX";
  return mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
}

Mount::Mount(std::vector<std::string> extra, std::function<void(const std::string&)> prepare)
    : extra_(std::move(extra)) {
  root_ = temp_dir("test");
  if (root_.empty()) throw std::runtime_error("mkdtemp failed");
  ::chmod(root_.c_str(), 0755);  // non-root test users must reach the mountpoint
  backing_ = root_ + "/backing";
  mnt_ = root_ + "/mnt";
  log_ = root_ + "/daemon.log";
  ::mkdir(backing_.c_str(), 0755);
  ::mkdir(mnt_.c_str(), 0755);
  if (prepare) prepare(backing_);
  int st = try_mount(extra_);
  if (st != -1000) {
    ADD_FAILURE() << "fencefs did not mount (status " << st << "): " << daemon_log();
  }
}

Mount::~Mount() {
  // A daemon that exits badly at the end of a test (an error at unmount, a sanitizer's report at
  // exit) fails the test, which otherwise passed with it.
  if (pid_ > 0) {
    if (int status = unmount(); status != 0)
      ADD_FAILURE() << "fencefs at " << mnt_ << " ended with status " << status
                    << " at the end of the test (its log is above)";
  } else if (mounted()) {
    unmount();
  }
  { untrack_mount(mnt_); }
  if (!root_.empty() && std::getenv("FENCEFS_KEEP_TEST_DIRS") == nullptr) {
    sh("rm -rf '" + root_ + "'");
  }
}

std::string Mount::path(std::string_view rel) const { return mnt_ + "/" + std::string(rel); }
std::string Mount::bpath(std::string_view rel) const { return backing_ + "/" + std::string(rel); }

int Mount::ctl(std::string_view line) const {
  int fd = ::open(ctl_path().c_str(), O_WRONLY | O_TRUNC);
  if (fd < 0) return errno;
  ssize_t n = ::write(fd, line.data(), line.size());
  int err = n < 0 ? errno : 0;
  ::close(fd);
  return err;
}

Bait::Bait(std::string_view name) : dir_(temp_dir(name)) {
  if (dir_.empty()) return;
  std::string src = dir_ + "/src";
  mnt_ = dir_ + "/bait";
  if (mkdir(src.c_str(), 0700) != 0 || mkdir(mnt_.c_str(), 0755) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    execlp("bindfs", "bindfs", "-f", src.c_str(), mnt_.c_str(), nullptr);
    _exit(127);
  }
  for (int t = 0; t < 10000 && !is_mounted(mnt_); t += 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (is_mounted(mnt_)) track_mount(mnt_);
}

Bait::~Bait() {
  if (pid_ > 0) {
    thaw(pid_);
    sh("fusermount3 -u '" + mnt_ + "' 2>/dev/null");
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    untrack_mount(mnt_);
  }
  if (!dir_.empty() && !is_mounted(mnt_)) sh("rm -rf '" + dir_ + "'");
}

Ext4Image::Ext4Image(const std::string& size, const std::string& options) : dir_(temp_dir("ext4")) {
  std::string img = dir_ + "/disk.img";
  made_ = !dir_.empty() && sh("truncate -s " + size + " '" + img + "' && mkfs.ext4 -q -F -I 256 " +
                              options + " '" + img + "'") == 0;
}

bool Ext4Image::mount_at(const std::string& backing) {
  if (!made_ || sh("mount -o loop '" + dir_ + "/disk.img' '" + backing + "'") != 0) return false;
  backing_ = backing;
  return true;
}

Ext4Image::~Ext4Image() {
  if (!backing_.empty()) sh("umount '" + backing_ + "' 2>/dev/null");
  if (!root_.empty() && !is_mounted(backing_)) sh("rm -rf '" + root_ + "'");
  if (!dir_.empty()) sh("rm -rf '" + dir_ + "'");
}

Stuck::~Stuck() {
  kill(bait, SIGCONT);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
}

bool Bait::mounted() const { return pid_ > 0 && is_mounted(mnt_); }

bool Mount::mounted() const { return is_mounted(mnt_); }

int Mount::try_mount(std::vector<std::string> extra) {
  extra_ = std::move(extra);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<std::string> args;
    std::vector<std::string> extra = extra_;
    auto fiu = std::find(extra.begin(), extra.end(), "--fiu");
    if (fiu != extra.end()) {  // fault injection: libfiu's POSIX wrappers, controlled by fiu-ctrl
      extra.erase(fiu);
      args = {"/usr/bin/fiu-run", "-x"};
      // fiu-run preloads its library ahead of a sanitizer's runtime; let ASan accept that.
      const char* asan = getenv("ASAN_OPTIONS");
      std::string opts = std::string(asan ? asan : "") + ":verify_asan_link_order=0";
      setenv("ASAN_OPTIONS", opts.c_str(), 1);
    }
    auto pre = std::find(extra.begin(), extra.end(), "--preload-unshare-fails");
    if (pre != extra.end()) {  // tests/integration/preload/unshare_fails.c, ahead of any runtime
      extra.erase(pre);
      setenv("LD_PRELOAD", UNSHARE_FAILS_LIB, 1);
      const char* asan = getenv("ASAN_OPTIONS");
      std::string opts = std::string(asan ? asan : "") + ":verify_asan_link_order=0";
      setenv("ASAN_OPTIONS", opts.c_str(), 1);
    }
    // "--drop-cap=N": out of the bounding set, so not held after the exec (a unit's
    // CapabilityBoundingSet).
    for (auto it = extra.begin(); it != extra.end();) {
      if (it->rfind("--drop-cap=", 0) != 0) {
        ++it;
        continue;
      }
      if (prctl(PR_CAPBSET_DROP, std::atoi(it->c_str() + 11), 0, 0, 0) != 0) _exit(126);
      it = extra.erase(it);
    }
    args.push_back(FENCEFS_BIN);
    args.push_back("-f");
    args.insert(args.end(), extra.begin(), extra.end());
    // Options every mount of the run gets (scripts/test.sh's io_uring pass), but -s mounts:
    // a single-threaded daemon takes every request from /dev/fuse.
    if (const char* all = getenv("FENCEFS_TEST_MOUNT_OPTS");
        all && *all && std::find(extra.begin(), extra.end(), "-s") == extra.end()) {
      std::istringstream words(all);
      for (std::string w; words >> w;) args.push_back(w);
    }
    args.push_back(backing_);
    args.push_back(mnt_);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());  // fiu-run execs the daemon: the pid stays the daemon's
    _exit(127);
  }
  pid_ = pid;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (mounted()) {
      track_mount(mnt_);
      return -1000;
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      pid_ = -1;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  pid_ = -1;
  return -1;
}

int Mount::unmount() {
  // A test that stopped the daemon may have failed before resuming it.
  if (pid_ > 0) thaw(pid_);
  // The daemon may unmount by itself meanwhile (SIGTERM): then there is nothing to force.
  if (mounted() && sh("fusermount3 -u '" + mnt_ + "' 2>/dev/null") != 0 && mounted())
    sh("fusermount3 -u -z '" + mnt_ + "'");
  int status = -1;  // no daemon
  bool killed = false;
  if (pid_ > 0) {
    // Generous: a sanitized daemon closing thousands of handles is slow, and a kill here now
    // fails the test (~Mount).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int st;
    while (true) {
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        status = 128 + SIGKILL;
        killed = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
  }
  untrack_mount(mnt_);
  // A daemon that ended badly says why in its log, removed with the test's directory.
  if (status > 0) {
    std::string log = daemon_log();
    size_t from = report_start(log, 3000);
    if (killed)
      fprintf(stderr, "fencefs at %s did not exit within 60 s of the unmount and was killed",
              mnt_.c_str());
    else
      fprintf(stderr, "fencefs at %s exited with status %d", mnt_.c_str(), status);
    fprintf(stderr, "; its log from offset %zu:\n%s\n", from, log.substr(from).c_str());
  }
  return status;
}

void Mount::crash() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

void Mount::kill9() {
  crash();
  sh("fusermount3 -u -z '" + mnt_ + "' 2>/dev/null");
  untrack_mount(mnt_);
}

bool Mount::remount() {
  if (mounted()) return false;  // a second daemon would stack on the first, which then leaks
  return try_mount(extra_) == -1000;
}

std::string Mount::daemon_log() const {
  std::ifstream in(log_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int in_child(const std::function<int()>& fn) {
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = fn();
    } catch (...) {
      rc = 99;
    }
    fflush(nullptr);
    _exit(rc);
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

namespace {
sigjmp_buf fault_env;
void on_sigbus(int) { siglongjmp(fault_env, 1); }
}  // namespace

bool store(char* p, char c, size_t n) {
  signal(SIGBUS, on_sigbus);
  if (sigsetjmp(fault_env, 1) != 0) return false;
  memset(p, c, n);
  return true;
}

std::string slurp(const std::string& path) {
  // read(2), not a stream: libstdc++ throws on a read error, which /proc files of a thread that
  // has just exited give (ESRCH).
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

bool wait_for_text(const std::string& file, const std::string& text) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (slurp(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void spit(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

size_t report_start(const std::string& log, size_t tail) {
  size_t from = log.find("==ERROR: ");
  if (size_t ub = log.find(": runtime error: "); from == log.npos && ub != log.npos) {
    size_t line = log.rfind('\n', ub);
    from = line == log.npos ? 0 : line + 1;
  }
  if (from == log.npos) from = log.size() > tail ? log.size() - tail : 0;
  return from;
}

Setting::Setting(std::string path, const std::string& value)
    : path_(std::move(path)), was_(slurp(path_)) {
  if (was_.empty()) return;
  spit(path_, value);
  ok_ = slurp(path_) == value;
}

void Setting::restore() {
  if (!was_.empty()) spit(path_, std::exchange(was_, std::string()));
}

long long metric(const std::string& metrics, const std::string& name, const std::string& label) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, name.size() + 1, name + "{") != 0) continue;
    size_t close = line.find("} ");
    if (close == std::string::npos) continue;
    std::string labels = line.substr(name.size(), close - name.size() + 1);
    if (labels.find("{" + label + ",") == std::string::npos &&
        labels.find("," + label + ",") == std::string::npos &&
        labels.find("," + label + "}") == std::string::npos &&
        labels.find("{" + label + "}") == std::string::npos)
      continue;
    return std::stoll(line.substr(close + 2));
  }
  return -1;
}

long long fuse_requests(const std::string& metrics, const std::string& op) {
  return metric(metrics, "fencefs_fuse_requests_total", "op=\"" + op + "\"");
}

std::string xattr(const std::string& path, const char* name) {
  char buf[256];
  ssize_t n = getxattr(path.c_str(), name, buf, sizeof buf);
  return n < 0 ? std::string("ERR:") + strerror(errno) : std::string(buf, static_cast<size_t>(n));
}

int as_job(const Mount& m, uint64_t token, const std::function<int()>& fn) {
  return in_child([&] {
    if (token && m.ctl("bind / " + std::to_string(token)) != 0) return 200;
    return fn();
  });
}

int as_superseded_job(const Mount& m, uint64_t token, const std::function<int()>& fn,
                      const std::function<int()>& supersede) {
  return in_child([&] {
    if (m.ctl("bind / " + std::to_string(token)) != 0) return 200;
    int err = supersede ? supersede()
                        : in_child([&] { return m.ctl("advance / " + std::to_string(token + 1)); });
    if (err != 0) return 201;
    return fn();
  });
}

namespace {
void hash_walk(const std::string& base, const std::string& rel, std::ostringstream& out) {
  std::string p = rel.empty() ? base : base + "/" + rel;
  struct stat st;
  if (lstat(p.c_str(), &st) != 0) return;
  out << rel << '|' << std::oct << st.st_mode << std::dec << '|' << st.st_uid << '|' << st.st_gid
      << '|' << (S_ISDIR(st.st_mode) ? 0 : st.st_size) << '|' << st.st_mtim.tv_sec << '.'
      << st.st_mtim.tv_nsec << '|';
  if (S_ISREG(st.st_mode)) {
    std::ifstream in(p, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), {});
    out << std::hash<std::string>{}(data);
  } else if (S_ISLNK(st.st_mode)) {
    char buf[4096];
    ssize_t n = readlink(p.c_str(), buf, sizeof buf);
    if (n > 0) out << std::string(buf, n);
  }
  char names[8192];
  ssize_t n = llistxattr(p.c_str(), names, sizeof names);
  for (ssize_t i = 0; i < n;) {
    std::string name(names + i);
    i += name.size() + 1;
    if (name.rfind("user.", 0) != 0) continue;
    char val[4096];
    ssize_t vn = lgetxattr(p.c_str(), name.c_str(), val, sizeof val);
    out << '[' << name << '=' << std::string(val, vn > 0 ? vn : 0) << ']';
  }
  out << '\n';
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> kids;
    if (DIR* d = opendir(p.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        if (rel.empty() && name == ".fencefs") continue;  // the state, not user data
        kids.push_back(name);
      }
      closedir(d);
    }
    std::sort(kids.begin(), kids.end());
    for (auto& k : kids) hash_walk(base, rel.empty() ? k : rel + "/" + k, out);
  }
}
}  // namespace

std::string tree_hash(const std::string& dir) {
  std::ostringstream out;
  hash_walk(dir, "", out);
  return out.str();
}

}  // namespace fencefs::testing
