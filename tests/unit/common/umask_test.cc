// A worker keeps the last caller's umask between creations; the daemon's own files never get it.
#include "common/umask.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "common/anchored.h"
#include "common/log.h"

namespace fencefs::common {
namespace {

class ThreadUmask : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fencefs-umask-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)system(("rm -rf '" + dir_ + "'").c_str()); }

  // Runs f on a thread with a umask of its own, starting at 0 as a worker's does.
  template <class F>
  void on_worker(F f) {
    std::thread t([&] {
      ASSERT_TRUE(own_thread_umask());
      f();
    });
    t.join();
  }

  mode_t mode_of(const std::string& name) {
    struct stat st;
    EXPECT_EQ(lstat((dir_ + "/" + name).c_str(), &st), 0) << name;
    return st.st_mode & 07777;
  }

  int create(const std::string& name, mode_t mode) {
    int fd = ::open((dir_ + "/" + name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0) ::close(fd);
    return fd;
  }

  std::string dir_;
};

TEST_F(ThreadUmask, ACallersUmaskAppliesUntilAnotherIsSetIncludingZero) {
  mode_t process = ::umask(022);
  on_worker([&] {
    set_thread_umask(0277);
    ASSERT_GE(create("a", 0666), 0);
    set_thread_umask(0277);  // the same again: no change
    ASSERT_GE(create("b", 0666), 0);
    set_thread_umask(0);  // a caller without one: not skipped as "nothing to set"
    ASSERT_GE(create("c", 0666), 0);
  });
  EXPECT_EQ(mode_of("a"), 0400u);
  EXPECT_EQ(mode_of("b"), 0400u);
  EXPECT_EQ(mode_of("c"), 0666u);
  EXPECT_EQ(::umask(process), 022u);  // the worker's umask was its own
}

// A thread without a umask of its own shares the process's: never changed from here.
TEST_F(ThreadUmask, AThreadWithoutItsOwnLeavesTheProcesssAlone) {
  mode_t process = ::umask(022);
  std::thread t([] {
    EXPECT_FALSE(set_thread_umask(0277));
    own_files_umask();
  });
  t.join();
  EXPECT_EQ(::umask(process), 022u);
}

// Without own_files_umask() in these helpers the files come out 0400, 0500 and 0440.
TEST_F(ThreadUmask, TheDaemonsOwnFilesIgnoreACallersUmaskLeftOnTheWorker) {
  std::string error;
  on_worker([&] {
    set_thread_umask(0277);
    int fd = anchored_open(dir_ + "/journal", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
    set_thread_umask(0277);
    ASSERT_EQ(anchored_mkdir(dir_ + "/state", 0700), 0);
    set_thread_umask(0277);
    log::Target t;
    t.sink = log::Sink::File;
    t.file = dir_ + "/daemon.log";
    ASSERT_TRUE(log::open(t, &error)) << error;
    // A caller's creation afterwards gets its umask again.
    set_thread_umask(0277);
    ASSERT_GE(create("callers", 0666), 0);
  });
  log::Target back;
  ASSERT_TRUE(log::open(back, &error)) << error;
  EXPECT_EQ(mode_of("journal"), 0600u);
  EXPECT_EQ(mode_of("state"), 0700u);
  EXPECT_EQ(mode_of("daemon.log"), 0640u);
  EXPECT_EQ(mode_of("callers"), 0400u);
}

}  // namespace
}  // namespace fencefs::common
