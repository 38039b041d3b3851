// An unprivileged user cannot freeze coordinators: a write(2) to the world-writable
// .fencefs/ctl from a buffer whose page fault never completes holds that file's inode lock, yet
// `fencectl advance` and `fencectl run` (which bind and acquire by ioctl on the domain's
// directory) still complete.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
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

}  // namespace
}  // namespace fencefs::testing
