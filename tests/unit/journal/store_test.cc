// The StateStore API on intact state: semantics of advance/add_domain, persistence, concurrency.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "journal/journal.h"
#include "unit/journal/test_util.h"

namespace fencefs::journal {
namespace {

using testing::create_store;
using testing::NoSyncLayer;
using testing::reopen;
using testing::state_of;
using testing::StateMap;
using testing::TempDir;

TEST(PosixFileLayer, BasicOperations) {
  TempDir t;
  FileLayer& fs = posix_file_layer();
  const std::string f = t.path() + "/f";
  std::string out;
  EXPECT_EQ(fs.read_file(f, &out), ENOENT);
  int err = 0;
  EXPECT_EQ(fs.open_append(f, false, &err), nullptr);
  EXPECT_EQ(err, ENOENT);
  auto file = fs.open_append(f, true, &err);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->append("abc", 3), 0);
  EXPECT_EQ(file->sync(), 0);
  EXPECT_EQ(file->close(), 0);
  file = fs.open_append(f, false, &err);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->append("def", 3), 0);
  file.reset();  // closes
  EXPECT_EQ(fs.read_file(f, &out), 0);
  EXPECT_EQ(out, "abcdef");
  EXPECT_EQ(fs.rename(f, t.path() + "/g"), 0);
  EXPECT_FALSE(fs.exists(f));
  EXPECT_TRUE(fs.exists(t.path() + "/g"));
  EXPECT_EQ(fs.sync_dir(t.path()), 0);
  EXPECT_EQ(fs.mkdir(t.path() + "/d"), 0);
  EXPECT_EQ(fs.mkdir(t.path() + "/d"), EEXIST);
  EXPECT_EQ(fs.remove(t.path() + "/d"), 0);
  EXPECT_EQ(fs.remove(t.path() + "/g"), 0);
  EXPECT_EQ(fs.remove(t.path() + "/g"), ENOENT);
  EXPECT_NE(fs.sync_dir(t.path() + "/nope"), 0);
}

TEST(StateStore, CreateReopenWithRealFiles) {
  TempDir t;
  FileLayer& fs = posix_file_layer();
  std::string err;
  EXPECT_EQ(reopen(t.state(), fs, &err), nullptr);
  EXPECT_EQ(err, "no state in " + t.state() + " (use --init to create)");
  std::string inc;
  {
    auto s = create_store(t.state(), fs);
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->report().created);
    inc = s->report().incarnation;
    EXPECT_EQ(state_of(*s), (StateMap{{0, {"/", 0}}}));
    EXPECT_EQ(s->add_domain(1, "/jobs"), 0);
    EXPECT_EQ(s->advance(1, 7), 0);
    EXPECT_EQ(s->advance(0, 3), 0);
    EXPECT_EQ(s->stats().syncs, 3u);
    EXPECT_EQ(s->stats().records, 3u);
  }
  auto s = reopen(t.state() + "/", fs, &err);  // a trailing slash names the same state
  ASSERT_NE(s, nullptr) << err;
  EXPECT_FALSE(s->report().created);
  EXPECT_EQ(s->report().incarnation, inc);
  EXPECT_EQ(s->report().records_replayed, 3u);
  EXPECT_EQ(state_of(*s), (StateMap{{0, {"/", 3}}, {1, {"/jobs", 7}}}));
  uint64_t e = 0;
  EXPECT_EQ(s->durable_epoch(1, &e), 0);
  EXPECT_EQ(e, 7u);
  EXPECT_EQ(s->durable_epoch(2, &e), EINVAL);
  // Opening an existing state with create_if_missing keeps it.
  s.reset();
  s = create_store(t.state(), fs);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->report().created);
  EXPECT_EQ(s->report().incarnation, inc);
}

TEST(StateStore, AdvanceAndAddDomainSemantics) {
  TempDir t;
  NoSyncLayer fs;
  auto s = create_store(t.state(), fs);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->advance(5, 1), EINVAL);  // unknown domain
  EXPECT_EQ(s->advance(0, 10), 0);
  EXPECT_EQ(s->advance(0, 10), 0);  // already durable: idempotent, no record
  EXPECT_EQ(s->advance(0, 3), 0);   // below durable: nothing to do (the fence rejects stale tokens)
  EXPECT_EQ(s->stats().records, 1u);
  EXPECT_EQ(s->add_domain(0, "/x"), EEXIST);
  EXPECT_EQ(s->add_domain(1, "/"), EEXIST);
  EXPECT_EQ(s->add_domain(1, "relative"), EINVAL);
  EXPECT_EQ(s->add_domain(1, ""), EINVAL);
  EXPECT_EQ(s->add_domain(1, std::string("/a\0b", 4)), EINVAL);
  EXPECT_EQ(s->add_domain(1, "/" + std::string(5000, 'a')), EINVAL);
  EXPECT_EQ(s->add_domain(1, "/a"), 0);
  EXPECT_EQ(s->add_domain(1, "/b"), EEXIST);
  EXPECT_EQ(s->add_domain(2, "/a"), EEXIST);
  EXPECT_EQ(s->advance(1, 0), 0);
  EXPECT_EQ(s->advance(1, UINT64_MAX), 0);
  EXPECT_EQ(state_of(*s), (StateMap{{0, {"/", 10}}, {1, {"/a", UINT64_MAX}}}));
  EXPECT_FALSE(s->poisoned());
  s.reset();
  s = reopen(t.state(), fs);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(state_of(*s), (StateMap{{0, {"/", 10}}, {1, {"/a", UINT64_MAX}}}));
}

// Callers normally serialise per domain; when they do not, records for one domain must still be
// written in rising order (or replay would refuse them) and nobody may return before durability.
TEST(StateStore, ConcurrentAdvancesOfOneDomain) {
  TempDir t;
  NoSyncLayer fs;
  auto s = create_store(t.state(), fs, /*threshold=*/2048);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->add_domain(1, "/shared"), 0);
  std::atomic<uint64_t> next{1};
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 300; ++k) {
        uint64_t e = next.fetch_add(1);
        if (s->advance(1, e) != 0) failures++;
        uint64_t d = 0;
        if (s->durable_epoch(1, &d) != 0 || d < e) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const uint64_t last = next.load() - 1;
  EXPECT_EQ(state_of(*s)[1].second, last);
  EXPECT_GT(s->stats().compactions, 0u);
  s.reset();
  std::string err;
  s = reopen(t.state(), fs, &err);
  ASSERT_NE(s, nullptr) << err;
  EXPECT_EQ(state_of(*s)[1].second, last);
}

TEST(StateStore, ConcurrentAddsAndAdvances) {
  TempDir t;
  NoSyncLayer fs;
  auto s = create_store(t.state(), fs, /*threshold=*/1024);
  ASSERT_NE(s, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t i = 1; i <= 6; ++i) {
    threads.emplace_back([&, i] {
      for (uint32_t k = 0; k < 20; ++k) {
        uint32_t id = i * 100 + k;
        if (s->add_domain(id, "/d" + std::to_string(id)) != 0) failures++;
        for (uint64_t e = 1; e <= 5; ++e) {
          if (s->advance(id, e) != 0) failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  StateMap want = state_of(*s);
  EXPECT_EQ(want.size(), 121u);
  s.reset();
  s = reopen(t.state(), fs);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(state_of(*s), want);
}

}  // namespace
}  // namespace fencefs::journal
