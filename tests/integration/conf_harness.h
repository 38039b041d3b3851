// Differential harness for the conformance and fsx suites.
//
// The same case function runs twice, each time in a forked child: once inside a fencefs mount
// (the child binds itself with `bind / TOKEN` first) and once in a plain directory on the same
// filesystem type as BACKING (both under /tmp). The child records every operation with its
// result and errno, plus state probes, into a Trace that it streams back to the parent; the parent
// compares the two traces and the resulting trees (plain dir vs mount view vs BACKING view) and
// prints a diff.
//
// FENCEFS_CONF_SELFTEST=1 replaces the mount with a second plain directory, so the harness itself
// can be debugged without a working fencefs.
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencefs::testing {
class Mount;
}

namespace fencefs::conf {

// Token every bound child presents. The domain starts at epoch 0, so the first mutation advances
// it to this value; after that every child holds the current epoch.
constexpr const char* kToken = "7";
constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
constexpr gid_t kOtherGroup = 4242;  // a group nobody is not in, unless a case adds it

bool selftest_mode();

// Where one side runs.
struct Side {
  std::string name;  // "native" or "fencefs"
  std::string dir;   // absolute directory the case runs in (created by the child)
  std::string view;  // where the result lands underneath (BACKING/case for fencefs), else == dir
  std::string ctl;   // control file to bind through, empty for the plain side
  bool fenced = false;
};

// One recorded step: what was done and what came of it.
struct Entry {
  std::string what;
  std::string result;
};

struct Trace {
  std::vector<Entry> entries;
  std::string child_status;  // "exit 0", "signal 9", "timeout"
  // First entry whose `what` contains needle, or nullptr.
  const Entry* find(std::string_view needle) const;
  std::string get(std::string_view needle) const;  // its result, or "<missing>"
};

// Recorder used inside the child.
class Ctx {
 public:
  Ctx(const Side& side, int out_fd);
  const Side& side() const { return side_; }
  // Absolute path of rel inside the case dir ("" = the case dir).
  std::string p(std::string_view rel = "") const;
  const char* c(std::string_view rel);  // same, as a C string kept alive in this Ctx

  // Records `what => result`. For integer-returning calls use rc(); for fd-returning calls fd().
  long rc(std::string_view what, long value, int err);
  int fd(std::string_view what, int value, int err);
  void note(std::string_view what, std::string_view result);
  void check(std::string_view what, bool value) { note(what, value ? "true" : "false"); }
  // Prefix for every later entry ("[scope] what"), to tell loop iterations apart in a diff.
  void scope(std::string s) { scope_ = std::move(s); }

  // State probes (recorded):
  void lstat(std::string_view rel);               // type mode nlink uid gid size [rdev|target]
  void stat(std::string_view rel);                // following symlinks
  void fstat(std::string_view label, int fd);     // same fields through an fd
  void content(std::string_view rel);             // size + hash + a prefix, via a fresh read
  void fcontent(std::string_view label, int fd);  // pread through an existing fd
  void listdir(std::string_view rel);             // sorted names with d_type
  void xattrs(std::string_view rel);              // user.* names and values

  // Credentials (not recorded as ops, but noted in the trace).
  void become(uid_t uid, gid_t gid, const std::vector<gid_t>& groups = {});
  void set_umask(mode_t m);

  // Timestamps, to compare relations only.
  struct Times {
    timespec atime{}, mtime{}, ctime{};
  };
  Times times(std::string_view rel, bool follow = false);

 private:
  void emit(std::string_view what, std::string_view result);
  Side side_;
  std::string scope_;
  int out_;
  std::vector<std::unique_ptr<std::string>> keep_;
};

std::string errname(int err);
bool ts_eq(const timespec& a, const timespec& b);
bool ts_le(const timespec& a, const timespec& b);

// Convenience macros for case bodies. `X` is the Ctx. Each captures errno right after the call.
#define CONF_RC_TXT(X, text, expr) \
  ([&]() -> long {                 \
    errno = 0;                     \
    long r__ = (long)(expr);       \
    int e__ = errno;               \
    return (X).rc(text, r__, e__); \
  }())
#define CONF_FD_TXT(X, text, expr) \
  ([&]() -> int {                  \
    errno = 0;                     \
    int r__ = (int)(expr);         \
    int e__ = errno;               \
    return (X).fd(text, r__, e__); \
  }())
#define CONF_RC(X, expr) CONF_RC_TXT(X, #expr, expr)
#define CONF_FD(X, expr) CONF_FD_TXT(X, #expr, expr)

using CaseFn = std::function<void(Ctx&)>;

// One snapshot line per path below dir: path type mode nlink uid gid size rdev target content
// hash and user xattrs (times excluded). The root .fencefs entry is skipped.
std::vector<std::string> snapshot(const std::string& dir);

struct RunOptions {
  mode_t umask = 022;
  int timeout_sec = 120;
  // Paths (relative to the case dir, prefix match) left out of the three-way tree comparison.
  std::vector<std::string> ignore_paths;
  // Run in a second mount whose daemon starts with RLIMIT_NOFILE=kLowFdLimit, so that it closes
  // the fds of idle inodes early and reopens them from file handles (its fd reclaim path).
  bool low_fd_mount = false;
};
constexpr unsigned kLowFdLimit = 1024;

struct Result {
  std::string name;
  Trace native, fenced;
  std::vector<std::string> snap_native, snap_mount, snap_backing;
};

// The shared environment: one fencefs mount (or, in selftest mode, a second plain dir) and one
// plain dir, created on first use and torn down at the end of the test program.
class Env {
 public:
  static Env& get();
  static Env& get_low_fd();  // see RunOptions::low_fd_mount
  ~Env();
  bool ok() const { return ok_; }
  std::string error() const { return error_; }
  Side native_side(const std::string& case_name) const;
  Side fenced_side(const std::string& case_name) const;
  const std::string& mnt_root() const { return mnt_; }
  const std::string& backing_root() const { return backing_; }
  const std::string& plain_root() const { return plain_; }
  std::string daemon_log() const;
  // Remounts if the daemon died, so one crash does not fail every later case. Returns false if
  // the mount is down and cannot come back.
  bool ensure_mounted();
  void teardown();

 private:
  explicit Env(unsigned nofile = 0);
  std::unique_ptr<fencefs::testing::Mount> make_mount();
  unsigned nofile_ = 0;
  bool ok_ = false;
  std::string error_;
  std::unique_ptr<fencefs::testing::Mount> mount_;
  std::string tmp_, plain_, mnt_, backing_;
};

// Forks a child that (fencefs side) binds itself, sets the umask, runs fn and streams its trace.
Trace run_side(const Side& side, const CaseFn& fn, const RunOptions& opt);

// Runs fn on both sides and snapshots the three trees.
Result run_both(const std::string& case_name, const CaseFn& fn, const RunOptions& opt = {});

// A diff-style report of every difference between the traces and between the snapshots; empty
// when identical. ignore(entry_what) may exempt trace lines (documented differences).
std::string diff(const Result& r, const std::function<bool(const std::string&)>& ignore = {},
                 const std::vector<std::string>& ignore_paths = {});

// The usual assertion: no difference at all. Also fails if a child did not exit cleanly.
#define EXPECT_CONFORMS(result)                                                             \
  do {                                                                                      \
    const auto& r__ = (result);                                                             \
    std::string d__ = ::fencefs::conf::diff(r__);                                           \
    EXPECT_TRUE(d__.empty()) << "native vs fencefs differ in " << r__.name << ":\n" << d__; \
  } while (0)

// Name of the running gtest, made filesystem-safe.
std::string current_case_name();

}  // namespace fencefs::conf
