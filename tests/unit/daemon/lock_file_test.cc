// Lock files whose holders remove them as they exit (the backing's lock in /run/fencefs): a
// daemon starting meanwhile must end up holding the file the name names, never fail because it
// opened the one being removed.
#include "daemon/lock_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

namespace fencefs::daemon {
namespace {

TEST(LockFile, AStarterRacingAnExitingHolderNeverFails) {
  char tmpl[] = "/tmp/fencefs-lockfile-XXXXXX";
  ASSERT_NE(nullptr, mkdtemp(tmpl));
  const std::string dir = tmpl;
  int dfd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dfd, 0);
  const std::string name = "backing.lock", path = dir + "/" + name;
  std::atomic<bool> done{false};
  std::atomic<int> removed{0};
  // Holders come and go, each removing the file as it leaves when nobody else holds it.
  std::thread holders([&] {
    for (int k = 0; k < 3000; k++) {
      int fd = -1;
      bool created = false;
      std::string error;
      if (lock_file(dfd, name, path, &fd, &created, &error, F_RDLCK) != Lock::Taken) continue;
      usleep(100);  // a daemon's lifetime, shortened: starters retry a bounded number of times
      if (unlink_if_last(dfd, fd, name)) removed++;
      close(fd);
    }
    done = true;
  });
  int errors = 0, taken = 0;
  std::string first_error;
  while (!done) {
    int fd = -1;
    bool created = false;
    std::string error;
    Lock l = lock_file(dfd, name, path, &fd, &created, &error, F_RDLCK);
    if (l == Lock::Error && errors++ == 0) first_error = error;
    if (l == Lock::Taken) taken++;
    if (l != Lock::Error) close(fd);
  }
  holders.join();
  EXPECT_EQ(0, errors) << first_error;
  EXPECT_GT(taken, 0);
  EXPECT_GT(removed.load(), 0);
  close(dfd);
  unlink(path.c_str());
  rmdir(tmpl);
}

}  // namespace
}  // namespace fencefs::daemon
