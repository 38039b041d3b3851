// The domain lock: exclusion, the writer's preference, and a release by another thread.
#include "fence/rwlock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace fencefs::fence {
namespace {

void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

// Taken on one thread, released on another: what the analysis cannot follow, and what the lock
// allows.
void take(WriterPreferringLock& l) NO_THREAD_SAFETY_ANALYSIS { l.lock(); }
void give_back(WriterPreferringLock& l) NO_THREAD_SAFETY_ANALYSIS { l.unlock(); }

TEST(WriterPreferringLock, AnotherThreadMayReleaseTheExclusiveLock) {
  WriterPreferringLock l;
  std::thread taker([&] { take(l); });
  taker.join();
  EXPECT_FALSE(l.try_lock_shared());
  std::atomic<bool> in{false};
  std::thread reader([&] {
    l.lock_shared();
    in = true;
    l.unlock_shared();
  });
  settle();
  EXPECT_FALSE(in.load()) << "a reader got in while the writer held the lock";
  std::thread releaser([&] { give_back(l); });
  releaser.join();
  reader.join();
  EXPECT_TRUE(in.load());
  EXPECT_TRUE(l.try_lock());
  give_back(l);
}

TEST(WriterPreferringLock, AWaitingWriterKeepsNewReadersOut) {
  WriterPreferringLock l;
  l.lock_shared();
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    l.lock();
    wrote = true;
    l.unlock();
  });
  settle();
  EXPECT_FALSE(wrote.load()) << "the writer got in beside a reader";
  EXPECT_FALSE(l.try_lock_shared()) << "a new reader got in ahead of the waiting writer";
  std::atomic<bool> read{false};
  std::thread late_reader([&] {
    l.lock_shared();
    read = true;
    l.unlock_shared();
  });
  settle();
  EXPECT_FALSE(read.load());
  l.unlock_shared();
  writer.join();
  late_reader.join();
  EXPECT_TRUE(wrote.load());
  EXPECT_TRUE(read.load());
}

TEST(WriterPreferringLock, ReadersShareAndWritersExcludeUnderLoad) {
  WriterPreferringLock l;
  std::atomic<int> readers{0}, writers{0}, violations{0}, max_readers{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < 6; k++) {
    threads.emplace_back([&] {
      while (!stop) {
        l.lock_shared();
        int n = ++readers;
        int m = max_readers.load();
        while (n > m && !max_readers.compare_exchange_weak(m, n)) {
        }
        if (writers.load() != 0) violations++;
        std::this_thread::yield();
        readers--;
        l.unlock_shared();
      }
    });
  }
  uint64_t rounds = 0;
  for (int k = 0; k < 2; k++) {
    threads.emplace_back([&] {
      while (!stop) {
        take(l);
        if (++writers != 1 || readers.load() != 0) violations++;
        writers--;
        // Half of the releases from another thread, as the journal's committer does.
        if (rounds++ % 2) {
          std::thread([&] { give_back(l); }).join();
        } else {
          give_back(l);
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(0, violations.load());
  EXPECT_GT(max_readers.load(), 1) << "readers never shared the lock";
}

}  // namespace
}  // namespace fencefs::fence
