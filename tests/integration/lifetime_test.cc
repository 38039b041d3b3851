// Inode lifetime in the daemon: a request's handler replies before it lets go of the inodes it
// pinned, and the kernel may forget an inode the moment that reply lands (an unlinked file's last
// close evicts it at once). These tests race FORGET against the end of requests, many times, so
// that a table that frees a pinned inode is caught (reliably under ASan, which CI runs them with).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

// One thread's loop: a file is created, unlinked while open, asked about through its handle
// (requests that pin the inode), then closed, so FORGET follows the last reply at once.
int churn(const Mount& m, int t, int rounds) {
  std::string dir = m.path("t" + std::to_string(t));
  if (mkdir(dir.c_str(), 0755) != 0) return 10;
  for (int k = 0; k < rounds; k++) {
    std::string p = dir + "/f" + std::to_string(k % 8);
    int fd = open(p.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) return 11;
    if (write(fd, "x", 1) != 1) return 12;
    if (unlink(p.c_str()) != 0) return 13;
    char v[8];
    if (fgetxattr(fd, "user.absent", v, sizeof v) >= 0 || errno != ENODATA) return 14;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_nlink != 0) return 15;
    if (fchmod(fd, 0600) != 0) return 16;
    if (close(fd) != 0) return 17;
  }
  return 0;
}

}  // namespace

TEST(InodeLifetime, ForgetRacingTheEndOfARequestNeverFreesAPinnedInode) {
  Mount m;
  constexpr int kThreads = 6, kRounds = 1500;
  int rc = as_job(m, 1, [&] {
    std::vector<std::thread> ts;
    std::atomic<int> first_error{0};
    for (int t = 0; t < kThreads; t++)
      ts.emplace_back([&, t] {
        int e = churn(m, t, kRounds);
        int none = 0;
        if (e) first_error.compare_exchange_strong(none, e);
      });
    for (auto& t : ts) t.join();
    return first_error.load();
  });
  EXPECT_EQ(rc, 0) << "errno " << errno << "\n" << m.daemon_log();
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  // The daemon still serves: a fresh file round-trips.
  EXPECT_EQ(as_job(m, 1,
                   [&] {
                     spit(m.path("after"), "ok");
                     return slurp(m.path("after")) == "ok" ? 0 : 1;
                   }),
            0)
      << m.daemon_log();
}
