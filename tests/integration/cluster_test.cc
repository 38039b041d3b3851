// Cluster mode on a real etcd: several fencefs daemons mount ONE backing directory at different
// mountpoints, each with its own state directory, as hosts sharing storage would.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "integration/etcd_fixture.h"
#include "integration/mount_fixture.h"

using namespace fencefs::testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kLocalHook =
    std::string(FENCEFS_SOURCE_DIR) + "/contrib/fence-hooks/fence_local_kill";

// One member: a fencefs daemon over the shared backing, with its own mountpoint and state.
class Node {
 public:
  // MNT: ROOT/ID unless given.
  Node(const std::string& root, const std::string& backing, std::string id, std::string opts,
       const std::string& mnt = "")
      : id_(std::move(id)), backing_(backing), opts_(std::move(opts)) {
    mnt_ = mnt.empty() ? root + "/" + id_ : mnt;
    state_ = root + "/" + id_ + ".state";
    log_ = root + "/" + id_ + ".log";
    mkdir(mnt_.c_str(), 0755);
  }
  ~Node() {
    if (pid_ > 0) thaw(pid_);
    stop();
  }

  // -1000 once mounted, else the daemon's exit status.
  int start() {
    if (is_mounted(mnt_)) sh("fusermount3 -u -z '" + mnt_ + "'");  // the host "rebooted"
    pid_t pid = fork();
    if (pid == 0) {
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::string o = "state=" + state_ + ",member=" + id_ + "," + opts_;
      execl(FENCEFS_BIN, FENCEFS_BIN, "-f", "-o", o.c_str(), backing_.c_str(), mnt_.c_str(),
            nullptr);
      _exit(127);
    }
    pid_ = pid;
    auto deadline = Clock::now() + 20s;
    while (Clock::now() < deadline) {
      if (is_mounted(mnt_)) {
        track_mount(mnt_);
        return -1000;
      }
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }
  void stop() {
    if (is_mounted(mnt_))
      sh("fusermount3 -u '" + mnt_ + "' 2>/dev/null || fusermount3 -u -z '" + mnt_ + "'");
    reap(20s);
    untrack_mount(mnt_);
  }
  // A crash: the daemon dies, its mount stays behind (dead) until a fence or a restart.
  void kill9() {
    if (pid_ > 0) kill(pid_, SIGKILL);
    reap(20s);
  }
  // Waits for the daemon to exit; its status or -1.
  int reap(std::chrono::milliseconds limit) {
    if (pid_ <= 0) return status_;
    auto deadline = Clock::now() + limit;
    int st;
    while (Clock::now() < deadline) {
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return status_;
      }
      std::this_thread::sleep_for(10ms);
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return status_ = -1;
  }
  pid_t pid() const { return pid_; }
  const std::string& mnt() const { return mnt_; }
  std::string path(const std::string& rel) const { return mnt_ + "/" + rel; }
  std::string log() const { return slurp(log_); }
  std::string status() const { return slurp(mnt_ + "/.fencefs/status"); }
  int ctl(const std::string& line) const {
    int fd = ::open((mnt_ + "/.fencefs/ctl").c_str(), O_WRONLY | O_TRUNC);
    if (fd < 0) return errno;
    ssize_t n = ::write(fd, line.data(), line.size());
    int err = n < 0 ? errno : 0;
    ::close(fd);
    return err;
  }
  uint64_t epoch() const {
    std::string e = xattr(mnt_, "user.fencefs.epoch");
    return e.rfind("ERR:", 0) == 0 ? 0 : std::stoull(e);
  }

 private:
  std::string id_, backing_, opts_, mnt_, state_, log_;
  pid_t pid_ = -1;
  int status_ = -1;
};

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fencefs-cluster-XXXXXX";
    root_ = mkdtemp(tmpl);
    chmod(root_.c_str(), 0755);
    backing_ = root_ + "/backing";
    mkdir(backing_.c_str(), 0755);
  }
  void TearDown() override {
    nodes_.clear();  // members leave while etcd is still there
    etcd_.reset();
    if (!getenv("FENCEFS_KEEP_TEST_DIRS")) sh("rm -rf '" + root_ + "'");
  }
  Node& node(const std::string& id, std::string etcd, const std::string& extra = "",
             const std::string& mnt = "") {
    std::replace(etcd.begin(), etcd.end(), ',', '+');  // commas separate mount options
    nodes_.push_back(std::make_unique<Node>(
        root_, backing_, id, "cluster=c1,etcd=" + etcd + (extra.empty() ? "" : "," + extra), mnt));
    Node& n = *nodes_.back();
    int st = n.start();
    EXPECT_EQ(st, -1000) << n.log();
    return n;
  }
  std::string bpath(const std::string& rel) const { return backing_ + "/" + rel; }

  Etcd& etcd(int members, bool tls = false) {
    etcd_ = std::make_unique<Etcd>(members, tls);
    return *etcd_;
  }

  std::string root_, backing_;
  std::unique_ptr<Etcd> etcd_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

// Forks a job bound to `token` for "/" through node n; returns its pid (fn's result is the exit
// status).
pid_t spawn_job(const Node& n, uint64_t token, const std::function<int()>& fn) {
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    if (token && n.ctl("bind / " + std::to_string(token)) != 0) _exit(200);
    _exit(fn());
  }
  return pid;
}

// A job of n that opens `rel` for writing (`flags` with O_WRONLY), writes `data` and holds the
// file open until `release()`, then closes it. Returns once the write is done.
class HeldFile {
 public:
  HeldFile(const Node& n, uint64_t token, const std::string& rel, int flags,
           const std::string& data) {
    int ready[2];
    if (pipe(ready) != 0 || pipe(go_) != 0) return;
    pid_ = spawn_job(n, token, [&] {
      int fd = ::open(n.path(rel).c_str(), O_WRONLY | flags, 0644);
      char c = 0;
      if (fd < 0 || ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size()))
        return 101;
      if (::write(ready[1], "r", 1) != 1 || ::read(go_[0], &c, 1) != 1) return 102;
      return ::close(fd) == 0 ? 0 : errno;
    });
    ::close(ready[1]);  // EOF below if the job ends early
    ::close(go_[0]);
    char c = 0;
    held_ = ::read(ready[0], &c, 1) == 1;
    ::close(ready[0]);
  }
  ~HeldFile() { ::close(go_[1]); }
  bool held() const { return held_; }
  // The job's exit status once it has closed the file.
  int release() {
    if (::write(go_[1], "g", 1) != 1) return -1;
    int st;
    return waitpid(pid_, &st, 0) == pid_ && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

 private:
  int go_[2] = {-1, -1};
  pid_t pid_ = -1;
  bool held_ = false;
};

int wait_status(pid_t pid) {
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int append(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return errno;
  int err = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) ? 0 : errno;
  ::close(fd);
  return err;
}

// A job that appends `line` to path every few ms until a write fails; exits with that errno.
int append_until_error(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return errno;
  for (;;) {
    if (::write(fd, line.data(), line.size()) < 0) return errno;
    usleep(2000);
  }
}

bool eventually(const std::function<bool()>& f, std::chrono::milliseconds limit = 10s) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (f()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return f();
}

// `fencectl run --acquire` through n: the token the job was given.
std::string acquire(const Node& n, int* st) {
  return sh_out(std::string(FENCECTL_BIN) + " run --mount '" + n.mnt() +
                    "' --domain / --acquire -- sh -c 'echo $FENCEFS_TOKEN'",
                st);
}

pid_t etcd_pid(const Etcd& e, int i) {
  std::string out = sh_out("pgrep -f -- '--listen-client-urls " + e.endpoint(i) + "( |$)'");
  return out.empty() ? -1 : std::stoi(out);
}

// Only lines of the form "A\n" (member 1's job) and, if given, B's lines at the end.
bool only_a_then(const std::string& data, const std::string& tail) {
  if (data.size() < tail.size() || data.compare(data.size() - tail.size(), tail.size(), tail))
    return false;
  std::string head = data.substr(0, data.size() - tail.size());
  for (size_t i = 0; i < head.size(); i += 2)
    if (head.compare(i, 2, "A\n") != 0) return false;
  return true;
}

}  // namespace

// Job A (mount 1, token 5) writes and is paused; job B (mount 2) advances to 6 and writes; A
// resumes: refused, and the file holds B's data only.
TEST_F(ClusterTest, PausedHolderAcrossMounts) {
  Etcd& etcd = this->etcd(3);
  Node& n1 = node("m1", etcd.endpoints());
  Node& n2 = node("m2", etcd.endpoints());
  ASSERT_EQ(n1.ctl("advance / 5"), 0);
  EXPECT_EQ(n2.epoch(), 5u);  // the advance through mount 1 completed on mount 2 too

  pid_t a = spawn_job(n1, 5, [&] {
    int fd = ::open(n1.path("report").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::write(fd, "A: part 1\n", 10) != 10) return 101;
    raise(SIGSTOP);
    return ::write(fd, "A: part 2\n", 10) < 0 ? errno : 0;
  });
  int st;
  ASSERT_EQ(waitpid(a, &st, WUNTRACED), a);
  ASSERT_TRUE(WIFSTOPPED(st));

  pid_t b = spawn_job(n2, 6, [&] {
    int fd = ::open(n2.path("report").c_str(), O_WRONLY | O_TRUNC);
    if (fd < 0) return errno;
    return ::write(fd, "B: fresh\n", 9) == 9 ? 0 : errno;
  });
  EXPECT_EQ(wait_status(b), 0);
  EXPECT_EQ(n1.epoch(), 6u);

  kill(a, SIGCONT);
  EXPECT_EQ(wait_status(a), ESTALE);
  EXPECT_EQ(slurp(bpath("report")), "B: fresh\n");
}

// Member 1's daemon is frozen while its job writes; an advance through mount 2 runs the hook,
// which kills member 1, and then completes. Member 1's mount stays, dead: a job there gets
// ENOTCONN, never the mountpoint's own directory to write in unfenced.
TEST_F(ClusterTest, PausedMemberIsFencedByTheHook) {
  Etcd& etcd = this->etcd(3);
  Node& n1 = node("m1", etcd.endpoints(), "ack_timeout=1");
  Node& n2 = node("m2", etcd.endpoints(), "ack_timeout=1,fence_hook=" + kLocalHook);
  ASSERT_EQ(n1.ctl("advance / 5"), 0);
  pid_t a = spawn_job(n1, 5, [&] { return append_until_error(n1.path("log"), "A\n"); });
  std::this_thread::sleep_for(200ms);
  pid_t member1 = n1.pid();
  ASSERT_TRUE(freeze(member1));
  std::this_thread::sleep_for(100ms);  // A is now inside a write the frozen daemon holds

  EXPECT_EQ(n2.ctl("advance / 6"), 0) << n2.log();
  EXPECT_EQ(n1.reap(5s), 128 + SIGKILL);  // the hook killed it
  EXPECT_NE(wait_status(a), 0);           // A's write never completed
  EXPECT_TRUE(is_mounted(n1.mnt()));
  EXPECT_EQ(ENOTCONN, in_child([&] { return append(n1.path("late"), "A\n"); }));
  EXPECT_NE(n2.log().find("fence_local_kill: member m1"), std::string::npos) << n2.log();

  pid_t b = spawn_job(n2, 6, [&] { return append(n2.path("log"), "B\n"); });
  EXPECT_EQ(wait_status(b), 0);
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(only_a_then(slurp(bpath("log")), "B\n")) << slurp(bpath("log"));
  std::string status = n2.status();
  EXPECT_EQ(status.find("\"id\":\"m1\""), std::string::npos) << status;  // fenced: not a member
}

// The same without a hook: the advance fails, nothing is admitted under 6, and member 1's writes
// land only under epoch 5. Once member 1 is back and acknowledges, a retry completes.
TEST_F(ClusterTest, PausedMemberWithoutHookFailsTheAdvance) {
  Etcd& etcd = this->etcd(3);
  Node& n1 = node("m1", etcd.endpoints(), "ack_timeout=1");
  Node& n2 = node("m2", etcd.endpoints(), "ack_timeout=1");
  ASSERT_EQ(n1.ctl("advance / 5"), 0);
  pid_t a = spawn_job(n1, 5, [&] { return append_until_error(n1.path("log"), "A\n"); });
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(freeze(n1.pid()));
  std::this_thread::sleep_for(100ms);

  // Seen once in many runs: this advance succeeded. What etcd and member 1 held then says how.
  EXPECT_EQ(n2.ctl("advance / 6"), EIO)
      << etcd.etcdctl("get --prefix /fencefs/clusters/c1/") << "member 1:\n"
      << n1.log() << "member 1's threads: "
      << sh_out("ps -o stat= -L -p " + std::to_string(n1.pid()) + " | sort | uniq -c");
  EXPECT_NE(n2.log().find("no fence_hook is configured"), std::string::npos) << n2.log();
  pid_t b = spawn_job(n2, 6, [&] { return append(n2.path("log"), "B\n"); });
  EXPECT_EQ(wait_status(b), EIO);  // not admitted under the new epoch
  EXPECT_TRUE(only_a_then(slurp(bpath("log")), "")) << slurp(bpath("log"));

  kill(n1.pid(), SIGCONT);
  // Member 1 finishes its in-flight write (under 5), then follows the pending epoch: refused.
  EXPECT_EQ(wait_status(a), ESTALE);
  EXPECT_TRUE(only_a_then(slurp(bpath("log")), "")) << slurp(bpath("log"));

  EXPECT_EQ(n2.ctl("advance / 6"), 0) << n2.log();  // every member acknowledged now
  b = spawn_job(n2, 6, [&] { return append(n2.path("log"), "B\n"); });
  EXPECT_EQ(wait_status(b), 0);
  {
    std::string d = slurp(bpath("log"));
    EXPECT_TRUE(only_a_then(d, "B\n")) << d.size() << " bytes, ends " << d.substr(d.size() - 10);
  }
  std::string status = n1.status();
  EXPECT_NE(status.find("\"acked\":{\"/\":6}"), std::string::npos) << status;
}

// A member whose etcd endpoint is frozen stops admitting within its isolation bound (EIO), reads
// keep working, and it admits again once it re-registered and re-read every epoch.
TEST_F(ClusterTest, MemberCutOffFromEtcdStopsAdmitting) {
  Etcd& etcd = this->etcd(3);
  // Member 1 talks to etcd member 1 only; member 2 to all of them.
  Node& n1 = node("m1", etcd.endpoint(1), "lease_ttl=2,isolation=1");
  Node& n2 = node("m2", etcd.endpoints());
  ASSERT_EQ(n2.ctl("advance / 5"), 0);
  pid_t seed = spawn_job(n1, 5, [&] { return append(n1.path("data"), "x\n"); });
  ASSERT_EQ(wait_status(seed), 0);

  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  pid_t job = spawn_job(n1, 5, [&] {
    // Appends until refused, then reports how long after the freeze (signalled by a byte).
    char c;
    if (read(pfd[0], &c, 1) != 1) return 102;
    auto t0 = Clock::now();
    while (Clock::now() - t0 < 10s) {
      int err = append(n1.path("data"), "x\n");
      if (err) {
        int ms = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
        if (write(pfd[1], &ms, sizeof ms) != sizeof ms) return 103;
        return err;
      }
      usleep(10000);
    }
    return 0;
  });
  pid_t frozen = etcd_pid(etcd, 1);
  ASSERT_GT(frozen, 0);
  ASSERT_TRUE(freeze(frozen));
  ASSERT_EQ(write(pfd[1], "g", 1), 1);
  EXPECT_EQ(wait_status(job), EIO);
  int ms = -1;
  ASSERT_EQ(read(pfd[0], &ms, sizeof ms), static_cast<ssize_t>(sizeof ms));
  // isolation=1 s, checked on every admission: refused within the bound plus scheduling slack.
  EXPECT_LE(ms, 2000) << "admitted for " << ms << " ms after etcd froze";
  EXPECT_EQ(slurp(n1.path("data")).substr(0, 2), "x\n");  // reads keep working
  std::string status = n1.status();
  EXPECT_NE(status.find("\"standing\":\"isolated\""), std::string::npos) << status;
  std::string audit_log = root_ + "/m1.state/audit.log";
  EXPECT_NE(slurp(audit_log).find("is isolated from etcd"), std::string::npos);  // the refusal
  EXPECT_TRUE(eventually([&] {  // and the transition, noted by the keepalive thread
    return slurp(audit_log).find("\"op\":\"cluster_isolated\"") != std::string::npos;
  }));

  kill(frozen, SIGCONT);
  bool back = false;
  for (int i = 0; i < 100 && !back; i++) {
    pid_t j = spawn_job(n1, 5, [&] { return append(n1.path("data"), "y\n"); });
    back = wait_status(j) == 0;
    if (!back) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(back) << n1.log();
  EXPECT_NE(n1.log().find("re-registered and re-read every epoch"), std::string::npos);
  close(pfd[0]);
  close(pfd[1]);
}

// Thousands of advances and writes across 3 mounts while members and the etcd leader are killed
// with SIGKILL, checked in the manner of a Jepsen history: every operation is logged with its
// epoch and its start and end on the (machine-wide) monotonic clock. No write admitted under
// epoch N may start after an advance to a higher epoch was acknowledged, and no acknowledged
// epoch may be lost.
TEST_F(ClusterTest, HistoryUnderKillsHasNoStaleWriteAfterAnAdvance) {
  Etcd& etcd = this->etcd(3);
  std::string opts = "ack_timeout=2,lease_ttl=2,fence_hook=" + kLocalHook;
  Node& n1 = node("m1", etcd.endpoints(), opts);
  Node& n2 = node("m2", etcd.endpoints(), opts);
  Node& n3 = node("m3", etcd.endpoints(), opts);
  ASSERT_EQ(n1.ctl("advance / 1"), 0);
  // Until 1000 acknowledged advances (or 50 s on a slow machine); the chaos runs in the first 20 s.
  const auto start = Clock::now();
  const auto stop = start + 50s;
  const std::string done = root_ + "/done";
  auto mono = [] { return Clock::now().time_since_epoch().count(); };

  std::vector<pid_t> workers;
  std::vector<std::string> logs;
  // Writers: bind to the epoch their mount shows, write a record to their own file.
  for (Node* n : {&n1, &n2, &n3}) {
    for (int w = 0; w < 2; w++) {
      std::string name = n->mnt().substr(n->mnt().rfind('/') + 1) + "." + std::to_string(w);
      std::string oplog = root_ + "/ops." + name;
      logs.push_back(oplog);
      workers.push_back(spawn_job(*n, 0, [n, name, oplog, stop, mono, done] {
        FILE* out = fopen(oplog.c_str(), "w");
        int seq = 0;
        while (Clock::now() < stop && access(done.c_str(), F_OK) != 0) {
          uint64_t e = n->epoch();
          if (e == 0 || n->ctl("bind / " + std::to_string(e)) != 0) {
            usleep(5000);
            continue;
          }
          auto t0 = mono();
          int err = append(n->path("w." + name), fmt::format("{} {}\n", e, seq++));
          auto t1 = mono();
          fprintf(out, "W %" PRIu64 " %lld %lld %d\n", e, static_cast<long long>(t0),
                  static_cast<long long>(t1), err);
          usleep(2000);  // leave the 2 CPUs some room for the advances
        }
        fclose(out);
        return 0;
      }));
    }
  }
  // The advancer, through mounts 1 and 2 in turn.
  std::string alog = root_ + "/ops.advancer";
  logs.push_back(alog);
  workers.push_back(spawn_job(n1, 0, [&, stop, mono] {
    FILE* out = fopen(alog.c_str(), "w");
    int acked = 0;
    for (int i = 0; Clock::now() < stop && (acked < 1000 || Clock::now() < start + 22s); i++) {
      Node* n = i % 2 ? &n2 : &n1;
      uint64_t next = n->epoch() + 1;
      if (next == 1) {
        usleep(5000);
        continue;
      }
      auto t0 = mono();
      int err = n->ctl("advance / " + std::to_string(next));
      auto t1 = mono();
      fprintf(out, "A %" PRIu64 " %lld %lld %d\n", next, static_cast<long long>(t0),
              static_cast<long long>(t1), err);
      if (!err) acked++;
    }
    fclose(out);
    spit(done, "");
    return 0;
  }));

  // Chaos: a member crashes and comes back, twice; the etcd leader crashes and comes back.
  auto at = [&](std::chrono::seconds s) { std::this_thread::sleep_until(start + s); };
  at(4s);
  n3.kill9();
  at(8s);
  EXPECT_EQ(n3.start(), -1000) << n3.log();
  at(11s);
  int leader = etcd.leader();
  ASSERT_GE(leader, 0);
  etcd.kill(leader);
  at(14s);
  EXPECT_TRUE(etcd.start(leader));
  at(17s);
  n3.kill9();
  at(20s);
  EXPECT_EQ(n3.start(), -1000) << n3.log();
  for (pid_t p : workers) EXPECT_EQ(wait_status(p), 0);

  // The checker.
  struct Rec {
    char kind;
    uint64_t epoch;
    long long t0, t1;
    int err;
  };
  std::vector<Rec> acks, writes;
  for (auto& l : logs) {
    std::istringstream in(slurp(l));
    Rec r;
    while (in >> r.kind >> r.epoch >> r.t0 >> r.t1 >> r.err) {
      if (r.err) continue;
      (r.kind == 'A' ? acks : writes).push_back(r);
    }
  }
  std::sort(acks.begin(), acks.end(), [](const Rec& a, const Rec& b) { return a.t1 < b.t1; });
  std::vector<uint64_t> max_acked(acks.size());  // highest epoch acknowledged by acks[i].t1
  for (size_t i = 0; i < acks.size(); i++)
    max_acked[i] = std::max(i ? max_acked[i - 1] : 0, acks[i].epoch);
  int violations = 0;
  std::string first;
  for (auto& w : writes) {
    auto it = std::upper_bound(acks.begin(), acks.end(), w.t0,
                               [](long long t, const Rec& a) { return t < a.t1; });
    if (it == acks.begin()) continue;
    uint64_t acked = max_acked[static_cast<size_t>(it - acks.begin()) - 1];
    if (w.epoch < acked && !violations++)
      first = fmt::format("write under {} started after epoch {} was acknowledged", w.epoch, acked);
  }
  EXPECT_EQ(violations, 0) << first;
  uint64_t highest = acks.empty() ? 0 : max_acked.back();
  std::cout << "[ history  ] " << acks.size() << " acknowledged advances, " << writes.size()
            << " accepted writes, highest epoch " << highest << "\n";
  EXPECT_GE(acks.size() + writes.size(), 2000u);
  EXPECT_GE(acks.size(), 200u);
  // No acknowledged epoch lost: etcd and every member are at least at the last one.
  int st = 0;
  std::string held = etcd.etcdctl("get --print-value-only /fencefs/clusters/c1/epoch/", &st);
  ASSERT_EQ(st, 0);
  EXPECT_GE(std::stoull(held), highest) << held;
  // Members a hook fenced (a kill here) are gone; every member still mounted holds it.
  for (Node* n : {&n1, &n2, &n3})
    if (is_mounted(n->mnt())) {
      EXPECT_GE(n->epoch(), highest) << n->mnt();
    }
}

// A domain declared on one member exists on all; epochs and declarations survive the loss of an
// etcd member and a restart of every daemon.
TEST_F(ClusterTest, DomainsReachEveryMemberAndSurviveRestarts) {
  Etcd& etcd = this->etcd(3);
  ASSERT_EQ(mkdir(bpath("proj").c_str(), 0755), 0);
  Node& n1 = node("m1", etcd.endpoints());
  Node& n2 = node("m2", etcd.endpoints());
  ASSERT_EQ(n1.ctl("domain add /proj"), 0);
  EXPECT_TRUE(eventually([&] { return xattr(n2.path("proj"), "user.fencefs.domain") == "/proj"; }))
      << n2.log();
  ASSERT_EQ(n2.ctl("advance /proj 4"), 0) << n2.log();
  EXPECT_EQ(xattr(n1.path("proj"), "user.fencefs.epoch"), "4");
  EXPECT_EQ(n1.epoch(), 0u);  // the root domain is unaffected

  n1.stop();
  n2.stop();
  etcd.kill(0);  // a minority of etcd
  ASSERT_EQ(n2.start(), -1000) << n2.log();
  ASSERT_EQ(n1.start(), -1000) << n1.log();
  EXPECT_EQ(xattr(n1.path("proj"), "user.fencefs.epoch"), "4");
  EXPECT_EQ(xattr(n2.path("proj"), "user.fencefs.epoch"), "4");
  pid_t j = spawn_job(n1, 0, [&] { return n1.ctl("bind /proj 3"); });  // refused at bind time
  EXPECT_EQ(wait_status(j), ESTALE);
}

// etcd restored from an older snapshot: the members' views (journal, the high-water copy beside
// the data) notice that etcd went back, say so, and refuse the old epochs, as for a rolled-back
// journal; an advance above the highest epoch heals it.
TEST_F(ClusterTest, RestoredEtcdIsDetectedAndRefused) {
  Etcd& etcd = this->etcd(1);
  Node& n1 = node("m1", etcd.endpoints());
  Node& n2 = node("m2", etcd.endpoints());
  ASSERT_EQ(n1.ctl("advance / 3"), 0);
  ASSERT_TRUE(etcd.snapshot_save(root_ + "/snap"));
  ASSERT_EQ(n2.ctl("advance / 7"), 0);
  ASSERT_TRUE(etcd.snapshot_restore(root_ + "/snap"));
  std::string held = etcd.etcdctl("get --print-value-only /fencefs/clusters/c1/epoch/");
  ASSERT_EQ(held, "3\n");

  EXPECT_TRUE(eventually([&] {
    return n1.status().find("\"rolled_back\":{\"/\":7}") != std::string::npos;
  })) << n1.status()
      << n1.log();
  EXPECT_NE(n1.log().find("rollback detected: etcd says domain / is at epoch 3"),
            std::string::npos);
  EXPECT_NE(slurp(root_ + "/m1.state/audit.log").find("\"reason\":\"rollback\""),
            std::string::npos);
  EXPECT_EQ(n1.ctl("advance / 5"), ESTALE);  // below what this member acknowledged

  // A member that joins now starts from etcd's 3; the copy beside the data says 7: refused.
  Node& n3 = node("m3", etcd.endpoints());
  pid_t j = spawn_job(n3, 5, [&] { return append(n3.path("f"), "old owner\n"); });
  EXPECT_EQ(wait_status(j), EIO);
  EXPECT_NE(n3.log().find("rollback detected"), std::string::npos) << n3.log();

  ASSERT_EQ(n1.ctl("advance / 8"), 0) << n1.log();  // heals every member
  EXPECT_TRUE(eventually([&] {
    return n1.status().find("\"rolled_back\":{}") != std::string::npos;
  })) << n1.status();
  j = spawn_job(n3, 8, [&] { return append(n3.path("f"), "new owner\n"); });
  EXPECT_EQ(wait_status(j), 0);
  EXPECT_EQ(slurp(bpath("f")), "new owner\n");
}

// etcd restored from a snapshot older than a domain while an advance of it waited for a paused
// member (no hook): the advancing member declared the domain again at its own epoch as
// committed, and a job under that epoch was admitted before the paused member had followed. It
// is declared pending: the epoch waits for every member, as the advance did. The advancing
// member is the one that founded the cluster: that proves nothing after its first read.
TEST_F(ClusterTest, ADomainARestoredEtcdLacksIsDeclaredPendingWhereItsAdvanceWas) {
  Etcd& etcd = this->etcd(1);
  ASSERT_EQ(mkdir(bpath("d").c_str(), 0755), 0);
  Node& n1 = node("m1", etcd.endpoints(), "ack_timeout=1");
  Node& n2 = node("m2", etcd.endpoints(), "ack_timeout=1");
  ASSERT_TRUE(etcd.snapshot_save(root_ + "/snap"));
  ASSERT_EQ(n1.ctl("domain add /d"), 0);
  ASSERT_TRUE(eventually([&] { return xattr(n2.path("d"), "user.fencefs.domain") == "/d"; }))
      << n2.log();
  ASSERT_EQ(n1.ctl("advance /d 5"), 0) << n1.log();
  ASSERT_TRUE(freeze(n2.pid()));
  EXPECT_EQ(n1.ctl("advance /d 6"), EIO) << n1.log();
  ASSERT_TRUE(etcd.snapshot_restore(root_ + "/snap"));
  const std::string key = "get --print-value-only /fencefs/clusters/c1/epoch/d";
  EXPECT_TRUE(eventually([&] { return !etcd.etcdctl(key).empty(); })) << n1.log();
  EXPECT_EQ(etcd.etcdctl(key), "6 pending\n") << n1.log();
  auto job_d = [&](uint64_t token) {
    return spawn_job(n1, 0, [&n1, token] {
      if (n1.ctl("bind /d " + std::to_string(token))) return 200;
      return append(n1.path("d/f"), "A\n");
    });
  };
  EXPECT_EQ(wait_status(job_d(6)), EIO);  // not admitted before member 2 followed
  EXPECT_NE(n1.log().find("published as pending"), std::string::npos) << n1.log();
  kill(n2.pid(), SIGCONT);
  EXPECT_EQ(n1.ctl("advance /d 6"), 0) << n1.log();  // every member acknowledges now
  EXPECT_EQ(wait_status(job_d(6)), 0);
  EXPECT_EQ(etcd.etcdctl(key), "6\n");
}

// A member with a fresh state that reaches another etcd (a typo, a staging cluster) founds a
// cluster of the same name there: it must not serve the BACKING that another cluster serves.
TEST_F(ClusterTest, AMemberOfAnotherEtcdIsRefusedTheBacking) {
  Etcd& etcd = this->etcd(1);
  Node& n1 = node("m1", etcd.endpoints());
  ASSERT_EQ(n1.ctl("advance / 5"), 0);
  Etcd other(1);
  std::string eps = other.endpoints();
  std::replace(eps.begin(), eps.end(), ',', '+');
  nodes_.push_back(std::make_unique<Node>(root_, backing_, "m3", "cluster=c1,etcd=" + eps));
  Node& n3 = *nodes_.back();
  EXPECT_EQ(n3.start(), 1) << n3.log();
  EXPECT_NE(n3.log().find("is not the cluster's"), std::string::npos) << n3.log();
  // Refused before it founded a cluster there or recorded one in its state.
  EXPECT_EQ(other.etcdctl("get --prefix --keys-only /fencefs/"), "");
  EXPECT_NE(0, access((root_ + "/m3.state/cluster").c_str(), F_OK));
  // The member of the cluster that serves it still joins.
  Node& n2 = node("m2", etcd.endpoints());
  EXPECT_EQ(n2.epoch(), 5u);
}

// An advance waiting for a member's acknowledgement finds etcd's epoch gone back below it (etcd
// restored from an older snapshot, or the key rewritten): it fails, and nothing is admitted under
// the new epoch. Before, it took the older epoch for a completion elsewhere and reported success
// without the paused member's acknowledgement.
TEST_F(ClusterTest, AnAdvanceWhoseEpochGoesBackInEtcdFails) {
  Etcd& etcd = this->etcd(1);
  Node& n1 = node("m1", etcd.endpoints(), "ack_timeout=4");
  Node& n2 = node("m2", etcd.endpoints(), "ack_timeout=4");
  ASSERT_EQ(n1.ctl("advance / 5"), 0);
  ASSERT_TRUE(freeze(n1.pid()));  // its acknowledgement never comes
  const std::string key = "/fencefs/clusters/c1/epoch/";
  int result = -1;
  std::thread advancer([&] { result = n2.ctl("advance / 6"); });
  EXPECT_TRUE(
      eventually([&] { return etcd.etcdctl("get --print-value-only " + key) == "6 pending\n"; }));
  etcd.etcdctl("put " + key + " 5");
  advancer.join();
  EXPECT_EQ(result, EIO) << n2.log();
  EXPECT_NE(n2.log().find("etcd's epoch of domain / went back to '5' while it was advanced to 6"),
            std::string::npos)
      << n2.log();
  pid_t b = spawn_job(n2, 6, [&] { return append(n2.path("log"), "B\n"); });
  EXPECT_EQ(wait_status(b), EIO);  // 6 is never committed
  EXPECT_EQ(slurp(bpath("log")), "");

  EXPECT_NE(n2.status().find("\"rolled_back\":{\"/\":6}"), std::string::npos) << n2.status();
  EXPECT_EQ(n2.ctl("advance / 6"), EUCLEAN) << n2.log();  // as after a rollback

  kill(n1.pid(), SIGCONT);
  EXPECT_EQ(n2.ctl("advance / 7"), 0) << n2.log();  // heals it, acknowledged by both
  b = spawn_job(n2, 7, [&] { return append(n2.path("log"), "B\n"); });
  EXPECT_EQ(wait_status(b), 0) << n2.log();
  EXPECT_EQ(n1.epoch(), 7u);
  EXPECT_NE(n2.status().find("\"rolled_back\":{}"), std::string::npos) << n2.status();
}

// A hook that fails (or cannot prove the member is cut off) fails the advance the same way.
// It starts with the daemon's umask, not the one a caller's creation left on the worker that
// runs it (common/umask.h), with no signal blocked, and SIGPIPE not ignored as in the daemon.
TEST_F(ClusterTest, FailingHookFailsTheAdvance) {
  Etcd& etcd = this->etcd(1);
  std::string hook = root_ + "/hook";
  spit(hook,
       "#!/bin/sh\n"
       "blk=$(awk '/^SigBlk/{print $2}' /proc/self/status)\n"
       "ign=$(awk '/^SigIgn/{print $2}' /proc/self/status)\n"
       "pipe=$(( (0x$ign >> 12) & 1 ))\n"  // SIGPIPE is 13
       "echo \"cannot reach $2 for $1 (umask $(umask), blocked $blk, SIGPIPE ignored $pipe)\" >&2\n"
       "exit 3\n");
  chmod(hook.c_str(), 0755);
  Node& n1 = node("m1", etcd.endpoints(), "ack_timeout=0.5");
  Node& n2 = node("m2", etcd.endpoints(), "ack_timeout=0.5,fence_hook=" + hook);
  ASSERT_EQ(n1.ctl("advance / 5"), 0);
  pid_t c = spawn_job(n2, 5, [&] {
    ::umask(0277);  // each worker that serves one of these creations keeps it
    for (int k = 0; k < 20; k++)
      if (int err = append(n2.path("u" + std::to_string(k)), "x\n")) return err;
    return 0;
  });
  ASSERT_EQ(wait_status(c), 0);
  ASSERT_TRUE(freeze(n1.pid()));
  EXPECT_EQ(n2.ctl("advance / 6"), EIO);
  std::string log = n2.log();
  EXPECT_NE(log.find("failed (exit 3: cannot reach"), std::string::npos) << log;
  EXPECT_NE(log.find("(umask 0000, blocked 0000000000000000, SIGPIPE ignored 0)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("nothing is admitted under 6"), std::string::npos) << log;
  pid_t b = spawn_job(n2, 6, [&] { return append(n2.path("f"), "B\n"); });
  EXPECT_EQ(wait_status(b), EIO);
  EXPECT_NE(n2.status().find("\"id\":\"m1\""), std::string::npos);  // still a member
  kill(n1.pid(), SIGCONT);
}

// Misconfigurations and an unreachable etcd refuse the mount with a message.
TEST_F(ClusterTest, MountRefusesBadClusterOptions) {
  Etcd& etcd = this->etcd(1);
  std::string eps = etcd.endpoints();
  std::replace(eps.begin(), eps.end(), ',', '+');
  struct Case {
    std::string opts, message;
  } cases[] = {
      {"cluster=c1", "cluster= needs etcd=ENDPOINTS"},
      {"etcd=" + eps, "need cluster=NAME"},
      {"cluster=c/1,etcd=" + eps, "cluster= must be"},
      {"cluster=c1,etcd=" + eps + ",lease_ttl=4,isolation=4", "isolation must be shorter"},
      {"cluster=c1,etcd=" + eps + ",fence_hook=/nonexistent", "not an executable file"},
      {"cluster=c1,etcd=127.0.0.1:1", "etcd unreachable"},
      {"lease_ttl=4", "need cluster=NAME"},
      {"isolation=1", "need cluster=NAME"},
      // One journal on the shared backing for every member: refused.
      {"cluster=c1,etcd=" + eps + ",state=" + backing_ + "/.fencefs", "inside the shared BACKING"},
      // Fails after joining: it must leave again, or advances would wait for it.
      {"cluster=c1,etcd=" + eps + ",no_such_option", "cannot create the FUSE session"},
  };
  int i = 0;
  for (auto& c : cases) {
    nodes_.push_back(std::make_unique<Node>(root_, backing_, "bad" + std::to_string(i++), c.opts));
    Node& n = *nodes_.back();
    EXPECT_EQ(n.start(), 1) << c.opts;
    EXPECT_NE(n.log().find(c.message), std::string::npos) << c.opts << ": " << n.log();
  }
  int st = -1;
  EXPECT_EQ(etcd.etcdctl("get --prefix --keys-only /fencefs/clusters/c1/members/", &st), "");
  EXPECT_EQ(st, 0);
  EXPECT_EQ(slurp(bpath(".fencefs/owner")), "");  // failed mounts leave the marker as found
}

// A hook that cuts a member off at the storage leaves its daemon alive: once it runs again it
// learns it was fenced, stops, re-registers and re-reads every epoch before admitting again.
TEST_F(ClusterTest, FencedMemberRejoinsAtTheNewEpoch) {
  Etcd& etcd = this->etcd(1);
  std::string hook = root_ + "/hook";
  spit(hook, "#!/bin/sh\necho \"$1 revoked at the storage\"\n");
  chmod(hook.c_str(), 0755);
  Node& n1 = node("m1", etcd.endpoints(), "ack_timeout=0.5,lease_ttl=2");
  Node& n2 = node("m2", etcd.endpoints(), "ack_timeout=0.5,fence_hook=" + hook);
  ASSERT_EQ(n1.ctl("advance / 5"), 0);
  ASSERT_TRUE(freeze(n1.pid()));
  ASSERT_EQ(n2.ctl("advance / 6"), 0) << n2.log();
  EXPECT_EQ(n2.status().find("\"id\":\"m1\""), std::string::npos);  // no longer a member
  kill(n1.pid(), SIGCONT);
  EXPECT_TRUE(eventually([&] {
    return n1.log().find("re-registered and re-read every epoch") != std::string::npos;
  })) << n1.log();
  EXPECT_NE(n1.log().find("fenced by another member"), std::string::npos) << n1.log();
  EXPECT_EQ(n1.epoch(), 6u);
  EXPECT_NE(n2.status().find("\"id\":\"m1\""), std::string::npos);  // a member again
  // A token below the epoch it re-read is refused, already at bind time.
  pid_t old = spawn_job(n1, 0, [&] { return n1.ctl("bind / 5"); });
  EXPECT_EQ(wait_status(old), ESTALE);
  pid_t cur = spawn_job(n1, 6, [&] { return append(n1.path("f"), "new\n"); });
  EXPECT_EQ(wait_status(cur), 0);
  EXPECT_EQ(n2.ctl("advance / 7"), 0);  // and it acknowledges again
  EXPECT_EQ(n1.epoch(), 7u);
}

// A fenced member's registration is removed only if it is the one that was fenced: one made
// again while the hook ran (a restart by its service manager, here the hook's own put) stays,
// and the next advance waits for that member.
TEST_F(ClusterTest, AMemberRegisteredAgainWhileFencedIsKept) {
  Etcd& etcd = this->etcd(1);
  std::string hook = root_ + "/hook";
  std::string ctl = "ETCDCTL_API=3 etcdctl --endpoints=" + etcd.endpoints() + " ";
  std::string key = "/fencefs/clusters/c1/members/$1";
  spit(hook, "#!/bin/sh\n" + ctl + "put " + key + " \"$(" + ctl + "get --print-value-only " + key +
                 ")\" >/dev/null\necho \"$1 revoked at the storage\"\n");
  chmod(hook.c_str(), 0755);
  Node& n1 = node("m1", etcd.endpoints(), "ack_timeout=0.5");
  Node& n2 = node("m2", etcd.endpoints(), "ack_timeout=0.5,fence_hook=" + hook);
  ASSERT_EQ(n1.ctl("advance / 5"), 0);
  ASSERT_TRUE(freeze(n1.pid()));
  ASSERT_EQ(n2.ctl("advance / 6"), 0) << n2.log();
  EXPECT_NE(n2.log().find("has registered again since: kept"), std::string::npos) << n2.log();
  EXPECT_NE(n2.status().find("\"id\":\"m1\""), std::string::npos) << n2.status();
  kill(n1.pid(), SIGCONT);
  EXPECT_EQ(n2.ctl("advance / 7"), 0) << n2.log();  // acknowledged by m1 again
  EXPECT_EQ(n1.epoch(), 7u);
}

// etcd is not on the data path of equal-token operations: with etcd frozen, a bound job's writes
// go on (until the member's isolation bound, which is far away here).
TEST_F(ClusterTest, EqualTokenWritesDoNotTouchEtcd) {
  Etcd& etcd = this->etcd(1);
  Node& n1 = node("m1", etcd.endpoints(), "lease_ttl=20,isolation=10");
  ASSERT_EQ(n1.ctl("advance / 3"), 0);
  pid_t frozen = etcd_pid(etcd, 0);
  ASSERT_GT(frozen, 0);
  ASSERT_TRUE(freeze(frozen));
  auto t0 = Clock::now();
  pid_t j = spawn_job(n1, 3, [&] {
    int fd = ::open(n1.path("data").c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd < 0) return errno;
    char buf[4096] = {};
    for (int i = 0; i < 500; i++)
      if (pwrite(fd, buf, sizeof buf, (i % 16) * 4096) < 0) return errno;
    return close(fd) == 0 ? 0 : errno;
  });
  int st = wait_status(j);
  auto took = Clock::now() - t0;
  kill(frozen, SIGCONT);
  EXPECT_EQ(st, 0);
  EXPECT_LT(took, 8s);  // well before the isolation bound: no write waited for etcd
}

// One owner, two members: a file created through member 1 and held open unwritten is written
// and closed through member 2. Member 1's release must leave member 2's stamp, which its own
// count of stamps never saw, not put back the file as created.
TEST_F(ClusterTest, AnUnwrittenCreatorKeepsAnotherMembersStamp) {
  Etcd& etcd = this->etcd(1);
  Node& n1 = node("m1", etcd.endpoints());
  Node& n2 = node("m2", etcd.endpoints());
  ASSERT_EQ(n1.ctl("advance / 5"), 0);
  HeldFile a(n1, 5, "f", O_CREAT | O_EXCL, "");
  ASSERT_TRUE(a.held());
  pid_t b = spawn_job(n2, 5, [&] {
    int fd = ::open(n2.path("f").c_str(), O_WRONLY);
    if (fd < 0 || ::write(fd, "member 2", 8) != 8) return errno;
    return ::close(fd) == 0 ? 0 : errno;
  });
  EXPECT_EQ(wait_status(b), 0);
  auto stamp = [&] { return xattr(bpath("f"), "trusted.fencefs"); };
  EXPECT_TRUE(eventually([&] { return stamp().rfind("5 8 ", 0) == 0; })) << stamp();
  EXPECT_EQ(a.release(), 0);
  n1.stop();  // its release served
  n2.stop();
  EXPECT_EQ(0u, stamp().rfind("5 8 ", 0)) << stamp();
}

// `domain add` through member 2 above a file open for writing through member 1: member 1's
// handle is refused once it learns of the domain and does not restamp at close, so it stamps
// what the handle wrote then, as its own `domain add` would.
TEST_F(ClusterTest, ADomainDeclaredElsewhereStampsWhatHandlesHereWrote) {
  Etcd& etcd = this->etcd(1);
  ASSERT_EQ(mkdir(bpath("sub").c_str(), 0755), 0);
  Node& n1 = node("m1", etcd.endpoints());
  Node& n2 = node("m2", etcd.endpoints());
  ASSERT_EQ(n1.ctl("advance / 5"), 0);
  HeldFile a(n1, 5, "sub/g", O_CREAT | O_EXCL, "data");
  ASSERT_TRUE(a.held());
  ASSERT_EQ(n2.ctl("domain add /sub"), 0);
  EXPECT_TRUE(eventually([&] { return xattr(n1.path("sub"), "user.fencefs.domain") == "/sub"; }))
      << n1.log();
  EXPECT_EQ(a.release(), 0);
  n1.stop();
  n2.stop();
  std::string stamp = xattr(bpath("sub/g"), "trusted.fencefs");
  EXPECT_EQ(0u, stamp.rfind("5 4 ", 0)) << stamp;
}

// `fencectl run --acquire` on a cluster mount gets the cluster's epoch + 1, made on every member;
// an explicit token not above the cluster's epoch is refused with the epoch that refused it.
TEST_F(ClusterTest, AcquireIssuesTheNextClusterEpoch) {
  Etcd& etcd = this->etcd(1);
  Node& n1 = node("m1", etcd.endpoints());
  Node& n2 = node("m2", etcd.endpoints());
  ASSERT_EQ(n2.ctl("advance / 4"), 0);
  int st = -1;
  EXPECT_EQ(acquire(n1, &st), "5\n");
  EXPECT_EQ(st, 0) << n1.log();
  EXPECT_EQ(n1.epoch(), 5u);
  EXPECT_EQ(n2.epoch(), 5u);
  std::string held = etcd.etcdctl("get --print-value-only /fencefs/clusters/c1/epoch/");
  EXPECT_EQ(held, "5\n");

  // An explicit token at the cluster's epoch: stale (not a silent token 0).
  sh_out(std::string(FENCECTL_BIN) + " run --mount '" + n2.mnt() +
             "' --domain / --acquire --token 5 -- true 2>/dev/null",
         &st);
  EXPECT_NE(st, 0);
  EXPECT_EQ(n2.epoch(), 5u);

  // A record above any token (written by hand) is malformed: not followed, so nobody is fenced
  // out for good, and no acquisition is drawn from it.
  etcd.etcdctl("put /fencefs/clusters/c1/epoch/ 18446744073709551615");
  acquire(n1, &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(n1.log().find("refused acquire /"), std::string::npos) << n1.log();
  std::this_thread::sleep_for(500ms);  // the members' watches have long had the record
  EXPECT_EQ(n1.epoch(), 5u);
  EXPECT_EQ(n2.epoch(), 5u);
  // At the largest token there is no next one: ERANGE, never a wrapped epoch.
  etcd.etcdctl("put /fencefs/clusters/c1/epoch/ 9223372036854775807");
  EXPECT_TRUE(eventually([&] { return n1.epoch() == 9223372036854775807u; })) << n1.log();
  acquire(n1, &st);
  EXPECT_EQ(st, 202) << n1.log();  // fencectl's ERANGE
  EXPECT_EQ(etcd.etcdctl("get --print-value-only /fencefs/clusters/c1/epoch/"),
            "9223372036854775807\n");
}

// A rename across two domains whose second domain needs a raise, while another member advances
// the first one over and over: the member's follower needs the first domain's lock exclusively
// while the rename raises the second; neither may wait for the other.
TEST_F(ClusterTest, CrossDomainRenameRaisingDoesNotDeadlockAFollower) {
  Etcd& etcd = this->etcd(1);
  Node& n1 = node("m1", etcd.endpoints());
  Node& n2 = node("m2", etcd.endpoints());
  ASSERT_EQ(n1.ctl("advance / 2"), 0);
  pid_t seed = spawn_job(n1, 2, [&] {
    if (::mkdir(n1.path("a").c_str(), 0755)) return errno;
    return append(n1.path("f"), "x\n");
  });
  ASSERT_EQ(wait_status(seed), 0);
  ASSERT_EQ(n1.ctl("domain add /a"), 0) << n1.log();

  fflush(nullptr);
  pid_t renamer = fork();
  if (renamer == 0) {
    // Each rename raises /a; "/" is bound at its current epoch (the advancer moves it on). A
    // raise goes through etcd, so most renames lose the race with an advance of "/" (ESTALE):
    // the loop makes 100 tries, and up to 600 until ten renames have gone through.
    int moved = 0;
    std::string here = n1.path("f"), there = n1.path("a/f");
    for (uint64_t k = 2; k < 602 && (k < 102 || moved < 10); k++) {
      if (n1.ctl("bind /a " + std::to_string(k)) || n1.ctl("bind / " + std::to_string(n1.epoch())))
        continue;
      if (::rename(here.c_str(), there.c_str()) == 0) {
        std::swap(here, there);
        moved++;
      }
    }
    _exit(moved > 0 ? 0 : 1);
  }
  std::atomic<bool> done{false};
  std::thread advancer([&] {
    for (uint64_t e = 3; !done && e < 1000; e++) {
      n2.ctl("advance / " + std::to_string(e));
      std::this_thread::sleep_for(e % 4 ? 10ms : 100ms);  // bursts, with gaps a raise fits in
    }
  });
  // Bounded: with the lock-order cycle the member hangs for good.
  int st = -1;
  bool finished = false;
  auto deadline = Clock::now() + 60s;
  while (!finished && Clock::now() < deadline) {
    finished = waitpid(renamer, &st, WNOHANG) == renamer;
    if (!finished) std::this_thread::sleep_for(50ms);
  }
  done = true;
  if (!finished) {  // the member first: the renamer waits in its rename
    sh("kill -9 " + std::to_string(n1.pid()) + "; fusermount3 -u -z '" + n1.mnt() + "'");
    kill(renamer, SIGKILL);
    waitpid(renamer, &st, 0);
  }
  advancer.join();
  EXPECT_TRUE(finished) << "renames across domains hung while another member advanced";
  EXPECT_TRUE(finished && WIFEXITED(st) && WEXITSTATUS(st) == 0) << n1.log();
}

// A member mounted at the path of another that was just unmounted is given the device number the
// kernel freed. The first daemon, resuming after the unmount, must take it for the unmount it
// was: exit 0, the other member's mount left alone. Before, it took that mount for its own, left
// dead, and exited 1 (its detach refused it: another unique mount id).
TEST_F(ClusterTest, AMemberMountedAtThePathRightAfterAnUnmountIsLeftAlone) {
  Etcd& etcd = this->etcd(1);
  Node& n1 = node("m1", etcd.endpoints());
  struct stat first {
  }, second{};
  ASSERT_EQ(0, ::stat(n1.mnt().c_str(), &first));
  ASSERT_TRUE(freeze(n1.pid()));  // it reads the unmount only once the next is made
  ASSERT_EQ(0, sh("fusermount3 -u '" + n1.mnt() + "'"));
  Node& n2 = node("m2", etcd.endpoints(), "", n1.mnt());
  ASSERT_EQ(0, ::stat(n2.mnt().c_str(), &second));
  kill(n1.pid(), SIGCONT);
  ASSERT_EQ(first.st_dev, second.st_dev) << "the kernel gave the new mount another device";
  EXPECT_EQ(n1.reap(20s), 0) << n1.log();
  EXPECT_EQ(n1.log().find("ended while it was still mounted"), std::string::npos) << n1.log();
  EXPECT_TRUE(is_mounted(n2.mnt()));
  ASSERT_EQ(n2.ctl("advance / 3"), 0) << n2.log();
  pid_t job = spawn_job(n2, 3, [&] { return append(n2.path("f"), "x\n"); });
  EXPECT_EQ(wait_status(job), 0) << n2.log();
}

// A member started at the mountpoint of another that is stopped (not dead) is refused as busy
// within the probe's bound (10 s), and the stopped member's mount is left alone: the probe of a
// dead mount waits for no daemon.
TEST_F(ClusterTest, AMemberStartedOnAStoppedMembersMountIsRefusedAsBusy) {
  Etcd& etcd = this->etcd(1);
  Node& n1 = node("m1", etcd.endpoints());
  ASSERT_TRUE(freeze(n1.pid()));
  std::string eps = etcd.endpoints();
  std::replace(eps.begin(), eps.end(), ',', '+');
  int st = -1;
  std::string out =
      sh_out("timeout -s KILL 60 " + std::string(FENCEFS_BIN) + " -f -o state=" + root_ +
                 "/m2.state,member=m2,cluster=c1,etcd=" + eps + " '" + backing_ + "' '" + n1.mnt() +
                 "' 2>&1",
             &st);
  EXPECT_EQ(st, 1) << out;
  EXPECT_NE(out.find("did not answer within 10 s"), std::string::npos) << out;
  EXPECT_NE(out.find("is busy"), std::string::npos) << out;
  kill(n1.pid(), SIGCONT);
  // Still mounted, and serving once back in contact with etcd (10 s stopped isolated it).
  EXPECT_TRUE(eventually([&] { return n1.ctl("advance / 3") == 0; }, 30s)) << n1.log();
  pid_t job = spawn_job(n1, 3, [&] { return append(n1.path("f"), "x\n"); });
  EXPECT_EQ(wait_status(job), 0) << n1.log();
}

// Production etcd speaks TLS and wants client certificates: members given the CA, a certificate
// and its key join, advance and acquire over TLS; a member without a certificate is refused at
// mount and joins nothing.
TEST_F(ClusterTest, MembersSpeakTlsWithClientCertificates) {
  Etcd& etcd = this->etcd(3, true);
  std::string tls = "etcd_cacert=" + etcd.cacert() + ",etcd_cert=" + etcd.client_cert() +
                    ",etcd_key=" + etcd.client_key();
  Node& n1 = node("m1", etcd.endpoints(), tls);
  Node& n2 = node("m2", etcd.endpoints(), tls);
  ASSERT_EQ(n1.ctl("advance / 5"), 0) << n1.log();
  EXPECT_EQ(n2.epoch(), 5u);

  int st = -1;
  EXPECT_EQ(acquire(n2, &st), "6\n");
  EXPECT_EQ(st, 0) << n2.log();
  EXPECT_EQ(n1.epoch(), 6u);
  EXPECT_EQ(etcd.etcdctl("get --print-value-only /fencefs/clusters/c1/epoch/"), "6\n");
  pid_t a = spawn_job(n1, 0, [&] { return n1.ctl("bind / 5"); });  // superseded everywhere
  EXPECT_EQ(wait_status(a), ESTALE);
  pid_t b = spawn_job(n1, 6, [&] { return append(n1.path("log"), "B\n"); });
  EXPECT_EQ(wait_status(b), 0);
  EXPECT_EQ(slurp(bpath("log")), "B\n");

  nodes_.push_back(std::make_unique<Node>(
      root_, backing_, "nocert",
      "cluster=c1,etcd=" + etcd.endpoint(0) + ",etcd_cacert=" + etcd.cacert()));
  Node& bad = *nodes_.back();
  EXPECT_EQ(bad.start(), 1);
  EXPECT_NE(bad.log().find("no client certificate was given"), std::string::npos) << bad.log();
  std::string members = etcd.etcdctl("get --prefix --keys-only /fencefs/clusters/c1/members/");
  EXPECT_EQ(members.find("nocert"), std::string::npos) << members;
}

// BACKING/.fencefs/owner names the cluster once a member mounted it, and keeps naming it after
// the members leave (members on hosts whose locks do not reach here may still serve it): a
// daemon outside the cluster, or a member of another cluster, is refused unless it takes over;
// a member of the cluster is not, and another host's single daemon keeps members off too.
TEST_F(ClusterTest, OwnerMarkerKeepsOtherDaemonsOffTheClustersBacking) {
  Etcd& etcd = this->etcd(1);
  std::string eps = etcd.endpoints();
  std::replace(eps.begin(), eps.end(), ',', '+');
  std::string marker = bpath(".fencefs/owner");
  {
    Node& m1 = node("m1", etcd.endpoints());
    EXPECT_NE(slurp(marker).find("cluster=c1\n"), std::string::npos) << slurp(marker);
    EXPECT_NE(slurp(marker).find("\npid=" + std::to_string(m1.pid()) + "\n"), std::string::npos)
        << slurp(marker);
    m1.stop();
  }
  std::string left = slurp(marker);
  EXPECT_NE(left.find("cluster=c1\n"), std::string::npos) << left;

  std::string single_mnt = root_ + "/single";
  mkdir(single_mnt.c_str(), 0755);
  auto single = [&](const std::string& extra, int* st) {
    return sh_out(std::string(FENCEFS_BIN) + " -o state=" + root_ + "/single.state" + extra + " " +
                      backing_ + " " + single_mnt + " 2>&1",
                  st);
  };
  int st = -1;
  std::string out = single("", &st);
  EXPECT_EQ(st, 1) << out;
  EXPECT_NE(out.find("marked as served by fencefs cluster c1"), std::string::npos) << out;
  EXPECT_NE(out.find("outside that cluster"), std::string::npos) << out;
  EXPECT_NE(out.find("-o takeover"), std::string::npos) << out;
  EXPECT_EQ(slurp(marker), left);

  nodes_.push_back(std::make_unique<Node>(root_, backing_, "other", "cluster=c2,etcd=" + eps));
  Node& other = *nodes_.back();
  EXPECT_EQ(other.start(), 1);
  EXPECT_NE(other.log().find("Members of two clusters do not fence each other"), std::string::npos)
      << other.log();
  EXPECT_EQ(slurp(marker), left);

  Node& m2 = node("m2", etcd.endpoints());  // a member of c1: welcome, and nothing was "gone"
  EXPECT_EQ(m2.log().find("was last served by"), std::string::npos) << m2.log();
  m2.stop();

  // A single daemon of another host marked it: members stay off unless they take over.
  spit(marker,
       "host=other-host.example\nboot_id=0\npid=4242\nstart_time=1\n"
       "mountpoint=/mnt/elsewhere\nstate=/var/lib/fencefs\nsince=2026-01-01T00:00:00Z\n");
  nodes_.push_back(std::make_unique<Node>(root_, backing_, "m3", "cluster=c1,etcd=" + eps));
  Node& m3 = *nodes_.back();
  EXPECT_EQ(m3.start(), 1);
  EXPECT_NE(m3.log().find("another host's fencefs"), std::string::npos) << m3.log();
  EXPECT_NE(slurp(marker).find("other-host.example"), std::string::npos);
  Node& m4 = node("m4", etcd.endpoints(), "takeover");
  EXPECT_NE(m4.log().find("other-host.example"), std::string::npos) << m4.log();
  EXPECT_NE(slurp(marker).find("cluster=c1\n"), std::string::npos) << slurp(marker);
  m4.stop();

  // Leaving cluster mode is the operator's call.
  out = single(",takeover", &st);
  EXPECT_EQ(st, 0) << out;
  if (st == 0) {
    track_mount(single_mnt);
    EXPECT_EQ(sh("fusermount3 -u " + single_mnt), 0);
    untrack_mount(single_mnt);
  }
}

// A member that fails after a fellow member started meanwhile (here: its etcd is unreachable,
// found only after it claimed the backing) must not take the cluster's marker away from the
// member that serves: on a host whose locks do not reach here, an empty marker would let a
// daemon outside the cluster mount the backing beside it.
TEST_F(ClusterTest, AFailingMemberLeavesTheMarkerOfAMemberServingMeanwhile) {
  Etcd& etcd = this->etcd(1);
  std::string marker = bpath(".fencefs/owner");
  nodes_.push_back(
      std::make_unique<Node>(root_, backing_, "failing", "cluster=c1,etcd=127.0.0.1:1"));
  Node& failing = *nodes_.back();
  std::atomic<int> failed{0};
  std::thread t([&] { failed = failing.start(); });
  auto deadline = Clock::now() + 10s;
  while (slurp(marker).find("mountpoint=" + failing.mnt() + "\n") == std::string::npos &&
         Clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_NE(slurp(marker).find("mountpoint=" + failing.mnt() + "\n"), std::string::npos)
      << slurp(marker);
  Node& m2 = node("m2", etcd.endpoints());
  // The failing member gives up only after its etcd calls time out (5 s): still trying here.
  EXPECT_EQ(failing.log().find("etcd unreachable"), std::string::npos) << failing.log();
  t.join();
  EXPECT_EQ(failed.load(), 1) << failing.log();
  EXPECT_NE(failing.log().find("etcd unreachable"), std::string::npos) << failing.log();
  std::string left = slurp(marker);
  EXPECT_NE(left.find("cluster=c1\n"), std::string::npos) << left;
  EXPECT_NE(left.find("mountpoint=" + m2.mnt() + "\n"), std::string::npos) << left;
}

// A member detached into the background (no -f) names the daemon in the marker, not the process
// that started it and exited.
TEST_F(ClusterTest, MarkerNamesTheDetachedMember) {
  Etcd& etcd = this->etcd(1);
  std::string eps = etcd.endpoints();
  std::replace(eps.begin(), eps.end(), ',', '+');
  std::string mnt = root_ + "/bg", pidfile = root_ + "/bg.pid";
  mkdir(mnt.c_str(), 0755);
  int st = -1;
  std::string out = sh_out(std::string(FENCEFS_BIN) + " -o state=" + root_ +
                               "/bg.state,member=bg,cluster=c1,etcd=" + eps +
                               ",pidfile=" + pidfile + " " + backing_ + " " + mnt + " 2>&1",
                           &st);
  ASSERT_EQ(st, 0) << out;
  track_mount(mnt);
  // The starting process exits before the daemon writes its pid file and marker: wait for them.
  std::string pid, marker;
  for (auto until = Clock::now() + 10s; Clock::now() < until; std::this_thread::sleep_for(10ms)) {
    pid = slurp(pidfile);
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    marker = slurp(bpath(".fencefs/owner"));
    if (!pid.empty() && marker.find("\npid=" + pid + "\n") != std::string::npos) break;
  }
  ASSERT_FALSE(pid.empty()) << "no pid file";
  EXPECT_NE(marker.find("cluster=c1\n"), std::string::npos) << marker;
  EXPECT_NE(marker.find("\npid=" + pid + "\n"), std::string::npos)
      << "daemon " << pid << ": " << marker;
  EXPECT_EQ(sh("fusermount3 -u " + mnt), 0);
  untrack_mount(mnt);
  pid_t daemon = static_cast<pid_t>(std::stol(pid));
  for (auto until = Clock::now() + 20s; kill(daemon, 0) == 0 && Clock::now() < until;)
    std::this_thread::sleep_for(10ms);  // it leaves the cluster before etcd goes
}

// A daemon outside cluster mode finding members serving the backing here is told it is a
// cluster's backing, and how to join it, not that "one daemon" serves it.
TEST_F(ClusterTest, DaemonOutsideTheClusterIsToldMembersServeTheBacking) {
  Etcd& etcd = this->etcd(1);
  Node& m1 = node("m1", etcd.endpoints());
  std::string mnt = root_ + "/single";
  mkdir(mnt.c_str(), 0755);
  int st = -1;
  std::string out = sh_out(std::string(FENCEFS_BIN) + " -o state=" + root_ + "/single.state " +
                               backing_ + " " + mnt + " 2>&1",
                           &st);
  EXPECT_EQ(st, 1) << out;
  EXPECT_NE(out.find("is served by members of fencefs cluster c1"), std::string::npos) << out;
  EXPECT_NE(out.find("cluster=c1"), std::string::npos) << out;
  EXPECT_EQ(out.find("served by one daemon"), std::string::npos) << out;
  EXPECT_NE(slurp(bpath(".fencefs/owner")).find("mountpoint=" + m1.mnt() + "\n"),
            std::string::npos);
}
