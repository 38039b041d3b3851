// FUSE over io_uring (-o uring, src/fs/ring.cc): requests come through the kernel's rings, are
// fenced as through /dev/fuse, and one blocked inside the daemon holds up only its own thread.
// The kernel offers the rings only with /sys/module/fuse/parameters/enable_uring at Y: set here
// for the suite's duration (and put back), as an operator would.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "fencefs/ioctl.h"
#include "integration/mount_fixture.h"

namespace fencefs::testing {
namespace {

constexpr const char* kParam = "/sys/module/fuse/parameters/enable_uring";

class Ring : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    before_ = slurp(kParam);
    spit(kParam, "Y\n");
  }
  static void TearDownTestSuite() {
    if (!before_.empty()) spit(kParam, before_);
  }
  void SetUp() override {
    ASSERT_EQ("Y\n", slurp(kParam)) << "this kernel has no FUSE over io_uring (Linux 6.14+)";
  }
  static std::string before_;
};
std::string Ring::before_;

// CPU ids in a sysfs list ("0-1,4").
std::vector<int> cpus(const std::string& path) {
  std::vector<int> ids;
  std::stringstream in(slurp(path));
  for (std::string part; std::getline(in, part, ',');) {
    size_t dash = part.find('-');
    int lo = std::stoi(part),
        hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    for (int c = lo; c <= hi; c++) ids.push_back(c);
  }
  return ids;
}

// Ring threads per online CPU by default: 16 up to 4 CPUs, 64 in all up to 32, then 2.
int default_per_cpu() {
  const int n_online = static_cast<int>(cpus("/sys/devices/system/cpu/online").size());
  return std::clamp(64 / n_online, 2, 16);
}

// Ring threads for per_cpu: per_cpu on each online CPU, one on each possible CPU not online
// (the kernel wants an entry on every possible CPU's queue). 0: the default (default_per_cpu).
long long ring_threads_for(int per_cpu) {
  std::vector<int> possible = cpus("/sys/devices/system/cpu/possible");
  std::vector<int> online = cpus("/sys/devices/system/cpu/online");
  if (per_cpu == 0) per_cpu = default_per_cpu();
  long long n = 0;
  for (int c : possible) n += std::count(online.begin(), online.end(), c) ? per_cpu : 1;
  return n;
}

// Threads named `comm` of pid, and how many of them sleep in `wchan`.
std::pair<int, int> threads(pid_t pid, const std::string& comm, const std::string& wchan) {
  int all = 0, in = 0;
  std::string task = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(task.c_str());
  if (!d) return {-1, -1};
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string t = task + "/" + e->d_name;
    if (slurp(t + "/comm") != comm + "\n") continue;
    all++;
    if (slurp(t + "/wchan") == wchan) in++;
  }
  closedir(d);
  return {all, in};
}

// The open files one user may hold (fencefs_open_files_per_user_limit) against a sixteenth of the
// daemon's fd limit less RING_FDS (two per ring thread: its io_uring and eventfd).
void expect_per_user_open_files(const Mount& m, const std::string& metrics, long long ring_fds) {
  long long soft = -1;
  std::istringstream limits(slurp("/proc/" + std::to_string(m.daemon_pid()) + "/limits"));
  for (std::string line; std::getline(limits, line);)
    if (line.rfind("Max open files", 0) == 0) soft = std::stoll(line.substr(14));
  ASSERT_GT(soft, 0);
  EXPECT_EQ((soft - std::min(soft / 2, ring_fds)) / 16,
            metric(metrics, "fencefs_open_files_per_user_limit", "mount=\"" + m.mnt() + "\""))
      << "with " << ring_fds << " ring fds\n"
      << metrics;
}

TEST_F(Ring, RequestsComeThroughTheRingsAndAreFenced) {
  Mount m({"-o", "uring"});
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  const std::string mx = m.mnt() + "/.fencefs/metrics";
  std::string text;
  for (int t = 0; t < 100; t++) {  // every thread registers its entry once INIT is answered
    text = slurp(mx);
    if (metric(text, "fencefs_fuse_ring_threads", "mount=\"" + m.mnt() + "\"") ==
        ring_threads_for(0))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(std::string::npos, m.daemon_log().find("serving FUSE through io_uring"))
      << m.daemon_log();
  EXPECT_EQ(ring_threads_for(0),
            metric(text, "fencefs_fuse_ring_threads", "mount=\"" + m.mnt() + "\""))
      << text;
  expect_per_user_open_files(m, text, 2 * ring_threads_for(0));
  long long before = metric(text, "fencefs_fuse_ring_requests_total", "mount=\"" + m.mnt() + "\"");

  // A legacy job's pattern, and 1 MiB in one write(2) and one read(2): the largest request and
  // reply an entry carries.
  std::string big(1 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>('a' + i / 4096 % 26);
  ASSERT_EQ(0, as_job(m, 1, [&] {
              for (int k = 0; k < 50; k++) {
                std::string tmp = m.path("t" + std::to_string(k) + ".tmp");
                int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
                if (fd < 0 || write(fd, "data", 4) != 4 || close(fd) != 0) return 1;
                if (rename(tmp.c_str(), m.path("f" + std::to_string(k)).c_str()) != 0) return 2;
              }
              int fd = open(m.path("big").c_str(), O_RDWR | O_CREAT, 0644);
              if (fd < 0) return 3;
              if (pwrite(fd, big.data(), big.size(), 0) != static_cast<ssize_t>(big.size()))
                return 4;
              std::string back(big.size(), '\0');
              if (pread(fd, back.data(), back.size(), 0) != static_cast<ssize_t>(back.size()))
                return 5;
              close(fd);
              return back == big ? 0 : 6;
            }));
  EXPECT_EQ(big, slurp(m.bpath("big")));
  EXPECT_EQ("data", slurp(m.bpath("f49")));
  text = slurp(mx);
  // Each job: LOOKUP, CREATE, WRITE, RELEASE, RENAME at least.
  EXPECT_GE(metric(text, "fencefs_fuse_ring_requests_total", "mount=\"" + m.mnt() + "\""),
            before + 250)
      << text;

  // The fence holds on this path: a superseded holder changes nothing, missing tokens neither,
  // and a later owner writes.
  EXPECT_EQ(ESTALE, as_superseded_job(m, 1, [&] {
              int fd = open(m.path("f0").c_str(), O_WRONLY | O_TRUNC);
              return fd < 0 ? errno : E(write(fd, "old", 3));
            }));
  EXPECT_EQ(EPERM, as_job(m, 0, [&] { return E(unlink(m.path("f1").c_str())); }));
  EXPECT_EQ(0, as_job(m, 2, [&] { return E(unlink(m.path("f1").c_str())); }));
  EXPECT_EQ("data", slurp(m.bpath("f0")));
  EXPECT_NE(0, access(m.bpath("f1").c_str(), F_OK));
  // An advance through the ioctl (replied by the thread that synced its record).
  EXPECT_EQ(0, sh(std::string(FENCECTL_BIN) + " advance --mount '" + m.mnt() + "' / 5"));
  EXPECT_NE(0, as_job(m, 4, [&] { return E(unlink(m.path("f2").c_str())); }));
  EXPECT_EQ(0, access(m.bpath("f2").c_str(), F_OK));
  EXPECT_EQ(0, m.unmount()) << m.daemon_log();
}

// Advances 1..n of / from callers on CPU 0, each left blocked in the daemon (the first in the
// journal's write on a stopped bait, the others waiting for the domain's lock).
void block_advances(const Mount& m, long long n, Stuck& stuck) {
  for (long long k = 1; k <= n; k++) {
    pid_t left = -1;
    std::string cmd = "taskset -c 0 " + std::string(FENCECTL_BIN) + " advance --mount '" + m.mnt() +
                      "' / " + std::to_string(k) + " >/dev/null 2>&1";
    EXPECT_EQ(-1, finishes_within(cmd, 200, &left)) << "advance " << k << " did not block";
    if (left > 0) stuck.pids.push_back(left);
  }
}

// The daemon's ring threads, and how many wait in the kernel, once n of them are held by blocked
// advances (each holds its thread once its handler runs, which may lag its start), or after 3 s.
std::pair<int, int> ring_threads_once_held(const Mount& m, long long n) {
  std::pair<int, int> seen;
  for (int t = 0; t < 300; t++) {
    seen = threads(m.daemon_pid(), "fencefs-ring", "io_cqring_wait");
    if (seen.first - seen.second == n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return seen;
}

// A request from CPU 0 is served past the n blocked advances; then the bait runs again and every
// advance ends, the domain at epoch n.
void served_past_then_released(const Mount& m, Stuck& stuck, long long n) {
  pid_t left = -1;
  EXPECT_EQ(0, finishes_within("taskset -c 0 cat '" + m.mnt() + "/.fencefs/metrics' >/dev/null",
                               10000, &left))
      << "a request from CPU 0 waited behind the " << n << " blocked on CPU 0's queue";
  if (left > 0) stuck.pids.push_back(left);
  kill(stuck.bait, SIGCONT);
  for (pid_t p : stuck.pids) {
    int st = 0;
    waitpid(p, &st, 0);
    // 201: a lower token's advance that got the lock after a higher one (ESTALE).
    EXPECT_TRUE(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 201)) << st;
  }
  stuck.pids.clear();
  std::string text = slurp(m.mnt() + "/.fencefs/metrics");
  EXPECT_EQ(n, metric(text, "fencefs_epoch", "domain=\"/\"")) << text;
}

TEST_F(Ring, ARequestBlockedInTheDaemonHoldsUpOnlyItsThread) {
  // As Workers.RequestsBlockedInTheDaemonDoNotHoldUpOthers: the journal on a bindfs mount whose
  // daemon is stopped blocks the first advance in its write, and the next advances of the domain
  // wait in their handlers for its lock. Every caller here runs on CPU 0, so every request goes
  // to CPU 0's queue: three of its four threads blocked, the fourth serves the rest (with one
  // thread per CPU, or one entry per CPU shared by a thread, the first advance would hold it).
  Bait b("ring");
  ASSERT_TRUE(b.mounted()) << "bindfs did not mount";
  Mount m({"-o", "uring=4", "-o", "state=" + b.mnt() + "/s"});
  Stuck stuck{b.pid(), {}};
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  ASSERT_FALSE(slurp(m.mnt() + "/.fencefs/metrics").empty());
  ASSERT_TRUE(freeze(b.pid()));
  block_advances(m, 3, stuck);
  // The three advances hold three ring threads.
  auto [ring_threads, idle] = ring_threads_once_held(m, 3);
  EXPECT_EQ(ring_threads_for(4), ring_threads);  // uring=4
  EXPECT_EQ(ring_threads - 3, idle);
  served_past_then_released(m, stuck, 3);
  EXPECT_EQ(0, m.unmount()) << m.daemon_log();
}

// By default a CPU's queue has as many threads as the /dev/fuse loop serves requests at once (16,
// on a machine of up to 4 CPUs): callers on one CPU with 15 requests blocked in the daemon still
// have the 16th served. With 8 per CPU (the default before), 16 advances from one CPU could not
// all wait for the same sync.
TEST_F(Ring, ByDefaultOneCpusCallersAreServedAsManyAtOnceAsThroughDevFuse) {
  const long long per_cpu = default_per_cpu();
  Bait b("ringdefault");
  ASSERT_TRUE(b.mounted()) << "bindfs did not mount";
  Mount m({"-o", "uring", "-o", "state=" + b.mnt() + "/s"});
  Stuck stuck{b.pid(), {}};
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  ASSERT_FALSE(slurp(m.mnt() + "/.fencefs/metrics").empty());
  // The daemon's own count, from its log (a machine of up to 4 CPUs has 16), written once the
  // rings serve, perhaps after the read above.
  ASSERT_TRUE(
      wait_for_text(m.root() + "/daemon.log", "(" + std::to_string(per_cpu) + " per online CPU)"))
      << m.daemon_log();
  if (cpus("/sys/devices/system/cpu/online").size() <= 4) {
    ASSERT_EQ(16, per_cpu);
  }
  ASSERT_TRUE(freeze(b.pid()));
  // The first advance blocks in the journal's write, the others in their handlers for its lock.
  block_advances(m, per_cpu - 1, stuck);
  auto [ring_threads, idle] = ring_threads_once_held(m, per_cpu - 1);
  EXPECT_EQ(ring_threads_for(0), ring_threads);
  EXPECT_EQ(ring_threads - (per_cpu - 1), idle);
  served_past_then_released(m, stuck, per_cpu - 1);
  EXPECT_EQ(0, m.unmount()) << m.daemon_log();
}

// An advance is replied by whichever thread synced its record, and that reply is handed to the
// ring thread whose entry holds the request. Eight domains advanced at once through two threads
// per CPU: every caller gets its own reply (each domain ends at its last acknowledged token), and
// no ring thread is left inside a handler. A lost reply would leave its caller waiting: after a
// minute the daemon is killed, which ends the caller's ioctl.
TEST_F(Ring, AdvancesRepliedByTheThreadThatSyncedReachTheirCallers) {
  Mount m({"-o", "uring=2"});
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  constexpr int kDomains = 8, kAdvances = 300;
  for (int k = 0; k < kDomains; k++) {
    std::string d = m.path("d" + std::to_string(k));
    ASSERT_EQ(0, as_job(m, 1, [&] { return E(mkdir(d.c_str(), 0755)); }));
    ASSERT_EQ(0, sh(std::string(FENCECTL_BIN) + " domain add '" + d + "' >/dev/null"));
  }
  std::vector<std::thread> ts;
  std::vector<int> failed(kDomains, 0), last(kDomains, 0);
  std::atomic<int> done{0};
  for (int k = 0; k < kDomains; k++)
    ts.emplace_back([&, k] {
      int fd = open(m.path("d" + std::to_string(k)).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      failed[k] = fd < 0 ? errno : 0;
      for (int e = 1; e <= kAdvances && !failed[k]; e++) {
        fencefs_token t{};
        t.epoch = static_cast<uint64_t>(e);
        if (ioctl(fd, FENCEFS_IOC_ADVANCE, &t) != 0)
          failed[k] = errno;
        else
          last[k] = e;
      }
      if (fd >= 0) close(fd);
      done++;
    });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done.load() < kDomains && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  bool hung = done.load() < kDomains;
  if (hung) m.kill9();
  for (auto& t : ts) t.join();
  ASSERT_FALSE(hung) << "an advance got no reply within a minute";
  std::string text = slurp(m.mnt() + "/.fencefs/metrics");
  for (int k = 0; k < kDomains; k++) {
    EXPECT_EQ(0, failed[k]) << "domain /d" << k << " after " << last[k] << " advances";
    EXPECT_EQ(kAdvances, metric(text, "fencefs_epoch", "domain=\"/d" + std::to_string(k) + "\""))
        << text;
  }
  EXPECT_GT(metric(text, "fencefs_fuse_ring_requests_total", "mount=\"" + m.mnt() + "\""),
            kDomains * kAdvances)
      << text;
  // Every ring thread waits in the kernel again (once the metrics file's RELEASE, sent after
  // close returns, has been served).
  std::pair<int, int> seen;
  for (int t = 0; t < 200; t++) {
    seen = threads(m.daemon_pid(), "fencefs-ring", "io_cqring_wait");
    if (seen.first == seen.second) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ring_threads_for(2), seen.first);
  EXPECT_EQ(seen.first, seen.second);
  EXPECT_EQ(0, as_job(m, 1, [&] { return E(mkdir(m.path("after").c_str(), 0755)); }));
  EXPECT_EQ(0, m.unmount()) << m.daemon_log();
}

// An advance that finds the journal busy returns to its ring thread and is replied by the thread
// that syncs its record: the reply is handed to the entry's thread, which commits it. The
// journal on a stopped bindfs keeps the first advance's write waiting while the second queues.
TEST_F(Ring, AnAdvanceSyncedByAnotherThreadIsHandedToItsEntry) {
  Bait b("ringhand");
  ASSERT_TRUE(b.mounted()) << "bindfs did not mount";
  Mount m({"-o", "uring", "-o", "state=" + b.mnt() + "/s"});
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  ASSERT_EQ(0, as_job(m, 1, [&] { return E(mkdir(m.path("d").c_str(), 0755)); }));
  ASSERT_EQ(0, sh(std::string(FENCECTL_BIN) + " domain add '" + m.path("d") + "' >/dev/null"));
  std::string mount = "mount=\"" + m.mnt() + "\"";
  long long before = metric(slurp(m.mnt() + "/.fencefs/metrics"),
                            "fencefs_fuse_ring_replies_handed_over_total", mount);
  ASSERT_TRUE(freeze(b.pid()));
  Stuck stuck{b.pid(), {}};
  for (auto [domain, token] : {std::pair{"/", 2}, std::pair{"/d", 3}}) {
    pid_t left = -1;
    EXPECT_EQ(-1,
              finishes_within(std::string(FENCECTL_BIN) + " advance --mount '" + m.mnt() + "' " +
                                  domain + " " + std::to_string(token) + " >/dev/null 2>&1",
                              300, &left))
        << "the advance of " << domain << " did not wait for the journal";
    if (left > 0) stuck.pids.push_back(left);
  }
  kill(b.pid(), SIGCONT);
  for (pid_t p : stuck.pids) {
    int st = 0;
    waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  }
  stuck.pids.clear();
  std::string text = slurp(m.mnt() + "/.fencefs/metrics");
  EXPECT_EQ(2, metric(text, "fencefs_epoch", "domain=\"/\"")) << text;
  EXPECT_EQ(3, metric(text, "fencefs_epoch", "domain=\"/d\"")) << text;
  EXPECT_GE(metric(text, "fencefs_fuse_ring_replies_handed_over_total", mount), before + 1) << text;
  EXPECT_EQ(0, m.unmount()) << m.daemon_log();
}

TEST_F(Ring, WithoutTheKernelsRingsRequestsComeThroughDevFuse) {
  spit(kParam, "N\n");
  Mount m({"-o", "uring"});
  spit(kParam, "Y\n");
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  std::string text = slurp(m.mnt() + "/.fencefs/metrics");
  EXPECT_EQ(0, metric(text, "fencefs_fuse_ring_threads", "mount=\"" + m.mnt() + "\"")) << text;
  EXPECT_NE(std::string::npos, m.daemon_log().find("does not offer FUSE over io_uring"))
      << m.daemon_log();
  expect_per_user_open_files(m, text, 0);  // no fd kept for rings that never came
  EXPECT_EQ(0, as_job(m, 1, [&] { return E(mkdir(m.path("d").c_str(), 0755)); }));
  EXPECT_EQ(0, m.unmount()) << m.daemon_log();
}

// Started the way fstab and mount(8) start it, without -f: the daemon forks to detach, and a
// fork keeps only the thread that forked. The rings' threads are started after it.
TEST_F(Ring, ADetachedDaemonServesThroughItsRings) {
  std::string dir = temp_dir("ringbg");
  ASSERT_FALSE(dir.empty());
  std::string b = dir + "/b", mnt = dir + "/m", log = dir + "/d.log", pidf = dir + "/pid";
  ASSERT_EQ(0, mkdir(b.c_str(), 0755));
  ASSERT_EQ(0, mkdir(mnt.c_str(), 0755));
  ASSERT_EQ(0, sh(std::string(FENCEFS_BIN) + " --init -o uring,log=" + log + ",pidfile=" + pidf +
                  " " + b + " " + mnt));
  track_mount(mnt);
  struct Undo {
    std::string mnt, dir;
    ~Undo() {
      sh("fusermount3 -u -z '" + mnt + "' 2>/dev/null");
      untrack_mount(mnt);
      sh("rm -rf '" + dir + "'");
    }
  } undo{mnt, dir};
  ASSERT_TRUE(is_mounted(mnt));
  pid_t left = -1;
  EXPECT_EQ(0, finishes_within(
                   "stat '" + mnt + "' >/dev/null && cat '" + mnt + "/.fencefs/metrics' >/dev/null",
                   10000, &left))
      << slurp(log);
  if (left > 0) {
    sh("fusermount3 -u -z '" + mnt + "'");
    kill(std::stoi(slurp(pidf)), SIGKILL);
    waitpid(left, nullptr, 0);
    return;
  }
  std::string text = slurp(mnt + "/.fencefs/metrics");
  EXPECT_EQ(ring_threads_for(0), metric(text, "fencefs_fuse_ring_threads", "mount=\"" + mnt + "\""))
      << text;
  pid_t daemon = std::stoi(slurp(pidf));
  EXPECT_EQ(0, sh("fusermount3 -u '" + mnt + "'"));
  for (int t = 0; t < 500 && kill(daemon, 0) == 0; t++)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_NE(0, kill(daemon, 0)) << "the daemon did not exit";
  EXPECT_NE(std::string::npos, slurp(log).find("unmounted")) << slurp(log);
}

// An advance still waiting for its journal when the daemon is told to stop is made durable and
// replied to, as through /dev/fuse (main: fence.quiesce() while the rings serve, then
// ring::stop(), whose threads end once their entry's reply is made).
TEST_F(Ring, AnAdvanceRepliedAfterTheSessionEndedStillReachesItsCaller) {
  Bait b("ringlate");
  ASSERT_TRUE(b.mounted()) << "bindfs did not mount";
  Mount m({"-o", "uring", "-o", "state=" + b.mnt() + "/s"});
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  ASSERT_FALSE(slurp(m.mnt() + "/.fencefs/metrics").empty());
  ASSERT_TRUE(freeze(b.pid()));
  pid_t left = -1;
  std::string out = b.dir() + "/adv.out";
  EXPECT_EQ(-1, finishes_within(std::string(FENCECTL_BIN) + " advance --mount '" + m.mnt() +
                                    "' / 1 >'" + out + "' 2>&1",
                                300, &left));
  ASSERT_GT(left, 0);
  kill(m.daemon_pid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  kill(b.pid(), SIGCONT);
  int st = 0;
  waitpid(left, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st << ": " << slurp(out);
  EXPECT_EQ(0, m.unmount()) << m.daemon_log();
}

// The daemon asks for the rings only once it has made them: after an INIT reply that asked, the
// kernel holds every request until each CPU's queue has an entry.
TEST_F(Ring, ADaemonThatCannotMakeItsRingsServesThroughDevFuse) {
  Setting disabled("/proc/sys/kernel/io_uring_disabled", "2\n");  // io_uring_setup(2): EPERM
  ASSERT_TRUE(disabled.ok());
  Mount m({"-o", "uring"});
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  pid_t left = -1;
  EXPECT_EQ(0, finishes_within("ls -a '" + m.mnt() + "' >/dev/null", 10000, &left))
      << "requests held by the kernel for rings that never came";
  disabled.restore();
  if (left > 0) {
    m.kill9();
    waitpid(left, nullptr, 0);
    return;
  }
  EXPECT_NE(std::string::npos, m.daemon_log().find("io_uring_setup")) << m.daemon_log();
  std::string text = slurp(m.mnt() + "/.fencefs/metrics");
  EXPECT_EQ(0, metric(text, "fencefs_fuse_ring_threads", "mount=\"" + m.mnt() + "\"")) << text;
  expect_per_user_open_files(m, text, 0);
  EXPECT_EQ(0, as_job(m, 1, [&] { return E(mkdir(m.path("d").c_str(), 0755)); }));
  EXPECT_EQ(0, m.unmount()) << m.daemon_log();
}

}  // namespace
}  // namespace fencefs::testing
