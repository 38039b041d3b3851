// advance_async: the caller does not wait, and its callback runs exactly once, only after the
// record is synced (or with the error that refused it).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "journal/fault_injection.h"
#include "journal/journal.h"
#include "unit/journal/test_util.h"

namespace fencefs::journal {
namespace {

using testing::create_store;
using testing::GatedSyncLayer;
using testing::reopen;
using testing::state_of;
using testing::TempDir;

constexpr int kNotYet = -100;

uint64_t durable(const StateStore& s, uint32_t id) {
  uint64_t e = 0;
  EXPECT_EQ(0, s.durable_epoch(id, &e));
  return e;
}

bool eventually(const std::function<bool()>& f) {
  for (int k = 0; k < 5000; k++) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return f();
}

TEST(AsyncAdvance, TheCallbackRunsOnlyOnceTheRecordIsSynced) {
  TempDir t;
  GatedSyncLayer fs;
  auto s = create_store(t.state(), fs);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(0, s->start());
  ASSERT_EQ(0, s->add_domain(1, "/a"));
  const int synced = fs.syncs_entered();
  fs.shut();
  // The journal is idle: the caller leads this record itself, so it waits in the sync.
  std::atomic<int> first{kNotYet}, second{kNotYet};
  std::thread leader([&] { s->advance_async(0, 5, [&](int rc) { first = rc; }); });
  fs.await_syncs(synced + 1);
  // The journal is busy: this caller queues its record and returns at once.
  s->advance_async(1, 7, [&](int rc) { second = rc; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(kNotYet, first.load()) << "called back before its record was synced";
  EXPECT_EQ(kNotYet, second.load()) << "called back before its record was synced";
  EXPECT_EQ(0u, durable(*s, 0));
  EXPECT_EQ(0u, durable(*s, 1));
  fs.open();
  leader.join();
  EXPECT_EQ(0, first.load());
  ASSERT_TRUE(eventually([&] { return second.load() != kNotYet; }))
      << "a record queued while the journal was busy was never synced";
  EXPECT_EQ(0, second.load());
  EXPECT_EQ(5u, durable(*s, 0));
  EXPECT_EQ(7u, durable(*s, 1));
  s.reset();
  auto r = reopen(t.state(), fs);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(5u, durable(*r, 0));
  EXPECT_EQ(7u, durable(*r, 1));
}

TEST(AsyncAdvance, WithoutACommitterACallerFindingTheJournalBusyWaitsItsTurn) {
  TempDir t;
  GatedSyncLayer fs;
  auto s = create_store(t.state(), fs);  // not started: no committer thread
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(0, s->add_domain(1, "/a"));
  const int synced = fs.syncs_entered();
  fs.shut();
  std::atomic<int> first{kNotYet}, second{kNotYet};
  std::atomic<bool> returned{false};
  std::thread leader([&] { s->advance_async(0, 5, [&](int rc) { first = rc; }); });
  fs.await_syncs(synced + 1);
  std::thread waiter([&] {
    s->advance_async(1, 7, [&](int rc) { second = rc; });
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load()) << "returned with its record queued and nobody to sync it";
  fs.open();
  leader.join();
  waiter.join();
  EXPECT_EQ(0, first.load());
  EXPECT_EQ(0, second.load()) << "returned before its callback ran";
  EXPECT_EQ(7u, durable(*s, 1));
}

TEST(AsyncAdvance, WithoutARecordTheCallbackRunsAtOnce) {
  TempDir t;
  GatedSyncLayer fs;
  auto s = create_store(t.state(), fs);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(0, s->advance(0, 4));
  int rc = kNotYet;
  s->advance_async(0, 3, [&](int r) { rc = r; });
  EXPECT_EQ(0, rc) << "already durable: no record needed";
  s->advance_async(9, 3, [&](int r) { rc = r; });
  EXPECT_EQ(EINVAL, rc) << "unknown domain";
}

TEST(AsyncAdvance, AFailedSyncReachesEveryQueuedCallbackAndPoisons) {
  TempDir t;
  FaultInjectionFileLayer fi(posix_file_layer(), /*forward_syncs=*/false);
  auto s = create_store(t.state(), fi);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(0, s->add_domain(1, "/a"));
  fi.fail_syncs(true);
  std::promise<int> a, b;
  s->advance_async(0, 2, [&](int rc) { a.set_value(rc); });
  s->advance_async(1, 2, [&](int rc) { b.set_value(rc); });
  EXPECT_EQ(EIO, a.get_future().get());
  EXPECT_EQ(EIO, b.get_future().get());
  EXPECT_TRUE(s->poisoned());
  fi.fail_syncs(false);
  int rc = kNotYet;
  s->advance_async(0, 3, [&](int r) { rc = r; });
  EXPECT_EQ(EIO, rc) << "poisoned: refused at once, without a record";
  EXPECT_EQ(0u, durable(*s, 0));
}

TEST(AsyncAdvance, ConcurrentCallersEachGetTheirCallbackOnceTheirRecordIsDurable) {
  TempDir t;
  GatedSyncLayer fs;  // never shut: every sync passes
  auto s = create_store(t.state(), fs);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(0, s->start());
  const int kThreads = 16, kAdvances = 200;
  for (int d = 1; d <= kThreads; ++d) ASSERT_EQ(0, s->add_domain(d, "/d" + std::to_string(d)));
  const Stats before = s->stats();
  std::atomic<int> calls{0}, failures{0};
  std::vector<std::thread> threads;
  for (int d = 1; d <= kThreads; ++d) {
    threads.emplace_back([&, d] {
      for (uint64_t e = 1; e <= kAdvances; ++e) {
        std::promise<int> p;
        s->advance_async(d, e, [&](int rc) {
          calls++;
          uint64_t now = 0;
          // The record is durable by the time the callback runs.
          if (s->durable_epoch(d, &now) != 0 || now < e) failures++;
          p.set_value(rc);
        });
        if (p.get_future().get() != 0) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(0, failures.load());
  EXPECT_EQ(kThreads * kAdvances, calls.load());
  const Stats after = s->stats();
  EXPECT_EQ(static_cast<uint64_t>(kThreads * kAdvances), after.records - before.records);
  const auto want = state_of(*s);
  s.reset();
  auto r = reopen(t.state(), fs);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(want, state_of(*r));
}

TEST(AsyncAdvance, ClosingTheStoreSyncsWhatWasQueuedFirst) {
  TempDir t;
  GatedSyncLayer fs;
  auto s = create_store(t.state(), fs);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(0, s->start());
  ASSERT_EQ(0, s->add_domain(1, "/a"));
  ASSERT_EQ(0, s->add_domain(2, "/b"));
  const int synced = fs.syncs_entered();
  fs.shut();
  std::atomic<int> rc[3] = {kNotYet, kNotYet, kNotYet};
  std::thread leader([&] { s->advance_async(0, 2, [&](int r) { rc[0] = r; }); });
  fs.await_syncs(synced + 1);
  s->advance_async(1, 3, [&](int r) { rc[1] = r; });  // the committer's, once the journal is free
  fs.pass(1);
  leader.join();
  fs.await_syncs(synced + 2);                         // the committer syncs the second record
  s->advance_async(2, 4, [&](int r) { rc[2] = r; });  // queued behind it, nobody waiting
  std::thread closer([&] { s.reset(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  fs.open();
  closer.join();
  for (int k = 0; k < 3; k++) EXPECT_EQ(0, rc[k].load()) << "record " << k;
  auto r = reopen(t.state(), fs);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(2u, durable(*r, 0));
  EXPECT_EQ(3u, durable(*r, 1));
  EXPECT_EQ(4u, durable(*r, 2)) << "the store closed with a queued record not synced";
}

}  // namespace
}  // namespace fencefs::journal
