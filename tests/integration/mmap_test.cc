// Memory-mapped files: shared mappings of writable handles work, and writes through them stay
// fenced. The rule (README, "Mapped files"): a writeback of mapped pages lands only while every
// handle of the file opened O_RDWR holds the domain's current epoch; otherwise it fails with EIO,
// reported by msync, fsync or close, and the refused bytes are dropped from the page cache.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kPages = 8;
constexpr size_t kSize = kPage * kPages;

int advance(const Mount& m, int token) {
  return sh(std::string(FENCECTL_BIN) + " advance --mount '" + m.mnt() + "' / " +
            std::to_string(token) + " >/dev/null");
}

// Creates `name` as owner of `token`, filled with `fill`.
void make_file(const Mount& m, const char* name, int token, char fill) {
  ASSERT_EQ(0, as_job(m, token, [&] {
              int fd = open(m.path(name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
              std::string data(kSize, fill);
              if (fd < 0 || pwrite(fd, data.data(), kSize, 0) != static_cast<ssize_t>(kSize))
                return 1;
              return close(fd) == 0 ? 0 : 2;
            }));
}

// One byte over a pipe, to step a child through its script. Waits are bounded (a minute), so a
// failing step ends the test instead of hanging it.
void signal_fd(int fd) {
  char c = 's';
  if (write(fd, &c, 1) != 1) _exit(120);
}
bool wait_byte(int fd) {
  pollfd p{fd, POLLIN, 0};
  char c;
  return poll(&p, 1, 60000) == 1 && read(fd, &c, 1) == 1;
}
void wait_fd(int fd) {
  if (!wait_byte(fd)) _exit(121);
}

// A forked child, killed and reaped if the test ends before it does.
struct Kid {
  pid_t pid = -1;
  explicit Kid(pid_t p) : pid(p) {}
  ~Kid() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int p[2];
    if (pipe(p) == 0) r = p[0], w = p[1];
  }
  ~Pipe() {
    ::close(r);
    ::close(w);
  }
};

int status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

int exit_code(Kid& k) {
  if (k.pid < 0) return -1;
  int st = 0;
  waitpid(k.pid, &st, 0);
  k.pid = -1;
  return status_code(st);
}

// Waits for the child's next step; false (with its exit code in the message) if it ended first.
::testing::AssertionResult step_of(Kid& k, int fd) {
  for (int i = 0; i < 600; i++) {
    pollfd p{fd, POLLIN, 0};
    char c;
    if (poll(&p, 1, 100) == 1 && read(fd, &c, 1) == 1) return ::testing::AssertionSuccess();
    int st;
    if (waitpid(k.pid, &st, WNOHANG) == k.pid) {
      k.pid = -1;
      return ::testing::AssertionFailure() << "child exited with " << status_code(st);
    }
  }
  return ::testing::AssertionFailure() << "child did not reach its step within a minute";
}

// In a forked child: binds with `bind`, opens f O_RDWR into *fd and maps it shared and writable;
// exits (10, 11) if it cannot.
char* map_as_holder(const Mount& m, const std::string& bind, int* fd) {
  if (m.ctl(bind) != 0) _exit(10);
  *fd = open(m.path("f").c_str(), O_RDWR);
  void* p = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  if (*fd < 0 || p == MAP_FAILED) _exit(11);
  return static_cast<char*>(p);
}

// msync of a freshly dirtied page until it succeeds: a writeback is refused while refused bytes
// of the file are still being dropped from the page cache (milliseconds).
int msync_until_ok(char* map, size_t page, char fill) {
  for (int i = 0; i < 1000; i++) {
    memset(map + page * kPage, fill, kPage);
    if (msync(map, kSize, MS_SYNC) == 0) return 0;
    if (errno != EIO) return errno;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ETIMEDOUT;
}

}  // namespace

// What LMDB and sqlite's mmap_size do: map for reading a file they write with pwrite.
TEST(Mmap, SharedReadMapOfWritableHandleIsCoherentWithWrites) {
  Mount m;
  make_file(m, "f", 1, 'a');
  EXPECT_EQ(0, as_job(m, 1, [&] {
              int rw = open(m.path("f").c_str(), O_RDWR);
              int ro = open(m.path("f").c_str(), O_RDONLY);
              if (rw < 0 || ro < 0) return 1;
              auto* p = static_cast<char*>(mmap(nullptr, kSize, PROT_READ, MAP_SHARED, rw, 0));
              if (p == MAP_FAILED) return 100 + errno;  // ENODEV before mapped I/O was supported
              if (p[0] != 'a' || p[kSize - 1] != 'a') return 3;
              if (pwrite(rw, "through rw", 10, kPage + 5) != 10) return 4;
              if (memcmp(p + kPage + 5, "through rw", 10) != 0) return 5;
              // another writable handle of the same file, and a read-only handle's reads
              int rw2 = open(m.path("f").c_str(), O_WRONLY);
              if (rw2 < 0 || pwrite(rw2, "other handle", 12, 3 * kPage) != 12) return 6;
              if (memcmp(p + 3 * kPage, "other handle", 12) != 0) return 7;
              char buf[12];
              if (pread(ro, buf, 12, 3 * kPage) != 12 || memcmp(buf, "other handle", 12) != 0)
                return 8;
              // growing the file: the new part maps too
              std::string tail(kPage, 't');
              if (pwrite(rw, tail.data(), kPage, kSize) != static_cast<ssize_t>(kPage)) return 9;
              auto* q =
                  static_cast<char*>(mmap(nullptr, kSize + kPage, PROT_READ, MAP_SHARED, rw, 0));
              if (q == MAP_FAILED || q[kSize] != 't' || q[kSize + kPage - 1] != 't') return 10;
              munmap(q, kSize + kPage);
              munmap(p, kSize);
              close(rw2);
              close(ro);
              return close(rw) == 0 ? 0 : 11;
            }));
  std::string want(kSize, 'a');
  want.replace(kPage + 5, 10, "through rw");
  want.replace(3 * kPage, 12, "other handle");
  want += std::string(kPage, 't');
  EXPECT_TRUE(slurp(m.bpath("f")) == want);
}

TEST(Mmap, OwnerWritesThroughASharedMapping) {
  Mount m;
  make_file(m, "f", 3, 'a');
  EXPECT_EQ(0, as_job(m, 3, [&] {
              int fd = open(m.path("f").c_str(), O_RDWR);
              auto* p = static_cast<char*>(
                  mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
              if (p == MAP_FAILED) return 100 + errno;
              memcpy(p + 10, "mapped write", 12);
              if (msync(p, kSize, MS_SYNC) != 0) return 2;
              memcpy(p + 2 * kPage, "second", 6);
              munmap(p, kSize);  // written back when the mapping goes
              return close(fd) == 0 ? 0 : 3;
            }));
  std::string want(kSize, 'a');
  want.replace(10, 12, "mapped write");
  want.replace(2 * kPage, 6, "second");
  EXPECT_TRUE(slurp(m.bpath("f")) == want);
  EXPECT_EQ("3", xattr(m.path("f"), "user.fencefs.last_epoch"));
}

// The holder maps, dirties pages and is paused; the domain advances and the new owner writes; the
// holder resumes, dirties more pages, msyncs and exits. Only the new owner's data lands, and the
// holder sees the error.
TEST(Mmap, PausedHolderWithSharedWritableMapping) {
  Mount m;
  make_file(m, "f", 1, 'a');
  Pipe ready;
  Kid holder(fork());
  if (holder.pid == 0) {
    int fd = -1;
    char* p = map_as_holder(m, "bind / 1", &fd);
    memset(p, 'H', kSize / 2);  // dirty, not yet written back
    signal_fd(ready.w);
    raise(SIGSTOP);
    // Resumed after the advance: a store faults (a page the holder would read in), or lands in a
    // page the new owner read in, and its writeback is refused.
    if (!store(p + kSize / 2, 'h', kSize / 2) || !store(p, 'h', kPage)) _exit(0);
    int rc = msync(p, kSize, MS_SYNC);
    int err = rc != 0 ? errno : 0;
    munmap(p, kSize);
    close(fd);
    _exit(err == EIO ? 0 : err == 0 ? 20 : 21);
  }
  ASSERT_TRUE(step_of(holder, ready.r));
  int st;
  ASSERT_EQ(holder.pid, waitpid(holder.pid, &st, WUNTRACED));
  ASSERT_TRUE(WIFSTOPPED(st));
  ASSERT_EQ(0, advance(m, 2));
  std::string fresh(kSize, 'N');
  EXPECT_EQ(0, as_job(m, 2, [&] {
              int fd = open(m.path("f").c_str(), O_RDWR);
              if (fd < 0 || pwrite(fd, fresh.data(), kSize, 0) != static_cast<ssize_t>(kSize))
                return 1;
              // close(2) writes back the file's dirty pages first: the holder's are refused, and
              // the kernel keeps one error flag per file, so this close may be the one to say EIO.
              return close(fd) == 0 || errno == EIO ? 0 : 2;
            }));
  kill(holder.pid, SIGCONT);
  EXPECT_EQ(0, exit_code(holder)) << "20: the holder's msync succeeded; 21: other error";
  EXPECT_TRUE(slurp(m.bpath("f")) == fresh)
      << "BACKING holds something besides the new owner's data";
  EXPECT_TRUE(slurp(m.path("f")) == fresh) << "the mount shows bytes that are not in BACKING";
  EXPECT_EQ("2", xattr(m.path("f"), "user.fencefs.last_epoch"));
}

// A superseded holder and the new owner have the file mapped at once.
TEST(Mmap, SupersededHolderAndNewOwnerMappedAtOnce) {
  Mount m;
  make_file(m, "f", 1, 'a');
  Pipe h_go, h_done, o_ready, o_go;
  Kid holder(fork());
  if (holder.pid == 0) {
    int fd = -1;
    char* p = map_as_holder(m, "bind / 1", &fd);
    signal_fd(h_done.w);
    wait_fd(h_go.r);  // superseded by now: a store faults, or is refused at writeback
    if (!store(p, 'H', kPage) || !store(p + kPage + kPage / 2, 'H', kPage / 2)) _exit(0);
    int rc = msync(p, kSize, MS_SYNC);
    int err = rc != 0 ? errno : 0;
    munmap(p, kSize);
    close(fd);
    _exit(err == EIO ? 0 : err == 0 ? 20 : 21);
  }
  ASSERT_TRUE(step_of(holder, h_done.r));
  ASSERT_EQ(0, advance(m, 2));
  Kid owner(fork());
  if (owner.pid == 0) {
    int fd = -1;
    char* p = map_as_holder(m, "bind / 2", &fd);
    // While a superseded O_RDWR handle is open, no mapped writeback lands, not even the owner's.
    memset(p + kPage, 'N', kPage / 2);
    if (msync(p, kSize, MS_SYNC) == 0) _exit(30);
    if (errno != EIO) _exit(31);
    // write(2) stays the owner's own, fenced by its handle's token
    std::string w(kPage, 'W');
    if (pwrite(fd, w.data(), kPage, 2 * kPage) != static_cast<ssize_t>(kPage)) _exit(32);
    if (p[2 * kPage] != 'W') _exit(33);
    signal_fd(o_ready.w);
    wait_fd(o_go.r);  // the holder has tried and exited
    int err = msync_until_ok(p, 3, 'M');
    if (err) _exit(40 + (err == ETIMEDOUT ? 0 : 1));
    // the holder's refused bytes are gone from the owner's mapping too
    for (int i = 0; i < 1000 && p[0] != 'a'; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (p[0] != 'a' || p[kPage + kPage / 2] != 'a') _exit(50);
    munmap(p, kSize);
    _exit(close(fd) == 0 ? 0 : 51);
  }
  ASSERT_TRUE(step_of(owner, o_ready.r));
  signal_fd(h_go.w);
  EXPECT_EQ(0, exit_code(holder)) << "20: the superseded holder's msync succeeded";
  signal_fd(o_go.w);
  EXPECT_EQ(0, exit_code(owner)) << "30: the owner's mapped write landed beside a superseded "
                                    "handle; 40: it never landed afterwards; 50: holder's bytes "
                                    "still visible";
  std::string want(kSize, 'a');
  want.replace(2 * kPage, kPage, std::string(kPage, 'W'));
  want.replace(3 * kPage, kPage, std::string(kPage, 'M'));
  std::string got = slurp(m.bpath("f"));
  EXPECT_EQ(want.size(), got.size());
  for (size_t i = 0; i < std::min(want.size(), got.size()); i++) {
    if (want[i] != got[i]) {
      ADD_FAILURE() << "BACKING byte " << i << " is '" << got[i] << "', want '" << want[i] << "'";
      break;
    }
  }
  EXPECT_TRUE(slurp(m.path("f")) == want) << "the mount shows bytes that are not in BACKING";
}

// A store into a mapped page reaches no daemon until writeback (30 s later by default), and every
// reader of the cached page sees it meanwhile. So a superseded holder's stores must not outlive
// the advance there: the advance drops the pages it dirtied, and a store made after it (into a
// page read in again by anyone) is dropped at the next sweep. Reads stay unfenced.
void superseded_stores_do_not_show(std::vector<std::string> daemon_args) {
  Mount m(daemon_args);
  make_file(m, "f", 1, 'a');
  Pipe cmd, reply;
  Kid holder(fork());
  if (holder.pid == 0) {
    int fd = -1;
    char* p = map_as_holder(m, "bind / 1", &fd);
    signal_fd(reply.w);
    // Commands: a page number to store 'X' into (replies 'S' stored, 'F' faulted); 'r' to read
    // through the handle (replies 'E' when refused with ESTALE or EIO); 'q' to end.
    for (char c; read(cmd.r, &c, 1) == 1 && c != 'q';) {
      char r = 'R';
      if (c >= '0' && c < '0' + static_cast<int>(kPages)) {
        r = store(p + (c - '0') * kPage, 'X', 16) ? 'S' : 'F';
      } else if (c == 'r') {
        char b;
        r = pread(fd, &b, 1, 5 * kPage) == -1 && (errno == ESTALE || errno == EIO) ? 'E' : 'R';
      }
      if (write(reply.w, &r, 1) != 1) _exit(12);
    }
    _exit(0);
  }
  ASSERT_TRUE(step_of(holder, reply.r));
  auto ask = [&](char c) {
    char r = '?';
    pollfd pf{reply.r, POLLIN, 0};
    if (write(cmd.w, &c, 1) == 1 && poll(&pf, 1, 60000) == 1 && read(reply.r, &r, 1) != 1) r = '?';
    return r;
  };
  // A reader's shared mapping, made before the advance: it opens nothing afterwards (a fresh
  // read-only open drops the cached pages anyway while a writable handle is open).
  int rfd = open(m.path("f").c_str(), O_RDONLY);
  ASSERT_GE(rfd, 0);
  auto* r = static_cast<volatile char*>(mmap(nullptr, kSize, PROT_READ, MAP_SHARED, rfd, 0));
  ASSERT_NE(MAP_FAILED, r);
  ASSERT_EQ('S', ask('0'));  // stored under epoch 1, not written back
  EXPECT_EQ('X', r[0]);
  auto shows = [&](size_t page, char want) {  // 2 s at most
    for (int i = 0; i < 200; i++) {
      if (r[page * kPage] == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  ASSERT_EQ(0, advance(m, 2));
  EXPECT_TRUE(shows(0, 'a')) << "the holder's stores made before the advance still show";

  // The holder stores into a page the reader read in (a sweep may drop it first: retried).
  char stored = '?';
  for (int i = 0; i < 20 && stored != 'S'; i++) {
    EXPECT_EQ('a', r[2 * kPage]);
    stored = ask('2');
  }
  ASSERT_EQ('S', stored) << "the holder never found the page in the cache";
  EXPECT_TRUE(shows(2, 'a')) << "the holder's store after the advance still shows";

  // Nobody reads: the holder's store reads its page in itself, and shows until the next sweep.
  std::this_thread::sleep_for(4 * std::chrono::milliseconds(100));
  EXPECT_EQ('S', ask('4'));
  EXPECT_TRUE(shows(4, 'a')) << "a store into a page the holder read in itself still shows";
  EXPECT_EQ('R', ask('r')) << "a read(2) through the superseded handle was refused: reads are "
                              "never fenced";
  char q = 'q';
  ASSERT_EQ(1, write(cmd.w, &q, 1));
  EXPECT_EQ(0, exit_code(holder));
  EXPECT_TRUE(slurp(m.bpath("f")) == std::string(kSize, 'a'))
      << "the holder's bytes reached BACKING";
  for (size_t k = 0; k < kPages; k++) EXPECT_EQ('a', r[k * kPage]) << "page " << k;
  munmap(const_cast<char*>(r), kSize);
  close(rfd);
  EXPECT_TRUE(slurp(m.path("f")) == std::string(kSize, 'a'));
}

TEST(Mmap, ASupersededHoldersStoresDoNotShowAfterTheAdvance) { superseded_stores_do_not_show({}); }

// With one daemon thread: the drops run on a thread of their own while the session thread
// answers the write-backs they cause.
TEST(Mmap, ASupersededHoldersStoresDoNotShowAfterTheAdvanceSingleThreaded) {
  superseded_stores_do_not_show({"-s"});
}

// A refused write(2) has already been copied into the kernel's page cache; it must not reach
// BACKING later with the owner's writeback of the same page.
TEST(Mmap, RefusedWriteDoesNotLandWithTheOwnersWriteback) {
  Mount m;
  make_file(m, "f", 1, 'a');
  Pipe h_ready, h_go, o_ready, o_go;
  Kid holder(fork());
  if (holder.pid == 0) {
    if (m.ctl("bind / 1") != 0) _exit(10);
    int fd = open(m.path("f").c_str(), O_RDWR);
    if (fd < 0) _exit(11);
    signal_fd(h_ready.w);
    wait_fd(h_go.r);
    std::string stale(200, 'S');
    ssize_t n = pwrite(fd, stale.data(), stale.size(), 100);
    int err = n < 0 ? errno : 0;
    close(fd);
    _exit(err == ESTALE ? 0 : 20);
  }
  ASSERT_TRUE(step_of(holder, h_ready.r));
  ASSERT_EQ(0, advance(m, 2));
  Kid owner(fork());
  if (owner.pid == 0) {
    int fd = -1;
    char* p = map_as_holder(m, "bind / 2", &fd);
    if (p[100] != 'a') _exit(12);  // page 0 is mapped
    signal_fd(o_ready.w);
    wait_fd(o_go.r);
    int err = msync_until_ok(p, 0, 'M');  // the whole page, rewritten by the owner
    if (err) _exit(40);
    p[0] = 'm';  // one byte of page 0 only: the rest must come from BACKING
    if (msync(p, kSize, MS_SYNC) != 0) _exit(41);
    munmap(p, kSize);
    _exit(close(fd) == 0 ? 0 : 42);
  }
  ASSERT_TRUE(step_of(owner, o_ready.r));
  signal_fd(h_go.w);
  EXPECT_EQ(0, exit_code(holder));
  signal_fd(o_go.w);
  EXPECT_EQ(0, exit_code(owner));
  std::string want(kSize, 'a');
  want.replace(0, kPage, std::string(kPage, 'M'));
  want[0] = 'm';
  std::string got = slurp(m.bpath("f"));
  EXPECT_EQ(std::string::npos, got.find('S')) << "a refused byte reached BACKING";
  EXPECT_TRUE(got == want);
}

// The same, when the owner dirties only a byte beside the refused ones (no full-page rewrite).
void refused_write_beside_owners_mapped_byte(std::vector<std::string> daemon_args) {
  Mount m(daemon_args);
  make_file(m, "f", 1, 'a');
  Pipe h_ready, h_go, o_ready, o_go;
  Kid holder(fork());
  if (holder.pid == 0) {
    if (m.ctl("bind / 1") != 0) _exit(10);
    int fd = open(m.path("f").c_str(), O_RDWR);
    if (fd < 0) _exit(11);
    signal_fd(h_ready.w);
    wait_fd(h_go.r);
    std::string stale(200, 'S');
    ssize_t n = pwrite(fd, stale.data(), stale.size(), 100);
    int err = n < 0 ? errno : 0;
    close(fd);
    _exit(err == ESTALE ? 0 : 20);
  }
  ASSERT_TRUE(step_of(holder, h_ready.r));
  ASSERT_EQ(0, advance(m, 2));
  Kid owner(fork());
  if (owner.pid == 0) {
    int fd = -1;
    char* p = map_as_holder(m, "bind / 2", &fd);
    if (p[100] != 'a') _exit(12);
    signal_fd(o_ready.w);
    wait_fd(o_go.r);
    for (int i = 0; i < 1000; i++) {
      p[0] = 'm';
      if (msync(p, kSize, MS_SYNC) == 0) {
        munmap(p, kSize);
        _exit(close(fd) == 0 ? 0 : 42);
      }
      if (errno != EIO) _exit(41);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    _exit(40);
  }
  ASSERT_TRUE(step_of(owner, o_ready.r));
  signal_fd(h_go.w);
  EXPECT_EQ(0, exit_code(holder));
  signal_fd(o_go.w);
  EXPECT_EQ(0, exit_code(owner));
  std::string want(kSize, 'a');
  want[0] = 'm';
  std::string got = slurp(m.bpath("f"));
  EXPECT_EQ(std::string::npos, got.find('S')) << "a refused byte reached BACKING";
  EXPECT_TRUE(got == want);
}

TEST(Mmap, RefusedWriteBesideOwnersMappedByte) { refused_write_beside_owners_mapped_byte({}); }

// With one daemon thread the cache is still dropped: a thread of its own does that, while the
// session thread answers the WRITEs the kernel sends meanwhile.
TEST(Mmap, RefusedWriteBesideOwnersMappedByteSingleThreaded) {
  refused_write_beside_owners_mapped_byte({"-s"});
}

namespace {

// mdb_load's input (mdb_dump's format): keys FROM..TO; the header when `header`.
std::string lmdb_records(int from, int to, bool header, bool end) {
  std::string s;
  if (header) s = "VERSION=3\nformat=print\ntype=btree\nmapsize=67108864\nHEADER=END\n";
  char line[96];
  for (int i = from; i <= to; i++) {
    snprintf(line, sizeof line, " key%06d\n value-%06d-fencefs-lmdb\n", i, i);
    s += line;
  }
  if (end) s += "DATA=END\n";
  return s;
}

bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

// LMDB's own writer, superseded mid-load: mdb_load opened the environment under epoch 1 (data file
// mapped shared, lock file mapped shared and writable) and loaded half its input when the domain
// advanced. The rest of its load fails and changes nothing in BACKING; the new owner then reads
// what landed and loads more into the same environment.
TEST(Mmap, LmdbLoadOfASupersededHolderChangesNothing) {
  signal(SIGPIPE, SIG_IGN);
  Mount m;
  ASSERT_EQ(0, as_job(m, 1, [&] { return mkdir(m.path("env").c_str(), 0755) == 0 ? 0 : 1; }));
  Pipe in;
  Kid loader(fork());
  if (loader.pid == 0) {
    if (m.ctl("bind / 1") != 0) _exit(10);
    dup2(in.r, 0);
    ::close(in.w);
    execlp("mdb_load", "mdb_load", m.path("env").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ::close(in.r);
  in.r = -1;
  ASSERT_TRUE(write_all(in.w, lmdb_records(1, 5000, true, false)));
  // It commits every 100 records: wait until most of the first half is in BACKING.
  struct stat st {};
  for (int i = 0; i < 600; i++) {
    if (stat(m.bpath("env/data.mdb").c_str(), &st) == 0 && st.st_size >= 150 * 1024) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(st.st_size, 150 * 1024) << "mdb_load did not load its first half";
  ASSERT_EQ(0, advance(m, 2));
  std::string before = tree_hash(m.backing());
  write_all(in.w, lmdb_records(5001, 10000, false, true));
  ::close(in.w);
  in.w = -1;
  EXPECT_NE(0, exit_code(loader)) << "the superseded mdb_load succeeded";
  EXPECT_EQ(before, tree_hash(m.backing())) << "the superseded mdb_load changed BACKING";

  spit(m.root() + "/more.txt", lmdb_records(20001, 20100, true, true));
  std::string run =
      std::string(FENCECTL_BIN) + " run --mount '" + m.mnt() + "' --domain / --token 2 -- sh -c ";
  std::string env = m.path("env");
  std::string count = "mdb_dump -p '" + env + "' | grep -c '^ key'";
  int rc = -1;
  std::string landed = sh_out(run + "\"" + count + "\"", &rc);
  ASSERT_EQ(0, rc) << landed;
  int n = atoi(landed.c_str());
  EXPECT_GE(n, 1000);
  EXPECT_LE(n, 5000);
  std::string after = sh_out(run + "\"mdb_load -f '" + m.root() + "/more.txt' '" + env + "' && " +
                                 count + " && mdb_stat '" + env + "'\"",
                             &rc);
  ASSERT_EQ(0, rc) << after;
  EXPECT_EQ(n + 100, atoi(after.c_str())) << after;
  EXPECT_NE(std::string::npos, after.find("Entries: " + std::to_string(n + 100))) << after;
}
