// An unprivileged user cannot freeze coordinators: a write(2) to the world-writable
// .fencefs/ctl from a buffer whose page fault never completes holds that file's inode lock, yet
// `fencectl advance` and `fencectl run` (which bind and acquire by ioctl on the domain's
// directory) still complete.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "integration/mount_fixture.h"

namespace fencefs::testing {
namespace {

constexpr uid_t kNobody = 65534;
constexpr size_t kBait = 1 << 16;

// A child that maps the bait (a file on a second mount), runs prepare(), and, once the bait's
// daemon is frozen, call(mapping): the page fault on the bait never completes, so the child stays
// in system call `nr` (holding whatever that call holds). Returns the child once it sits there,
// else -1 (the bait thawed, the child killed). SIGCONT to the bait's daemon lets it go.
pid_t stall_in(const Mount& bait, int prot, int map, long nr, const std::function<bool()>& prepare,
               const std::function<void(void*)>& call) {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return -1;
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(bait.path("bait").c_str(), O_RDONLY);
    void* p = fd < 0 ? MAP_FAILED : mmap(nullptr, kBait, prot, map, fd, 0);
    if (p == MAP_FAILED || !prepare()) _exit(2);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(5);
    call(p);
    _exit(0);
  }
  ::close(ready[1]);  // a child that gave up before `ready` reads as EOF
  ::close(go[0]);
  char c;
  // Every thread stopped, or one still running could serve the fault meant to stall.
  bool ok = read(ready[0], &c, 1) == 1 && freeze(bait.daemon_pid()) && write(go[1], "g", 1) == 1;
  ::close(ready[0]);
  ::close(go[1]);
  auto in_call = [&] {
    std::string sc = slurp("/proc/" + std::to_string(pid) + "/syscall");
    return sc.rfind(std::to_string(nr) + " ", 0) == 0;
  };
  for (int t = 0; ok && t < 10000 && !in_call(); t += 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (ok && in_call()) return pid;
  kill(bait.daemon_pid(), SIGCONT);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

TEST(CtlFreeze, StalledControlFileWriterDoesNotBlockCoordinators) {
  Mount m;
  // The hostile user's buffer: a never-read file on a second FUSE mount whose daemon we stop.
  Mount bait({}, [](const std::string& b) { spit(b + "/bait", std::string(kBait, 'x')); });
  ASSERT_TRUE(m.mounted() && bait.mounted());
  int ctl = -1;
  pid_t hostile = stall_in(
      bait, PROT_READ, MAP_SHARED, SYS_write,
      [&] {
        if (setgid(kNobody) != 0 || setuid(kNobody) != 0) return false;  // any user may do this
        return (ctl = open(m.ctl_path().c_str(), O_WRONLY)) >= 0;
      },
      // Stalls while holding ctl's inode lock.
      [&](void* p) { (void)!write(ctl, p, kBait); });
  ASSERT_GT(hostile, 0) << "the hostile writer never got stuck in write(2)";
  std::vector<pid_t> stuck;
  auto release = [&] {
    kill(bait.daemon_pid(), SIGCONT);
    for (pid_t p : stuck) waitpid(p, nullptr, 0);
    stuck.clear();
  };

  // The stall is real: a shell writing a command to the control file is stuck behind it.
  pid_t left = -1;
  int shell = finishes_within("echo 'bind / 1' > '" + m.ctl_path() + "' 2>/dev/null", 1500, &left);
  if (left > 0) stuck.push_back(left);
  EXPECT_EQ(-1, shell) << "the hostile writer did not hold the control file";

  // Coordinators are not: advance, a bound run and an acquiring run all complete.
  std::string c_ = FENCECTL_BIN;
  left = -1;
  EXPECT_EQ(
      0, finishes_within(c_ + " advance --mount '" + m.mnt() + "' / 5 >/dev/null", 10000, &left));
  if (left > 0) stuck.push_back(left);
  left = -1;
  EXPECT_EQ(0,
            finishes_within(c_ + " run --mount '" + m.mnt() +
                                "' --domain / --token 5 -- sh -c 'echo five > " + m.path("f") + "'",
                            10000, &left));
  if (left > 0) stuck.push_back(left);
  left = -1;
  EXPECT_EQ(0,
            finishes_within(c_ + " run --mount '" + m.mnt() +
                                "' --domain / --acquire -- sh -c 'echo six >> " + m.path("f") + "'",
                            10000, &left));
  if (left > 0) stuck.push_back(left);
  EXPECT_EQ("five\nsix\n", slurp(m.path("f")));
  EXPECT_EQ("6", xattr(m.mnt(), "user.fencefs.epoch"));

  release();
  int st;
  ASSERT_EQ(hostile, waitpid(hostile, &st, 0));
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
}

// An admitted operation that cannot finish (a mkdir in a BACKING directory whose lock a native
// getdents holds while it faults on a stalled buffer) keeps an advance waiting, by design. Callers
// without a token are still refused at once, instead of each waiting for the domain's lock and
// holding one of the daemon's workers: twenty of them left none, and reads through the mount hung.
TEST(CtlFreeze, TokenlessCallersDoNotWaitBehindAPendingAdvance) {
  Mount m({}, [](const std::string& b) {
    ::mkdir((b + "/pub").c_str(), 0755);
    ::chmod(b.c_str(), 0777);
    spit(b + "/readme", "readable\n");
  });
  Mount bait({}, [](const std::string& b) { spit(b + "/bait", std::string(kBait, 'x')); });
  ASSERT_TRUE(m.mounted() && bait.mounted());
  int dir = -1;
  pid_t lister = stall_in(
      bait, PROT_READ | PROT_WRITE, MAP_PRIVATE, SYS_getdents64,
      [&] { return (dir = open(m.bpath("pub").c_str(), O_RDONLY | O_DIRECTORY)) >= 0; },
      // Holds pub's inode lock while the copy out faults on the bait.
      [&](void* p) { (void)!syscall(SYS_getdents64, dir, p, kBait); });
  ASSERT_GT(lister, 0) << "the lister never got stuck in getdents64";
  std::vector<pid_t> stuck;
  auto release = [&] {
    kill(bait.daemon_pid(), SIGCONT);
    for (pid_t p : stuck) waitpid(p, nullptr, 0);
    stuck.clear();
  };

  std::string c_ = FENCECTL_BIN;
  auto start = [&](const std::string& cmd) {
    pid_t left = -1;
    int st = finishes_within(cmd, 1500, &left);
    if (left > 0) stuck.push_back(left);
    return st;
  };
  // Admitted under epoch 1, then stuck on pub's lock; the advance to 2 waits for it.
  EXPECT_EQ(-1, start(c_ + " run --mount '" + m.mnt() + "' --domain / --token 1 -- mkdir '" +
                      m.path("pub/new") + "'"));
  pid_t advance = -1;
  EXPECT_EQ(-1, finishes_within(c_ + " advance --mount '" + m.mnt() + "' / 2 >/dev/null", 1500,
                                &advance));
  // Twenty tokenless writers, more than the daemon has workers: all refused at once.
  std::string many =
      "for i in \\$(seq 20); do (echo x > '" + m.path("t") + "'\\$i) 2>/dev/null & done; wait";
  EXPECT_EQ(0, start("setpriv --reuid=65534 --regid=65534 --clear-groups sh -c \"" + many + "\""));
  EXPECT_EQ(0, start("cat '" + m.path("readme") + "' >/dev/null"));
  // Operators see the advance waiting: in the status page and the metrics.
  EXPECT_EQ(std::string::npos,
            slurp(m.path(".fencefs/status")).find("\"advance_waiting_since_unix_ns\":0"));
  std::string metrics = slurp(m.path(".fencefs/metrics"));
  size_t at = metrics.find("fencefs_advance_waiting_seconds{");
  ASSERT_NE(std::string::npos, at) << metrics;
  EXPECT_GT(std::stod(metrics.substr(metrics.find("} ", at) + 2)), 1.0);

  release();
  ASSERT_GT(advance, 0);
  int st = 0;
  ASSERT_EQ(advance, waitpid(advance, &st, 0));
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ("2", xattr(m.mnt(), "user.fencefs.epoch"));
  EXPECT_NE(std::string::npos, m.daemon_log().find("domain /: an advance waited"));
  EXPECT_NE(std::string::npos,
            slurp(m.path(".fencefs/status")).find("\"advance_waiting_since_unix_ns\":0"));
  ASSERT_EQ(lister, waitpid(lister, &st, 0));
  struct stat sb;
  EXPECT_EQ(0, ::stat(m.bpath("pub/new").c_str(), &sb));  // the admitted mkdir landed
  EXPECT_NE(0, ::stat(m.bpath("t1").c_str(), &sb));
}

}  // namespace
}  // namespace fencefs::testing
