// Read-only opens keep the kernel's cached pages of a file that nothing changed (ReadCache): a
// file read again is not read from the daemon again, and no cached page ever hides a change,
// whichever way it was made, nor shows bytes the fence refused.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/proc.h"
#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

constexpr size_t kSize = 1 << 20;

// The metrics page in one read(2), so that reading it costs the same number of READs whatever its
// length (read in buffered chunks, one more READ when it grew past a chunk).
std::string metrics_once(const Mount& m) {
  std::string buf(1 << 20, '\0');
  int fd = open(m.path(".fencefs/metrics").c_str(), O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf.data(), buf.size()) : -1;
  if (fd >= 0) close(fd);
  buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return buf;
}

long long reads(const Mount& m) { return fuse_requests(metrics_once(m), "read"); }

// fencefs_read_opens_total{cache="CACHE"}: read-only opens that kept or dropped the pages.
long long opens(const Mount& m, const char* cache) {
  return metric(slurp(m.path(".fencefs/metrics")), "fencefs_read_opens_total",
                std::string("cache=\"") + cache + "\"");
}

// READ requests that reading the whole file through a fresh open costs, less what reading the
// metrics costs (its own READs count too: they are measured by a read of nothing in between).
long long reads_to_read(const Mount& m, const std::string& rel, std::string* got) {
  long long r0 = reads(m), r1 = reads(m);
  *got = slurp(m.path(rel));
  long long r2 = reads(m);
  return (r2 - r1) - (r1 - r0);
}

// Whether the kernel holds every page of the file's first kSize bytes, probed through a mapping of
// `fd`, a read-only handle of it held open (mincore sees the page cache, not the mapping's own).
bool cached(int fd) {
  void* map = mmap(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return false;
  std::vector<unsigned char> in(kSize / 4096);
  bool all = mincore(map, kSize, in.data()) == 0;
  for (unsigned char c : in) all = all && (c & 1);
  munmap(map, kSize);
  return all;
}

// A read-only open of `rel` while all its pages are cached, and whether they were still all cached
// once open(2) returned: the open kept them. The kernel reclaims pages of its own accord at any
// time, which is not the open's doing: they are read into the cache again first, up to 10 times.
// *reads: the READs that reading the file whole through that open then cost.
struct Kept {
  bool tried = false, kept = false;
  long long reads = -1;
  int refills = 0;  // read-only opens made to cache the pages again
};
Kept open_keeping(const Mount& m, const std::string& rel, int probe, std::string* got) {
  Kept r;
  long long r0, r1;
  for (;; r.refills++) {
    r0 = reads(m), r1 = reads(m);  // first: the pages are probed right before the open
    if (cached(probe)) break;
    if (r.refills == 10) return r;
    *got = slurp(m.path(rel));
  }
  r.tried = true;
  int fd = open(m.path(rel).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return r;
  r.kept = cached(probe);
  got->assign(kSize, '\0');
  ssize_t n = pread(fd, got->data(), kSize, 0);
  got->resize(n > 0 ? static_cast<size_t>(n) : 0);
  close(fd);
  long long r2 = reads(m);
  r.reads = (r2 - r1) - (r1 - r0);
  return r;
}

int advance(const Mount& m, int token) {
  return sh(std::string(FENCECTL_BIN) + " advance --mount '" + m.mnt() + "' / " +
            std::to_string(token) + " >/dev/null");
}

// Writes `data` at `off` through a handle opened with `flags`, as the owner of token 1.
int write_through(const Mount& m, const std::string& rel, int flags, const std::string& data,
                  off_t off) {
  return as_job(m, 1, [&] {
    int fd = open(m.path(rel).c_str(), flags);
    if (fd < 0) return 1;
    if (pwrite(fd, data.data(), data.size(), off) != static_cast<ssize_t>(data.size())) return 2;
    return close(fd) == 0 ? 0 : 3;
  });
}

}  // namespace

TEST(ReadCache, AnUnchangedFileIsReadFromTheDaemonOnce) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  std::string data(kSize, 'a');
  for (size_t k = 0; k < kSize; k += 4096) data[k] = static_cast<char>('b' + k / 4096 % 20);
  spit(m.bpath("f"), data);
  std::string got;
  EXPECT_GT(reads_to_read(m, "f", &got), 0);
  EXPECT_TRUE(got == data);
  int probe = open(m.path("f").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(probe, 0);
  long long kept = opens(m, "kept"), dropped = opens(m, "dropped");
  ASSERT_GE(kept, 0);
  int refills = 0, read_none = 0;
  for (int k = 0; k < 3; k++) {
    Kept r = open_keeping(m, "f", probe, &got);
    ASSERT_TRUE(r.tried) << "the kernel kept reclaiming the file's pages: nothing to keep";
    EXPECT_TRUE(r.kept) << "a read-only open dropped the cached pages";
    EXPECT_TRUE(got == data);
    refills += r.refills;
    read_none += r.reads == 0;
  }
  // The pages may be reclaimed while they are read, but not in every round.
  EXPECT_GT(read_none, 0) << "every read of the cached file was read from the daemon";
  EXPECT_EQ(kept + 3 + refills, opens(m, "kept")) << "the metrics do not count the kept opens";
  EXPECT_EQ(dropped, opens(m, "dropped"));
  close(probe);
}

// Every way to change a file's data, then a fresh open: the mount shows what BACKING holds. Each
// step first reads the file, so that its pages are cached when the change comes.
TEST(ReadCache, NoCachedPageHidesAChange) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  std::string want(kSize, 'a'), got;
  spit(m.bpath("f"), want);
  auto check = [&](const char* step) {
    got = slurp(m.path("f"));
    EXPECT_TRUE(got == want) << step << ": the mount shows stale bytes";
    EXPECT_TRUE(slurp(m.bpath("f")) == want) << step << ": BACKING is not what was written";
    EXPECT_GT(got.size(), 0u);
  };
  check("start");

  // Write-only handles bypass the page cache (direct I/O).
  want.replace(4096, 3, "WWW");
  ASSERT_EQ(0, write_through(m, "f", O_WRONLY, "WWW", 4096));
  check("O_WRONLY write");

  want.replace(8192, 3, "RRR");
  ASSERT_EQ(0, write_through(m, "f", O_RDWR, "RRR", 8192));
  check("O_RDWR write");

  // Truncate by path, then write the tail back: the same size as before, other bytes.
  ASSERT_EQ(0, as_job(m, 1, [&] { return truncate(m.path("f").c_str(), 4096) == 0 ? 0 : 1; }));
  want.resize(4096);
  check("truncate");
  want.resize(kSize, 'T');
  ASSERT_EQ(0, write_through(m, "f", O_WRONLY, std::string(kSize - 4096, 'T'), 4096));
  check("regrow");

  want.replace(0, 4096, std::string(4096, 'M'));
  ASSERT_EQ(0, as_job(m, 1, [&] {
              int fd = open(m.path("f").c_str(), O_RDWR);
              if (fd < 0) return 1;
              void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
              if (p == MAP_FAILED) return 2;
              memset(p, 'M', 4096);
              if (munmap(p, 4096) != 0) return 3;
              return close(fd) == 0 ? 0 : 4;
            }));
  check("shared mapping");

  want.replace(12288, 4096, std::string(4096, '\0'));
  ASSERT_EQ(0, as_job(m, 1, [&] {
              int fd = open(m.path("f").c_str(), O_WRONLY);
              if (fd < 0) return 1;
              if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 12288, 4096) != 0)
                return 2;
              return close(fd) == 0 ? 0 : 3;
            }));
  check("hole punched");

  spit(m.bpath("src"), std::string(4096, 'C'));
  want.replace(16384, 4096, std::string(4096, 'C'));
  ASSERT_EQ(0, as_job(m, 1, [&] {
              int in = open(m.path("src").c_str(), O_RDONLY);
              int out = open(m.path("f").c_str(), O_WRONLY);
              if (in < 0 || out < 0) return 1;
              off_t oi = 0, oo = 16384;
              if (copy_file_range(in, &oi, out, &oo, 4096, 0) != 4096) return 2;
              close(in);
              return close(out) == 0 ? 0 : 3;
            }));
  check("copy_file_range");

  // Beside the mount (another writer of BACKING): the same size, only the bytes differ.
  {
    int fd = open(m.bpath("f").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(3, pwrite(fd, "BBB", 3, 20480));
    close(fd);
  }
  want.replace(20480, 3, "BBB");
  check("written in BACKING");
}

// The kernel drops the pages inside the open(2) that was told to, after the daemon's reply: an
// open racing it must not keep them (they may still hold what is being dropped), so pages are kept
// only once that open has completed, which its handle's first READ or its RELEASE shows.
TEST(ReadCache, PagesAreKeptOnlyOnceTheDroppingOpenCompleted) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  std::string want(kSize, 'a'), got;
  spit(m.bpath("f"), want);
  ASSERT_TRUE(slurp(m.path("f")) == want);
  int r0 = open(m.path("f").c_str(), O_RDONLY);
  ASSERT_GE(r0, 0);
  want.replace(0, 5, "fresh");  // beside the mount (the same size: no stale attribute in the way)
  spit(m.bpath("f"), want);
  int r1 = open(m.path("f").c_str(), O_RDONLY);  // drops; neither read nor closed yet
  ASSERT_GE(r1, 0);
  // Pages cached again through the other handle: an open that took r1's drop as done keeps them.
  std::string buf(kSize, '\0');
  ASSERT_EQ(static_cast<ssize_t>(kSize), pread(r0, buf.data(), kSize, 0));
  EXPECT_TRUE(buf == want);
  EXPECT_GT(reads_to_read(m, "f", &got), 0) << "kept pages before the dropping open completed";
  EXPECT_TRUE(got == want);
  Kept r = open_keeping(m, "f", r0, &got);
  ASSERT_TRUE(r.tried) << "the kernel kept reclaiming the file's pages: nothing to keep";
  EXPECT_TRUE(r.kept) << "the completed open's drop was not taken as done";
  EXPECT_TRUE(got == want);
  close(r1);
  close(r0);
}

// A store through a shared mapping of the BACKING file into a page already dirty moves no
// timestamp: nothing tells such a change from none, so it shows once the timeout has passed.
TEST(ReadCache, AChangeThatMovesNoTimestampShowsAfterTheTimeout) {
  Mount m({"-o", "timeout=1"});
  ASSERT_TRUE(m.mounted());
  spit(m.bpath("f"), std::string(8192, 'A'));
  int fd = open(m.bpath("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  auto* p = static_cast<char*>(mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(MAP_FAILED, p);
  p[0] = 'B';
  EXPECT_EQ('B', slurp(m.path("f")).at(0));
  struct stat before, after;
  ASSERT_EQ(0, fstat(fd, &before));
  p[0] = 'C';
  ASSERT_EQ(0, fstat(fd, &after));
  EXPECT_EQ(before.st_ctim.tv_nsec, after.st_ctim.tv_nsec) << "the store moved ctime after all";
  usleep(1'200'000);
  EXPECT_EQ('C', slurp(m.path("f")).at(0)) << "a change in BACKING stayed hidden past the timeout";
  munmap(p, 8192);
  close(fd);
}

// A reader holding the file open while a writer changes it: the next open shows the change.
TEST(ReadCache, AChangeWhileAReaderIsOpenShowsInTheNextOpen) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  std::string want(kSize, 'a');
  spit(m.bpath("f"), want);
  ASSERT_TRUE(slurp(m.path("f")) == want);
  int rfd = open(m.path("f").c_str(), O_RDONLY);
  ASSERT_GE(rfd, 0);
  char c;
  ASSERT_EQ(1, pread(rfd, &c, 1, 0));
  want.replace(0, 5, "fresh");
  EXPECT_EQ(0, write_through(m, "f", O_WRONLY, "fresh", 0));
  EXPECT_TRUE(slurp(m.path("f")) == want) << "the next open showed stale bytes";
  close(rfd);
  EXPECT_TRUE(slurp(m.path("f")) == want);
}

// Bytes a superseded holder wrote through the page cache, and were refused, are never read: not
// by an open made after the refusal, though the file's pages were cached before it.
TEST(ReadCache, RefusedBytesAreNeverRead) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  std::string want(kSize, 'a');
  ASSERT_EQ(0, write_through(m, "f", O_RDWR | O_CREAT, want, 0));
  ASSERT_TRUE(slurp(m.path("f")) == want);
  ASSERT_TRUE(slurp(m.path("f")) == want);  // cached, kept
  EXPECT_EQ(0, as_job(m, 1, [&] {
              int fd = open(m.path("f").c_str(), O_RDWR);
              if (fd < 0) return 1;
              void* map = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
              if (map == MAP_FAILED) return 2;
              if (advance(m, 2) != 0) return 3;
              // Refused at writeback, or faults: the advance dropped the pages, and a
              // superseded handle reads none in.
              if (store(static_cast<char*>(map), 'X', 8192) &&
                  (msync(map, kSize, MS_SYNC) != -1 || errno != EIO))
                return 4;
              if (pwrite(fd, "YYYY", 4, 65536) != -1 || errno != ESTALE) return 5;
              munmap(map, kSize);
              close(fd);
              return 0;
            }));
  EXPECT_TRUE(slurp(m.bpath("f")) == want) << "refused bytes reached BACKING";
  for (int k = 0; k < 2; k++)
    EXPECT_TRUE(slurp(m.path("f")) == want) << "a read showed refused bytes (" << k << ")";
}

// With the attribute cache off (timeout=0, cluster mode's default) every open drops the pages.
TEST(ReadCache, OffWithTheAttributeCache) {
  Mount m({"-o", "timeout=0"});
  ASSERT_TRUE(m.mounted());
  spit(m.bpath("f"), std::string(kSize, 'a'));
  std::string got;
  long long dropped = opens(m, "dropped");
  EXPECT_GT(reads_to_read(m, "f", &got), 0);
  EXPECT_GT(reads_to_read(m, "f", &got), 0);
  EXPECT_EQ(kSize, got.size());
  EXPECT_EQ(0, opens(m, "kept"));
  EXPECT_EQ(dropped + 2, opens(m, "dropped"));
}

// The daemon's minor page faults, -1 if unreadable.
static long long minor_faults(pid_t pid) {
  auto st = fencefs::proc::read_stat(pid);
  return st ? static_cast<long long>(st->minflt) : -1;
}

// A READ of 1 MiB, the most the kernel asks for at once (a cold sequential read asks that much):
// too large for libfuse's splice pipe, and never spliced through the rings. libfuse then copied
// it through a buffer it allocated and freed per READ, every page of which faulted in again,
// milliseconds of daemon CPU per READ. Each thread's buffer is now kept, and a ring's READ is
// read straight into its entry.
TEST(ReadCache, LargeReadsFaultInNoFreshBuffer) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  std::string want(kSize, '\0');
  for (size_t i = 0; i < want.size(); i++) want[i] = static_cast<char>(i * 7 + i / 4096);
  spit(m.bpath("big"), want);
  int fd = open(m.path("big").c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);  // every read a READ
  ASSERT_GE(fd, 0) << strerror(errno);
  char* buf = static_cast<char*>(aligned_alloc(4096, kSize));
  ASSERT_NE(nullptr, buf);
  constexpr int kReads = 100;
  long long before = minor_faults(m.daemon_pid());
  ASSERT_GE(before, 0);
  int bad = 0;
  for (int k = 0; k < kReads; k++) {
    ssize_t n = pread(fd, buf, kSize, 0);
    bad += n != static_cast<ssize_t>(kSize) || std::memcmp(buf, want.data(), kSize) != 0;
  }
  // From the middle to past the end: a short read, and one of nothing.
  ssize_t tail = pread(fd, buf, kSize, kSize / 2);
  ssize_t none = pread(fd, buf, kSize, kSize);
  long long faults = minor_faults(m.daemon_pid()) - before;
  close(fd);
  EXPECT_EQ(0, bad);
  EXPECT_EQ(static_cast<ssize_t>(kSize / 2), tail);
  EXPECT_EQ(0, none);
  EXPECT_EQ(0, std::memcmp(buf, want.data() + kSize / 2, kSize / 2));
  // A fresh buffer per READ: 256 pages each, over 25,600. A kept one faults once per thread that
  // serves these READs: at most 16 /dev/fuse workers, or the ring entries of the CPUs this
  // thread runs on (16 per CPU here), of 256 pages each.
  EXPECT_LT(faults, kReads * 256 / 3)
      << faults << " minor faults in the daemon for " << kReads << " READs of 1 MiB";
  free(buf);
}

// The read-ahead of the mount's backing device info in sysfs, in KiB ("" when unreadable).
std::string readahead_kb(const Mount& m) {
  struct stat st;
  if (stat(m.mnt().c_str(), &st) != 0) return "";
  std::string v = slurp("/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                        std::to_string(minor(st.st_dev)) + "/read_ahead_kb");
  while (!v.empty() && v.back() == '\n') v.pop_back();
  return v;
}

// A file read in sequence (cp, tar, rsync) is read ahead a MiB per READ by default (readahead=):
// the kernel's own 128 KiB costs eight round trips through the daemon per MiB.
TEST(ReadCache, ASequentialReadAsksForAMebibytePerRead) {
  constexpr size_t kMiB = 64;
  std::string want(kMiB << 20, '\0');
  for (size_t i = 0; i < want.size(); i += 4096) want[i] = static_cast<char>(i / 4096);
  for (std::string opt : {"", "readahead=0"}) {
    SCOPED_TRACE(opt.empty() ? "default" : opt);
    Mount m(opt.empty() ? std::vector<std::string>{} : std::vector<std::string>{"-o", opt});
    ASSERT_TRUE(m.mounted());
    spit(m.bpath("seq"), want);  // never read through the mount: nothing of it is cached
    std::string got;
    long long n = reads_to_read(m, "seq", &got);
    EXPECT_TRUE(got == want) << got.size() << " bytes read of " << want.size();
    if (opt.empty()) {
      EXPECT_EQ("1024", readahead_kb(m));
      // One per MiB, and a few while the kernel's window grows from the first small read.
      EXPECT_LE(n, static_cast<long long>(kMiB + kMiB / 4));
    } else {
      EXPECT_EQ("128", readahead_kb(m));  // the kernel's default, as without fencefs' choice
      EXPECT_GE(n, static_cast<long long>(kMiB) * 8);
    }
  }
}
