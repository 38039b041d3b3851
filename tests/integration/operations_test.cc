// Operating the daemon: one daemon per backing and state, options checked before any side
// effect, signals, logging, readiness, and fencectl on a mount whose daemon died.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

const std::string kFencefs = FENCEFS_BIN;
const std::string kCtl = FENCECTL_BIN;

bool is_mounted(const std::string& dir) { return sh("mountpoint -q '" + dir + "'") == 0; }

struct Daemon {
  int status = -1;  // exit status, or kMounted
  std::string out;  // stdout and stderr
};
constexpr int kMounted = -1000;

// Starts `fencefs -f ARGS...`; returns its exit status and output, or kMounted (after unmounting
// it again) when it mounted at `mnt`.
Daemon run_fencefs(const std::vector<std::string>& args, const std::string& mnt,
                   const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<std::string> all = {kFencefs, "-f"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  Daemon r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      r.out = slurp(log);
      return r;
    }
    if (!mnt.empty() && is_mounted(mnt)) {
      r.status = kMounted;
      sh("fusermount3 -u '" + mnt + "'");
      waitpid(pid, &st, 0);
      r.out = slurp(log);
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  sh("fusermount3 -u -z '" + mnt + "' 2>/dev/null");
  r.out = slurp(log);
  return r;
}

bool exists(const std::string& p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0;
}

// A fresh directory under the mount's temp root.
std::string make_dir(const Mount& m, const std::string& name) {
  std::string d = m.root() + "/" + name;
  ::mkdir(d.c_str(), 0755);
  return d;
}

int write_as(const Mount& m, uint64_t token, const std::string& rel, const std::string& data) {
  return as_job(m, token, [&] {
    int fd = ::open(m.path(rel).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return errno;
    int err = ::write(fd, data.data(), data.size()) < 0 ? errno : 0;
    ::close(fd);
    return err;
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// One daemon per backing and per state directory.

TEST(OneDaemon, SecondDaemonOnTheSameBackingWithAnotherStateRefuses) {
  Mount m;
  std::string mnt2 = make_dir(m, "mnt2");
  std::string state2 = m.root() + "/state2";
  Daemon r = run_fencefs({"-o", "state=" + state2, m.backing(), mnt2}, mnt2, m.root() + "/2.log");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("is already served by a fencefs daemon"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pid " + std::to_string(m.daemon_pid())), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(m.mnt()), std::string::npos) << r.out;
  EXPECT_FALSE(exists(state2)) << "a refused mount created its state directory";
  // The first mount is untouched.
  EXPECT_EQ(write_as(m, 1, "f", "one"), 0);
  EXPECT_EQ(slurp(m.path("f")), "one");
}

TEST(OneDaemon, SecondDaemonOnTheSameStateDirectoryRefuses) {
  Mount first;
  std::string state = first.root() + "/shared-state";
  Mount m({"-o", "state=" + state});
  ASSERT_TRUE(m.mounted());
  std::string backing2 = make_dir(m, "backing2"), mnt2 = make_dir(m, "mnt2");
  Daemon r = run_fencefs({"-o", "state=" + state, backing2, mnt2}, mnt2, m.root() + "/2.log");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("state directory " + state + " is in use by another fencefs daemon"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(exists(backing2 + "/.fencefs")) << "a refused mount left a marker in BACKING";
}

TEST(OneDaemon, AfterACleanUnmountANewDaemonMounts) {
  Mount m;
  ASSERT_EQ(write_as(m, 3, "f", "x"), 0);
  EXPECT_EQ(m.unmount(), 0);
  EXPECT_EQ(slurp(m.bpath(".fencefs/owner")), "") << "a clean unmount frees the backing";
  std::string mnt2 = make_dir(m, "mnt2");
  Daemon r = run_fencefs({m.backing(), mnt2}, mnt2, m.root() + "/2.log");
  EXPECT_EQ(r.status, kMounted) << r.out;
  EXPECT_EQ(r.out.find("was last served by"), std::string::npos) << r.out;
}

TEST(OneDaemon, AfterKill9ANewDaemonMountsAndSaysSo) {
  Mount m;
  ASSERT_EQ(write_as(m, 3, "f", "x"), 0);
  pid_t old = m.daemon_pid();
  m.kill9();
  std::string owner = slurp(m.bpath(".fencefs/owner"));
  EXPECT_NE(owner.find("pid=" + std::to_string(old)), std::string::npos) << owner;
  std::string mnt2 = make_dir(m, "mnt2");
  Daemon r = run_fencefs({m.backing(), mnt2}, mnt2, m.root() + "/2.log");
  EXPECT_EQ(r.status, kMounted) << r.out;
  EXPECT_NE(r.out.find("was last served by pid " + std::to_string(old)), std::string::npos)
      << r.out;
}

TEST(OneDaemon, MarkerOfAnotherHostRefusesUnlessTakeover) {
  Mount m;
  ASSERT_EQ(m.unmount(), 0);
  spit(m.bpath(".fencefs/owner"),
       "host=other-host.example\nboot_id=0\npid=4242\nstart_time=1\n"
       "mountpoint=/mnt/elsewhere\nstate=/var/lib/fencefs\nsince=2026-01-01T00:00:00Z\n");
  std::string before = tree_hash(m.backing()) + slurp(m.bpath(".fencefs/audit.log"));
  Daemon r = run_fencefs({m.backing(), m.mnt()}, m.mnt(), m.root() + "/2.log");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("other-host.example"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/mnt/elsewhere"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-o takeover"), std::string::npos) << r.out;
  EXPECT_EQ(tree_hash(m.backing()) + slurp(m.bpath(".fencefs/audit.log")), before);
  EXPECT_NE(slurp(m.bpath(".fencefs/owner")).find("other-host.example"), std::string::npos)
      << "a refused mount must leave the marker as it found it";

  Daemon t = run_fencefs({"-o", "takeover", m.backing(), m.mnt()}, m.mnt(), m.root() + "/3.log");
  EXPECT_EQ(t.status, kMounted) << t.out;
  EXPECT_NE(t.out.find("other-host.example"), std::string::npos) << t.out;
}

TEST(OneDaemon, MarkerOfALiveProcessOnThisHostRefuses) {
  // The lock is free but the marker names a process of this boot that still runs (here: this
  // test): a copied or restored marker must not let a second daemon in.
  Mount m;
  ASSERT_EQ(m.unmount(), 0);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string boot = slurp("/proc/sys/kernel/random/boot_id");
  boot.erase(boot.find_last_not_of("\n") + 1);
  std::string stat = slurp("/proc/self/stat");
  std::istringstream in(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; i++) in >> field;
  spit(m.bpath(".fencefs/owner"), std::string("host=") + host + "\nboot_id=" + boot +
                                      "\npid=" + std::to_string(getpid()) +
                                      "\nstart_time=" + field + "\nmountpoint=/x\nstate=/y\n");
  Daemon r = run_fencefs({m.backing(), m.mnt()}, m.mnt(), m.root() + "/2.log");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("still running"), std::string::npos) << r.out;
}
