// The core overlay, end to end on real mounts: every operation passes through, every mutation is
// fenced, and mounting reports clear errors.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

// Runs a bash script from a file (no quoting games); returns its exit status.
int script(const Mount& m, const std::string& body) {
  std::string path = m.root() + "/script.sh";
  spit(path, "M='" + m.mnt() + "'\nC='" + std::string(FENCECTL_BIN) + "'\n" + body);
  return sh("bash '" + path + "'");
}

}  // namespace

TEST(Core, MountsAndHidesState) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  struct stat st;
  EXPECT_EQ(0, stat(m.bpath(".fencefs/snapshot").c_str(), &st)) << "state lives in BACKING";
  std::string ls = sh_out("ls -a '" + m.mnt() + "'");
  EXPECT_EQ(std::string::npos, ls.find(".fencefs")) << ls;
  std::string ctl = sh_out("ls '" + m.mnt() + "/.fencefs'");
  EXPECT_EQ("ctl\nmetrics\nstatus\n", ctl);
  EXPECT_NE(0, stat(m.path(".fencefs/journal").c_str(), &st));
  EXPECT_NE(0, stat(m.path(".fencefs/snapshot").c_str(), &st));
  // Not even a bound job can touch the state.
  int r = as_job(m, 1, [&] {
    if (mkdir(m.path(".fencefs/x").c_str(), 0755) == 0) return 1;
    if (rename(m.path(".fencefs").c_str(), m.path("y").c_str()) == 0) return 2;
    if (mkdir(m.path("d").c_str(), 0755) != 0) return 3;
    if (rename(m.path("d").c_str(), m.path(".fencefs").c_str()) == 0) return 4;
    if (unlink(m.path(".fencefs/ctl").c_str()) == 0) return 5;
    return 0;
  });
  EXPECT_EQ(0, r);
}

TEST(Core, PausedHolderIsRefused) {
  Mount m;
  int ready[2], go[2];
  ASSERT_EQ(0, pipe(ready));
  ASSERT_EQ(0, pipe(go));
  pid_t old_owner = fork();
  if (old_owner == 0) {
    if (m.ctl("bind / 1") != 0) _exit(10);
    int fd = open(m.path("data").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(11);
    if (write(fd, "old owner\n", 10) != 10) _exit(12);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(13);
    if (read(go[0], &c, 1) != 1) _exit(14);  // stopped here by SIGSTOP, resumed later
    ssize_t n = write(fd, "STALE WRITE\n", 12);
    int err = n < 0 ? errno : 0;
    int err2 = ftruncate(fd, 0) < 0 ? errno : 0;
    _exit(err == ESTALE && err2 == ESTALE ? 0 : 20);
  }
  char c;
  ASSERT_EQ(1, read(ready[0], &c, 1));
  kill(old_owner, SIGSTOP);
  // Another owner acquires epoch 2 and writes.
  EXPECT_EQ(0, as_job(m, 2, [&] {
              int fd = open(m.path("data").c_str(), O_WRONLY | O_TRUNC);
              if (fd < 0) return errno;
              if (write(fd, "new owner\n", 10) != 10) return 99;
              return close(fd) == 0 ? 0 : errno;
            }));
  kill(old_owner, SIGCONT);
  ASSERT_EQ(1, write(go[1], "g", 1));
  int st;
  waitpid(old_owner, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "old owner exit " << WEXITSTATUS(st);
  EXPECT_EQ("new owner\n", slurp(m.bpath("data")));
  EXPECT_EQ("2", xattr(m.path("data"), "user.fencefs.epoch"));
  EXPECT_EQ("2", xattr(m.path("data"), "user.fencefs.last_epoch"));
}

TEST(Core, EqualTokenWritesManyTimes) {
  Mount m;
  EXPECT_EQ(0, as_job(m, 5, [&] {
              for (int i = 0; i < 200; i++) {
                int fd = open(m.path("f").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
                if (fd < 0) return errno;
                if (write(fd, "x", 1) != 1) return errno;
                close(fd);
              }
              return 0;
            }));
  EXPECT_EQ(200u, slurp(m.bpath("f")).size());
  EXPECT_EQ(0, as_job(m, 5, [&] { return E(unlink(m.path("f").c_str())); }));
}

// Every fenced operation, with a stale token and with none, fails with the right errno and
// leaves BACKING exactly as it was.
struct OpCase {
  const char* name;
  std::function<int(const Mount&)> run;  // returns errno (0 = succeeded)
};

std::vector<OpCase> fenced_ops() {
  auto P = [](const Mount& m, const char* r) { return m.path(r); };
  return {
      {"open_wronly", [=](const Mount& m) { return E(open(P(m, "file").c_str(), O_WRONLY)); }},
      {"open_rdwr", [=](const Mount& m) { return E(open(P(m, "file").c_str(), O_RDWR)); }},
      {"open_trunc",
       [=](const Mount& m) { return E(open(P(m, "file").c_str(), O_RDONLY | O_TRUNC)); }},
      {"create",
       [=](const Mount& m) { return E(open(P(m, "new").c_str(), O_WRONLY | O_CREAT, 0644)); }},
      {"mknod", [=](const Mount& m) { return E(mknod(P(m, "fifo").c_str(), S_IFIFO | 0644, 0)); }},
      {"mkdir", [=](const Mount& m) { return E(mkdir(P(m, "newdir").c_str(), 0755)); }},
      {"unlink", [=](const Mount& m) { return E(unlink(P(m, "file").c_str())); }},
      {"rmdir", [=](const Mount& m) { return E(rmdir(P(m, "dir").c_str())); }},
      {"symlink", [=](const Mount& m) { return E(symlink("file", P(m, "sl").c_str())); }},
      {"link", [=](const Mount& m) { return E(link(P(m, "file").c_str(), P(m, "hl").c_str())); }},
      {"rename",
       [=](const Mount& m) { return E(rename(P(m, "file").c_str(), P(m, "moved").c_str())); }},
      {"rename_exchange",
       [=](const Mount& m) {
         return E(renameat2(AT_FDCWD, P(m, "file").c_str(), AT_FDCWD, P(m, "dir").c_str(),
                            RENAME_EXCHANGE));
       }},
      {"chmod", [=](const Mount& m) { return E(chmod(P(m, "file").c_str(), 0600)); }},
      {"chown", [=](const Mount& m) { return E(chown(P(m, "file").c_str(), 1, 1)); }},
      {"truncate", [=](const Mount& m) { return E(truncate(P(m, "file").c_str(), 1)); }},
      {"utimes",
       [=](const Mount& m) { return E(utimensat(AT_FDCWD, P(m, "file").c_str(), nullptr, 0)); }},
      {"setxattr",
       [=](const Mount& m) { return E(setxattr(P(m, "file").c_str(), "user.k", "v", 1, 0)); }},
      {"removexattr",
       [=](const Mount& m) { return E(removexattr(P(m, "file").c_str(), "user.old")); }},
  };
}

class FencedOp : public ::testing::TestWithParam<int> {};

TEST_P(FencedOp, StaleAndMissingTokensChangeNothing) {
  OpCase op = fenced_ops()[GetParam()];
  Mount m;
  // Epoch 3 set up a file (with an xattr) and a directory.
  ASSERT_EQ(0, as_job(m, 3, [&] {
              int fd = open(m.path("file").c_str(), O_WRONLY | O_CREAT, 0644);
              if (fd < 0 || write(fd, "content", 7) != 7) return 1;
              close(fd);
              if (setxattr(m.path("file").c_str(), "user.old", "1", 1, 0) != 0) return 2;
              return mkdir(m.path("dir").c_str(), 0755) != 0 ? 3 : 0;
            }));
  std::string before = tree_hash(m.backing());
  // The owner of epoch 3, superseded by epoch 4 while bound.
  EXPECT_EQ(ESTALE, as_superseded_job(m, 3, [&] { return op.run(m); }))
      << op.name << " with stale token";
  EXPECT_EQ(before, tree_hash(m.backing())) << op.name;
  EXPECT_EQ(EPERM, as_job(m, 0, [&] { return op.run(m); })) << op.name << " with no token";
  EXPECT_EQ(before, tree_hash(m.backing())) << op.name;
  // A stale token is refused at bind time already.
  EXPECT_EQ(ESTALE, in_child([&] { return m.ctl("bind / 3"); }));
  // The current owner may do it.
  EXPECT_EQ(0, as_job(m, 4, [&] { return op.run(m); })) << op.name << " with current token";
}

INSTANTIATE_TEST_SUITE_P(All, FencedOp, ::testing::Range(0, static_cast<int>(fenced_ops().size())),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(fenced_ops()[i.param].name);
                         });

// Operations through a handle opened under epoch 1, after epoch 2 acted.
TEST(Core, StaleHandleOperationsAreRefused) {
  Mount m;
  int ready[2], go[2];
  ASSERT_EQ(0, pipe(ready));
  ASSERT_EQ(0, pipe(go));
  ASSERT_EQ(0, as_job(m, 1, [&] {
              int fd = open(m.path("src").c_str(), O_WRONLY | O_CREAT, 0644);
              return fd >= 0 && write(fd, "source-data", 11) == 11 ? 0 : 1;
            }));
  pid_t holder = fork();
  if (holder == 0) {
    if (m.ctl("bind / 1") != 0) _exit(10);
    int fd = open(m.path("target").c_str(), O_RDWR | O_CREAT, 0644);
    int in = open(m.path("src").c_str(), O_RDONLY);
    if (fd < 0 || in < 0 || write(fd, "held", 4) != 4) _exit(11);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(12);
    int bad = 0;
    if (E(write(fd, "x", 1)) != ESTALE) bad |= 1;
    if (E(ftruncate(fd, 100)) != ESTALE) bad |= 2;
    if (E(fallocate(fd, 0, 0, 4096)) != ESTALE) bad |= 4;
    loff_t off_in = 0, off_out = 0;
    if (E(copy_file_range(in, &off_in, fd, &off_out, 5, 0)) != ESTALE) bad |= 8;
    if (E(pwrite(fd, "y", 1, 10)) != ESTALE) bad |= 16;
    // A shared writable mapping can be made, but what is written through it never lands.
    auto* p = static_cast<char*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (p == MAP_FAILED) {
      bad |= 32;
    } else {
      memcpy(p, "MAPD", 4);
      if (E(msync(p, 4096, MS_SYNC)) != EIO) bad |= 64;
      munmap(p, 4096);
    }
    _exit(bad);
  }
  char c;
  ASSERT_EQ(1, read(ready[0], &c, 1));
  std::string r = sh_out(std::string(FENCECTL_BIN) + " advance --mount '" + m.mnt() + "' / 2");
  EXPECT_NE(std::string::npos, r.find("advanced")) << r;
  std::string before = tree_hash(m.backing());
  ASSERT_EQ(1, write(go[1], "g", 1));
  int st;
  waitpid(holder, &st, 0);
  EXPECT_EQ(0, WEXITSTATUS(st)) << "bitmask of operations not refused";
  EXPECT_EQ(before, tree_hash(m.backing()));
}

TEST(Core, ReadsAreNeverFenced) {
  Mount m([] { return std::vector<std::string>{}; }(),
          [](const std::string& b) {
            std::ofstream(b + "/r") << "readable";
            std::filesystem::create_directory(b + "/sub");
          });
  EXPECT_EQ(0, as_job(m, 0, [&] {
              if (slurp(m.path("r")) != "readable") return 1;
              struct stat st;
              if (stat(m.path("sub").c_str(), &st) != 0) return 2;
              char buf[64];
              if (listxattr(m.path("r").c_str(), buf, sizeof buf) < 0) return 3;
              if (sh("ls -l '" + m.mnt() + "' >/dev/null") != 0) return 4;
              int fd = open(m.path("r").c_str(), O_RDONLY);
              if (fd < 0) return 5;
              void* p = mmap(nullptr, 8, PROT_READ, MAP_SHARED, fd, 0);
              if (p == MAP_FAILED || memcmp(p, "readable", 8) != 0) return 6;
              return 0;
            }));
}

TEST(Core, EpochsSurviveUnmountAndKill9) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 7, [&] { return E(mkdir(m.path("a").c_str(), 0755)); }));
  EXPECT_EQ(0, m.unmount()) << m.daemon_log();
  ASSERT_TRUE(m.remount());
  EXPECT_EQ("7", xattr(m.mnt(), "user.fencefs.epoch"));
  EXPECT_EQ(ESTALE, in_child([&] { return m.ctl("bind / 6"); }));
  ASSERT_EQ(0, as_job(m, 9, [&] { return E(mkdir(m.path("c").c_str(), 0755)); }));
  m.kill9();
  ASSERT_TRUE(m.remount());
  EXPECT_EQ("9", xattr(m.mnt(), "user.fencefs.epoch"));
  EXPECT_EQ(ESTALE, in_child([&] { return m.ctl("bind / 8"); }));
  // And a job bound to 9 before a restart is refused once 10 acted after it.
  EXPECT_EQ(ESTALE, as_superseded_job(m, 9, [&] { return E(mkdir(m.path("d").c_str(), 0755)); }));
  struct stat st;
  EXPECT_NE(0, stat(m.bpath("d").c_str(), &st));
}

TEST(Core, MalformedBindLinesAreEinval) {
  Mount m;
  for (const char* line :
       {"bind / 0\n", "bind / -1\n", "bind / 01\n", "bind / 1.5\n", "bind / 9223372036854775808\n",
        "bind /nodomain 1\n", "bind 1\n", "bind / 1 2\n", "bind  / 1\n", "frobnicate\n", "\n",
        "bind / 1\nbind / 2\n"}) {
    int r = in_child([&] { return m.ctl(line); });
    EXPECT_EQ(EINVAL, r) << "line: " << line;
  }
  // And nothing got bound by them.
  EXPECT_EQ(EPERM, as_job(m, 0, [&] {
              if (m.ctl("bind / 0\n") != EINVAL) return 1;
              return E(mkdir(m.path("x").c_str(), 0755));
            }));
  EXPECT_EQ("0", xattr(m.mnt(), "user.fencefs.epoch"));
}

TEST(Core, BindingIsInheritedAndSurvivesExec) {
  Mount m;
  EXPECT_EQ(0, script(m,
                      "set -e\n"
                      "echo 'bind / 4' > $M/.fencefs/ctl\n"
                      "sh -c 'mkdir '$M/from-grandchild\n"
                      "sh -c 'exec touch '$M/after-exec\n"
                      "echo 'unbind /' > $M/.fencefs/ctl\n"
                      "if mkdir $M/after-unbind 2>/dev/null; then exit 9; fi\n"));
  struct stat st;
  EXPECT_EQ(0, stat(m.bpath("from-grandchild").c_str(), &st));
  EXPECT_EQ(0, stat(m.bpath("after-exec").c_str(), &st));
  EXPECT_NE(0, stat(m.bpath("after-unbind").c_str(), &st));
  EXPECT_EQ("4", xattr(m.mnt(), "user.fencefs.epoch"));
}

TEST(Core, DomainsHaveTheirOwnEpochs) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 1, [&] {
              if (mkdir(m.path("jobs").c_str(), 0755)) return 1;
              return mkdir(m.path("jobs/a").c_str(), 0755) ? 2 : 0;
            }));
  ASSERT_EQ(0, sh(std::string(FENCECTL_BIN) + " domain add '" + m.path("jobs/a") + "'"));
  EXPECT_EQ("/jobs/a", xattr(m.path("jobs/a"), "user.fencefs.domain"));
  EXPECT_EQ("/", xattr(m.path("jobs"), "user.fencefs.domain"));
  EXPECT_EQ("0", xattr(m.path("jobs/a"), "user.fencefs.epoch"));
  // Token 1 for / does not reach into /jobs/a.
  EXPECT_EQ(EPERM, as_job(m, 1, [&] { return E(mkdir(m.path("jobs/a/x").c_str(), 0755)); }));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind /jobs/a 50")) return 1;
              if (mkdir(m.path("jobs/a/x").c_str(), 0755)) return errno;
              return E(mkdir(m.path("jobs/a/x/y").c_str(), 0755));
            }));
  EXPECT_EQ("50", xattr(m.path("jobs/a/x/y"), "user.fencefs.epoch"));
  EXPECT_EQ("1", xattr(m.path("jobs"), "user.fencefs.epoch"));
  // The domain root is pinned.
  EXPECT_EQ(EBUSY, as_job(m, 1, [&] {
              return E(rename(m.path("jobs/a").c_str(), m.path("jobs/b").c_str()));
            }));
  EXPECT_EQ(
      EBUSY,
      as_job(m, 1, [&] { return E(rename(m.path("jobs").c_str(), m.path("jobs2").c_str())); }))
      << "renaming a directory above a domain root would move the domain";
  // Declared domains survive a remount.
  EXPECT_EQ(0, m.unmount());
  ASSERT_TRUE(m.remount());
  EXPECT_EQ("/jobs/a", xattr(m.path("jobs/a/x"), "user.fencefs.domain"));
  EXPECT_EQ("50", xattr(m.path("jobs/a/x"), "user.fencefs.epoch"));
  std::string js = sh_out(std::string(FENCECTL_BIN) + " status --json --mount '" + m.mnt() + "'");
  EXPECT_NE(std::string::npos, js.find("\"path\":\"/jobs/a\",\"epoch\":50")) << js;
}

TEST(Core, FencectlRunAndAdvanceFromAShellScript) {
  Mount m;
  EXPECT_EQ(0, script(m,
                      "set -e\n"
                      "$C run --mount $M --domain / --token 3 -- sh -c 'echo one > $0/log' $M\n"
                      "$C advance --mount $M / 4\n"
                      "if $C run --mount $M --domain / --token 3 -- sh -c 'echo two >> $0/log' "
                      "$M; then echo 'stale job was not refused'; exit 1; fi\n"
                      "$C run --mount $M --domain / --token 4 -- sh -c 'echo three >> $0/log' $M\n"
                      "if $C advance --mount $M / 2; then exit 2; fi\n"
                      "$C status --mount $M | grep -q '^/ '\n"));
  EXPECT_EQ("one\nthree\n", slurp(m.bpath("log")));
}

TEST(Core, DoubleForkedGrandchildKeepsBinding) {
  Mount m;
  // The middle process exits at once; the grandchild is reparented to fencectl run (subreaper).
  std::string cmd = std::string(FENCECTL_BIN) + " run --mount '" + m.mnt() +
                    "' --domain / --token 2 -- sh -c '(sh -c \"sleep 0.3; echo orphan > " +
                    m.path("orphan") + "\" &) ; wait; sleep 0.6'";
  EXPECT_EQ(0, sh(cmd));
  EXPECT_EQ("orphan\n", slurp(m.bpath("orphan")));
}

TEST(Core, CleanShutdownOnSigterm) {
  Mount m;
  kill(m.daemon_pid(), SIGTERM);
  EXPECT_EQ(0, m.unmount()) << m.daemon_log();
  EXPECT_FALSE(m.mounted());
}

TEST(Core, ClearErrorsAtMountTime) {
  std::string root = temp_dir("cli");
  std::string bin = FENCEFS_BIN;
  int st;
  std::string out = sh_out(bin + " -f " + root + "/missing " + root + " 2>&1", &st);
  EXPECT_EQ(1, st);
  EXPECT_NE(std::string::npos, out.find("missing")) << out;
  // A corrupt state refuses to mount, naming the file.
  sh("mkdir -p " + root + "/b/.fencefs " + root + "/m && head -c 64 /dev/urandom > " + root +
     "/b/.fencefs/snapshot && head -c 64 /dev/urandom > " + root + "/b/.fencefs/journal");
  out = sh_out(bin + " -f " + root + "/b " + root + "/m 2>&1", &st);
  EXPECT_EQ(1, st);
  EXPECT_NE(std::string::npos, out.find("snapshot")) << out;
  // A busy mountpoint.
  {
    Mount m;
    out = sh_out(bin + " -f " + root + "/m " + m.mnt() + " 2>&1", &st);
    EXPECT_EQ(1, st);
    EXPECT_NE(std::string::npos, out.find("busy")) << out;
  }
  out = sh_out(bin + " --help", &st);
  EXPECT_EQ(0, st);
  EXPECT_NE(std::string::npos, out.find("BACKING MOUNTPOINT"));
  sh("rm -rf " + root);
}

TEST(Core, OwnershipIsTheCallers) {
  Mount m({}, [](const std::string& b) { chmod(b.c_str(), 0777); });
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 1")) return 1;
              if (setgid(65534) || setuid(65534)) return 2;
              int fd = open(m.path("mine").c_str(), O_WRONLY | O_CREAT, 0640);
              if (fd < 0) return 3;
              close(fd);
              return mkdir(m.path("mydir").c_str(), 0750) ? 4 : 0;
            }));
  struct stat st;
  ASSERT_EQ(0, stat(m.bpath("mine").c_str(), &st));
  EXPECT_EQ(65534u, st.st_uid);
  EXPECT_EQ(65534u, st.st_gid);
  EXPECT_EQ(0640u, st.st_mode & 07777);
  ASSERT_EQ(0, stat(m.bpath("mydir").c_str(), &st));
  EXPECT_EQ(65534u, st.st_uid);
  // Permissions still apply to a bound job: nobody cannot write root's file.
  ASSERT_EQ(0, as_job(m, 1, [&] {
              int fd = open(m.path("roots").c_str(), O_WRONLY | O_CREAT, 0644);
              return fd < 0 ? errno : 0;
            }));
  EXPECT_EQ(EACCES, in_child([&] {
              if (m.ctl("bind / 1")) return 1;
              if (setgid(65534) || setuid(65534)) return 2;
              return E(open(m.path("roots").c_str(), O_WRONLY));
            }));
}

// More inodes than the process may hold fds (the hard limit here is 20,000): idle inodes give
// their fd back and reopen it from a file handle when used again.
TEST(Core, MoreInodesThanFileDescriptors) {
  constexpr int kFiles = 30000;
  Mount m({}, [](const std::string& b) {
    std::filesystem::create_directory(b + "/many");
    for (int i = 0; i < kFiles; i++) std::ofstream(b + "/many/f" + std::to_string(i)) << i;
  });
  struct stat st;
  for (int i = 0; i < kFiles; i++)
    ASSERT_EQ(0, stat(m.path("many/f" + std::to_string(i)).c_str(), &st)) << i << ": " << errno;
  // The earliest ones were reclaimed by now; every kind of use brings them back.
  EXPECT_EQ(0, as_job(m, 1, [&] {
              for (int i = 0; i < 200; i++) {
                std::string p = m.path("many/f" + std::to_string(i));
                if (chmod(p.c_str(), 0600)) return 100 + errno;
                int fd = open(p.c_str(), O_WRONLY | O_APPEND);
                if (fd < 0) return 200 + errno;
                if (write(fd, "+", 1) != 1) return 3;
                close(fd);
                if (slurp(p) != std::to_string(i) + "+") return 4;
                if (xattr(p, "user.fencefs.last_epoch") != "1") return 5;
              }
              return 0;
            }));
  std::string metrics = slurp(m.path(".fencefs/metrics"));
  EXPECT_NE(std::string::npos, metrics.find("fencefs_inodes")) << metrics;
}

TEST(Core, CrossDomainMovesAndLinks) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 40, [&] {
              if (mkdir(m.path("a").c_str(), 0755) || mkdir(m.path("a/sub").c_str(), 0755))
                return 1;
              int fd = open(m.path("f").c_str(), O_WRONLY | O_CREAT, 0644);
              return fd < 0 || write(fd, "x", 1) != 1 || close(fd) ? 2 : 0;
            }));
  ASSERT_EQ(0, sh(std::string(FENCECTL_BIN) + " domain add '" + m.path("a") + "' >/dev/null"));
  auto both = [&](const std::function<int()>& fn) {
    return in_child([&] { return m.ctl("bind / 40") || m.ctl("bind /a 3") ? 99 : fn(); });
  };
  // A file moves across and takes the new domain's epoch as its stamp (no false rollback).
  EXPECT_EQ(0, both([&] { return E(rename(m.path("f").c_str(), m.path("a/f").c_str())); }));
  EXPECT_EQ("3", xattr(m.path("a/f"), "user.fencefs.last_epoch"));
  EXPECT_EQ(0, both([&] {
              int fd = open(m.path("a/f").c_str(), O_WRONLY | O_APPEND);
              return fd < 0 ? errno : E(write(fd, "y", 1));
            }));
  // A directory tree or a hard link does not: EXDEV, as across devices (mv copies instead).
  EXPECT_EQ(0, as_job(m, 40, [&] { return E(mkdir(m.path("tree").c_str(), 0755)); }));
  EXPECT_EQ(EXDEV,
            both([&] { return E(rename(m.path("tree").c_str(), m.path("a/tree").c_str())); }));
  EXPECT_EQ(EXDEV, both([&] { return E(link(m.path("a/f").c_str(), m.path("g").c_str())); }));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 40") || m.ctl("bind /a 3")) return 99;
              return sh("mv '" + m.path("tree") + "' '" + m.path("a/tree") + "'");
            }));
  struct stat st;
  EXPECT_EQ(0, stat(m.bpath("a/tree").c_str(), &st));
}

// `mount -t fuse.fencefs BACKING MNT -o …` runs mount.fuse3, which runs `fencefs BACKING MNT -o …`
// found on PATH (here build/; installed, /usr/local/bin).
TEST(Core, MountsThroughMountFuse3) {
  std::string dir = temp_dir("mountfuse");
  ASSERT_EQ(0, sh("mkdir -p " + dir + "/b " + dir + "/m"));
  std::string bin_dir = std::filesystem::path(FENCEFS_BIN).parent_path();
  ASSERT_EQ(0, sh("PATH='" + bin_dir + "':$PATH mount.fuse3 " + dir + "/b " + dir +
                  "/m -t fuse.fencefs -o max_jump=50,noatime 2>/dev/null"));
  EXPECT_NE(std::string::npos, sh_out("grep ' " + dir + "/m ' /proc/mounts").find("fuse.fencefs"));
  // The fencefs option reached the daemon: a jump beyond 50 is refused.
  EXPECT_NE(0, sh("echo 'advance / 60' > " + dir + "/m/.fencefs/ctl 2>/dev/null"));
  EXPECT_EQ(0, sh("echo 'advance / 40' > " + dir + "/m/.fencefs/ctl"));
  EXPECT_EQ(0, sh("fusermount3 -u " + dir + "/m"));
  sh("rm -rf " + dir);
}
