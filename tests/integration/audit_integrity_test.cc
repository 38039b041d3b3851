// The audit trail resists its users: a flood of refusals cannot rotate epoch changes away nor
// drown the log (refusals are rate-limited per uid and summarised), and `fencectl audit` shows
// every field escaped, so a file name cannot forge a row or reach the terminal raw.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "audit/audit.h"
#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

constexpr uid_t kNobody = 65534;
const std::string kCtl = FENCECTL_BIN;

std::string state_dir(const Mount& m) { return m.bpath(".fencefs"); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

// All lines of the rotated logs (not the epochs trail).
std::string logs(const Mount& m) {
  std::string all;
  for (auto& f : fencefs::audit::log_files(state_dir(m))) all += slurp(f);
  return all;
}

// As nobody, writes malformed control lines for `seconds`; returns how many were refused.
int flood(const Mount& m, double seconds) {
  int pfd[2];
  if (pipe(pfd)) return -1;
  int st = in_child([&] {
    if (setgid(kNobody) || setuid(kNobody)) return 99;
    int fd = open(m.ctl_path().c_str(), O_WRONLY);
    if (fd < 0) return 98;
    int n = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (write(fd, "frobnicate / 1\n", 15) < 0 && errno == EINVAL) n++;
    }
    return write(pfd[1], &n, sizeof n) == sizeof n ? 0 : 97;
  });
  int n = -1;
  if (st == 0 && read(pfd[0], &n, sizeof n) != sizeof n) n = -1;
  close(pfd[0]);
  close(pfd[1]);
  return st == 0 ? n : -st;
}

}  // namespace

TEST(AuditIntegrity, AFloodOfRefusalsCannotRotateEpochChangesAway) {
  Mount m({"-o", "audit_max_bytes=4096,audit_keep=1"});
  ASSERT_EQ(0, as_job(m, 1, [&] { return E(mkdir(m.path("a").c_str(), 0755)); }));
  ASSERT_EQ(0, sh(kCtl + " advance --mount '" + m.mnt() + "' / 5 >/dev/null"));
  int refused = flood(m, 3);
  ASSERT_GT(refused, 100) << "the flood did not run";
  // The flood rotated the logs past the advances...
  EXPECT_EQ(std::string::npos, logs(m).find("\"decision\":\"advanced\""))
      << "the test needs the advances rotated out of audit.log";
  // ... yet the trail still shows both, from the epochs trail that is never rotated.
  int st;
  std::string out =
      sh_out(kCtl + " audit --mount '" + m.mnt() + "' --decision advanced --json", &st);
  EXPECT_EQ(0, st);
  auto adv = lines_of(out);
  ASSERT_EQ(2u, adv.size()) << out;
  EXPECT_NE(std::string::npos, adv[0].find("\"epoch_after\":1")) << adv[0];
  EXPECT_NE(std::string::npos, adv[1].find("\"epoch_after\":5")) << adv[1];
  EXPECT_NE(std::string::npos, adv[1].find("\"op\":\"advance\"")) << adv[1];
  std::string table = sh_out(kCtl + " audit --state '" + state_dir(m) + "' --decision advanced");
  EXPECT_EQ(3u, lines_of(table).size()) << table;
}

TEST(AuditIntegrity, RefusalsAreRateLimitedPerCallerAndSummarised) {
  Mount m;
  auto start = std::chrono::steady_clock::now();
  int refused = flood(m, 2);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_GT(refused, 400) << "the flood did not run";
  std::string all = logs(m);
  size_t recorded = 0;
  for (auto& l : lines_of(all))
    recorded += l.find("\"decision\":\"refused\"") != std::string::npos &&
                l.find("\"uid\":65534,") != std::string::npos;
  // A burst of 200, then 5 per second.
  EXPECT_GE(recorded, 150u);
  EXPECT_LE(recorded, 200u + static_cast<size_t>(5 * secs) + 5) << "of " << refused;
  std::string metrics = slurp(m.path(".fencefs/metrics"));
  EXPECT_NE(std::string::npos, metrics.find("fencefs_audit_suppressed_total{mount=\"" + m.mnt() +
                                            "\"} " + std::to_string(refused - recorded)))
      << metrics;
  // Another caller is not affected: root's refusals and advances are still recorded.
  ASSERT_EQ(0, sh(kCtl + " advance --mount '" + m.mnt() + "' / 3 >/dev/null"));
  EXPECT_EQ(EPERM, as_job(m, 0, [&] { return E(mkdir(m.path("x").c_str(), 0755)); }));
  all = logs(m);
  EXPECT_NE(std::string::npos, all.find("\"decision\":\"advanced\""));
  EXPECT_NE(std::string::npos, all.find("\"path\":\"/x\""));
  // After the summary window, the next record brings the count of what was left out.
  sleep(6);
  EXPECT_EQ(EPERM, as_job(m, 0, [&] { return E(mkdir(m.path("y").c_str(), 0755)); }));
  all = logs(m);
  size_t at = all.find("\"reason\":\"suppressed\"");
  ASSERT_NE(std::string::npos, at) << "no summary record";
  std::string line = all.substr(all.rfind('\n', at) + 1);
  line = line.substr(0, line.find('\n'));
  EXPECT_NE(std::string::npos, line.find("\"uid\":65534")) << line;
  std::string n = std::to_string(refused - recorded);
  EXPECT_NE(std::string::npos, line.find("\"message\":\"" + n + " refusal(s) of uid 65534"))
      << line << " expected " << n;
}

TEST(AuditIntegrity, TheTableEscapesEveryField) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 2, [&] { return E(mkdir(m.path("d").c_str(), 0755)); }));
  std::string evil =
      "x\n2026-12-02T00:00:00.000Z  advanced  -  advance  root  -  9  1->9  1  forged\x1b[2J\x1b]0;"
      "title\x07\x1b[31mred\xc2\x9b"
      "1m\xe2\x80\xae";
  ASSERT_EQ(ESTALE, as_superseded_job(m, 2, [&] { return E(mkdir(m.path(evil).c_str(), 0755)); }));
  int st;
  std::string json = sh_out(kCtl + " audit --mount '" + m.mnt() + "' --json", &st);
  ASSERT_EQ(0, st);
  size_t records = lines_of(json).size();
  std::string table = sh_out(kCtl + " audit --mount '" + m.mnt() + "' -v", &st);
  ASSERT_EQ(0, st);
  EXPECT_EQ(std::string::npos, table.find('\x1b')) << "a raw escape reached the terminal";
  EXPECT_EQ(std::string::npos, table.find('\x07'));
  EXPECT_EQ(std::string::npos, table.find("\xc2\x9b")) << "a C1 CSI reached the terminal";
  EXPECT_EQ(std::string::npos, table.find("\xe2\x80\xae")) << "a bidi override";
  size_t message_lines = 0;
  for (auto& l : lines_of(table)) message_lines += l.rfind("    ", 0) == 0;
  EXPECT_EQ(records + 1, lines_of(table).size() - message_lines)
      << "one row per record, no forged row:\n"
      << table;
  EXPECT_NE(std::string::npos, table.find("/x\\n2026-12-02T00:00:00.000Z")) << table;
  EXPECT_NE(std::string::npos, table.find("forged\\x1b[2J\\x1b]0;title\\x07\\x1b[31mred\\u009b1m"
                                          "\\u202e"))
      << table;
  for (auto& l : lines_of(table))
    EXPECT_NE(0u, l.rfind("2026-12-02T00:00:00.000Z", 0)) << "a forged row: " << l;
}
