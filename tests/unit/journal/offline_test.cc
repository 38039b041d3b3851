// check() and recover_offline(): the offline inspection and the audited way out.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "journal/fault_injection.h"
#include "journal/format.h"
#include "journal/journal.h"
#include "unit/journal/test_util.h"

namespace fencefs::journal {
namespace {

using testing::create_store;
using testing::NoSyncLayer;
using testing::read_bytes;
using testing::reopen;
using testing::state_of;
using testing::StateMap;
using testing::TempDir;
using testing::write_bytes;

bool any_contains(const std::vector<std::string>& v, const std::string& needle) {
  for (const auto& s : v) {
    if (s.find(needle) != std::string::npos) return true;
  }
  return false;
}

class Offline : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = create_store(dir(), fs_);
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->add_domain(1, "/a"), 0);
    ASSERT_EQ(s->advance(1, 10), 0);
    ASSERT_EQ(s->add_domain(2, "/b"), 0);
    corrupt_at_ = s->stats().journal_bytes;  // the record below starts here
    ASSERT_EQ(s->advance(2, 20), 0);
    ASSERT_EQ(s->advance(1, 11), 0);
    ASSERT_EQ(s->advance(0, 5), 0);
    full_ = state_of(*s);
    inc_ = s->report().incarnation;
  }
  std::string dir() const { return tmp_.state(); }
  std::string jpath() const { return dir() + "/journal"; }
  // Damages the ADVANCE(2, 20) record; the three records after it become unreachable.
  void corrupt() {
    std::string j = read_bytes(jpath());
    j[corrupt_at_ + 12] ^= 0x40;
    write_bytes(jpath(), j);
  }

  TempDir tmp_;
  NoSyncLayer fs_;
  uint64_t corrupt_at_ = 0;
  StateMap full_;
  std::string inc_;
};

TEST_F(Offline, CheckOfACleanStoreIsClean) {
  FaultInjectionFileLayer fs(posix_file_layer(), false);
  fs.crash_after(0);  // any write attempt would be recorded as a crash
  CheckResult c = check(dir(), fs);
  EXPECT_TRUE(c.readable);
  EXPECT_TRUE(c.findings.empty()) << c.findings.front();
  EXPECT_EQ(state_of(c.domains), full_);
  EXPECT_FALSE(fs.crashed()) << "check() attempted a write";
}

TEST_F(Offline, CheckReportsCorruptionWithOffsetAndNeverWrites) {
  corrupt();
  const std::string before = read_bytes(jpath());
  FaultInjectionFileLayer fs(posix_file_layer(), false);
  fs.crash_after(0);
  CheckResult c = check(dir(), fs);
  EXPECT_FALSE(fs.crashed()) << "check() attempted a write";
  EXPECT_EQ(read_bytes(jpath()), before);
  EXPECT_TRUE(c.readable);
  ASSERT_EQ(c.findings.size(), 1u);
  EXPECT_NE(c.findings[0].find(jpath() + ": bad CRC at byte " + std::to_string(corrupt_at_)),
            std::string::npos)
      << c.findings[0];
  // The valid prefix: domain 2 exists, its advance to 20 and everything after are unreadable.
  EXPECT_EQ(state_of(c.domains), (StateMap{{0, {"/", 0}}, {1, {"/a", 10}}, {2, {"/b", 0}}}));
  // open() refuses with the same finding.
  std::string err;
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  EXPECT_NE(err.find("bad CRC at byte " + std::to_string(corrupt_at_)), std::string::npos) << err;
}

TEST_F(Offline, CheckReportsTornTailsStaleJournalsLeftoversAndMismatches) {
  const std::string j = read_bytes(jpath());
  write_bytes(jpath(), j + std::string(7, 'x'));
  CheckResult c = check(dir(), fs_);
  ASSERT_EQ(c.findings.size(), 1u);
  EXPECT_NE(c.findings[0].find("torn tail"), std::string::npos) << c.findings[0];
  EXPECT_NE(c.findings[0].find("at byte " + std::to_string(j.size())), std::string::npos);
  EXPECT_EQ(state_of(c.domains), full_);
  write_bytes(jpath(), j);
  write_bytes(dir() + "/snapshot.tmp", "partial");
  c = check(dir(), fs_);
  EXPECT_TRUE(any_contains(c.findings, "snapshot.tmp")) << c.findings.size();
  ASSERT_EQ(fs_.remove(dir() + "/snapshot.tmp"), 0);
  // Another lineage's journal.
  TempDir other;
  { auto s = create_store(other.state(), fs_); }
  write_bytes(jpath(), read_bytes(other.state() + "/journal"));
  c = check(dir(), fs_);
  EXPECT_TRUE(any_contains(c.findings, "incarnation")) << c.findings.size();
  // No state at all.
  c = check(tmp_.path() + "/none", fs_);
  EXPECT_FALSE(c.readable);
  EXPECT_TRUE(any_contains(c.findings, "no state"));
}

TEST_F(Offline, RecoverSalvagesThePrefixAndAppliesTheFloor) {
  corrupt();
  std::string report;
  ASSERT_EQ(recover_offline(dir(), 1000, fs_, &report), 0) << report;
  EXPECT_NE(report.find("at byte " + std::to_string(corrupt_at_)), std::string::npos) << report;
  EXPECT_NE(report.find("floor 1000"), std::string::npos) << report;
  std::string err;
  auto s = reopen(dir(), fs_, &err);
  ASSERT_NE(s, nullptr) << err;
  EXPECT_EQ(state_of(*s), (StateMap{{0, {"/", 1000}}, {1, {"/a", 1000}}, {2, {"/b", 1000}}}));
  EXPECT_NE(s->report().incarnation, inc_);  // a new lineage
  EXPECT_TRUE(check(dir(), fs_).findings.empty());
  EXPECT_EQ(s->advance(1, 1001), 0);
}

TEST_F(Offline, RecoverWithoutFloorOnlySalvagesAndKeepsHigherEpochs) {
  std::string report;
  ASSERT_EQ(recover_offline(dir(), 0, fs_, &report), 0) << report;
  auto s = reopen(dir(), fs_);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(state_of(*s), full_);
  s.reset();
  ASSERT_EQ(recover_offline(dir(), 7, fs_, &report), 0) << report;
  s = reopen(dir(), fs_);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(state_of(*s), (StateMap{{0, {"/", 7}}, {1, {"/a", 11}}, {2, {"/b", 20}}}));
}

TEST_F(Offline, RecoverFromALostSnapshot) {
  ASSERT_EQ(fs_.remove(dir() + "/snapshot"), 0);
  std::string err;
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  std::string report;
  ASSERT_EQ(recover_offline(dir(), 50, fs_, &report), 0) << report;
  EXPECT_NE(report.find("snapshot: missing"), std::string::npos) << report;
  auto s = reopen(dir(), fs_, &err);
  ASSERT_NE(s, nullptr) << err;
  // The journal alone declares /a and /b (and their advances): all salvaged, then floored.
  EXPECT_EQ(state_of(*s), (StateMap{{0, {"/", 50}}, {1, {"/a", 50}}, {2, {"/b", 50}}}));
}

TEST_F(Offline, RecoverRefusesWhenThereIsNothing) {
  std::string report;
  EXPECT_EQ(recover_offline(tmp_.path() + "/none", 5, fs_, &report), ENOENT);
  EXPECT_NE(report.find("nothing to recover"), std::string::npos) << report;
}

TEST_F(Offline, RecoverIsCrashSafe) {
  corrupt();
  const std::string snap = read_bytes(dir() + "/snapshot");
  const std::string jrnl = read_bytes(jpath());
  for (int k = 0; k < 12; ++k) {
    SCOPED_TRACE("crash after " + std::to_string(k));
    write_bytes(dir() + "/snapshot", snap);
    write_bytes(jpath(), jrnl);
    FaultInjectionFileLayer fs(posix_file_layer(), false);
    fs.crash_after(k);
    std::string report;
    const int rc = recover_offline(dir(), 300, fs, &report);
    const bool crashed = fs.crashed();
    fs.drop_unsynced();
    if (!crashed) {
      EXPECT_EQ(rc, 0) << report;
    }
    // Whatever survived, running recover again succeeds and keeps the salvage and the floor.
    ASSERT_EQ(recover_offline(dir(), 300, fs, &report), 0) << report;
    std::string err;
    auto s = reopen(dir(), fs, &err);
    ASSERT_NE(s, nullptr) << err;
    EXPECT_EQ(state_of(*s), (StateMap{{0, {"/", 300}}, {1, {"/a", 300}}, {2, {"/b", 300}}}));
  }
}

}  // namespace
}  // namespace fencefs::journal
