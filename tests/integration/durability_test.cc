// Durable epochs end to end: epochs survive kill -9 under load, fsync failures fail closed, and a
// state restored from an older copy is caught.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "fence/highwater.h"
#include "fencefs/ioctl.h"
#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

uint64_t epoch_of(const std::string& path) {
  char buf[64];
  ssize_t n = getxattr(path.c_str(), "user.fencefs.epoch", buf, sizeof buf);
  return n < 0 ? 0 : std::stoull(std::string(buf, n));
}

std::map<int, uint64_t> read_log(const std::string& path) {  // "domain epoch" lines: max per domain
  std::map<int, uint64_t> m;
  std::ifstream in(path);
  int d;
  uint64_t e;
  while (in >> d >> e) m[d] = std::max(m[d], e);
  return m;
}

void append(int fd, int domain, uint64_t e) {
  std::string line = std::to_string(domain) + " " + std::to_string(e) + "\n";
  if (write(fd, line.data(), line.size()) < 0) _exit(90);
}

// FENCEFS_IOC_ADVANCE on directory dir (what fencectl advance and coordinators use): 0 or errno.
int ioctl_advance(const std::string& dir, uint64_t epoch) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  fencefs_token t{};
  t.epoch = epoch;
  int err = ioctl(fd, FENCEFS_IOC_ADVANCE, &t) == 0 ? 0 : errno;
  close(fd);
  return err;
}

}  // namespace

// Concurrent advancing writers log what they attempt and what was acknowledged; the daemon is
// killed at a random moment; after remount every domain is at least its highest acknowledged
// epoch and at most its highest attempted one.
TEST(Durability, KillNineDuringConcurrentAdvances) {
  constexpr int kDomains = 4;
  constexpr int kCycles = 20;
  Mount m;
  for (int d = 0; d < kDomains; d++) {
    ASSERT_EQ(0, in_child([&] {
                if (m.ctl("bind / 1")) return 1;
                return E(mkdir(m.path("d" + std::to_string(d)).c_str(), 0755));
              }));
    ASSERT_EQ(0, sh(std::string(FENCECTL_BIN) + " domain add '" + m.path("d" + std::to_string(d)) +
                    "' >/dev/null"));
  }
  std::string attempted = m.root() + "/attempted", acked = m.root() + "/acked";
  std::mt19937 rng(12345);
  uint64_t next = 1;
  for (int cycle = 0; cycle < kCycles; cycle++) {
    std::vector<pid_t> kids;
    for (int d = 0; d < kDomains; d++) {
      uint64_t base = next + static_cast<uint64_t>(d) * 100000;
      pid_t pid = fork();
      if (pid == 0) {
        int att = open(attempted.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
        int ack = open(acked.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
        std::string dom = "/d" + std::to_string(d);
        for (uint64_t k = 0; k < 100000; k++) {
          uint64_t e = base + k;
          append(att, d, e);
          int err;
          if (k % 3 == 0) {
            err = m.ctl("advance " + dom + " " + std::to_string(e));
          } else if (k % 3 == 1) {  // replied to by the thread that synced the record
            err = ioctl_advance(m.path("d" + std::to_string(d)), e);
          } else {  // advance by a write: bind the higher token and create a file
            err = m.ctl("bind " + dom + " " + std::to_string(e));
            if (!err) {
              int fd = open(m.path("d" + std::to_string(d) + "/f" + std::to_string(k % 8)).c_str(),
                            O_WRONLY | O_CREAT | O_TRUNC, 0644);
              err = fd < 0 ? errno : 0;
              if (fd >= 0) close(fd);
            }
          }
          if (err) _exit(0);  // the daemon is gone
          append(ack, d, e);
        }
        _exit(0);
      }
      kids.push_back(pid);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 200));
    m.kill9();
    for (pid_t k : kids) waitpid(k, nullptr, 0);
    ASSERT_TRUE(m.remount()) << "cycle " << cycle << ": " << m.daemon_log();
    auto att = read_log(attempted), ack = read_log(acked);
    for (int d = 0; d < kDomains; d++) {
      uint64_t e = epoch_of(m.path("d" + std::to_string(d)));
      EXPECT_GE(e, ack[d]) << "cycle " << cycle << " domain " << d << ": acknowledged epoch lost";
      EXPECT_LE(e, att[d]) << "cycle " << cycle << " domain " << d << ": epoch never attempted";
    }
    next += 1000000;
  }
  // The load was real: many advances were acknowledged before the kills.
  std::ifstream in(acked);
  size_t lines = 0;
  for (std::string l; std::getline(in, l);) lines++;
  EXPECT_GT(lines, static_cast<size_t>(kCycles * 10)) << "too few acknowledged advances";
  RecordProperty("acknowledged_advances", static_cast<int>(lines));
}

// With fdatasync failing (libfiu), an advance is never acknowledged, the journal is poisoned,
// equal-epoch work goes on, and a restart recovers.
TEST(Durability, FsyncFailureFailsClosed) {
  ASSERT_EQ(0, sh("command -v fiu-run >/dev/null && command -v fiu-ctrl >/dev/null"))
      << "fiu-utils is required (scripts/setup.sh installs it)";
  Mount m({"--fiu"});  // the fixture starts the daemon under `fiu-run -x`
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  ASSERT_EQ(0, in_child([&] { return m.ctl("advance / 1"); }));
  ASSERT_EQ(0, in_child([&] {
              if (m.ctl("bind / 1")) return 1;
              return E(mkdir(m.path("dir").c_str(), 0755));
            }));
  std::string pid = std::to_string(m.daemon_pid());
  ASSERT_EQ(0, sh("fiu-ctrl -c 'enable name=posix/io/sync/fdatasync,failinfo=5' " + pid));
  ASSERT_EQ(0, sh("fiu-ctrl -c 'enable name=posix/io/sync/fsync,failinfo=5' " + pid));
  EXPECT_EQ(EIO, in_child([&] { return m.ctl("advance / 2"); }));
  EXPECT_EQ(1u, epoch_of(m.mnt()));
  EXPECT_EQ(EIO, ioctl_advance(m.mnt(), 2)) << "the ioctl, replied to from the journal's side";
  EXPECT_EQ(1u, epoch_of(m.mnt()));
  EXPECT_EQ(EIO, in_child([&] {  // a write that would advance fails too, and changes nothing
              if (m.ctl("bind / 3")) return 1;
              return E(mkdir(m.path("by3").c_str(), 0755));
            }));
  struct stat st;
  EXPECT_NE(0, stat(m.bpath("by3").c_str(), &st));
  // Equal-epoch work needs no new durability.
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 1")) return 1;
              return E(mkdir(m.path("dir/by1").c_str(), 0755));
            }));
  // Poisoned: even with fsync healthy again, no advance until the state is rewritten or restart.
  ASSERT_EQ(0, sh("fiu-ctrl -c 'disable name=posix/io/sync/fdatasync' " + pid));
  ASSERT_EQ(0, sh("fiu-ctrl -c 'disable name=posix/io/sync/fsync' " + pid));
  std::string status = sh_out(std::string(FENCECTL_BIN) + " status --json --mount " + m.mnt());
  EXPECT_NE(std::string::npos, status.find("\"poisoned\":true")) << status;
  // The next advance rewrites the state into fresh files first; with fsync healthy, that lifts
  // the poison.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(0, ioctl_advance(m.mnt(), 3)) << m.daemon_log();
  EXPECT_EQ(3u, epoch_of(m.mnt()));
  status = sh_out(std::string(FENCECTL_BIN) + " status --json --mount " + m.mnt());
  EXPECT_NE(std::string::npos, status.find("\"poisoned\":false")) << status;
  m.kill9();
  ASSERT_TRUE(m.remount()) << m.daemon_log();
  uint64_t e = epoch_of(m.mnt());
  EXPECT_GE(e, 1u);
  EXPECT_LE(e, 3u);
  EXPECT_EQ(0, in_child([&] { return m.ctl("advance / 4"); }));
  EXPECT_EQ(4u, epoch_of(m.mnt()));
}

// A state directory restored from an older copy while the data is newer.
TEST(Durability, RestoredOlderStateIsCaught) {
  Mount m;
  ASSERT_EQ(0, in_child([&] { return m.ctl("advance / 2"); }));
  ASSERT_EQ(0, m.unmount());
  std::string old_state = m.root() + "/old-state";
  ASSERT_EQ(0, sh("cp -a '" + m.bpath(".fencefs") + "' '" + old_state + "'"));
  ASSERT_TRUE(m.remount());
  ASSERT_EQ(0, in_child([&] {
              if (m.ctl("bind / 5")) return 1;
              int fd = open(m.path("data").c_str(), O_WRONLY | O_CREAT, 0644);
              if (fd < 0 || write(fd, "epoch five", 10) != 10) return 2;
              return close(fd);
            }));
  ASSERT_EQ(0, m.unmount());
  ASSERT_EQ(0, sh("rm -rf '" + m.bpath(".fencefs") + "' && cp -a '" + old_state + "' '" +
                  m.bpath(".fencefs") + "'"));
  ASSERT_TRUE(m.remount()) << m.daemon_log();
  std::string before = tree_hash(m.backing());
  // Token 3 is above the restored epoch 2, but below what the data has seen: refused.
  EXPECT_EQ(EIO, in_child([&] {
              if (m.ctl("bind / 3")) return 1;
              return E(mkdir(m.path("new").c_str(), 0755));
            }));
  EXPECT_EQ(EIO, in_child([&] {
              if (m.ctl("bind / 4")) return 1;
              return E(open(m.path("data").c_str(), O_WRONLY | O_TRUNC));
            }));
  // Nor may an advance set the epoch below what the data has seen.
  EXPECT_EQ(EIO, in_child([&] { return m.ctl("advance / 4"); }));
  EXPECT_EQ(before, tree_hash(m.backing()));
  EXPECT_NE(std::string::npos, m.daemon_log().find("rollback detected")) << m.daemon_log();
  // The owner of epoch 5 heals it.
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 5")) return 1;
              return E(open(m.path("data").c_str(), O_WRONLY | O_APPEND));
            }));
  EXPECT_EQ(5u, epoch_of(m.mnt()));
  EXPECT_EQ(ESTALE, in_child([&] { return m.ctl("bind / 4"); }));
}

// Every domain's epoch in one xattr of BACKING's root stopped being written past some 50 domains
// on ext4, which keeps all of an inode's xattrs in one 4 KiB block: a state restored from an
// older copy was then not caught for any domain, not even "/".
TEST(Durability, RestoredOlderStateIsCaughtWithManyDomains) {
  Ext4Image disk("32M");
  ASSERT_TRUE(disk.made());
  constexpr int kDomains = 80;
  auto domain = [](int i) { return fmt::format("/{:0>60}", i); };  // 61 characters
  bool prepared = true;
  Mount m({}, [&](const std::string& b) {
    prepared = disk.mount_at(b);
    for (int i = 0; i < kDomains && prepared; i++)
      prepared = ::mkdir((b + domain(i)).c_str(), 0755) == 0;
  });
  disk.remove_after(m.root());
  ASSERT_TRUE(prepared) << "loop devices are needed for this test";
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  for (int i = 0; i < kDomains; i++) ASSERT_EQ(0, m.ctl("domain add " + domain(i))) << i;
  ASSERT_EQ(0, m.unmount());
  std::string old_state = disk.dir() + "/old-state";
  ASSERT_EQ(0, sh("cp -a '" + m.bpath(".fencefs") + "' '" + old_state + "'"));
  ASSERT_TRUE(m.remount()) << m.daemon_log();
  std::vector<std::string> all{"/"};
  for (int i = 0; i < kDomains; i++) all.push_back(domain(i));
  for (const std::string& d : all)
    ASSERT_EQ(0, in_child([&] { return m.ctl("advance " + d + " 5"); })) << d;
  ASSERT_EQ(0, m.unmount());
  ASSERT_EQ(0, sh("rm -rf '" + m.bpath(".fencefs") + "' && cp -a '" + old_state + "' '" +
                  m.bpath(".fencefs") + "'"));
  int st = 0;
  std::string out = sh_out(std::string(FENCECTL_BIN) + " verify '" + m.backing() + "' 2>&1", &st);
  EXPECT_NE(0, st) << out;
  ASSERT_TRUE(m.remount()) << m.daemon_log();
  const std::string last = domain(kDomains - 1);
  // Said before serving, and after the mount appears.
  EXPECT_TRUE(wait_for_text(m.log_path(), "rollback detected: domain " + last));
  std::string log = m.daemon_log();
  for (const std::string& d : all) {
    EXPECT_NE(std::string::npos,
              out.find("domain " + d + ": BACKING's high-water copy says epoch 5"))
        << d;
    EXPECT_NE(std::string::npos, log.find("rollback detected: domain " + d + " was at epoch 5"))
        << d;
  }
  // Token 3 is above the restored epoch 0, but below what the copies recorded.
  EXPECT_EQ(EIO, in_child([&] {
              if (m.ctl("bind " + last + " 3")) return 1;
              return E(mkdir(m.path(last.substr(1) + "/new").c_str(), 0755));
            }));
  EXPECT_EQ(EIO, in_child([&] { return m.ctl("advance / 4"); }));
}

TEST(Durability, RestoredOlderStateWithFloorStartsAboveIt) {
  Mount m;
  ASSERT_EQ(0, m.unmount());
  std::string old_state = m.root() + "/old-state";
  ASSERT_EQ(0, sh("cp -a '" + m.bpath(".fencefs") + "' '" + old_state + "'"));
  ASSERT_TRUE(m.remount());
  ASSERT_EQ(0, in_child([&] { return m.ctl("advance / 8"); }));
  ASSERT_EQ(0, m.unmount());
  ASSERT_EQ(0, sh("rm -rf '" + m.bpath(".fencefs") + "' && cp -a '" + old_state + "' '" +
                  m.bpath(".fencefs") + "'"));
  ASSERT_EQ(-1000, m.try_mount({"-o", "floor=10"})) << m.daemon_log();
  EXPECT_EQ(10u, epoch_of(m.mnt()));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 10")) return 1;
              return E(mkdir(m.path("ok").c_str(), 0755));
            }));
}

TEST(Durability, LostStateOverStampedTreeNeedsInit) {
  Mount m;
  ASSERT_EQ(0, in_child([&] {
              if (m.ctl("bind / 6")) return 1;
              int fd = open(m.path("f").c_str(), O_WRONLY | O_CREAT, 0644);
              return fd < 0 ? 2 : close(fd);
            }));
  ASSERT_EQ(0, m.unmount());
  ASSERT_EQ(0, sh("rm -rf '" + m.bpath(".fencefs") + "'"));
  int st = m.try_mount({});
  EXPECT_EQ(1, st);
  EXPECT_NE(std::string::npos, m.daemon_log().find("--init")) << m.daemon_log();
  ASSERT_EQ(-1000, m.try_mount({"--init"})) << m.daemon_log();
  EXPECT_EQ(6u, epoch_of(m.mnt()));
  EXPECT_EQ(ESTALE, in_child([&] { return m.ctl("bind / 5"); }));
  // The state was made from the stamps, at their epoch: they are no rollback.
  EXPECT_EQ(std::string::npos, m.daemon_log().find("rollback detected")) << m.daemon_log();
  EXPECT_EQ(std::string::npos, sh_out("'" + std::string(FENCECTL_BIN) + "' audit --mount '" +
                                      m.mnt() + "' --decision detected")
                                   .find("rollback"));
}

// Daemonised (no -f), as fstab and systemd run it: the epochs kept beside the data are written
// too, so a restored older state is caught after a background daemon as well.
TEST(Durability, BackgroundDaemonKeepsTheHighWaterCopy) {
  std::string dir = temp_dir("bg");
  ASSERT_EQ(0, sh("mkdir -p " + dir + "/b " + dir + "/m"));
  ASSERT_EQ(0, sh(std::string(FENCEFS_BIN) + " " + dir + "/b " + dir + "/m 2>/dev/null"));
  EXPECT_EQ(0, sh("echo 'advance / 12' > " + dir + "/m/.fencefs/ctl"));
  ASSERT_EQ(0, sh("fusermount3 -u " + dir + "/m"));
  for (int i = 0; i < 100 && sh("pgrep -f '[f]encefs " + dir + "/b' >/dev/null") == 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::string hwm = sh_out("getfattr --only-values -n trusted.fencefs.hwm " + dir + "/b");
  EXPECT_NE(std::string::npos, hwm.find("/ 12")) << hwm;
  sh("rm -rf " + dir);
}

// Cluster members share BACKING and each keeps the copy: one that loaded it before another
// recorded more (a member that lagged, or rejoined) must not write it back lower.
TEST(Durability, HighWaterCopyIsNeverLoweredByAnotherWriter) {
  std::string dir = temp_dir("hwm2");
  auto open_dir = [&] { return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); };
  {
    fencefs::fence::HighWater lagging(open_dir()), ahead(open_dir());
    lagging.record("/", 3);
    ahead.record("/", 7);
    ahead.record("/x", 2);
    lagging.record("/y", 1);  // still holds "/ 3" from before
  }
  std::string hwm = sh_out("getfattr --only-values -n trusted.fencefs.hwm " + dir);
  EXPECT_EQ(hwm, "v1\n/ 7\n/x 2\n/y 1\n");
  sh("rm -rf " + dir);
}

// A domain root's own copy is written only on that domain's directory, found beneath BACKING's
// root and never through a symlink, and read back the same way: a directory elsewhere, or one
// that took the domain's path, is neither given a copy nor taken for one.
TEST(Durability, HighWaterOwnCopiesStayOnTheDomainsDirectory) {
  using fencefs::fence::HighWater;
  std::string dir = temp_dir("hwm3"), out = temp_dir("hwm3-out");
  ASSERT_EQ(0, sh("mkdir '" + dir + "/a' '" + dir + "/c' && ln -s '" + out + "' '" + dir + "/b'"));
  ASSERT_EQ(0, setxattr(out.c_str(), HighWater::kOwnXattr, "v1\n/b 9\n", 8, 0));
  struct stat a, o;
  ASSERT_EQ(0, stat((dir + "/a").c_str(), &a));
  ASSERT_EQ(0, stat(out.c_str(), &o));
  int root = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(root, 0);
  {
    HighWater hw(::dup(root));
    hw.record("/a", 3, {a.st_dev, a.st_ino});
    hw.record("/b", 4, {o.st_dev, o.st_ino});  // the symlink's target: not followed
    hw.record("/c", 5, {a.st_dev, a.st_ino});  // not the directory at /c
  }
  auto own = [](const std::string& path) {
    return sh_out("getfattr --only-values -n trusted.fencefs.hwm.own '" + path + "' 2>/dev/null");
  };
  EXPECT_EQ("v1\n/a 3\n", own(dir + "/a"));
  EXPECT_EQ("v1\n/b 9\n", own(out));
  EXPECT_EQ("", own(dir + "/c"));
  int err = -1;
  auto m = HighWater::read(root, {"/a", "/b", "/c"}, &err);
  EXPECT_EQ(0, err);
  EXPECT_EQ(3u, m["/a"]);
  EXPECT_EQ(4u, m["/b"]);  // the root's copy, not the 9 found through the symlink
  EXPECT_EQ(5u, m["/c"]);
  ::close(root);
  sh("rm -rf '" + dir + "' '" + out + "'");
}

// Stamps are xattrs of BACKING's files: whether they can be written is a question for BACKING's
// filesystem, not the state directory's (cluster mode keeps the state on another one). ramfs
// has no xattrs.
TEST(Durability, StampsFollowBackingsXattrSupportNotTheStateDirectorys) {
  std::string ram = temp_dir("ramfs");
  ASSERT_EQ(0, sh("mount -t ramfs -o mode=0700 fencefs-test-ramfs '" + ram + "'"));
  struct Cleanup {
    std::string dir;
    ~Cleanup() { sh("umount -l '" + dir + "' 2>/dev/null; rmdir '" + dir + "'"); }
  } cleanup{ram};
  auto job_writes = [](const Mount& m, const std::string& name) {
    return as_job(m, 2, [&] {
      int fd = ::open(m.path(name).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || write(fd, "data", 4) != 4) return 1;
      return E(::close(fd));
    });
  };
  {  // the state on ramfs, BACKING with xattrs: stamped
    Mount m({"-o", "state=" + ram + "/state"});
    ASSERT_TRUE(m.mounted()) << m.daemon_log();
    ASSERT_EQ(0, job_writes(m, "f"));
    // The size is restamped at RELEASE, which the kernel sends after close(2) has returned.
    std::string stamp;
    for (int t = 0; t < 5000; t += 10) {
      stamp = xattr(m.bpath("f"), "trusted.fencefs");
      if (stamp.rfind("2 4 ", 0) == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(0u, stamp.rfind("2 4 ", 0)) << stamp;
    EXPECT_EQ(std::string::npos, m.daemon_log().find("does not support trusted")) << m.daemon_log();
  }
  {  // BACKING on ramfs, the state with xattrs: no stamps, said once at mount, not per file
    std::string backing, state_root = temp_dir("xstate");
    struct Remove {
      const std::string& dir;
      ~Remove() { sh("rm -rf '" + dir + "'"); }
    } remove_state{state_root};
    Mount m({"-o", "state=" + state_root + "/state"}, [&](const std::string& b) {
      backing = b;
      sh("mount -t ramfs -o mode=0755 fencefs-test-ramfs '" + b + "'");
    });
    struct Unmount {
      const std::string& dir;
      ~Unmount() { sh("umount -l '" + dir + "' 2>/dev/null"); }
    } unmount_backing{backing};
    ASSERT_TRUE(m.mounted()) << m.daemon_log();
    ASSERT_EQ(0, job_writes(m, "f"));
    ASSERT_EQ(0, job_writes(m, "g"));
    EXPECT_EQ("data", slurp(m.path("g")));
    EXPECT_EQ(0u, xattr(m.bpath("f"), "trusted.fencefs").rfind("ERR:", 0));
    std::string log = m.daemon_log();
    EXPECT_NE(std::string::npos, log.find("BACKING does not support trusted.* xattrs")) << log;
    EXPECT_EQ(std::string::npos, log.find("cannot stamp")) << log;
    EXPECT_EQ(0, m.unmount());
  }
}

// An immutable BACKING root: the daemon cannot make its marker there and says why; made
// immutable after that, the stamp probe fails with EPERM although the filesystem has xattrs, and
// the log says which, so nobody goes looking for missing xattr support.
TEST(Durability, AnImmutableBackingRootIsNamedAsTheReason) {
  std::string root = temp_dir("immutable");
  ASSERT_FALSE(root.empty());
  const std::string b = root + "/b", mnt = root + "/m", state = root + "/state";
  struct Undo {
    std::string root, b;
    ~Undo() { sh("chattr -i '" + b + "' 2>/dev/null; rm -rf '" + root + "'"); }
  } undo{root, b};
  ASSERT_EQ(0, sh("mkdir -p '" + b + "' '" + mnt + "' && chattr +i '" + b + "'"));
  int st;
  std::string out = sh_out(
      std::string(FENCEFS_BIN) + " -f -o state=" + state + " " + b + " " + mnt + " 2>&1", &st);
  EXPECT_EQ(1, st) << out;
  EXPECT_NE(std::string::npos, out.find("is BACKING's root immutable or append-only")) << out;

  std::string backing;
  Mount m({"-o", "state=" + state}, [&](const std::string& bk) {
    backing = bk;
    sh("mkdir -m 0700 '" + bk + "/.fencefs' && chattr +i '" + bk + "'");
  });
  struct Mutable {
    const std::string& b;
    ~Mutable() { sh("chattr -i '" + b + "' 2>/dev/null"); }  // before the fixture removes it
  } mutable_again{backing};
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  std::string log = m.daemon_log();
  EXPECT_NE(std::string::npos, log.find("is it immutable or append-only")) << log;
  EXPECT_EQ(std::string::npos, log.find("does not support")) << log;
  sh("chattr -i '" + backing + "'");
  EXPECT_EQ(0, m.unmount());
}
