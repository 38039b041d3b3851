// Group commit: concurrent advances share fdatasyncs; nobody returns before its record is synced.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "journal/format.h"
#include "journal/journal.h"
#include "unit/journal/test_util.h"

namespace fencefs::journal {
namespace {

using testing::create_store;
using testing::NoSyncLayer;
using testing::reopen;
using testing::state_of;
using testing::TempDir;

// Each journal sync takes 1 ms, like a real disk, so that batches form while a sync runs.
class SlowSyncLayer : public NoSyncLayer {
 public:
  std::unique_ptr<File> open_append(const std::string& path, bool truncate, int* err) override {
    auto f = NoSyncLayer::open_append(path, truncate, err);
    if (f == nullptr) return nullptr;
    return std::make_unique<SlowFile>(std::move(f));
  }

 private:
  class SlowFile : public File {
   public:
    explicit SlowFile(std::unique_ptr<File> f) : f_(std::move(f)) {}
    int append(const void* data, size_t len) override { return f_->append(data, len); }
    int sync() override {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return f_->sync();
    }
    int close() override { return f_->close(); }

   private:
    std::unique_ptr<File> f_;
  };
};

TEST(GroupCommit, ConcurrentDomainsShareSyncs) {
  TempDir t;
  SlowSyncLayer fs;
  auto s = create_store(t.state(), fs);
  ASSERT_NE(s, nullptr);
  const int kThreads = 16, kAdvances = 40;
  for (int d = 1; d <= kThreads; ++d) ASSERT_EQ(s->add_domain(d, "/d" + std::to_string(d)), 0);
  const Stats before = s->stats();
  EXPECT_EQ(before.syncs, static_cast<uint64_t>(kThreads));  // sequential: one sync each
  std::atomic<int> ready{0}, failures{0};
  std::vector<std::thread> threads;
  for (int d = 1; d <= kThreads; ++d) {
    threads.emplace_back([&, d] {
      ready++;
      while (ready.load() < kThreads) std::this_thread::yield();
      for (uint64_t e = 1; e <= kAdvances; ++e) {
        if (s->advance(d, e) != 0) failures++;
        uint64_t durable = 0;
        if (s->durable_epoch(d, &durable) != 0 || durable != e) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const Stats after = s->stats();
  const uint64_t records = after.records - before.records;
  const uint64_t syncs = after.syncs - before.syncs;
  EXPECT_EQ(records, static_cast<uint64_t>(kThreads * kAdvances));
  EXPECT_LT(syncs, records / 2) << syncs << " syncs for " << records << " records";
  RecordProperty("syncs", static_cast<int>(syncs));
  const auto want = state_of(*s);
  for (int d = 1; d <= kThreads; ++d)
    EXPECT_EQ(want.at(d).second, static_cast<uint64_t>(kAdvances));
  s.reset();
  s = reopen(t.state(), fs);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(state_of(*s), want);
}

// Remembers, per file, the bytes its last successful sync covered (after a slow sync, so that
// batches form), and finds a journal record among them.
class SyncedBytesLayer : public NoSyncLayer {
 public:
  std::unique_ptr<File> open_append(const std::string& path, bool truncate, int* err) override {
    auto f = NoSyncLayer::open_append(path, truncate, err);
    if (f == nullptr) return nullptr;
    auto seen = std::make_shared<Seen>();
    std::string existing;
    if (!truncate) posix_file_layer().read_file(path, &existing);
    seen->written = seen->synced = existing;
    std::lock_guard lk(mu_);
    files_.push_back(seen);
    return std::make_unique<TrackedFile>(std::move(f), seen);
  }

  // True when a synced ADVANCE of domain `id` to `epoch` is in some journal file.
  bool synced_advance(uint32_t id, uint64_t epoch) {
    std::vector<std::shared_ptr<Seen>> files;
    {
      std::lock_guard lk(mu_);
      files = files_;
    }
    for (const auto& f : files) {
      std::string bytes;
      {
        std::lock_guard lk(f->mu);
        bytes = f->synced;
      }
      format::FileHeader h;
      uint32_t chain = 0;
      if (!format::decode_header(bytes, format::FileKind::kJournal, &h, &chain).empty()) continue;
      bool found = false;
      format::scan(bytes, chain, [&](uint64_t, const format::Record& r) {
        found |= r.type == format::kAdvance && r.id == id && r.epoch == epoch;
        return std::string();
      });
      if (found) return true;
    }
    return false;
  }

 private:
  struct Seen {
    std::mutex mu;
    std::string written, synced;
  };
  class TrackedFile : public File {
   public:
    TrackedFile(std::unique_ptr<File> f, std::shared_ptr<Seen> s)
        : f_(std::move(f)), s_(std::move(s)) {}
    int append(const void* data, size_t len) override {
      int rc = f_->append(data, len);
      std::lock_guard lk(s_->mu);
      if (rc == 0) s_->written.append(static_cast<const char*>(data), len);
      return rc;
    }
    int sync() override {
      std::string covered;
      {
        std::lock_guard lk(s_->mu);
        covered = s_->written;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      int rc = f_->sync();
      std::lock_guard lk(s_->mu);
      if (rc == 0) s_->synced = covered;
      return rc;
    }
    int close() override { return f_->close(); }

   private:
    std::unique_ptr<File> f_;
    std::shared_ptr<Seen> s_;
  };
  std::mutex mu_;
  std::vector<std::shared_ptr<Seen>> files_;
};

// However the callers are woken, nobody returns before the sync that covers its own record.
TEST(GroupCommit, EveryCallerReturnsAfterTheSyncOfItsRecord) {
  TempDir t;
  SyncedBytesLayer fs;
  auto s = create_store(t.state(), fs, /*threshold=*/0);
  ASSERT_NE(s, nullptr);
  const int kThreads = 16, kAdvances = 30;
  for (int d = 1; d <= kThreads; ++d) ASSERT_EQ(s->add_domain(d, "/d" + std::to_string(d)), 0);
  std::atomic<int> ready{0}, failures{0}, unsynced{0};
  std::vector<std::thread> threads;
  for (int d = 1; d <= kThreads; ++d) {
    threads.emplace_back([&, d] {
      ready++;
      while (ready.load() < kThreads) std::this_thread::yield();
      for (uint64_t e = 1; e <= kAdvances; ++e) {
        if (s->advance(d, e) != 0) failures++;
        if (!fs.synced_advance(d, e)) unsynced++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(unsynced.load(), 0) << "advances returned before their record was synced";
  EXPECT_LT(s->stats().syncs, static_cast<uint64_t>(kThreads * kAdvances))
      << "the batches were shared";
}

TEST(GroupCommit, ASingleCallerSyncsEveryRecord) {
  TempDir t;
  NoSyncLayer fs;
  auto s = create_store(t.state(), fs);
  ASSERT_NE(s, nullptr);
  for (uint64_t e = 1; e <= 50; ++e) ASSERT_EQ(s->advance(0, e), 0);
  EXPECT_EQ(s->stats().syncs, 50u);
  EXPECT_EQ(s->stats().records, 50u);
}

}  // namespace
}  // namespace fencefs::journal
