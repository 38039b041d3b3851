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
#include <thread>

#include "integration/mount_fixture.h"

namespace fencefs::testing {
namespace {

constexpr uid_t kNobody = 65534;
constexpr size_t kBait = 1 << 16;

TEST(CtlFreeze, StalledControlFileWriterDoesNotBlockCoordinators) {
  Mount m;
  // The hostile user's buffer: a never-read file on a second FUSE mount whose daemon we stop.
  Mount bait({}, [](const std::string& b) { spit(b + "/bait", std::string(kBait, 'x')); });
  ASSERT_TRUE(m.mounted() && bait.mounted());
  int ready[2], go[2];
  ASSERT_EQ(0, pipe(ready));
  ASSERT_EQ(0, pipe(go));
  pid_t hostile = fork();
  if (hostile == 0) {
    int fd = open(bait.path("bait").c_str(), O_RDONLY);
    void* p = fd < 0 ? MAP_FAILED : mmap(nullptr, kBait, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) _exit(2);
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(3);  // any user may do this
    int ctl = open(m.ctl_path().c_str(), O_WRONLY);
    if (ctl < 0) _exit(4);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(5);
    (void)!write(ctl, p, kBait);  // faults on the bait: stalls while holding ctl's inode lock
    _exit(0);
  }
  char c;
  ASSERT_EQ(1, read(ready[0], &c, 1));
  // Every thread stopped, or one still running could serve the fault meant to stall.
  ASSERT_TRUE(freeze(bait.daemon_pid())) << "the bait's daemon did not stop";
  std::vector<pid_t> stuck;
  auto release = [&] {
    kill(bait.daemon_pid(), SIGCONT);
    for (pid_t p : stuck) waitpid(p, nullptr, 0);
    stuck.clear();
  };
  ASSERT_EQ(1, write(go[1], "g", 1));
  // Wait until the hostile writer sits in write(2) (syscall 1), stuck on the bait's page fault.
  auto in_write = [&] {
    std::string sc = slurp("/proc/" + std::to_string(hostile) + "/syscall");
    return sc.rfind("1 ", 0) == 0;
  };
  for (int t = 0; t < 10000 && !in_write(); t += 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(in_write()) << "the hostile writer never got stuck in write(2)";

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
  int ready[2], go[2];
  ASSERT_EQ(0, pipe(ready));
  ASSERT_EQ(0, pipe(go));
  pid_t lister = fork();
  if (lister == 0) {
    int fd = open(bait.path("bait").c_str(), O_RDONLY);
    void* p =
        fd < 0 ? MAP_FAILED : mmap(nullptr, kBait, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int dir = open(m.bpath("pub").c_str(), O_RDONLY | O_DIRECTORY);
    if (p == MAP_FAILED || dir < 0) _exit(2);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(5);
    // Holds pub's inode lock while the copy out faults on the bait.
    (void)!syscall(SYS_getdents64, dir, p, kBait);
    _exit(0);
  }
  char c;
  ASSERT_EQ(1, read(ready[0], &c, 1));
  ASSERT_TRUE(freeze(bait.daemon_pid())) << "the bait's daemon did not stop";
  std::vector<pid_t> stuck;
  auto release = [&] {
    kill(bait.daemon_pid(), SIGCONT);
    for (pid_t p : stuck) waitpid(p, nullptr, 0);
    stuck.clear();
  };
  ASSERT_EQ(1, write(go[1], "g", 1));
  auto in_getdents = [&] {
    std::string sc = slurp("/proc/" + std::to_string(lister) + "/syscall");
    return sc.rfind(std::to_string(SYS_getdents64) + " ", 0) == 0;
  };
  for (int t = 0; t < 10000 && !in_getdents(); t += 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(in_getdents()) << "the lister never got stuck in getdents64";

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

  release();
  ASSERT_GT(advance, 0);
  int st = 0;
  ASSERT_EQ(advance, waitpid(advance, &st, 0));
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ("2", xattr(m.mnt(), "user.fencefs.epoch"));
  ASSERT_EQ(lister, waitpid(lister, &st, 0));
  struct stat sb;
  EXPECT_EQ(0, ::stat(m.bpath("pub/new").c_str(), &sb));  // the admitted mkdir landed
  EXPECT_NE(0, ::stat(m.bpath("t1").c_str(), &sb));
}

}  // namespace
}  // namespace fencefs::testing
