// Per-opcode FUSE request counters: a known sequence of calls moves exactly the counters of the
// requests the kernel sends for it, and the metrics stay valid Prometheus text.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

// The value of fencefs_fuse_requests_total{op="OP"} in a metrics text, or -1 if absent.
long long requests(const std::string& metrics, const std::string& op) {
  std::string key = "fencefs_fuse_requests_total{op=\"" + op + "\"} ";
  size_t at = metrics.find(key);
  if (at == std::string::npos) return -1;
  return std::stoll(metrics.substr(at + key.size()));
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
    EXPECT_GE(requests(before, op), 0) << op << " missing:\n" << before;
  }
  // Without the writeback cache every write(2) is one WRITE; the metrics reads write nothing.
  EXPECT_EQ(2, requests(after, "write") - requests(before, "write")) << after;
  EXPECT_EQ(1, requests(after, "create") - requests(before, "create")) << after;
  EXPECT_EQ(1, requests(after, "rename") - requests(before, "rename")) << after;
  EXPECT_GE(requests(after, "flush") - requests(before, "flush"), 1) << after;
  // The metrics file is rendered at open, counting that OPEN; the first read's READ came later.
  EXPECT_GE(requests(before, "open"), 1) << before;
  EXPECT_GE(requests(after, "read") - requests(before, "read"), 1) << after;

  int status = 0;
  std::string lint = sh_out("promtool check metrics < '" + after_path + "' 2>&1", &status);
  EXPECT_EQ(0, status) << lint;
}
