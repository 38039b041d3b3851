// The audit log's defences, without a mount: the epochs trail survives rotation, refusals are
// rate-limited per uid with a summary, and display_escape leaves nothing a terminal interprets.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "audit/audit.h"
#include "unit/journal/test_util.h"

namespace fencefs::audit {
namespace {

using journal::testing::TempDir;

std::string read_all(const std::string& path) {
  std::string out;
  journal::posix_file_layer().read_file(path, &out);
  return out;
}

Event refusal(uid_t uid, const std::string& path) {
  Event e;
  e.op = "mkdir";
  e.decision = "refused";
  e.reason = "missing";
  e.err = EPERM;
  e.uid = uid;
  e.path = path;
  return e;
}

Event advance(uint64_t to) {
  Event e;
  e.op = "advance";
  e.decision = "advanced";
  e.domain = "/";
  e.epoch_before = to - 1;
  e.epoch_after = to;
  return e;
}

TEST(AuditTrail, EpochChangesOutliveRotationAndAreShownOnce) {
  TempDir t;
  Options o;
  o.dir = t.path();
  o.max_bytes = 1000;
  o.keep = 1;
  o.refusal_burst = 1e9;
  Log log(o);
  ASSERT_EQ(Log::Outcome::kWritten, log.record(advance(1)));
  for (int k = 0; k < 50; k++) log.record(refusal(1000, "/f" + std::to_string(k)));
  ASSERT_EQ(Log::Outcome::kWritten, log.record(advance(2)));
  std::string logs;
  for (auto& f : log_files(t.path())) logs += read_all(f);
  EXPECT_EQ(std::string::npos, logs.find("\"epoch_after\":1,")) << "rotated away";
  EXPECT_NE(std::string::npos, logs.find("\"epoch_after\":2,"));
  std::vector<std::string> seen;
  auto errors = for_each_record(
      t.path(), [&](const std::string& l, const std::string& where, bool) { seen.push_back(l); });
  EXPECT_TRUE(errors.empty());
  ASSERT_FALSE(seen.empty());
  EXPECT_NE(std::string::npos, seen.front().find("\"epoch_after\":1,")) << "the oldest first";
  size_t second = 0;
  for (auto& l : seen) second += l.find("\"epoch_after\":2,") != std::string::npos;
  EXPECT_EQ(1u, second) << "an epoch change still in the logs is not shown twice";
  std::string epochs = read_all(t.path() + "/epochs.jsonl");
  EXPECT_NE(std::string::npos, epochs.find("\"epoch_after\":1,"));
  EXPECT_NE(std::string::npos, epochs.find("\"epoch_after\":2,"));
  EXPECT_EQ(std::string::npos, epochs.find("refused"));
}

TEST(AuditTrail, RefusalsBeyondTheRateAreSummarisedPerUid) {
  TempDir t;
  Options o;
  o.dir = t.path();
  o.refusal_burst = 3;
  o.refusal_rate = 0.001;
  {
    Log log(o);
    for (int k = 0; k < 3; k++) EXPECT_EQ(Log::Outcome::kWritten, log.record(refusal(7, "/a")));
    for (int k = 0; k < 10; k++) EXPECT_EQ(Log::Outcome::kSuppressed, log.record(refusal(7, "/a")));
    EXPECT_EQ(Log::Outcome::kWritten, log.record(refusal(8, "/b"))) << "another uid";
    EXPECT_EQ(Log::Outcome::kWritten, log.record(advance(3))) << "epoch changes are not limited";
    EXPECT_EQ(10u, log.suppressed());
  }  // the summary is written at the latest when the log closes
  std::string text = read_all(t.path() + "/audit.log");
  EXPECT_NE(std::string::npos, text.find("\"reason\":\"suppressed\""));
  EXPECT_NE(std::string::npos, text.find("10 refusal(s) of uid 7 since")) << text;
}

TEST(AuditTrail, DisplayEscape) {
  EXPECT_EQ("plain /a b.txt", display_escape("plain /a b.txt"));
  EXPECT_EQ("caf\xc3\xa9 \xe6\x97\xa5", display_escape("caf\xc3\xa9 \xe6\x97\xa5"))
      << "UTF-8 stays";
  EXPECT_EQ("a\\nb\\tc\\rd", display_escape("a\nb\tc\rd"));
  EXPECT_EQ("\\x1b[31m\\x07\\x7f\\x00", display_escape(std::string("\x1b[31m\x07\x7f\0", 8)));
  EXPECT_EQ("back\\\\slash", display_escape("back\\slash"));
  EXPECT_EQ("\\u009b1m", display_escape("\xc2\x9b"
                                        "1m"))
      << "C1 CSI";
  EXPECT_EQ("\\u202eevil", display_escape("\xe2\x80\xae"
                                          "evil"))
      << "bidi override";
  EXPECT_EQ("\\u2028", display_escape("\xe2\x80\xa8")) << "line separator";
  EXPECT_EQ("\\xff\\xc3", display_escape("\xff\xc3")) << "invalid UTF-8";
}

}  // namespace
}  // namespace fencefs::audit
