// Compaction keeps the state bounded, and a crash at any step of it loses nothing acknowledged.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "journal/fault_injection.h"
#include "journal/journal.h"
#include "unit/journal/test_util.h"

namespace fencefs::journal {
namespace {

using testing::create_store;
using testing::NoSyncLayer;
using testing::reopen;
using testing::state_of;
using testing::TempDir;

uint64_t dir_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) total += e.file_size();
  return total;
}

TEST(Compaction, SizeStaysBoundedUnderEndlessAdvances) {
  TempDir t;
  NoSyncLayer fs;
  const uint64_t threshold = 4096;
  auto s = create_store(t.state(), fs, threshold);
  ASSERT_NE(s, nullptr);
  for (uint32_t d = 1; d <= 3; ++d) ASSERT_EQ(s->add_domain(d, "/d" + std::to_string(d)), 0);
  uint64_t max_seen = 0;
  const int kAdvances = 100000;
  for (int i = 0; i < kAdvances; ++i) {
    ASSERT_EQ(s->advance(i % 4, i / 4 + 1), 0) << i;
    if (i % 997 == 0) {
      const uint64_t now = dir_bytes(t.state());
      max_seen = std::max(max_seen, now);
      // Journal below threshold + one record, plus a snapshot of four domains.
      ASSERT_LE(now, threshold + 512) << "after " << i << " advances";
      const Stats st = s->stats();
      ASSERT_LE(st.journal_bytes, threshold);
    }
  }
  const Stats st = s->stats();
  EXPECT_EQ(st.records, static_cast<uint64_t>(kAdvances) + 3);
  EXPECT_GT(st.compactions, 400u);
  EXPECT_LE(st.journal_bytes + st.snapshot_bytes, threshold + 512);
  EXPECT_EQ(dir_bytes(t.state()), st.journal_bytes + st.snapshot_bytes);
  const auto want = state_of(*s);
  EXPECT_EQ(want.at(3).second, static_cast<uint64_t>(kAdvances / 4));
  s.reset();
  std::string err;
  s = reopen(t.state(), fs, &err, threshold);
  ASSERT_NE(s, nullptr) << err;
  EXPECT_EQ(state_of(*s), want);
  EXPECT_EQ(s->report().generation, st.compactions);
}

// The advance that crosses the threshold runs: append, sync (the advance is now durable),
// then the compaction: open snapshot.tmp, append, sync, rename, sync_dir, open journal.tmp,
// append, sync, rename, sync_dir. Crash after each of them, lose power, recover. Without
// power_loss only the process dies: the restart reads what the page cache kept, and a power loss
// after it must not take back what it served.
void crash_every_step(bool torn_writes, bool crash_again_in_recovery, bool power_loss = true) {
  int completed_at = -1;
  for (int k = 0; k < 40 && completed_at < 0; ++k) {
    SCOPED_TRACE("crash after " + std::to_string(k) + " operations");
    TempDir t;
    FaultInjectionFileLayer fs(posix_file_layer(), false);
    fs.set_torn_writes(torn_writes, k);
    const uint64_t threshold = 400;
    auto s = create_store(t.state(), fs, threshold);
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->add_domain(1, "/a"), 0);
    ASSERT_EQ(s->add_domain(2, "/b"), 0);
    uint64_t e = 0;
    while (s->stats().journal_bytes + 21 <= threshold) {
      ++e;
      ASSERT_EQ(s->advance(e % 2 == 1 ? 1 : 2, e), 0);  // domain 1 gets the odd epochs
    }
    ASSERT_EQ(s->stats().compactions, 0u);
    const uint64_t acked1 = e % 2 == 1 ? e : e - 1;
    const uint64_t attempt = e + (e % 2 == 0 ? 1 : 2);  // next odd epoch, for domain 1
    fs.crash_after(k);
    const int rc = s->advance(1, attempt);
    const bool crashed = fs.crashed();
    if (!crashed) {
      completed_at = k;
      EXPECT_EQ(rc, 0);
      EXPECT_EQ(s->stats().compactions, 1u);
    }
    EXPECT_TRUE(rc == 0 || rc == EIO) << rc;
    s.reset();
    std::string err;
    if (!power_loss) {
      fs.clear_faults();
      auto served = reopen(t.state(), fs, &err, threshold);
      ASSERT_NE(served, nullptr) << err;
      const uint64_t seen = state_of(*served).at(1).second;
      served.reset();
      fs.drop_unsynced();
      auto r = reopen(t.state(), fs, &err, threshold);
      ASSERT_NE(r, nullptr) << err;
      EXPECT_EQ(state_of(*r).at(1).second, seen) << "a power loss took back what a restart served";
    }
    fs.drop_unsynced();
    if (crash_again_in_recovery) {
      for (int j = 0; j < 6; ++j) {
        fs.crash_after(j);
        reopen(t.state(), fs, &err, threshold).reset();
        fs.drop_unsynced();
      }
    }
    auto r = reopen(t.state(), fs, &err, threshold);
    ASSERT_NE(r, nullptr) << err;
    const uint64_t got = state_of(*r).at(1).second;
    EXPECT_GE(got, rc == 0 ? attempt : acked1);
    EXPECT_LE(got, attempt);
    CheckResult c = check(t.state(), fs);
    EXPECT_TRUE(c.findings.empty()) << c.findings.front();
    EXPECT_EQ(r->advance(1, attempt + 2), 0);
    r.reset();
    r = reopen(t.state(), fs, &err, threshold);
    ASSERT_NE(r, nullptr) << err;
    EXPECT_EQ(state_of(*r).at(1).second, attempt + 2);
  }
  EXPECT_EQ(completed_at, 12) << "the protocol has 12 steps";
}

TEST(Compaction, CrashAtEveryStep) { crash_every_step(false, false); }
TEST(Compaction, CrashAtEveryStepWithTornWrites) { crash_every_step(true, false); }
TEST(Compaction, CrashAtEveryStepAndAgainDuringRecovery) { crash_every_step(true, true); }
TEST(Compaction, ProcessCrashAtEveryStepThenPowerLoss) { crash_every_step(false, false, false); }

TEST(Compaction, FailedCompactionPoisonsButTheDurableAdvanceSucceeds) {
  TempDir t;
  FaultInjectionFileLayer fs(posix_file_layer(), false);
  const uint64_t threshold = 100;
  auto s = create_store(t.state(), fs, threshold);
  ASSERT_NE(s, nullptr);
  uint64_t e = 0;
  while (s->stats().journal_bytes + 21 <= threshold) ASSERT_EQ(s->advance(0, ++e), 0);
  fs.crash_after(3);  // append, sync, open snapshot.tmp; then the snapshot append fails
  EXPECT_EQ(s->advance(0, ++e), 0);
  EXPECT_TRUE(s->poisoned());
  EXPECT_EQ(s->advance(0, e + 1), EIO);
  EXPECT_NE(s->rewrite(), 0);
  fs.clear_faults();
  EXPECT_EQ(s->rewrite(), 0);
  EXPECT_EQ(s->advance(0, e + 1), 0);
  s.reset();
  fs.drop_unsynced();
  auto r = reopen(t.state(), fs, nullptr, threshold);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(state_of(*r).at(0).second, e + 1);
}

// A disk that has no room for new files: appends to temp files created while it is full get
// ENOSPC, while the journal, which keeps room allocated past its end, still takes records.
class FullDiskLayer : public NoSyncLayer {
 public:
  bool full = false;
  std::unique_ptr<File> open_append(const std::string& path, bool truncate, int* err) override {
    auto f = NoSyncLayer::open_append(path, truncate, err);
    if (f == nullptr || path.size() < 4 || path.compare(path.size() - 4, 4, ".tmp") != 0) return f;
    if (!full) return f;
    return std::make_unique<FullFile>(std::move(f));
  }

 private:
  class FullFile : public File {
   public:
    explicit FullFile(std::unique_ptr<File> f) : f_(std::move(f)) {}
    int append(const void*, size_t) override { return ENOSPC; }
    int sync() override { return f_->sync(); }
    int close() override { return f_->close(); }

   private:
    std::unique_ptr<File> f_;
  };
};

TEST(Compaction, NoRoomForCompactionKeepsTheJournalAndAdvancesGoOn) {
  TempDir t;
  FullDiskLayer fs;
  const uint64_t threshold = 200;
  auto s = create_store(t.state(), fs, threshold);
  ASSERT_NE(s, nullptr);
  fs.full = true;
  uint64_t e = 0;
  for (int i = 0; i < 50; i++) ASSERT_EQ(s->advance(0, ++e), 0) << i;  // well past the threshold
  EXPECT_FALSE(s->poisoned());
  EXPECT_EQ(s->stats().compactions, 0u);
  EXPECT_GT(s->stats().journal_bytes, threshold);
  EXPECT_FALSE(std::filesystem::exists(t.state() + "/journal.tmp"));
  EXPECT_FALSE(std::filesystem::exists(t.state() + "/snapshot.tmp"));
  fs.full = false;  // room again: the next compaction goes through
  for (int i = 0; i < 50 && s->stats().compactions == 0; i++) ASSERT_EQ(s->advance(0, ++e), 0);
  EXPECT_GT(s->stats().compactions, 0u);
  s.reset();
  std::string err;
  auto r = reopen(t.state(), fs, &err, threshold);
  ASSERT_NE(r, nullptr) << err;
  EXPECT_EQ(state_of(*r).at(0).second, e);
}

}  // namespace
}  // namespace fencefs::journal
