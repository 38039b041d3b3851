// A real fencefs mount in a temp dir, always unmounted (RAII + an atexit sweep).
#pragma once
#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencefs::testing {

// A fresh directory FENCEFS_TEST_TMP/fencefs-NAME-XXXXXX (FENCEFS_TEST_TMP defaults to /tmp), or
// "" when it cannot be made. scripts/test.sh points FENCEFS_TEST_TMP at a directory of its own run,
// so that its cleanup unmounts only what its own tests left behind.
std::string temp_dir(std::string_view name);

// Runs a shell command, returns its exit status (or -1). Output goes to the test log.
int sh(const std::string& cmd);
// Runs a shell command and captures stdout.
std::string sh_out(const std::string& cmd, int* status = nullptr);

// SIGSTOPs pid and waits (up to 5 s) until every one of its threads is stopped: kill(2) returns
// before they are, and a thread still running may serve one more request. True once stopped.
bool freeze(pid_t pid);
// The ids of pid's threads (none once it is gone).
std::vector<pid_t> threads_of(pid_t pid);
// A thread's state, the letter of /proc's stat (0 once it is gone); tid == pid: the leader's,
// 'Z' once the process has exited and is not yet reaped.
char thread_state(pid_t pid, pid_t tid);
// A signal mask of a thread's /proc status: field "SigBlk", "SigCgt"... (none once it is gone).
std::optional<uint64_t> signal_mask(pid_t pid, pid_t tid, const char* field);

// Resumes pid if a SIGSTOP holds it, else sends nothing: a SIGCONT discards a pending SIGSTOP,
// such as the one the exit-time leak check of a sanitized daemon sends its threads as it attaches
// to them, and that check then waits for their stop forever.
void thaw(pid_t pid);

// Runs cmd with /bin/sh in a child: its exit status if it ends within ms, else -1 with the child
// left running in *left (the caller reaps it once whatever held it up is lifted).
int finishes_within(const std::string& cmd, int ms, pid_t* left);

// Whether something is mounted at mnt (/proc/mounts).
bool is_mounted(const std::string& mnt);
// Mounts a test makes itself (its own daemons): tracked ones are detached at exit, like Mount's.
void track_mount(const std::string& mnt);
void untrack_mount(const std::string& mnt);

// A bindfs mount of a fresh directory, for a fencefs to keep something on (its state): stopping
// bindfs (freeze(pid())) then blocks whatever fencefs' daemon does there, inside the daemon.
// Running again, unmounted and removed when it goes (after a Mount declared later).
class Bait {
 public:
  explicit Bait(std::string_view name);
  ~Bait();
  Bait(const Bait&) = delete;
  Bait& operator=(const Bait&) = delete;
  bool mounted() const;
  const std::string& dir() const { return dir_; }
  const std::string& mnt() const { return mnt_; }
  pid_t pid() const { return pid_; }

 private:
  std::string dir_, mnt_;
  pid_t pid_ = -1;
};

// A small ext4 filesystem in an image file, for a Mount's prepare callback to mount over its
// BACKING (xattrs in one block per inode, a root reserve). Declared before that Mount, so gone
// after it: it then unmounts the image and removes the Mount's tree, which the Mount cannot
// while the image is mounted in it.
class Ext4Image {
 public:
  // size: for truncate(1) ("32M"); options: more mkfs.ext4 options ("-m 10").
  Ext4Image(const std::string& size, const std::string& options = "");
  ~Ext4Image();
  Ext4Image(const Ext4Image&) = delete;
  Ext4Image& operator=(const Ext4Image&) = delete;
  bool made() const { return made_; }
  // Mounts the image at `backing`; false when it cannot be (no loop devices).
  bool mount_at(const std::string& backing);
  // The Mount's tree, removed once the image is unmounted.
  void remove_after(const std::string& root) { root_ = root; }
  // Scratch space beside the image, off the mounted filesystem.
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, backing_, root_;
  bool made_ = false;
};

// Children left blocked behind a stopped Bait. Declared after the Mount they are blocked in:
// gone first, it lets the bait run again and reaps them, so that the Mount can unmount.
struct Stuck {
  pid_t bait;
  std::vector<pid_t> pids;
  ~Stuck();
};

class Mount {
 public:
  // Creates ROOT/{backing,mnt} in a fresh temp dir and mounts. extra: more fencefs arguments
  // (e.g. {"-o", "max_jump=10"}; "--fiu" runs it under `fiu-run -x`; "--drop-cap=N" without
  // capability N; "--preload-unshare-fails": every FUSE worker after the first cannot have a
  // umask of its own). prepare runs on BACKING before mounting.
  explicit Mount(std::vector<std::string> extra = {},
                 std::function<void(const std::string& backing)> prepare = {});
  ~Mount();
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;

  const std::string& root() const { return root_; }
  const std::string& backing() const { return backing_; }
  const std::string& mnt() const { return mnt_; }
  std::string ctl_path() const { return mnt_ + "/.fencefs/ctl"; }
  std::string path(std::string_view rel) const;   // mnt/rel
  std::string bpath(std::string_view rel) const;  // backing/rel
  pid_t daemon_pid() const { return pid_; }

  // Writes `line` to the control file from THIS process (binding this process).
  // Returns 0 or the errno of the write.
  int ctl(std::string_view line) const;
  bool mounted() const;
  // Clean unmount (fusermount3 -u), waits for the daemon; returns its exit status.
  int unmount();
  // SIGKILL the daemon, detach the mount.
  void kill9();
  // SIGKILL the daemon and reap it; its mount stays, dead (ENOTCONN).
  void crash();
  // Mounts again with the same arguments (after unmount or kill9). Returns false on failure.
  bool remount();
  // Starts fencefs with these args and waits for the mount; returns the daemon's exit status if it
  // exited instead (e.g. refused to mount), else -1000 and the mount is up.
  int try_mount(std::vector<std::string> extra);
  std::string daemon_log() const;                       // stderr of the daemon so far
  const std::string& log_path() const { return log_; }  // the file it is written to

 private:
  std::string root_, backing_, mnt_, log_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

// Forks; in the child runs fn() and _exit()s with its return value. Returns the child's exit
// status (or 128+signal).
int in_child(const std::function<int()>& fn);

// The errno of a failed call (result < 0), 0 on success: E(write(fd, "x", 1)).
#define E(call) ((call) < 0 ? errno : 0)

std::string slurp(const std::string& path);
// Waits (up to 20 s) until FILE contains TEXT.
bool wait_for_text(const std::string& file, const std::string& text);
// Where to start printing a daemon's LOG: a sanitizer's report, which is only useful whole, from
// its first line; else the last `tail` bytes.
size_t report_start(const std::string& log, size_t tail);
void spit(const std::string& path, const std::string& data);
// A kernel setting (a /proc/sys or /sys file) written for a test, and what it held before put
// back when the test ends or restore() is called. ok(): it was read and now reads back as value.
class Setting {
 public:
  Setting(std::string path, const std::string& value);
  ~Setting() { restore(); }
  Setting(const Setting&) = delete;
  Setting& operator=(const Setting&) = delete;
  bool ok() const { return ok_; }
  void restore();

 private:
  std::string path_, was_;
  bool ok_ = false;
};
// Stores `n` bytes of `c` at p (a mapping), in a forked child: false when the store faulted
// (SIGBUS), as it does for a superseded holder whose page is not cached (its READ is refused).
bool store(char* p, char c, size_t n);
// The value of the series NAME{…LABEL…} in a metrics text (.fencefs/metrics), LABEL being one
// `key="value"` pair among its labels; -1 if absent.
long long metric(const std::string& metrics, const std::string& name, const std::string& label);
// fencefs_fuse_requests_total{op="OP"}.
long long fuse_requests(const std::string& metrics, const std::string& op);
// A (following) getxattr as text, or "ERR:<strerror>".
std::string xattr(const std::string& path, const char* name);
// Runs fn in a child bound to `token` for the root domain (0: unbound); returns fn's result.
int as_job(const Mount& m, uint64_t token, const std::function<int()>& fn);
// A superseded owner: runs fn in a child bound to `token` (which must be admissible now: a
// stale bind is refused at bind time) after `supersede` ran while it was bound (default: another
// process advances / to token + 1). Returns fn's result, 200 if the bind failed, 201 if
// supersede returned non-zero.
int as_superseded_job(const Mount& m, uint64_t token, const std::function<int()>& fn,
                      const std::function<int()>& supersede = {});

// Hash of every path, type, mode, uid, gid, size, content and user xattr below dir (stable order),
// to prove a refused operation changed nothing.
std::string tree_hash(const std::string& dir);

}  // namespace fencefs::testing
