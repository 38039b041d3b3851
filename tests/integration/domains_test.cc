// The domain model on real mounts: a file is judged by the domain it is in now, one inode
// belongs to one domain, domains are known by identity (never by a path read back), a new
// domain starts clean, a replaced domain root stays the domain, a superseded close does not
// restamp.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

std::string fencectl() { return std::string(FENCECTL_BIN); }

// fgetxattr of a directory fd as text, or "ERR:<strerror>".
std::string fxattr(int fd, const char* name) {
  char buf[8192];
  ssize_t n = fgetxattr(fd, name, buf, sizeof buf);
  return n < 0 ? std::string("ERR:") + strerror(errno) : std::string(buf, static_cast<size_t>(n));
}

// Creates `depth` nested directories named `name` below dirfd, one mkdirat/openat at a time (so
// the total path may exceed PATH_MAX); returns an O_RDONLY fd of the deepest, or -errno.
int make_deep(int dirfd, const std::string& name, int depth) {
  int fd = dup(dirfd);
  for (int k = 0; k < depth; k++) {
    if (mkdirat(fd, name.c_str(), 0755) != 0 && errno != EEXIST) {
      int err = errno;
      close(fd);
      return -err;
    }
    int next = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY);
    int err = errno;
    close(fd);
    if (next < 0) return -err;
    fd = next;
  }
  return fd;
}

int write_at(int dirfd, const char* name, const char* data) {
  int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return errno;
  int err = write(fd, data, strlen(data)) < 0 ? errno : 0;
  close(fd);
  return err;
}

}  // namespace

// A writable handle opened before `domain add` declared a directory above its file carries a
// token of the old domain: refused (ESTALE) once the file is in the new one. Opening the file
// again with the new domain's token works.
TEST(Domains, HandleOpenedBeforeDomainAddIsRefused) {
  Mount m;
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 5")) return 1;
              if (mkdir(m.path("a").c_str(), 0755)) return 2;
              int fd = open(m.path("a/log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
              if (fd < 0 || write(fd, "before\n", 7) != 7) return 3;
              if (m.ctl("domain add /a")) return 4;
              if (write(fd, "after\n", 6) != -1) return 5;
              if (errno != ESTALE) return 6;
              if (ftruncate(fd, 0) != -1 || errno != ESTALE) return 7;
              close(fd);
              if (m.ctl("bind /a 1")) return 8;
              fd = open(m.path("a/log").c_str(), O_WRONLY | O_APPEND);
              if (fd < 0 || write(fd, "reopened\n", 9) != 9) return 9;
              return close(fd) ? 10 : 0;
            }));
  EXPECT_EQ("before\nreopened\n", slurp(m.bpath("a/log")));
}

// The same for a file renamed into another domain under an open handle.
TEST(Domains, HandleOfFileRenamedAcrossIsRefused) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 5, [&] { return E(mkdir(m.path("a").c_str(), 0755)); }));
  ASSERT_EQ(0, m.ctl("domain add /a"));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 5") || m.ctl("bind /a 1")) return 1;
              int fd = open(m.path("f").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
              if (fd < 0 || write(fd, "one\n", 4) != 4) return 2;
              if (rename(m.path("f").c_str(), m.path("a/f").c_str())) return 3;
              if (write(fd, "two\n", 4) != -1) return 4;
              return errno == ESTALE ? 0 : 5;
            }));
  EXPECT_EQ("one\n", slurp(m.bpath("a/f")));
}

// One inode, one domain: a file with several names does not move across (EXDEV, as across
// devices; mv copies instead).
TEST(Domains, MultiplyLinkedFileDoesNotMoveAcross) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 5, [&] {
              if (mkdir(m.path("a").c_str(), 0755)) return 1;
              if (write_at(AT_FDCWD, m.path("f").c_str(), "x")) return 2;
              return E(link(m.path("f").c_str(), m.path("g").c_str()));
            }));
  ASSERT_EQ(0, m.ctl("domain add /a"));
  std::string before = tree_hash(m.bpath(""));
  EXPECT_EQ(EXDEV, in_child([&] {
              if (m.ctl("bind / 5") || m.ctl("bind /a 1")) return 99;
              return E(rename(m.path("f").c_str(), m.path("a/f").c_str()));
            }));
  EXPECT_EQ(before, tree_hash(m.bpath("")));
  // With its other name gone, it moves.
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 5") || m.ctl("bind /a 1")) return 99;
              if (unlink(m.path("g").c_str())) return 98;
              return E(rename(m.path("f").c_str(), m.path("a/f").c_str()));
            }));
}

// `domain add` over a tree whose files have hard links outside it is refused, naming them.
TEST(Domains, DomainAddOverCrossingHardLinksIsRefused) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 5, [&] {
              if (mkdir(m.path("a").c_str(), 0755) || mkdir(m.path("a/sub").c_str(), 0755))
                return 1;
              if (write_at(AT_FDCWD, m.path("a/sub/x").c_str(), "x")) return 2;
              if (write_at(AT_FDCWD, m.path("a/inside").c_str(), "y")) return 3;
              // Links within the tree are fine; one leaving it is not.
              if (link(m.path("a/inside").c_str(), m.path("a/sub/inside2").c_str())) return 4;
              return E(link(m.path("a/sub/x").c_str(), m.path("outside").c_str()));
            }));
  int st = 0;
  std::string out = sh_out(fencectl() + " domain add '" + m.path("a") + "' 2>&1", &st);
  EXPECT_NE(0, st) << out;
  EXPECT_NE(std::string::npos, out.find("/a/sub/x")) << out;
  EXPECT_EQ(std::string::npos, out.find("/a/inside")) << out;
  EXPECT_EQ("/", xattr(m.path("a/sub"), "user.fencefs.domain"));
  EXPECT_EQ(EXDEV, m.ctl("domain add /a"));
  ASSERT_EQ(0, as_job(m, 5, [&] { return E(unlink(m.path("outside").c_str())); }));
  EXPECT_EQ(0, m.ctl("domain add /a"));
  EXPECT_EQ("/a", xattr(m.path("a/sub"), "user.fencefs.domain"));
}

// A directory whose name contains " (deleted)" is placed by identity: declared inside a new
// domain, it takes that domain's rule.
TEST(Domains, DeletedLookingNameTakesItsDomain) {
  Mount m;
  const std::string dir = "a/x (deleted)";
  ASSERT_EQ(0, as_job(m, 5, [&] {
              if (mkdir(m.path("a").c_str(), 0755)) return 1;
              return E(mkdir(m.path(dir).c_str(), 0755));
            }));
  struct stat st;
  ASSERT_EQ(0, stat(m.path(dir).c_str(), &st));  // cached in the daemon's table
  ASSERT_EQ(0, m.ctl("domain add /a"));
  EXPECT_EQ("/a", xattr(m.path(dir), "user.fencefs.domain"));
  EXPECT_EQ(EPERM,
            as_job(m, 5, [&] { return write_at(AT_FDCWD, m.path(dir + "/f").c_str(), "x"); }));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind /a 1")) return 99;
              return write_at(AT_FDCWD, m.path(dir + "/f").c_str(), "x");
            }));
}

// A directory deeper than PATH_MAX below a new domain takes that domain's rule.
TEST(Domains, PathLongerThanPathMaxTakesItsDomain) {
  Mount m;
  const std::string name(200, 'd');
  constexpr int kDepth = 30;  // ~6 KiB below the mount
  ASSERT_EQ(0, in_child([&] {
              if (m.ctl("bind / 5")) return 1;
              if (mkdir(m.path("a").c_str(), 0755)) return 2;
              int a = open(m.path("a").c_str(), O_RDONLY | O_DIRECTORY);
              int fd = make_deep(a, name, kDepth);
              return fd < 0 ? 3 : 0;
            }));
  // Hold the deep directory open here, so the daemon keeps its inode cached across the add.
  int a = open(m.path("a").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(a, 0);
  int deep = make_deep(a, name, kDepth);
  ASSERT_GE(deep, 0) << strerror(-deep);
  EXPECT_EQ("/", fxattr(deep, "user.fencefs.domain"));
  ASSERT_EQ(0, m.ctl("domain add /a"));
  EXPECT_EQ("/a", fxattr(deep, "user.fencefs.domain"));
  EXPECT_EQ(EPERM, as_job(m, 5, [&] { return write_at(deep, "f", "x"); }));
  EXPECT_EQ(EPERM, as_job(m, 5, [&] { return E(mkdirat(deep, "sub", 0755)); }));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind /a 1")) return 99;
              return write_at(deep, "f", "x");
            }));
  close(deep);
  close(a);
}

// A domain root whose parent's path in BACKING is longer than PATH_MAX cannot be renamed or
// removed by a job holding only the parent domain's token (EBUSY), nor can a directory above it.
TEST(Domains, DeepDomainRootIsPinnedByIdentity) {
  Mount m;
  // BACKING's path plus the parent's exceeds PATH_MAX; the domain's path alone fits a command.
  const std::string name(200, 'p');
  const std::string wide(245, 'w');
  const std::string last = "root";
  ASSERT_EQ(0, in_child([&] {
              if (m.ctl("bind / 5")) return 1;
              if (mkdir(m.path("top").c_str(), 0755)) return 2;
              int top = open(m.path("top").c_str(), O_RDONLY | O_DIRECTORY);
              int fd = make_deep(top, name, 19);
              if (fd < 0 || mkdirat(fd, wide.c_str(), 0755)) return 3;
              int parent = openat(fd, wide.c_str(), O_RDONLY | O_DIRECTORY);
              return parent < 0 || mkdirat(parent, last.c_str(), 0755) ? 4 : 0;
            }));
  std::string rel_parent = "/top";
  for (int k = 0; k < 19; k++) rel_parent += "/" + name;
  rel_parent += "/" + wide;
  std::string rel = rel_parent + "/" + last;
  ASSERT_GT(m.backing().size() + rel_parent.size(), static_cast<size_t>(PATH_MAX));
  ASSERT_EQ(0, m.ctl("domain add " + rel));
  int top = open(m.path("top").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(top, 0);
  int above = make_deep(top, name, 19);
  ASSERT_GE(above, 0);
  int parent = openat(above, wide.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(parent, 0);
  std::string before = tree_hash(m.bpath(""));
  EXPECT_EQ(EBUSY,
            as_job(m, 5, [&] { return E(renameat(parent, last.c_str(), parent, "moved")); }));
  EXPECT_EQ(EBUSY, as_job(m, 5, [&] { return E(unlinkat(parent, last.c_str(), AT_REMOVEDIR)); }));
  EXPECT_EQ(EBUSY, as_job(m, 5, [&] {
              return E(renameat(above, wide.c_str(), above, "elsewhere"));  // above the root
            }));
  EXPECT_EQ(before, tree_hash(m.bpath("")));
  int root = openat(parent, last.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(root, 0);
  EXPECT_EQ(rel, fxattr(root, "user.fencefs.domain"));
  EXPECT_EQ(EPERM, as_job(m, 5, [&] { return write_at(root, "f", "x"); }));
  close(root);
  close(parent);
  close(above);
  close(top);
}

// `domain add` over files written under the parent: the new domain starts clean. Their stamps
// are the parent's epochs, not evidence that the new domain was rolled back.
TEST(Domains, NewDomainIsNotRolledBackByParentStamps) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 7, [&] {
              if (mkdir(m.path("a").c_str(), 0755)) return 1;
              if (write_at(AT_FDCWD, m.path("a/f").c_str(), "old\n")) return 2;
              return write_at(AT_FDCWD, m.path("a/untouched").c_str(), "old\n");
            }));
  ASSERT_EQ(0, m.ctl("domain add /a"));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind /a 1")) return 99;
              return write_at(AT_FDCWD, m.path("a/f").c_str(), "new\n");
            }));
  EXPECT_EQ(0, m.ctl("advance /a 3"));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind /a 3")) return 99;
              return write_at(AT_FDCWD, m.path("a/f").c_str(), "newer\n");
            }));
  EXPECT_EQ("3", xattr(m.path("a/f"), "user.fencefs.last_epoch"));
  EXPECT_EQ("old\nnew\nnewer\n", slurp(m.bpath("a/f")));
  // Offline, the untouched file's stamp (epoch 7 of /) is no rollback of /a (epoch 3) either.
  ASSERT_EQ(0, m.unmount());
  int st = 0;
  std::string out = sh_out(fencectl() + " verify '" + m.backing() + "' 2>&1", &st);
  EXPECT_EQ(0, st) << out;
}

// A domain root removed and recreated directly in BACKING while mounted stays the domain: the
// parent's token does not reach into the new directory.
TEST(Domains, RootReplacedInBackingStaysTheDomain) {
  Mount m({"-o", "timeout=0"});
  ASSERT_EQ(0, as_job(m, 5, [&] { return E(mkdir(m.path("a").c_str(), 0755)); }));
  ASSERT_EQ(0, m.ctl("domain add /a"));
  ASSERT_EQ(0, in_child([&] {
              if (m.ctl("bind /a 1")) return 99;
              return write_at(AT_FDCWD, m.path("a/f").c_str(), "x");
            }));
  ASSERT_EQ(0, sh("rm -rf '" + m.bpath("a") + "' && mkdir '" + m.bpath("a") + "'"));
  EXPECT_EQ("/a", xattr(m.path("a"), "user.fencefs.domain"));
  EXPECT_NE(std::string::npos, slurp(m.bpath(".fencefs/audit.log")).find("\"domain_root\""))
      << "the operator learns that the domain's directory was replaced";
  EXPECT_EQ(EPERM, as_job(m, 5, [&] { return E(mkdir(m.path("a/x").c_str(), 0755)); }));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind /a 1")) return 99;
              return E(mkdir(m.path("a/x").c_str(), 0755));
            }));
  // Nothing may be renamed onto a domain's place either.
  ASSERT_EQ(0, sh("rmdir '" + m.bpath("a/x") + "' '" + m.bpath("a") + "'"));
  ASSERT_EQ(0, as_job(m, 5, [&] { return E(mkdir(m.path("b").c_str(), 0755)); }));
  EXPECT_EQ(EBUSY,
            as_job(m, 5, [&] { return E(rename(m.path("b").c_str(), m.path("a").c_str())); }));
}

// The same at mount time: a domain whose directory is missing becomes the domain again when a
// directory is made at its path, instead of silently joining "/".
TEST(Domains, MissingRootAtMountStaysTheDomain) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 5, [&] { return E(mkdir(m.path("a").c_str(), 0755)); }));
  ASSERT_EQ(0, m.ctl("domain add /a"));
  ASSERT_EQ(0, m.unmount());
  ASSERT_EQ(0, sh("rmdir '" + m.bpath("a") + "'"));
  ASSERT_TRUE(m.remount());
  ASSERT_EQ(0, as_job(m, 5, [&] { return E(mkdir(m.path("a").c_str(), 0755)); }));
  EXPECT_EQ("/a", xattr(m.path("a"), "user.fencefs.domain"));
  EXPECT_EQ(EPERM, as_job(m, 5, [&] { return write_at(AT_FDCWD, m.path("a/f").c_str(), "x"); }));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind /a 1")) return 99;
              return write_at(AT_FDCWD, m.path("a/f").c_str(), "x");
            }));
}

// A holder superseded while its file is open does not restamp at close: a direct edit made in
// between stays visible to `fencectl verify`.
TEST(Domains, SupersededCloseDoesNotRestamp) {
  Mount m;
  int ready[2], go[2];
  ASSERT_EQ(0, pipe(ready));
  ASSERT_EQ(0, pipe(go));
  pid_t holder = fork();
  if (holder == 0) {
    if (m.ctl("bind / 1") != 0) _exit(10);
    int fd = open(m.path("data").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "holder\n", 7) != 7) _exit(11);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(12);
    _exit(close(fd) == 0 ? 0 : 13);
  }
  char c;
  ASSERT_EQ(1, read(ready[0], &c, 1));
  ASSERT_EQ(0, m.ctl("advance / 2"));
  spit(m.bpath("data"), "edited directly in BACKING\n");
  ASSERT_EQ(1, write(go[1], "g", 1));
  int st;
  waitpid(holder, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << WEXITSTATUS(st);
  ASSERT_EQ(0, m.unmount());
  std::string out = sh_out(fencectl() + " verify '" + m.backing() + "' 2>&1", &st);
  EXPECT_EQ(1, st) << out;
  EXPECT_NE(std::string::npos, out.find("changed outside fencefs")) << out;
}

// The table follows renames: a directory moved (within a domain) under a path that is then
// declared a domain belongs to it, cached inodes and open handles included.
TEST(Domains, MovedDirectoryTakesTheDomainDeclaredAboveIt) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 5, [&] {
              if (mkdir(m.path("x").c_str(), 0755) || mkdir(m.path("x/sub").c_str(), 0755) ||
                  mkdir(m.path("a").c_str(), 0755))
                return 1;
              return write_at(AT_FDCWD, m.path("x/sub/f").c_str(), "x");
            }));
  int sub = open(m.path("x/sub").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(sub, 0);
  ASSERT_EQ(0, as_job(m, 5, [&] { return E(rename(m.path("x").c_str(), m.path("a/x").c_str())); }));
  ASSERT_EQ(0, m.ctl("domain add /a"));
  EXPECT_EQ("/a", fxattr(sub, "user.fencefs.domain"));
  EXPECT_EQ(EPERM, as_job(m, 5, [&] { return write_at(sub, "f", "y"); }));
  EXPECT_EQ(EPERM, as_job(m, 5, [&] { return write_at(sub, "g", "y"); }));
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind /a 1")) return 99;
              return write_at(sub, "f", "y");
            }));
  EXPECT_EQ("xy", slurp(m.bpath("a/x/sub/f")));
  close(sub);
}

// `domain add` under load: writers through handles of the parent domain keep writing into the
// tree until the declaration; once it has returned, not one more byte of theirs lands.
TEST(Domains, NothingOfTheParentLandsAfterDomainAdd) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 5, [&] { return E(mkdir(m.path("a").c_str(), 0755)); }));
  constexpr int kWriters = 4;
  int ready[2];
  ASSERT_EQ(0, pipe(ready));
  std::vector<pid_t> writers;
  for (int w = 0; w < kWriters; w++) {
    pid_t pid = fork();
    if (pid == 0) {
      if (m.ctl("bind / 5")) _exit(90);
      std::string p = m.path("a/w" + std::to_string(w));
      int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0) _exit(91);
      if (write(ready[1], "r", 1) != 1) _exit(92);
      // Bounded, so that a daemon that never refuses fails the test instead of hanging it.
      for (long n = 0; n < 2000000; n++)
        if (write(fd, "w", 1) != 1) _exit(errno == ESTALE ? 0 : 93);
      _exit(94);
    }
    writers.push_back(pid);
  }
  char c;
  for (int w = 0; w < kWriters; w++) ASSERT_EQ(1, read(ready[0], &c, 1));
  usleep(100 * 1000);
  ASSERT_EQ(0, m.ctl("domain add /a"));
  std::vector<size_t> at_add;
  for (int w = 0; w < kWriters; w++)
    at_add.push_back(slurp(m.bpath("a/w" + std::to_string(w))).size());
  for (pid_t pid : writers) {
    int st;
    waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "writer exit " << WEXITSTATUS(st);
  }
  for (int w = 0; w < kWriters; w++) {
    size_t now = slurp(m.bpath("a/w" + std::to_string(w))).size();
    EXPECT_GT(at_add[w], 0u);
    EXPECT_EQ(at_add[w], now) << "writer " << w << " landed bytes after domain add returned";
  }
}

namespace {

// Every regular file below dir: inode -> (path, content).
void collect(const std::string& dir, std::map<ino_t, std::pair<std::string, std::string>>* out) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || n == ".fencefs") continue;
    std::string p = dir + "/" + n;
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode))
      collect(p, out);
    else if (S_ISREG(st.st_mode))
      (*out)[st.st_ino] = {p, slurp(p)};
  }
  closedir(d);
}

struct Snapshot {
  std::string domain;  // advanced domain ("" for the domain add below)
  uint64_t epoch = 0;  // its epoch after the advance
  std::map<ino_t, size_t> sizes;
};

Snapshot snapshot(const Mount& m, const std::string& domain, uint64_t epoch) {
  Snapshot s{domain, epoch, {}};
  std::map<ino_t, std::pair<std::string, std::string>> files;
  collect(m.backing(), &files);
  for (auto& [ino, f] : files) s.sizes[ino] = f.second.size();
  return s;
}

}  // namespace

// Randomized: writers in several domains (each record tagged with the domain and token it was
// written under), SIGSTOP/SIGCONT storms, advances, renames across domains and a `domain add`
// during the load. Checked afterwards: once an advance of D to N+1 returned, no record written
// with a token of D below N+1 landed; once the domain add returned, no record of "/" landed in
// the new domain.
TEST(Domains, RandomizedStressNoSupersededRecordLands) {
  Mount m;
  const std::vector<std::string> dirs = {"", "d0", "d1", "d2", "n0"};
  ASSERT_EQ(0, as_job(m, 1, [&] {
              for (size_t k = 1; k < dirs.size(); k++)
                if (mkdir(m.path(dirs[k]).c_str(), 0755)) return 1;
              return 0;
            }));
  for (const char* d : {"/d0", "/d1", "/d2"}) ASSERT_EQ(0, m.ctl(std::string("domain add ") + d));
  unsigned seed = static_cast<unsigned>(time(nullptr));
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int kWriters = 6;
  std::vector<pid_t> writers;
  for (int w = 0; w < kWriters; w++) {
    pid_t pid = fork();
    if (pid == 0) {
      std::mt19937 rng(seed * 31 + w);
      auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      for (int k = 0; std::chrono::steady_clock::now() < end; k++) {
        const std::string& dir = dirs[rng() % dirs.size()];
        std::string dpath = dir.empty() ? m.mnt() : m.path(dir);
        std::string dom = xattr(dpath, "user.fencefs.domain");
        std::string epoch = xattr(dpath, "user.fencefs.epoch");
        if (dom.rfind("ERR:", 0) == 0 || epoch.rfind("ERR:", 0) == 0) continue;
        if (m.ctl("bind " + dom + " " + (epoch == "0" ? "1" : epoch))) continue;
        std::string f = dpath + "/w" + std::to_string(w) + "-" + std::to_string(k);
        int fd = open(f.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0) continue;
        std::string rec = dom + " " + (epoch == "0" ? "1" : epoch) + "\n";
        // Long-lived handles: many are open across an advance or the domain add.
        for (int r = 0; r < 400; r++) {
          if (write(fd, rec.data(), rec.size()) != static_cast<ssize_t>(rec.size())) break;
          if (r % 4 == 0) usleep(1000);
        }
        close(fd);
      }
      _exit(0);
    }
    writers.push_back(pid);
  }
  std::mt19937 rng(seed);
  std::vector<Snapshot> snaps;
  bool added = false;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (int step = 0; std::chrono::steady_clock::now() < end; step++) {
    int action = static_cast<int>(rng() % 4);
    if (!added && step >= 20) {
      ASSERT_EQ(0, m.ctl("domain add /n0"));
      snaps.push_back(snapshot(m, "", 0));
      added = true;
    } else if (action == 0) {
      const std::string& dir = dirs[rng() % 4];
      std::string dom = dir.empty() ? "/" : "/" + dir;
      uint64_t e = std::stoull(xattr(dir.empty() ? m.mnt() : m.path(dir), "user.fencefs.epoch"));
      if (m.ctl("advance " + dom + " " + std::to_string(e + 1)) == 0)
        snaps.push_back(snapshot(m, dom, e + 1));
    } else if (action == 1) {
      pid_t victim = writers[rng() % writers.size()];
      kill(victim, SIGSTOP);
      usleep(static_cast<useconds_t>(rng() % 20000));
      kill(victim, SIGCONT);
    } else if (action == 2) {
      // Move a writer's file across domains (d0..d2 and /), as an owner of both.
      const std::string& from = dirs[rng() % 4];
      const std::string& to = dirs[rng() % 4];
      std::string fdir = from.empty() ? m.mnt() : m.path(from);
      std::string tdir = to.empty() ? m.mnt() : m.path(to);
      in_child([&] {
        for (const std::string& d : {from, to}) {
          std::string p = d.empty() ? m.mnt() : m.path(d);
          std::string e = xattr(p, "user.fencefs.epoch");
          if (m.ctl("bind " + xattr(p, "user.fencefs.domain") + " " + (e == "0" ? "1" : e)))
            return 1;
        }
        DIR* dp = opendir(fdir.c_str());
        if (!dp) return 2;
        std::string pick;
        while (dirent* e = readdir(dp))
          if (e->d_name[0] == 'w') pick = e->d_name;
        closedir(dp);
        if (!pick.empty()) rename((fdir + "/" + pick).c_str(), (tdir + "/m" + pick).c_str());
        return 0;
      });
    } else {
      usleep(2000);
    }
  }
  for (pid_t pid : writers) {
    kill(pid, SIGCONT);
    int st;
    waitpid(pid, &st, 0);
  }
  ASSERT_TRUE(added);
  std::map<ino_t, std::pair<std::string, std::string>> final_files;
  collect(m.backing(), &final_files);
  size_t checked = 0, violations = 0;
  for (const Snapshot& s : snaps) {
    for (auto& [ino, f] : final_files) {
      auto it = s.sizes.find(ino);
      size_t from = it == s.sizes.end() ? 0 : it->second;
      std::istringstream later(f.second.substr(std::min(from, f.second.size())));
      std::string dom, tok;
      while (later >> dom >> tok) {
        checked++;
        bool bad = s.domain.empty() ? dom == "/" && f.first.rfind(m.bpath("n0/"), 0) == 0
                                    : dom == s.domain && std::stoull(tok) < s.epoch;
        if (bad && violations++ < 5)
          ADD_FAILURE() << f.first << ": record '" << dom << " " << tok << "' landed after "
                        << (s.domain.empty()
                                ? "domain add /n0"
                                : "advance " + s.domain + " " + std::to_string(s.epoch));
      }
    }
  }
  std::cout << snaps.size() << " snapshots, " << final_files.size() << " files, " << checked
            << " record checks\n";
  EXPECT_EQ(0u, violations);
  EXPECT_GT(snaps.size(), 2u);
  EXPECT_GT(checked, 0u);
}

// The operator may re-declare a domain whose directory was replaced: `domain add` of its path
// binds it to the directory there now (the epoch stays).
TEST(Domains, RedeclaringADomainRebindsIt) {
  Mount m({"-o", "timeout=0"});  // the kernel sees the change in BACKING at once
  ASSERT_EQ(0, as_job(m, 5, [&] { return E(mkdir(m.path("a").c_str(), 0755)); }));
  ASSERT_EQ(0, m.ctl("domain add /a"));
  EXPECT_EQ(EEXIST, m.ctl("domain add /a"));
  ASSERT_EQ(0, m.ctl("advance /a 4"));
  ASSERT_EQ(
      0, sh("mv '" + m.bpath("a") + "' '" + m.bpath("old") + "' && mkdir '" + m.bpath("a") + "'"));
  EXPECT_EQ(0, m.ctl("domain add /a"));
  EXPECT_EQ("/a", xattr(m.path("a"), "user.fencefs.domain"));
  EXPECT_EQ("4", xattr(m.path("a"), "user.fencefs.epoch"));
  EXPECT_EQ("/", xattr(m.path("old"), "user.fencefs.domain"));
  EXPECT_EQ(EPERM, as_job(m, 5, [&] { return E(mkdir(m.path("a/x").c_str(), 0755)); }));
}
