// Per-opcode FUSE request counters: a known sequence of calls moves exactly the counters of the
// requests the kernel sends for it, and the metrics stay valid Prometheus text.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

// The names in a directory, sorted, "." and ".." left out.
std::vector<std::string> names(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return {"opendir failed"};
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

long long listing_requests(const std::string& metrics) {
  return fuse_requests(metrics, "readdir") + fuse_requests(metrics, "readdirplus");
}

}  // namespace

TEST(OpStats, CountsEveryRequestByOpcode) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  std::string before_path = m.root() + "/before.prom", after_path = m.root() + "/after.prom";
  // Bound in a child (binding writes the control file); the metrics are read just around the
  // sequence, so only the sequence and the metrics reads themselves fall between them.
  ASSERT_EQ(0, as_job(m, 1, [&] {
              std::string before = slurp(m.path(".fencefs/metrics"));
              int fd = open(m.path("job.tmp").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
              if (fd < 0) return 1;
              char buf[4096] = {'x'};
              if (write(fd, buf, sizeof buf) != sizeof buf) return 2;
              if (write(fd, buf, sizeof buf) != sizeof buf) return 3;
              if (close(fd) != 0) return 4;
              if (rename(m.path("job.tmp").c_str(), m.path("job").c_str()) != 0) return 5;
              std::string after = slurp(m.path(".fencefs/metrics"));
              spit(before_path, before);
              spit(after_path, after);
              return 0;
            }));
  std::string before = slurp(before_path), after = slurp(after_path);
  for (const char* op : {"create", "write", "rename", "flush", "lookup", "getattr", "read"}) {
    EXPECT_GE(fuse_requests(before, op), 0) << op << " missing:\n" << before;
  }
  // Without the writeback cache every write(2) is one WRITE; the metrics reads write nothing.
  EXPECT_EQ(2, fuse_requests(after, "write") - fuse_requests(before, "write")) << after;
  EXPECT_EQ(1, fuse_requests(after, "create") - fuse_requests(before, "create")) << after;
  EXPECT_EQ(1, fuse_requests(after, "rename") - fuse_requests(before, "rename")) << after;
  // A write-only handle on a local backing has nothing for close(2) to report: no FLUSH. The
  // one counted is the close of the metrics file read before the sequence.
  EXPECT_EQ(1, fuse_requests(after, "flush") - fuse_requests(before, "flush")) << after;
  // The metrics file is rendered at open, counting that OPEN; the first read's READ came later.
  EXPECT_GE(fuse_requests(before, "open"), 1) << before;
  EXPECT_GE(fuse_requests(after, "read") - fuse_requests(before, "read"), 1) << after;

  int status = 0;
  std::string lint = sh_out("promtool check metrics < '" + after_path + "' 2>&1", &status);
  EXPECT_EQ(0, status) << lint;
}

// Writes through the page cache (an O_RDWR handle, as fio and databases open files): the kernel
// asks for security.capability once per inode, then marks it checked (FUSE_HANDLE_KILLPRIV_V2
// and SB_NOSEC), so each further write(2) is a single WRITE.
TEST(OpStats, CachedWritesAskForCapabilitiesOnce) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  std::string p0 = m.root() + "/0.prom", p1 = m.root() + "/1.prom", p2 = m.root() + "/2.prom";
  ASSERT_EQ(0, as_job(m, 1, [&] {
              int fd = open(m.path("db").c_str(), O_RDWR | O_CREAT, 0644);
              if (fd < 0) return 1;
              char buf[4096] = {'x'};
              std::string s0 = slurp(m.path(".fencefs/metrics"));
              for (int k = 0; k < 100; k++)
                if (pwrite(fd, buf, sizeof buf, (k % 16) * 4096) != sizeof buf) return 2;
              std::string s1 = slurp(m.path(".fencefs/metrics"));
              for (int k = 0; k < 100; k++)
                if (pwrite(fd, buf, sizeof buf, (k % 16) * 4096) != sizeof buf) return 3;
              std::string s2 = slurp(m.path(".fencefs/metrics"));
              spit(p0, s0);
              spit(p1, s1);
              spit(p2, s2);
              return close(fd) == 0 ? 0 : 4;
            }));
  std::string s0 = slurp(p0), s1 = slurp(p1), s2 = slurp(p2);
  EXPECT_EQ(100, fuse_requests(s1, "write") - fuse_requests(s0, "write")) << s1;
  EXPECT_EQ(100, fuse_requests(s2, "write") - fuse_requests(s1, "write")) << s2;
  EXPECT_LE(fuse_requests(s1, "getxattr") - fuse_requests(s0, "getxattr"), 1) << s1;
  EXPECT_EQ(0, fuse_requests(s2, "getxattr") - fuse_requests(s1, "getxattr")) << s2;
}

// The kernel keeps a directory's listing across opens (cache_readdir, keep_cache), and a change
// made through the mount is in the very next listing: a cached listing never hides one.
TEST(OpStats, ListingsAreCachedUntilTheDirectoryChanges) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  ASSERT_EQ(0, as_job(m, 1, [&] {
              if (mkdir(m.path("d").c_str(), 0755) != 0) return 1;
              for (int k = 0; k < 50; k++) {
                int fd = creat(m.path("d/f" + std::to_string(k)).c_str(), 0644);
                if (fd < 0) return 2;
                close(fd);
              }
              return 0;
            }));
  std::string d = m.path("d");
  ASSERT_EQ(50u, names(d).size());
  long long before = listing_requests(slurp(m.path(".fencefs/metrics")));
  for (int k = 0; k < 5; k++) ASSERT_EQ(50u, names(d).size());
  EXPECT_EQ(before, listing_requests(slurp(m.path(".fencefs/metrics"))))
      << "a listing of an unchanged directory went to the daemon";
  ASSERT_EQ(0, as_job(m, 1, [&] {
              int fd = creat(m.path("d/new").c_str(), 0644);
              if (fd < 0) return 1;
              close(fd);
              return unlink(m.path("d/f0").c_str()) == 0 ? 0 : 2;
            }));
  auto now = names(d);
  EXPECT_EQ(50u, now.size());
  EXPECT_TRUE(std::count(now.begin(), now.end(), "new") == 1);
  EXPECT_TRUE(std::count(now.begin(), now.end(), "f0") == 0);
  ASSERT_EQ(0, as_job(m, 1, [&] {
              return rename(m.path("d/f1").c_str(), m.path("d/moved").c_str()) == 0 ? 0 : 1;
            }));
  now = names(d);
  EXPECT_TRUE(std::count(now.begin(), now.end(), "moved") == 1);
  EXPECT_TRUE(std::count(now.begin(), now.end(), "f1") == 0);
  EXPECT_GT(listing_requests(slurp(m.path(".fencefs/metrics"))), before);
}

// A name put straight into BACKING (outside the contract: changes pass through the mount) shows
// in a listing once the attribute timeout has passed, as it does in a lookup.
TEST(OpStats, ACachedListingExpiresWithTheAttributeTimeout) {
  Mount m({"-o", "timeout=1"});
  ASSERT_TRUE(m.mounted());
  ASSERT_EQ(0, as_job(m, 1, [&] { return mkdir(m.path("d").c_str(), 0755) == 0 ? 0 : 1; }));
  ASSERT_TRUE(names(m.path("d")).empty());
  spit(m.bpath("d/outside"), "x");
  usleep(1'500'000);
  EXPECT_EQ(std::vector<std::string>{"outside"}, names(m.path("d")));
}
