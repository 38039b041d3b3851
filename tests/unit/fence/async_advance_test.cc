// Fence::advance_async: the caller's thread does not wait for the sync, yet the domain stays
// locked exclusively from before the record is queued until the epoch is durable and set, and
// the thread that synced the record releases it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "fence/fence.h"
#include "journal/fault_injection.h"
#include "unit/fence/fake_processes.h"
#include "unit/journal/test_util.h"

namespace fencefs::fence {
namespace {

using journal::testing::GatedSyncLayer;
using journal::testing::NoSyncLayer;
using journal::testing::TempDir;
using testing::FakeProcesses;

constexpr int kNotYet = -100;

struct Rig {
  explicit Rig(journal::FileLayer& fs, uint64_t compact_threshold = 4u << 20) {
    store = journal::testing::create_store(t.state(), fs, compact_threshold);
    domains.add(0, "/", 0, 0, 0);
    domains.add(1, "/other", 0, 0, 0);
    EXPECT_EQ(0, store->add_domain(1, "/other"));
    audit::Options ao;
    ao.dir = t.path();
    log = std::make_unique<audit::Log>(ao);
    fence = std::make_unique<Fence>(Config{}, domains, *store, log.get(), nullptr, procs);
    caller = Caller{procs.spawn(1), 0, 0};
    EXPECT_EQ(0, store->start());
  }
  ~Rig() { fence->quiesce(); }  // the committer still counts a completion after calling back
  Domain& root() { return *domains.root(); }
  int admit(Epoch token) {
    Admission a;
    return fence->admit(root(), token, 0, caller, Op{"write", {-1, "f"}, {}}, &a);
  }

  TempDir t;
  std::unique_ptr<journal::StateStore> store;
  DomainTable domains;
  std::unique_ptr<audit::Log> log;
  FakeProcesses procs;
  std::unique_ptr<Fence> fence;
  Caller caller;
};

TEST(FenceAsyncAdvance, TheDomainStaysLockedUntilTheEpochIsDurableThenTheSyncerUnlocksIt) {
  GatedSyncLayer fs;
  Rig r(fs);
  ASSERT_EQ(0, r.admit(1));
  // Another domain's advance keeps the journal busy, so the committer thread, not the caller,
  // syncs the root's record.
  const int synced = fs.syncs_entered();
  fs.shut();
  std::thread busy([&] {
    std::string why;
    EXPECT_EQ(0, r.fence->advance(*r.domains.by_id(1), 5, false, r.caller, &why)) << why;
  });
  fs.await_syncs(synced + 1);
  std::atomic<int> rc{kNotYet};
  std::promise<std::thread::id> by;
  r.fence->advance_async(r.root(), 2, r.caller, [&](int err) {
    rc = err;
    by.set_value(std::this_thread::get_id());
  });
  // Returned with the record queued and the domain still held.
  EXPECT_EQ(kNotYet, rc.load());
  EXPECT_FALSE(r.root().mu.try_lock_shared()) << "admissions possible before epoch 2 is durable";
  std::atomic<int> old_rc{kNotYet}, new_rc{kNotYet};
  std::thread old_writer([&] { old_rc = r.admit(1); });
  std::thread new_writer([&] { new_rc = r.admit(2); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(kNotYet, old_rc.load()) << "the old epoch was judged while the advance was pending";
  EXPECT_EQ(kNotYet, new_rc.load()) << "the new epoch was admitted before it was durable";
  EXPECT_EQ(1u, r.root().epoch.load());
  fs.open();
  busy.join();
  auto f = by.get_future();
  ASSERT_EQ(std::future_status::ready, f.wait_for(std::chrono::seconds(10)));
  EXPECT_NE(std::this_thread::get_id(), f.get()) << "the committer completes it";
  old_writer.join();
  new_writer.join();
  EXPECT_EQ(0, rc.load());
  EXPECT_EQ(ESTALE, old_rc.load());
  EXPECT_EQ(0, new_rc.load());
  EXPECT_EQ(2u, r.root().epoch.load());
  uint64_t durable = 0;
  ASSERT_EQ(0, r.store->durable_epoch(0, &durable));
  EXPECT_EQ(2u, durable);
}

TEST(FenceAsyncAdvance, AFailedSyncRefusesTheAdvanceAndReleasesTheDomain) {
  journal::FaultInjectionFileLayer fi(journal::posix_file_layer(), /*forward_syncs=*/false);
  Rig r(fi);
  ASSERT_EQ(0, r.admit(1));
  fi.fail_syncs(true);
  std::promise<int> p;
  r.fence->advance_async(r.root(), 2, r.caller, [&](int err) { p.set_value(err); });
  auto f = p.get_future();
  ASSERT_EQ(std::future_status::ready, f.wait_for(std::chrono::seconds(10)));
  EXPECT_EQ(EIO, f.get());
  EXPECT_EQ(1u, r.root().epoch.load()) << "the epoch moved although it is not durable";
  EXPECT_EQ(0, r.admit(1)) << "equal-epoch work goes on (and the domain is not left locked)";
  EXPECT_EQ(1u, r.root().refused[static_cast<int>(Reason::Io)].load());
}

TEST(FenceAsyncAdvance, TheRuleStillDecidesWhatAnAdvanceGets) {
  GatedSyncLayer fs;
  Rig r(fs);
  ASSERT_EQ(0, r.admit(3));
  int rc = kNotYet;
  r.fence->advance_async(r.root(), 2, r.caller, [&](int err) { rc = err; });
  EXPECT_EQ(ESTALE, rc) << "lower";
  rc = kNotYet;
  r.fence->advance_async(r.root(), 3, r.caller, [&](int err) { rc = err; });
  EXPECT_EQ(0, rc) << "equal: nothing to do";
  rc = kNotYet;
  r.fence->advance_async(r.root(), 3 + kDefaultMaxJump + 1, r.caller, [&](int err) { rc = err; });
  EXPECT_EQ(ERANGE, rc) << "beyond max_jump";
  EXPECT_EQ(3u, r.root().epoch.load());
}

// Two threads advance the root by advance_async, two admit writes at its current epoch, one
// keeps the journal busy with another domain's synchronous advances (so the committer syncs),
// optionally with compactions and failing syncs: an acknowledged advance is durable and set, no
// write is admitted below an acknowledged epoch, and none sees the epoch move while admitted.
void stress(journal::FileLayer& fs, uint64_t threshold, journal::FaultInjectionFileLayer* fi) {
  Rig r(fs, threshold);
  Domain& root = *r.domains.root();
  Domain& other = *r.domains.by_id(1);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};  // highest token an advance_async acknowledged (0)
  std::atomic<int> violations{0}, admitted{0}, advanced{0}, failed{0};
  std::vector<std::thread> th;
  for (int a = 0; a < 2; a++)
    th.emplace_back([&, a] {
      std::mt19937 rng(a);
      while (!stop) {
        Epoch tok = root.epoch.load() + 1 + rng() % 2;
        std::promise<int> p;
        r.fence->advance_async(root, tok, r.caller, [&](int err) {
          if (err == 0) {
            uint64_t durable = 0;
            r.store->durable_epoch(0, &durable);
            if (durable < tok || root.epoch.load() < tok) violations++;
          }
          p.set_value(err);
        });
        int err = p.get_future().get();
        if (err == 0) {
          Epoch seen = acked.load();
          while (seen < tok && !acked.compare_exchange_weak(seen, tok)) {
          }
          advanced++;
        } else if (err == EIO) {
          failed++;
        }
      }
    });
  // The other domain: synchronous advances keep the journal busy, so the committer leads.
  th.emplace_back([&] {
    while (!stop) {
      std::string why;
      r.fence->advance(other, other.epoch.load() + 1, false, r.caller, &why);
    }
  });
  for (int w = 0; w < 2; w++)
    th.emplace_back([&] {
      while (!stop) {
        Epoch floor = acked.load();
        Epoch tok = root.epoch.load();
        Admission adm;
        int err = r.fence->admit(root, tok, 0, r.caller, Op{"write", {-1, "f"}, {}}, &adm);
        if (err == 0) {
          admitted++;
          if (tok < floor) violations++;  // admitted below an acknowledged advance
          if (root.epoch.load() != tok) violations++;
          std::this_thread::yield();
          if (root.epoch.load() != tok) violations++;  // an advance acted meanwhile
        }
      }
    });
  if (fi) {
    th.emplace_back([&] {
      while (!stop) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        fi->fail_next_sync(1);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  stop = true;
  for (auto& t : th) t.join();
  r.fence->quiesce();
  ::testing::Test::RecordProperty("advanced", advanced.load());
  ::testing::Test::RecordProperty("failed", failed.load());
  ::testing::Test::RecordProperty("admitted", admitted.load());
  EXPECT_EQ(0, violations.load());
  EXPECT_GT(advanced.load(), 0);
  EXPECT_GT(admitted.load(), 0);
}

TEST(FenceAsyncAdvanceStress, Plain) {
  NoSyncLayer fs;
  stress(fs, 4u << 20, nullptr);
}

TEST(FenceAsyncAdvanceStress, CompactingOften) {
  NoSyncLayer fs;
  stress(fs, 2048, nullptr);
}

TEST(FenceAsyncAdvanceStress, WithFailingSyncs) {
  journal::FaultInjectionFileLayer fi(journal::posix_file_layer(), /*forward_syncs=*/false);
  stress(fi, 2048, &fi);
}

}  // namespace
}  // namespace fencefs::fence
