// Revocation under load and the identity of processes, on real mounts: an advance is not
// starved by a superseded holder's overlapping writes; a binding reaches any depth of process
// tree; a process reparented away from its bound parent presents no token.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "fencefs/ioctl.h"
#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

std::string epoch(const Mount& m) {
  char buf[64];
  ssize_t n = getxattr(m.mnt().c_str(), "user.fencefs.epoch", buf, sizeof buf);
  return n < 0 ? "ERR" : std::string(buf, n);
}

// Waits for a child up to `limit`; true when it exited in time (status in *st).
bool wait_for(pid_t pid, std::chrono::seconds limit, int* st) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, st, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

// A superseded holder keeps 8 threads of overlapping writes going (like fio or a database); the
// advance waits only for the writes already admitted, then every later write is refused.
TEST(Revocation, AdvanceIsNotStarvedByOverlappingWriters) {
  Mount m;
  int ready[2];
  ASSERT_EQ(0, pipe(ready));
  pid_t holder = fork();
  if (holder == 0) {
    close(ready[0]);
    if (m.ctl("bind / 1")) _exit(10);
    // One file per thread: the kernel serializes direct-I/O writes to one file, not to several.
    int fds[8];
    for (int k = 0; k < 8; k++) {
      fds[k] = open(m.path("data" + std::to_string(k)).c_str(), O_WRONLY | O_CREAT | O_DSYNC, 0644);
      if (fds[k] < 0 || write(fds[k], "x", 1) != 1) _exit(11);
    }
    std::atomic<int> refused{0}, other{0};
    std::atomic<uint64_t> writes{0};
    std::vector<std::thread> threads;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int k = 0; k < 8; k++) {
      threads.emplace_back([&, k] {
        std::string buf(1 << 20, static_cast<char>('a' + k));
        while (std::chrono::steady_clock::now() < deadline) {
          ssize_t n = pwrite(fds[k], buf.data(), buf.size(), 0);
          if (n < 0) {
            (errno == ESTALE ? refused : other)++;
            return;
          }
          if (writes.fetch_add(1) == 64) (void)!write(ready[1], "r", 1);
        }
      });
    }
    for (auto& t : threads) t.join();
    _exit(refused.load() == 8 && other.load() == 0 ? 0 : 12);
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(1, read(ready[0], &c, 1)) << "the holder never got going";
  close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the load is in full swing
  pid_t advancer = fork();
  if (advancer == 0) {
    int fd = open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY);
    fencefs_token t{};
    t.epoch = 2;
    _exit(fd >= 0 && ioctl(fd, FENCEFS_IOC_ADVANCE, &t) == 0 ? 0 : 1);
  }
  int st = 0;
  bool in_time = wait_for(advancer, std::chrono::seconds(10), &st);
  EXPECT_TRUE(in_time) << "the advance did not complete within 10 s under the writers' load";
  if (!in_time) {
    kill(holder, SIGKILL);  // lets the advance through, so the test ends
    waitpid(advancer, &st, 0);
  }
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  int hst = 0;
  ASSERT_TRUE(wait_for(holder, std::chrono::seconds(60), &hst));
  if (in_time) {
    EXPECT_TRUE(WIFEXITED(hst) && WEXITSTATUS(hst) == 0)
        << "every writer thread must end refused with ESTALE (status " << hst << ")";
  }
  EXPECT_EQ("2", epoch(m));
}

// No fixed depth: a build script can nest processes as deep as it likes.
TEST(Revocation, DeepProcessTreeWritesWithItsAncestorsToken) {
  Mount m;
  std::function<int(int)> nest = [&](int depth) -> int {
    if (depth == 0) {
      int fd = open(m.path("deep").c_str(), O_WRONLY | O_CREAT, 0644);
      return fd < 0 ? 100 + (errno & 0x3f) : 0;
    }
    pid_t p = fork();
    if (p == 0) _exit(nest(depth - 1));
    int st;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
  };
  EXPECT_EQ(0, as_job(m, 1, [&] { return nest(200); })) << "a create 200 processes below";
  EXPECT_EQ("1", epoch(m));
}

// A process whose bound parent exits is reparented (to a subreaper or init) and presents what
// its new chain of ancestors gives: here nothing, even though it was resolved (and cached) before.
TEST(Revocation, ReparentedChildPresentsNoToken) {
  Mount m;
  int result[2];
  ASSERT_EQ(0, pipe(result));
  pid_t parent = fork();
  if (parent == 0) {
    close(result[0]);
    if (m.ctl("bind / 1")) _exit(10);
    int go[2], created[2];
    if (pipe(go) || pipe(created)) _exit(11);
    pid_t me = getpid();
    pid_t child = fork();
    if (child == 0) {
      close(go[1]);
      char r = 'a';
      int fd = open(m.path("before").c_str(), O_WRONLY | O_CREAT, 0644);
      if (fd < 0) r = 'b';  // presents its parent's token
      close(fd);
      (void)!write(created[1], &r, 1);
      char c;
      (void)!read(go[0], &c, 1);  // the parent goes away
      while (getppid() == me) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (r == 'a') {
        fd = open(m.path("after").c_str(), O_WRONLY | O_CREAT, 0644);
        r = fd < 0 && errno == EPERM ? 'k' : fd < 0 ? 'e' : 'w';
      }
      (void)!write(result[1], &r, 1);
      _exit(0);
    }
    char c;
    (void)!read(created[0], &c, 1);  // the child resolved its token (and cached it)
    _exit(0);                        // closes go[1]: the child proceeds
  }
  close(result[1]);
  int st;
  waitpid(parent, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  pollfd p{result[0], POLLIN, 0};
  ASSERT_EQ(1, poll(&p, 1, 10000)) << "the child did not report";
  char r = 0;
  ASSERT_EQ(1, read(result[0], &r, 1));
  close(result[0]);
  EXPECT_EQ('k', r) << "a: before failed? b: the bound child could not create; w: the "
                       "reparented child still wrote with its dead parent's token; e: other error";
  EXPECT_EQ(-1, access(m.path("after").c_str(), F_OK));
}

// A process that gets a dead binder's pid (here at once, likely within the same clock tick of
// the binder's start time) is another process and presents no token.
TEST(Revocation, RecycledPidPresentsNoToken) {
  Mount m;
  int recycled = 0;
  for (int attempt = 0; attempt < 100 && recycled < 5; attempt++) {
    pid_t binder = fork();
    if (binder == 0) _exit(m.ctl("bind / 1") ? 1 : 0);
    int st;
    waitpid(binder, &st, 0);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    // The next fork of this pid namespace gets the binder's pid, unless another one is faster.
    spit("/proc/sys/kernel/ns_last_pid", std::to_string(binder - 1));
    pid_t again = fork();
    if (again == 0) {
      if (getpid() != binder) _exit(200);
      _exit(E(mkdir(m.path("recycled").c_str(), 0755)));
    }
    waitpid(again, &st, 0);
    ASSERT_TRUE(WIFEXITED(st));
    if (WEXITSTATUS(st) == 200) continue;
    recycled++;
    EXPECT_EQ(EPERM, WEXITSTATUS(st))
        << "the process with pid " << binder << " wrote with its dead predecessor's token";
  }
  EXPECT_EQ(5, recycled) << "could not get pids recycled";
}

// Same, after the binder used its binding: its resolution is cached under its pid, and the process
// that gets the pid next must not find it there.
TEST(Revocation, RecycledPidDoesNotInheritACachedResolution) {
  Mount m;
  int recycled = 0;
  for (int attempt = 0; attempt < 100 && recycled < 5; attempt++) {
    std::string mine = m.path("by-binder-" + std::to_string(attempt));
    pid_t binder = fork();
    if (binder == 0) {
      if (m.ctl("bind / 1")) _exit(1);
      _exit(mkdir(mine.c_str(), 0755) == 0 ? 0 : 2);  // resolves, and caches, its token
    }
    int st;
    waitpid(binder, &st, 0);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << WEXITSTATUS(st);
    spit("/proc/sys/kernel/ns_last_pid", std::to_string(binder - 1));
    pid_t again = fork();
    if (again == 0) {
      if (getpid() != binder) _exit(200);
      _exit(E(mkdir(m.path("recycled").c_str(), 0755)));
    }
    waitpid(again, &st, 0);
    ASSERT_TRUE(WIFEXITED(st));
    if (WEXITSTATUS(st) == 200) continue;
    recycled++;
    EXPECT_EQ(EPERM, WEXITSTATUS(st))
        << "the process with pid " << binder << " used its dead predecessor's cached token";
  }
  EXPECT_EQ(5, recycled) << "could not get pids recycled";
  EXPECT_EQ(-1, access(m.path("recycled").c_str(), F_OK));
}
