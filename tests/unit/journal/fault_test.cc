// Power loss, crashes and failed fsyncs, through FaultInjectionFileLayer.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "journal/fault_injection.h"
#include "journal/journal.h"
#include "unit/journal/test_util.h"

namespace fencefs::journal {
namespace {

using testing::create_store;
using testing::read_bytes;
using testing::reopen;
using testing::state_of;
using testing::StateMap;
using testing::TempDir;

std::unique_ptr<File> create(FileLayer& fs, const std::string& path) {
  int err = 0;
  auto f = fs.open_append(path, true, &err);
  EXPECT_NE(f, nullptr) << path << ": " << err;
  return f;
}

// --- The fault-injection layer itself ---

TEST(FaultLayer, UnsyncedAppendsAndUnsyncedNamesAreLost) {
  TempDir t;
  FaultInjectionFileLayer fs(posix_file_layer());
  const std::string a = t.path() + "/a", b = t.path() + "/b";
  auto fa = create(fs, a);
  ASSERT_EQ(fa->append("synced", 6), 0);
  ASSERT_EQ(fa->sync(), 0);
  ASSERT_EQ(fs.sync_dir(t.path()), 0);
  ASSERT_EQ(fa->append("-volatile", 9), 0);
  auto fb = create(fs, b);  // never made durable by sync_dir
  ASSERT_EQ(fb->append("b", 1), 0);
  ASSERT_EQ(fb->sync(), 0);
  EXPECT_EQ(read_bytes(a), "synced-volatile");
  fs.drop_unsynced();
  EXPECT_EQ(read_bytes(a), "synced");
  EXPECT_FALSE(fs.exists(b));
  // Handles from before the power loss are dead.
  EXPECT_EQ(fa->append("x", 1), EIO);
  EXPECT_EQ(fa->sync(), EIO);
  EXPECT_EQ(read_bytes(a), "synced");
}

TEST(FaultLayer, RenameOverIsUndoneWithoutDirSync) {
  TempDir t;
  const std::string f = t.path() + "/f", tmp = t.path() + "/f.tmp";
  testing::write_bytes(f, "old");  // exists before the layer sees it: durable
  FaultInjectionFileLayer fs(posix_file_layer());
  auto ft = create(fs, tmp);
  ASSERT_EQ(ft->append("new", 3), 0);
  ASSERT_EQ(ft->sync(), 0);
  ASSERT_EQ(fs.rename(tmp, f), 0);
  EXPECT_EQ(read_bytes(f), "new");
  fs.drop_unsynced();
  EXPECT_EQ(read_bytes(f), "old");
  EXPECT_FALSE(fs.exists(tmp));
  // With the directory synced the rename survives.
  ft = create(fs, tmp);
  ASSERT_EQ(ft->append("new", 3), 0);
  ASSERT_EQ(ft->sync(), 0);
  ASSERT_EQ(fs.rename(tmp, f), 0);
  ASSERT_EQ(fs.sync_dir(t.path()), 0);
  fs.drop_unsynced();
  EXPECT_EQ(read_bytes(f), "new");
  // Removal without a directory sync is undone too.
  ASSERT_EQ(fs.remove(f), 0);
  EXPECT_FALSE(fs.exists(f));
  fs.drop_unsynced();
  EXPECT_EQ(read_bytes(f), "new");
}

TEST(FaultLayer, FailedSyncLosesDataEvenIfALaterSyncSucceeds) {
  TempDir t;
  FaultInjectionFileLayer fs(posix_file_layer(), /*forward_syncs=*/false);
  const std::string f = t.path() + "/f";
  auto file = create(fs, f);
  ASSERT_EQ(fs.sync_dir(t.path()), 0);
  ASSERT_EQ(file->append("aaaa", 4), 0);
  ASSERT_EQ(file->sync(), 0);
  fs.fail_next_sync(1);
  ASSERT_EQ(file->append("bbbb", 4), 0);
  EXPECT_EQ(file->sync(), EIO);
  ASSERT_EQ(file->append("cccc", 4), 0);
  EXPECT_EQ(file->sync(), 0);  // "retry and trust": the bbbb pages are gone
  fs.drop_unsynced();
  EXPECT_EQ(read_bytes(f), std::string("aaaa") + std::string(4, '\0') + "cccc");
  EXPECT_EQ(fs.syncs(), 2u);
}

TEST(FaultLayer, TornWritesKeepAPrefixOfUnsyncedBytes) {
  TempDir t;
  FaultInjectionFileLayer fs(posix_file_layer(), false);
  const std::string f = t.path() + "/f";
  std::set<std::string> seen;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    fs.set_torn_writes(true, seed);
    auto file = create(fs, f);
    ASSERT_EQ(fs.sync_dir(t.path()), 0);
    ASSERT_EQ(file->append("sync", 4), 0);
    ASSERT_EQ(file->sync(), 0);
    ASSERT_EQ(file->append("unsynced", 8), 0);
    file.reset();
    fs.drop_unsynced();
    const std::string got = read_bytes(f);
    ASSERT_GE(got.size(), 4u);
    ASSERT_LE(got.size(), 12u);
    EXPECT_EQ(got.substr(0, 4), "sync");
    const std::string tail = got.substr(4);
    EXPECT_TRUE(tail == std::string("unsynced").substr(0, tail.size()) ||
                tail == std::string(tail.size(), '\0'))
        << tail;
    seen.insert(got);
  }
  EXPECT_GT(seen.size(), 5u);  // the seed varies the outcome
}

TEST(FaultLayer, CrashPointStopsEveryMutation) {
  TempDir t;
  FaultInjectionFileLayer fs(posix_file_layer(), false);
  const std::string f = t.path() + "/f";
  fs.crash_after(2);
  auto file = create(fs, f);  // op 1
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->append("x", 1), 0);  // op 2
  EXPECT_FALSE(fs.crashed());
  EXPECT_EQ(file->sync(), EIO);  // op 3: crashed
  EXPECT_TRUE(fs.crashed());
  EXPECT_EQ(file->append("y", 1), EIO);
  EXPECT_EQ(fs.rename(f, f + "2"), EIO);
  EXPECT_EQ(fs.mkdir(t.path() + "/d"), EIO);
  EXPECT_TRUE(fs.exists(f));
  fs.drop_unsynced();
  EXPECT_FALSE(fs.crashed());
  EXPECT_FALSE(fs.exists(f));  // created, never made durable
}

TEST(FaultLayer, UndurableDirectoryDisappears) {
  TempDir t;
  FaultInjectionFileLayer fs(posix_file_layer(), false);
  const std::string d = t.path() + "/d";
  ASSERT_EQ(fs.mkdir(d), 0);
  auto f = create(fs, d + "/f");
  ASSERT_EQ(f->append("x", 1), 0);
  ASSERT_EQ(f->sync(), 0);
  ASSERT_EQ(fs.sync_dir(d), 0);
  f.reset();
  fs.drop_unsynced();
  EXPECT_FALSE(fs.exists(d));
  ASSERT_EQ(fs.mkdir(d), 0);
  ASSERT_EQ(fs.sync_dir(t.path()), 0);
  fs.drop_unsynced();
  EXPECT_TRUE(fs.exists(d));
}

// --- The store under faults ---

// Every run: concurrent advances (and domain adds) with acknowledgements logged, then a crash,
// a failed fsync or both, a power loss, and recovery. Invariant: recovered epoch >= every
// acknowledged epoch and <= the highest attempted one; acknowledged domains exist.
void run_seed(uint32_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir t;
  FaultInjectionFileLayer fs(posix_file_layer(), /*forward_syncs=*/false);
  // Half the runs keep a random part of the unsynced bytes (torn and zeroed tails).
  fs.set_torn_writes(seed % 2 == 0, seed);
  const uint64_t threshold = 200 + rng() % 1500;
  auto s = create_store(t.state(), fs, threshold);
  ASSERT_NE(s, nullptr);
  const uint32_t ndomains = 1 + rng() % 5;
  for (uint32_t d = 1; d <= ndomains; ++d) ASSERT_EQ(s->add_domain(d, "/d" + std::to_string(d)), 0);

  std::mutex mu;
  std::map<uint32_t, uint64_t> acked, attempted;
  std::set<uint32_t> adds_acked, adds_attempted;
  std::atomic<uint64_t> next_epoch{1};
  std::atomic<bool> stop{false};
  std::atomic<int> bad_rc{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937 r(seed * 31 + i);
      uint32_t next_add = 100 + i * 1000;
      while (!stop.load()) {
        if (i == 0 && r() % 16 == 0) {
          const uint32_t id = next_add++;
          {
            std::lock_guard<std::mutex> lk(mu);
            adds_attempted.insert(id);
          }
          int rc = s->add_domain(id, "/added/" + std::to_string(id));
          if (rc == 0) {
            std::lock_guard<std::mutex> lk(mu);
            adds_acked.insert(id);
          } else if (rc != EIO) {
            bad_rc++;
          }
          continue;
        }
        const uint32_t d = r() % (ndomains + 1);
        const uint64_t e = next_epoch.fetch_add(1 + r() % 3);
        {
          std::lock_guard<std::mutex> lk(mu);
          attempted[d] = std::max(attempted[d], e);
        }
        int rc = s->advance(d, e);
        if (rc == 0) {
          std::lock_guard<std::mutex> lk(mu);
          acked[d] = std::max(acked[d], e);
        } else if (rc != EIO) {
          bad_rc++;
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  auto wait_for = [&](auto cond) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!cond() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return cond();
  };
  const int mode = seed % 3;
  if (mode == 0) {
    // A crash point: the process dies after a random number of file operations.
    fs.crash_after(rng() % 400);
  } else if (mode == 1) {
    // A failed fsync poisons; rewrite() heals; then a crash point.
    const uint64_t at = fs.mutating_ops() + rng() % 150;
    EXPECT_TRUE(wait_for([&] { return fs.mutating_ops() >= at; }));
    fs.fail_next_sync(1);
    EXPECT_TRUE(wait_for([&] { return s->poisoned(); }));
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
    EXPECT_EQ(s->rewrite(), 0);
    EXPECT_FALSE(s->poisoned());
    fs.crash_after(rng() % 200);
  } else {
    // Power is cut at a random moment.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    fs.crash_after(0);
  }
  EXPECT_TRUE(wait_for([&] { return fs.crashed(); }));
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad_rc.load(), 0);
  s.reset();
  fs.drop_unsynced();

  std::string err;
  if (seed % 5 == 0) {
    // Crash again while recovery itself writes (torn-tail cut, stale journal, temp files).
    fs.crash_after(rng() % 8);
    auto r = reopen(t.state(), fs, &err, threshold);
    r.reset();
    fs.drop_unsynced();
  }
  auto r = reopen(t.state(), fs, &err, threshold);
  ASSERT_NE(r, nullptr) << err;
  const StateMap got = state_of(*r);
  for (const auto& [id, e] : acked) {
    ASSERT_TRUE(got.count(id)) << id;
    EXPECT_GE(got.at(id).second, e) << "domain " << id << " lost an acknowledged epoch";
  }
  for (const auto& [id, pe] : got) {
    const uint64_t hi = attempted.count(id) ? attempted[id] : 0;
    EXPECT_LE(pe.second, hi) << "domain " << id << " recovered an epoch never attempted";
    if (id >= 100) {
      EXPECT_TRUE(adds_attempted.count(id)) << id;
    }
  }
  for (uint32_t id : adds_acked) EXPECT_TRUE(got.count(id)) << "lost acknowledged domain " << id;
  for (uint32_t d = 0; d <= ndomains; ++d) EXPECT_TRUE(got.count(d)) << d;
  // The recovered store works and keeps working across another restart.
  const uint64_t high = next_epoch.load() + 10;
  EXPECT_EQ(r->advance(0, high), 0);
  r.reset();
  r = reopen(t.state(), fs, &err, threshold);
  ASSERT_NE(r, nullptr) << err;
  EXPECT_EQ(state_of(*r).at(0).second, high);
}

TEST(FaultInjection, SeededCrashRunsNeverLoseAcknowledgedEpochs) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    run_seed(seed);
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) break;
  }
}

// --- fsync failure ---

class FsyncFailure : public ::testing::Test {
 protected:
  void SetUp() override {
    s_ = create_store(t_.state(), fs_);
    ASSERT_NE(s_, nullptr);
    ASSERT_EQ(s_->add_domain(1, "/a"), 0);
    ASSERT_EQ(s_->advance(1, 5), 0);
  }
  TempDir t_;
  FaultInjectionFileLayer fs_{posix_file_layer(), false};
  std::unique_ptr<StateStore> s_;
};

TEST_F(FsyncFailure, PoisonsUntilRewrite) {
  fs_.fail_next_sync(1);
  EXPECT_EQ(s_->advance(1, 6), EIO);
  EXPECT_TRUE(s_->poisoned());
  uint64_t e = 0;
  ASSERT_EQ(s_->durable_epoch(1, &e), 0);
  EXPECT_EQ(e, 5u);
  EXPECT_EQ(s_->stats().sync_failures, 1u);
  // Fails closed without touching the file: no append, no sync.
  const std::string before = read_bytes(t_.state() + "/journal");
  const uint64_t ops = fs_.mutating_ops();
  EXPECT_EQ(s_->advance(1, 6), EIO);
  EXPECT_EQ(s_->advance(1, 7), EIO);
  EXPECT_EQ(s_->add_domain(2, "/b"), EIO);
  EXPECT_EQ(fs_.mutating_ops(), ops);
  EXPECT_EQ(read_bytes(t_.state() + "/journal"), before);
  // Equal (already durable) epochs need no new durability.
  EXPECT_EQ(s_->advance(1, 5), 0);
  // A rewrite whose own sync fails does not clear the poison.
  fs_.fail_next_sync(1);
  EXPECT_NE(s_->rewrite(), 0);
  EXPECT_TRUE(s_->poisoned());
  EXPECT_EQ(s_->advance(1, 7), EIO);
  // A successful rewrite does; the failed record is gone from the files.
  EXPECT_EQ(s_->rewrite(), 0);
  EXPECT_FALSE(s_->poisoned());
  EXPECT_EQ(state_of(*s_).at(1).second, 5u);
  {
    std::string err;
    FaultInjectionFileLayer plain(posix_file_layer(), false);
    CheckResult c = check(t_.state(), plain);
    EXPECT_TRUE(c.findings.empty());
    EXPECT_EQ(state_of(c.domains).at(1).second, 5u);
  }
  EXPECT_EQ(s_->advance(1, 7), 0);
  EXPECT_EQ(s_->add_domain(2, "/b"), 0);
  s_.reset();
  fs_.drop_unsynced();
  auto r = reopen(t_.state(), fs_);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(state_of(*r), (StateMap{{0, {"/", 0}}, {1, {"/a", 7}}, {2, {"/b", 0}}}));
}

// A restart replays the failed record if its bytes survived, and makes it durable before it
// serves: a power loss then keeps it (an fsync of the old file would succeed without writing it).
TEST_F(FsyncFailure, ARestartMakesTheFailedRecordItReplaysDurable) {
  fs_.fail_next_sync(1);
  EXPECT_EQ(s_->advance(1, 6), EIO);
  s_.reset();
  std::string err;
  {
    auto r = reopen(t_.state(), fs_, &err);
    ASSERT_NE(r, nullptr) << err;
    EXPECT_EQ(state_of(*r).at(1).second, 6u);  // the bytes are still in the file
    EXPECT_FALSE(r->poisoned());
  }
  fs_.drop_unsynced();
  auto r = reopen(t_.state(), fs_, &err);
  ASSERT_NE(r, nullptr) << err;
  EXPECT_EQ(state_of(*r).at(1).second, 6u);
  EXPECT_EQ(r->advance(1, 6), 0);
  EXPECT_EQ(r->advance(1, 7), 0);
}

// The daemon dies between a record's append and its fdatasync: the restart serves the record
// from the page cache, so it must reach the disk first.
TEST_F(FsyncFailure, ARestartAfterACrashBeforeTheSyncMakesTheRecordDurable) {
  fs_.crash_after(1);  // the append, not the sync
  EXPECT_EQ(s_->advance(1, 6), EIO);
  ASSERT_TRUE(fs_.crashed());
  s_.reset();
  fs_.clear_faults();
  std::string err;
  {
    auto r = reopen(t_.state(), fs_, &err);
    ASSERT_NE(r, nullptr) << err;
    EXPECT_EQ(state_of(*r).at(1).second, 6u);
  }
  fs_.drop_unsynced();
  auto r = reopen(t_.state(), fs_, &err);
  ASSERT_NE(r, nullptr) << err;
  EXPECT_EQ(state_of(*r).at(1).second, 6u);
}

TEST_F(FsyncFailure, FailedDomainAddIsNotDurable) {
  fs_.fail_next_sync(1);
  EXPECT_EQ(s_->add_domain(2, "/b"), EIO);
  EXPECT_EQ(state_of(*s_).count(2), 0u);
  EXPECT_EQ(s_->advance(2, 1), EINVAL);
  ASSERT_EQ(s_->rewrite(), 0);
  EXPECT_EQ(s_->add_domain(2, "/b"), 0);  // the id and path are free again
  EXPECT_EQ(s_->advance(2, 1), 0);
}

TEST_F(FsyncFailure, EveryCallerInTheFailedBatchGetsEio) {
  fs_.fail_syncs(true);
  std::vector<std::thread> threads;
  std::atomic<int> eio{0}, other{0};
  ASSERT_EQ(s_->add_domain(2, "/b"), EIO);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      int rc = s_->advance(1, 100 + i);
      (rc == EIO ? eio : other)++;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(eio.load(), 8);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(state_of(*s_).at(1).second, 5u);
  fs_.fail_syncs(false);
  ASSERT_EQ(s_->rewrite(), 0);
  EXPECT_EQ(s_->advance(1, 6), 0);
}

}  // namespace
}  // namespace fencefs::journal
