// Fence::advance_async: the caller's thread does not wait for the sync, yet the domain stays
// locked exclusively from before the record is queued until the epoch is durable and set, and
// the thread that synced the record releases it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "fence/fence.h"
#include "journal/fault_injection.h"
#include "unit/fence/fake_processes.h"
#include "unit/journal/test_util.h"

namespace fencefs::fence {
namespace {

using journal::testing::GatedSyncLayer;
using journal::testing::TempDir;
using testing::FakeProcesses;

constexpr int kNotYet = -100;

struct Rig {
  explicit Rig(journal::FileLayer& fs) {
    store = journal::testing::create_store(t.state(), fs);
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

}  // namespace
}  // namespace fencefs::fence
