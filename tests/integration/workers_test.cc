// The daemon's request loop (src/fs/loop.cc): requests blocked inside the daemon never hold up
// others, however few workers it keeps waiting in read(2); idle, only two wait there.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "integration/mount_fixture.h"

namespace fencefs::testing {
namespace {

TEST(Workers, RequestsBlockedInTheDaemonDoNotHoldUpOthers) {
  // fencefs with its journal on a bindfs mount whose daemon we stop: an advance then blocks
  // inside fencefs' daemon in the journal's write, and every advance after it behind that one.
  Bait b("workers");
  ASSERT_TRUE(b.mounted()) << "bindfs did not mount";
  Mount m({"-o", "state=" + b.mnt() + "/s"});
  Stuck stuck{b.pid(), {}};
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  // The mount shows before the daemon has written its state and answered the kernel's INIT:
  // a request served first proves that it is past those writes and in its loop.
  ASSERT_FALSE(slurp(m.mnt() + "/.fencefs/metrics").empty());
  ASSERT_TRUE(freeze(b.pid()));
  constexpr int kBlocked = 6;  // more than the workers the loop keeps waiting in read(2)
  for (int k = 1; k <= kBlocked; k++) {
    pid_t left = -1;
    std::string cmd = std::string(FENCECTL_BIN) + " advance --mount '" + m.mnt() + "' / " +
                      std::to_string(k) + " >/dev/null 2>&1";
    EXPECT_EQ(-1, finishes_within(cmd, 100, &left)) << "advance " << k << " did not block";
    if (left > 0) stuck.pids.push_back(left);
  }
  // Each advance reaches its handler in its own time (a loaded machine, a sanitizer's start-up):
  // all of them, and this metrics read, busy at once.
  for (int t = 0; t < 400; t++) {
    if (metric(slurp(m.mnt() + "/.fencefs/metrics"), "fencefs_fuse_workers", "state=\"busy\"") >=
        kBlocked + 1)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  // Served by another worker meanwhile: it needs neither the journal nor the domain's lock.
  pid_t left = -1;
  EXPECT_EQ(0, finishes_within("cat '" + m.mnt() + "/.fencefs/metrics' >/dev/null", 10000, &left))
      << "a request not touching the journal waited behind " << kBlocked << " blocked ones";
  if (left > 0) stuck.pids.push_back(left);

  // Once the blocked calls end, the workers started for them go idle, and only two of them wait
  // in read(2): the others park (libfuse's own loop keeps up to ten in read(2)).
  kill(b.pid(), SIGCONT);
  for (pid_t p : stuck.pids) waitpid(p, nullptr, 0);
  stuck.pids.clear();
  const std::string mx = m.mnt() + "/.fencefs/metrics";
  const std::string mount_label = "mount=\"" + m.mnt() + "\"";
  std::string text;
  for (int t = 0; t < 100; t++) {  // the metrics read itself is the one busy worker
    text = slurp(mx);
    if (metric(text, "fencefs_fuse_workers", "state=\"busy\"") == 1 &&
        metric(text, "fencefs_fuse_workers", "state=\"reading\"") == 1)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  long long started = metric(text, "fencefs_fuse_workers_started", mount_label);
  EXPECT_GE(started, kBlocked + 2) << text;
  EXPECT_EQ(1, metric(text, "fencefs_fuse_workers", "state=\"busy\"")) << text;
  EXPECT_EQ(1, metric(text, "fencefs_fuse_workers", "state=\"reading\"")) << text;
  EXPECT_EQ(started - 2, metric(text, "fencefs_fuse_workers", "state=\"parked\"")) << text;
  // The kernel's view: worker threads asleep in /dev/fuse's read, once all are idle.
  int in_read = -1, workers = 0;
  for (int t = 0; t < 100 && in_read != 2; t++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    in_read = workers = 0;
    std::string task = "/proc/" + std::to_string(m.daemon_pid()) + "/task";
    DIR* d = opendir(task.c_str());
    ASSERT_NE(nullptr, d);
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string t = task + "/" + e->d_name;
      if (slurp(t + "/comm") != "fencefs-worker\n") continue;
      workers++;
      if (slurp(t + "/wchan") == "fuse_dev_do_read") in_read++;
    }
    closedir(d);
  }
  EXPECT_EQ(2, in_read) << workers << " workers";
  EXPECT_EQ(started, workers);
}

// Workers are started by the loop's own thread, never by a worker: a worker keeps the last
// caller's umask (common/umask.h), and one started by it that cannot have its own umask
// (unshare fails: preloaded here for every worker after the first) would share that worker's
// changing umask, masking callers' modes twice. Callers alternating umasks under load, with
// workers started meanwhile: every mode is the caller's own.
TEST(Workers, ModesStayTheCallersWhenLaterWorkersCannotHaveTheirOwnUmask) {
  Mount m({"--preload-unshare-fails"});
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  ASSERT_EQ(0, m.ctl("bind / 1"));
  constexpr int kCallers = 6, kFiles = 150;
  std::vector<pid_t> kids;
  for (int c = 0; c < kCallers; c++) {
    pid_t pid = fork();
    if (pid == 0) {
      for (int k = 0; k < kFiles; k++) {
        mode_t um = (k + c) % 2 ? 0277 : 0;
        ::umask(um);
        std::string name = "c" + std::to_string(c) + "-" + std::to_string(k);
        int fd = ::open(m.path(name).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0666);
        if (fd < 0) _exit(10);
        ::close(fd);
        struct stat st;
        if (::lstat(m.bpath(name).c_str(), &st) != 0) _exit(11);
        if ((st.st_mode & 07777) != (0666 & ~um)) _exit(12);  // masked twice
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  int bad = 0;
  for (pid_t p : kids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
  }
  EXPECT_EQ(0, bad) << "callers whose files did not get their own modes";
  std::string text = slurp(m.mnt() + "/.fencefs/metrics");
  EXPECT_GT(metric(text, "fencefs_fuse_workers_started", "mount=\"" + m.mnt() + "\""), 2)
      << "no worker was started under load: nothing was tested\n"
      << text;
  EXPECT_NE(m.daemon_log().find("cannot have a umask of its own"), std::string::npos)
      << m.daemon_log();
}

}  // namespace
}  // namespace fencefs::testing
