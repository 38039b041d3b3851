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
#include <optional>
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

// What we read of a child in a user namespace mapped with `map`.
std::optional<Credentials> credentials_in_userns(const std::string& map) {
  pid_t pid = child_in_userns(map.c_str());
  if (pid <= 0) return std::nullopt;
  auto cr = credentials(pid);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return cr;
}

TEST(ProcCredentials, ANamespaceBelowOursHoldsItsOwnOverTheIdsItMaps) {
  ASSERT_EQ(0u, geteuid()) << "run as root";
  auto cr = credentials_in_userns("0 0 1");
  ASSERT_TRUE(cr.has_value());
  EXPECT_EQ(0u, cr->caps) << "none in our namespace";
  EXPECT_NE(0u, cr->ns_caps & (uint64_t{1} << CAP_DAC_OVERRIDE));
  EXPECT_EQ(cr->ns_caps, cr->caps_over(0, 0));
  EXPECT_EQ(0u, cr->caps_over(65534, 0)) << "owner not mapped";
  EXPECT_EQ(0u, cr->caps_over(0, 65534)) << "group not mapped";
}

TEST(ProcCredentials, RangesOfAMapCountWhole) {
  ASSERT_EQ(0u, geteuid()) << "run as root";
  auto cr = credentials_in_userns("0 100000 65536");
  ASSERT_TRUE(cr.has_value());
  EXPECT_NE(0u, cr->caps_over(100000, 100000));
  EXPECT_NE(0u, cr->caps_over(165535, 165535));
  EXPECT_EQ(0u, cr->caps_over(165536, 100000));
  EXPECT_EQ(0u, cr->caps_over(0, 0)) << "our root is not theirs";
}

// A map of many lines is read in several short reads, each ending at a line: all of it counts.
TEST(ProcCredentials, EveryLineOfALongMapCounts) {
  ASSERT_EQ(0u, geteuid()) << "run as root";
  std::string map;
  for (int i = 0; i < 340; i++)  // the kernel's most, written in under a page
    map += std::to_string(i) + " " + std::to_string(1000 + 2 * i) + " 1\n";
  auto cr = credentials_in_userns(map);
  ASSERT_TRUE(cr.has_value());
  EXPECT_EQ(340u, cr->uid_map.size());
  EXPECT_NE(0u, cr->caps_over(1000 + 2 * 339, 1000 + 2 * 300));
  EXPECT_EQ(0u, cr->caps_over(1001, 1000));
}

}  // namespace
}  // namespace fencefs::proc
