// A thread's capabilities count where the kernel counts them: everywhere for a thread of our user
// namespace; for one in a namespace below ours, only over files whose owner and group it maps.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/proc.h"

namespace fencefs::proc {
namespace {

TEST(ProcCredentials, OursCountOverEveryFile) {
  ASSERT_EQ(0u, geteuid()) << "run as root";
  auto cr = credentials(gettid());
  ASSERT_TRUE(cr.has_value());
  EXPECT_NE(0u, cr->caps & (uint64_t{1} << CAP_DAC_OVERRIDE));
  EXPECT_EQ(cr->caps, cr->caps_over(12345, 54321));
  EXPECT_EQ(0u, cr->ns_caps);
}

// A child in a user namespace of its own, which we map with `map` (uids and gids alike); it
// waits to be killed. Its pid, or -1.
pid_t child_in_userns(const char* map) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    if (unshare(CLONE_NEWUSER) != 0 || write(ready[1], "x", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c;
  bool ok = pid > 0 && read(ready[0], &c, 1) == 1;
  close(ready[0]);
  for (auto [file, text] : {std::pair{"setgroups", "deny"}, {"uid_map", map}, {"gid_map", map}}) {
    if (!ok) break;
    int fd = open(("/proc/" + std::to_string(pid) + "/" + file).c_str(), O_WRONLY);
    ok = fd >= 0 && write(fd, text, strlen(text)) > 0;
    if (fd >= 0) close(fd);
  }
  if (!ok && pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

TEST(ProcCredentials, ANamespaceBelowOursHoldsItsOwnOverTheIdsItMaps) {
  ASSERT_EQ(0u, geteuid()) << "run as root";
  pid_t pid = child_in_userns("0 0 1");
  ASSERT_GT(pid, 0);
  auto cr = credentials(pid);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ASSERT_TRUE(cr.has_value());
  EXPECT_EQ(0u, cr->caps) << "none in our namespace";
  EXPECT_NE(0u, cr->ns_caps & (uint64_t{1} << CAP_DAC_OVERRIDE));
  EXPECT_EQ(cr->ns_caps, cr->caps_over(0, 0));
  EXPECT_EQ(0u, cr->caps_over(65534, 0)) << "owner not mapped";
  EXPECT_EQ(0u, cr->caps_over(0, 65534)) << "group not mapped";
  EXPECT_EQ(0u, effective_caps(pid)) << "capable() of our namespace: none";
}

TEST(ProcCredentials, RangesOfAMapCountWhole) {
  ASSERT_EQ(0u, geteuid()) << "run as root";
  pid_t pid = child_in_userns("0 100000 65536");
  ASSERT_GT(pid, 0);
  auto cr = credentials(pid);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ASSERT_TRUE(cr.has_value());
  EXPECT_NE(0u, cr->caps_over(100000, 100000));
  EXPECT_NE(0u, cr->caps_over(165535, 165535));
  EXPECT_EQ(0u, cr->caps_over(165536, 100000));
  EXPECT_EQ(0u, cr->caps_over(0, 0)) << "our root is not theirs";
}

}  // namespace
}  // namespace fencefs::proc
