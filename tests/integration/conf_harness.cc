#include "integration/conf_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "integration/mount_fixture.h"

namespace fencefs::conf {

using fencefs::testing::Mount;

bool selftest_mode() {
  const char* v = std::getenv("FENCEFS_CONF_SELFTEST");
  return v && *v && std::string(v) != "0";
}

std::string errname(int err) {
  const char* n = strerrorname_np(err);
  return n ? std::string(n) : "errno" + std::to_string(err);
}

bool ts_eq(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}
bool ts_le(const timespec& a, const timespec& b) {
  return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec <= b.tv_nsec);
}

namespace {

std::string escape(std::string_view s, size_t max = std::string::npos) {
  std::string out;
  size_t n = std::min(s.size(), max);
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = s[i];
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch < 32 || ch >= 127) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (n < s.size()) out += "...";
  return out;
}

std::string unescape_line(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char n = s[++i];
      out += n == 'n' ? '\n' : n == 't' ? '\t' : n;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string wire_escape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\\')
      out += "\\\\";
    else if (ch == '\n')
      out += "\\n";
    else if (ch == '\t')
      out += "\\t";
    else
      out += ch;
  }
  return out;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string oct(unsigned v) {
  char buf[16];
  snprintf(buf, sizeof buf, "%04o", v);
  return buf;
}

const char* type_name(mode_t m) {
  switch (m & S_IFMT) {
    case S_IFREG:
      return "reg";
    case S_IFDIR:
      return "dir";
    case S_IFLNK:
      return "lnk";
    case S_IFIFO:
      return "fifo";
    case S_IFSOCK:
      return "sock";
    case S_IFCHR:
      return "chr";
    case S_IFBLK:
      return "blk";
  }
  return "?";
}

bool read_all_fd(int fd, std::string& out) {
  char buf[65536];
  off_t off = 0;
  while (true) {
    ssize_t n = pread(fd, buf, sizeof buf, off);
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(buf, n);
    off += n;
  }
}

std::string describe_stat(const struct stat& st, const std::string& path_for_link) {
  std::string s = std::string("type=") + type_name(st.st_mode) +
                  " mode=" + oct(st.st_mode & 07777) + " nlink=" + std::to_string(st.st_nlink) +
                  " uid=" + std::to_string(st.st_uid) + " gid=" + std::to_string(st.st_gid) +
                  " size=" + std::to_string(st.st_size);
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
    s += " rdev=" + std::to_string(major(st.st_rdev)) + "," + std::to_string(minor(st.st_rdev));
  }
  if (S_ISLNK(st.st_mode) && !path_for_link.empty()) {
    char buf[8192];
    ssize_t n = readlink(path_for_link.c_str(), buf, sizeof buf);
    s += " -> " + (n >= 0 ? escape(std::string_view(buf, n)) : "readlink:" + errname(errno));
  }
  return s;
}

std::string describe_content(const std::string& data) {
  return "size=" + std::to_string(data.size()) + " fnv=" + hex(fnv1a(data)) + " head='" +
         escape(data, 40) + "'";
}

std::string xattr_text(const std::string& path) {
  std::vector<char> names(65536);
  ssize_t n = llistxattr(path.c_str(), names.data(), names.size());
  if (n < 0) return "listxattr:" + errname(errno);
  std::vector<std::string> user;
  for (ssize_t i = 0; i < n;) {
    std::string name(names.data() + i);
    i += name.size() + 1;
    if (name.rfind("user.", 0) == 0) user.push_back(name);
  }
  std::sort(user.begin(), user.end());
  std::string out;
  for (auto& name : user) {
    std::vector<char> val(65536);
    ssize_t vn = lgetxattr(path.c_str(), name.c_str(), val.data(), val.size());
    out += "[" + name + "=" +
           (vn >= 0 ? escape(std::string_view(val.data(), vn), 64) : "err:" + errname(errno)) + "]";
  }
  return out;
}

void snap_walk(const std::string& base, const std::string& rel, std::vector<std::string>& out) {
  std::string p = rel.empty() ? base : base + "/" + rel;
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0) {
    out.push_back((rel.empty() ? "." : rel) + " lstat:" + errname(errno));
    return;
  }
  std::string line = (rel.empty() ? "." : rel) + " " + describe_stat(st, p);
  if (S_ISREG(st.st_mode)) {
    int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    std::string data;
    if (fd >= 0 && read_all_fd(fd, data)) {
      line += " content:" + hex(fnv1a(data));
    } else {
      line += " content:err:" + errname(errno);
    }
    if (fd >= 0) ::close(fd);
  }
  std::string xa = xattr_text(p);
  if (!xa.empty()) line += " xattr:" + xa;
  out.push_back(line);
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> kids;
    if (DIR* d = opendir(p.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        if (rel.empty() && name == ".fencefs") continue;
        kids.push_back(name);
      }
      closedir(d);
    } else {
      out.push_back(rel + "/ opendir:" + errname(errno));
    }
    std::sort(kids.begin(), kids.end());
    for (auto& k : kids) snap_walk(base, rel.empty() ? k : rel + "/" + k, out);
  }
}

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += n;
  }
}

Env* g_env = nullptr;
Env* g_env_low = nullptr;

class ConfGtestEnv : public ::testing::Environment {
 public:
  void TearDown() override {
    delete g_env;  // unmounts and removes the temp dirs
    g_env = nullptr;
    delete g_env_low;
    g_env_low = nullptr;
  }
};
::testing::Environment* const g_gtest_env = ::testing::AddGlobalTestEnvironment(new ConfGtestEnv);

}  // namespace

// ---------------------------------------------------------------- Trace

const Entry* Trace::find(std::string_view needle) const {
  for (auto& e : entries) {
    if (e.what.find(needle) != std::string::npos) return &e;
  }
  return nullptr;
}

std::string Trace::get(std::string_view needle) const {
  const Entry* e = find(needle);
  return e ? e->result : "<missing>";
}

// ---------------------------------------------------------------- Ctx

Ctx::Ctx(const Side& side, int out_fd) : side_(side), out_(out_fd) {}

std::string Ctx::p(std::string_view rel) const {
  if (rel.empty()) return side_.dir;
  return side_.dir + "/" + std::string(rel);
}

const char* Ctx::c(std::string_view rel) {
  keep_.push_back(std::make_unique<std::string>(p(rel)));
  return keep_.back()->c_str();
}

void Ctx::emit(std::string_view what, std::string_view result) {
  std::string w = scope_.empty() ? std::string(what) : "[" + scope_ + "] " + std::string(what);
  write_all(out_, wire_escape(w) + "\t" + wire_escape(result) + "\n");
}

void Ctx::note(std::string_view what, std::string_view result) { emit(what, result); }

long Ctx::rc(std::string_view what, long value, int err) {
  emit(what, value < 0 ? std::to_string(value) + " " + errname(err) : std::to_string(value));
  return value;
}

int Ctx::fd(std::string_view what, int value, int err) {
  emit(what, value < 0 ? std::to_string(value) + " " + errname(err) : std::string("fd"));
  return value;
}

void Ctx::lstat(std::string_view rel) {
  struct stat st;
  std::string path = p(rel);
  if (::lstat(path.c_str(), &st) != 0) {
    emit("lstat " + std::string(rel), "-1 " + errname(errno));
  } else {
    emit("lstat " + std::string(rel), describe_stat(st, path));
  }
}

void Ctx::stat(std::string_view rel) {
  struct stat st;
  std::string path = p(rel);
  if (::stat(path.c_str(), &st) != 0) {
    emit("stat " + std::string(rel), "-1 " + errname(errno));
  } else {
    emit("stat " + std::string(rel), describe_stat(st, ""));
  }
}

void Ctx::fstat(std::string_view label, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    emit("fstat " + std::string(label), "-1 " + errname(errno));
  } else {
    emit("fstat " + std::string(label), describe_stat(st, ""));
  }
}

void Ctx::content(std::string_view rel) {
  std::string path = p(rel);
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0) {
    emit("content " + std::string(rel), "open:-1 " + errname(errno));
    return;
  }
  std::string data;
  if (!read_all_fd(fd, data)) {
    emit("content " + std::string(rel), "read:-1 " + errname(errno));
  } else {
    emit("content " + std::string(rel), describe_content(data));
  }
  ::close(fd);
}

void Ctx::fcontent(std::string_view label, int fd) {
  std::string data;
  if (!read_all_fd(fd, data)) {
    emit("fcontent " + std::string(label), "read:-1 " + errname(errno));
  } else {
    emit("fcontent " + std::string(label), describe_content(data));
  }
}

void Ctx::listdir(std::string_view rel) {
  std::string path = p(rel);
  DIR* d = opendir(path.c_str());
  if (!d) {
    emit("listdir " + std::string(rel), "-1 " + errname(errno));
    return;
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = readdir(d)) {
    names.push_back(std::string(e->d_name) + ":" + std::to_string(e->d_type));
  }
  int err = errno;
  closedir(d);
  std::sort(names.begin(), names.end());
  std::string s;
  for (auto& n : names) s += (s.empty() ? "" : " ") + n;
  if (err) s += " readdir:" + errname(err);
  emit("listdir " + std::string(rel), s);
}

void Ctx::xattrs(std::string_view rel) { emit("xattrs " + std::string(rel), xattr_text(p(rel))); }

void Ctx::become(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) {
  int r1 = setgroups(groups.size(), groups.empty() ? nullptr : groups.data());
  int r2 = setresgid(gid, gid, gid);
  int r3 = setresuid(uid, uid, uid);
  std::string g;
  for (gid_t x : groups) g += " " + std::to_string(x);
  emit("become uid=" + std::to_string(uid) + " gid=" + std::to_string(gid) + " groups=" + g,
       (r1 || r2 || r3) ? "failed " + errname(errno) : "0");
}

void Ctx::set_umask(mode_t m) {
  ::umask(m);
  emit("umask " + oct(m), "0");
}

Ctx::Times Ctx::times(std::string_view rel, bool follow) {
  struct stat st {};
  std::string path = p(rel);
  int r = follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  Times t;
  if (r == 0) {
    t.atime = st.st_atim;
    t.mtime = st.st_mtim;
    t.ctime = st.st_ctim;
  }
  return t;
}

// ---------------------------------------------------------------- snapshots

std::vector<std::string> snapshot(const std::string& dir) {
  std::vector<std::string> out;
  snap_walk(dir, "", out);
  return out;
}

// ---------------------------------------------------------------- Env

Env& Env::get() {
  if (!g_env) g_env = new Env();
  return *g_env;
}

Env& Env::get_low_fd() {
  if (!g_env_low) g_env_low = new Env(kLowFdLimit);
  return *g_env_low;
}

// The daemon inherits this process's limits at fork: lower them around the start, then restore.
std::unique_ptr<Mount> Env::make_mount() {
  struct rlimit saved {};
  getrlimit(RLIMIT_NOFILE, &saved);
  if (nofile_) {
    struct rlimit low {
      nofile_, nofile_
    };
    setrlimit(RLIMIT_NOFILE, &low);
  }
  auto m = std::make_unique<Mount>();
  if (nofile_) setrlimit(RLIMIT_NOFILE, &saved);
  return m;
}

Env::Env(unsigned nofile) : nofile_(nofile) {
  tmp_ = testing::temp_dir("conf");
  if (tmp_.empty()) {
    error_ = "mkdtemp failed";
    return;
  }
  ::chmod(tmp_.c_str(), 0755);  // nobody must reach the case dirs
  plain_ = tmp_ + "/plain";
  ::mkdir(plain_.c_str(), 0755);
  ::chmod(plain_.c_str(), 0755);
  if (selftest_mode()) {
    mnt_ = tmp_ + "/selftest-mount";
    ::mkdir(mnt_.c_str(), 0755);
    ::chmod(mnt_.c_str(), 0755);
    backing_ = mnt_;
    ok_ = true;
    return;
  }
  mount_ = make_mount();
  ::chmod(mount_->root().c_str(), 0755);  // mkdtemp made it 0700; nobody must get through
  mnt_ = mount_->mnt();
  backing_ = mount_->backing();
  ok_ = mount_->mounted();
  if (!ok_) error_ = "fencefs did not mount: " + mount_->daemon_log();
}

Env::~Env() { teardown(); }

void Env::teardown() {
  mount_.reset();
  if (!tmp_.empty() && std::getenv("FENCEFS_KEEP_TEST_DIRS") == nullptr) {
    fencefs::testing::sh("rm -rf '" + tmp_ + "'");
  }
  tmp_.clear();
}

std::string Env::daemon_log() const { return mount_ ? mount_->daemon_log() : ""; }

bool Env::ensure_mounted() {
  if (!mount_) return ok_;
  if (mount_->mounted()) return true;
  // The daemon left during the last case: a failure, whatever that case saw.
  ADD_FAILURE() << "the conformance mount went down; its daemon ended with status "
                << mount_->unmount() << " (its log is above); mounting again";
  struct rlimit saved {};
  getrlimit(RLIMIT_NOFILE, &saved);
  if (nofile_) {
    struct rlimit low {
      nofile_, nofile_
    };
    setrlimit(RLIMIT_NOFILE, &low);
  }
  ok_ = mount_->remount();
  if (nofile_) setrlimit(RLIMIT_NOFILE, &saved);
  return ok_;
}

Side Env::native_side(const std::string& case_name) const {
  Side s;
  s.name = "native";
  s.dir = plain_ + "/" + case_name;
  s.view = s.dir;
  return s;
}

Side Env::fenced_side(const std::string& case_name) const {
  Side s;
  s.name = "fencefs";
  s.dir = mnt_ + "/" + case_name;
  s.view = backing_ + "/" + case_name;
  s.fenced = !selftest_mode();
  if (s.fenced) s.ctl = mnt_ + "/.fencefs/ctl";
  return s;
}

// ---------------------------------------------------------------- running

Trace run_side(const Side& side, const CaseFn& fn, const RunOptions& opt) {
  Trace t;
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0) {
    t.child_status = "pipe failed";
    return t;
  }
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    ::close(pfd[0]);
    Ctx ctx(side, pfd[1]);
    if (side.fenced) {
      std::string line = std::string("bind / ") + kToken;
      int fd = ::open(side.ctl.c_str(), O_WRONLY | O_TRUNC);
      int err = 0;
      if (fd < 0) {
        err = errno;
      } else {
        if (::write(fd, line.data(), line.size()) < 0) err = errno;
        ::close(fd);
      }
      if (err) {
        ctx.note("bind", "failed " + errname(err));
        _exit(3);
      }
    }
    ::umask(0);
    errno = 0;
    int r = ::mkdir(side.dir.c_str(), 0755);
    ctx.rc("mkdir case dir", r, errno);
    ::umask(opt.umask);
    try {
      fn(ctx);
    } catch (const std::exception& e) {
      ctx.note("exception", e.what());
    } catch (...) {
      ctx.note("exception", "unknown");
    }
    _exit(0);
  }
  ::close(pfd[1]);
  std::string buf;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.timeout_sec);
  bool timed_out = false;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{pfd[0], POLLIN, 0};
    int pr = poll(&p, 1, static_cast<int>(std::min<long>(left, 1000)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    char chunk[65536];
    ssize_t n = ::read(pfd[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, n);
  }
  ::close(pfd[0]);
  int st = 0;
  if (timed_out) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    t.child_status = "timeout after " + std::to_string(opt.timeout_sec) + "s";
  } else {
    waitpid(pid, &st, 0);
    t.child_status = WIFEXITED(st) ? "exit " + std::to_string(WEXITSTATUS(st))
                                   : "signal " + std::to_string(WTERMSIG(st));
  }
  std::istringstream in(buf);
  std::string line;
  while (std::getline(in, line)) {
    // split at the first unescaped tab
    size_t cut = std::string::npos;
    for (size_t i = 0; i < line.size(); i++) {
      if (line[i] == '\\') {
        i++;
        continue;
      }
      if (line[i] == '\t') {
        cut = i;
        break;
      }
    }
    Entry e;
    if (cut == std::string::npos) {
      e.what = unescape_line(line);
    } else {
      e.what = unescape_line(line.substr(0, cut));
      e.result = unescape_line(line.substr(cut + 1));
    }
    t.entries.push_back(std::move(e));
  }
  return t;
}

Result run_both(const std::string& case_name, const CaseFn& fn, const RunOptions& opt) {
  Result r;
  r.name = case_name;
  Env& env = opt.low_fd_mount ? Env::get_low_fd() : Env::get();
  if (!env.ok()) {
    r.fenced.child_status = "environment not ready: " + env.error();
    r.native.child_status = "not run";
    return r;
  }
  if (!env.ensure_mounted()) {
    r.fenced.child_status = "mount down and remount failed: " + env.daemon_log();
    return r;
  }
  Side nat = env.native_side(case_name);
  Side fen = env.fenced_side(case_name);
  r.native = run_side(nat, fn, opt);
  r.fenced = run_side(fen, fn, opt);
  r.snap_native = snapshot(nat.view);
  r.snap_mount = snapshot(fen.dir);
  r.snap_backing = snapshot(fen.view);
  if (const char* dump = std::getenv("FENCEFS_CONF_DUMP"); dump && *dump) {
    for (const Trace* t : {&r.native, &r.fenced}) {
      fprintf(stderr, "=== %s trace (%s)\n", t == &r.native ? "native" : "fencefs",
              t->child_status.c_str());
      for (auto& e : t->entries) fprintf(stderr, "  %s => %s\n", e.what.c_str(), e.result.c_str());
    }
    for (auto& l : r.snap_native) fprintf(stderr, "  snap %s\n", l.c_str());
  }
  return r;
}

namespace {

bool ignored_path(const std::string& line, const std::vector<std::string>& ignore_paths) {
  for (auto& p : ignore_paths) {
    if (line.rfind(p, 0) == 0) return true;
  }
  return false;
}

std::string snap_key(const std::string& line) { return line.substr(0, line.find(' ')); }

void diff_snaps(const std::string& la, const std::vector<std::string>& a, const std::string& lb,
                const std::vector<std::string>& b, const std::vector<std::string>& ignore_paths,
                std::ostringstream& out) {
  std::map<std::string, std::string> ma, mb;
  for (auto& l : a) {
    if (!ignored_path(l, ignore_paths)) ma[snap_key(l)] = l;
  }
  for (auto& l : b) {
    if (!ignored_path(l, ignore_paths)) mb[snap_key(l)] = l;
  }
  bool header = false;
  auto head = [&] {
    if (!header) out << "--- tree " << la << "\n+++ tree " << lb << "\n";
    header = true;
  };
  for (auto& [k, v] : ma) {
    auto it = mb.find(k);
    if (it == mb.end()) {
      head();
      out << "- " << v << "\n";
    } else if (it->second != v) {
      head();
      out << "- " << v << "\n+ " << it->second << "\n";
    }
  }
  for (auto& [k, v] : mb) {
    if (!ma.count(k)) {
      head();
      out << "+ " << v << "\n";
    }
  }
}

}  // namespace

std::string diff(const Result& r, const std::function<bool(const std::string&)>& ignore,
                 const std::vector<std::string>& ignore_paths) {
  std::ostringstream out;
  if (r.native.child_status != "exit 0") out << "native child: " << r.native.child_status << "\n";
  if (r.fenced.child_status != "exit 0") {
    out << "fencefs child: " << r.fenced.child_status << "\n";
    for (Env* env : {g_env, g_env_low}) {
      if (env && !selftest_mode()) {
        std::string log = env->daemon_log();
        size_t from = fencefs::testing::report_start(log, 4000);
        out << "daemon log (" << env->mnt_root() << "), from offset " << from << ":\n"
            << log.substr(from) << "\n";
      }
    }
  }
  // Documented differences are compared by the test itself: leave them out here.
  std::vector<std::pair<size_t, const Entry*>> a, b;
  for (size_t i = 0; i < r.native.entries.size(); i++) {
    if (!ignore || !ignore(r.native.entries[i].what)) a.emplace_back(i, &r.native.entries[i]);
  }
  for (size_t i = 0; i < r.fenced.entries.size(); i++) {
    if (!ignore || !ignore(r.fenced.entries[i].what)) b.emplace_back(i, &r.fenced.entries[i]);
  }
  size_t n = std::min(a.size(), b.size());
  int shown = 0;
  for (size_t i = 0; i < n && shown < 60; i++) {
    const Entry& x = *a[i].second;
    const Entry& y = *b[i].second;
    if (x.what != y.what) {
      out << "@@ step " << a[i].first << ": the two runs diverged\n- " << x.what << " => "
          << x.result << "\n+ " << y.what << " => " << y.result << "\n";
      shown = 1000;
      break;
    }
    if (x.result == y.result) continue;
    out << "@@ step " << a[i].first << ": " << x.what << "\n-  native: " << x.result
        << "\n+ fencefs: " << y.result << "\n";
    shown++;
  }
  if (shown < 1000 && a.size() != b.size()) {
    out << "@@ trace lengths differ: native " << a.size() << " vs fencefs " << b.size() << "\n";
    for (size_t i = n; i < a.size() && i < n + 10; i++) {
      out << "- " << a[i].second->what << " => " << a[i].second->result << "\n";
    }
    for (size_t i = n; i < b.size() && i < n + 10; i++) {
      out << "+ " << b[i].second->what << " => " << b[i].second->result << "\n";
    }
  }
  diff_snaps("native", r.snap_native, "fencefs(mount view)", r.snap_mount, ignore_paths, out);
  diff_snaps("fencefs(mount view)", r.snap_mount, "fencefs(BACKING)", r.snap_backing, {}, out);
  return out.str();
}

std::string current_case_name() {
  static std::map<std::string, int> seen;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "case";
  for (char& ch : name) {
    if (ch == '/' || ch == ' ') ch = '_';
  }
  int n = ++seen[name];
  if (n > 1) name += "_" + std::to_string(n);
  return name;
}

}  // namespace fencefs::conf
