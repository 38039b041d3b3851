// The cached caller identity is what /proc/TID/status says, follows renames, and never outlives
// its thread.
#include "common/identity_cache.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace fencefs::proc {
namespace {

// A thread that names itself, reports its id, then waits for its next name or its end.
class Named {
 public:
  explicit Named(const char* name) {
    th_ = std::thread([this, name] {
      prctl(PR_SET_NAME, name);
      tid_ = gettid();
      while (!stop_) {
        if (const char* n = rename_.exchange(nullptr)) {
          prctl(PR_SET_NAME, n);
          renamed_ = true;
        }
        std::this_thread::yield();
      }
    });
    while (tid_.load() == 0) std::this_thread::yield();
  }
  ~Named() { join(); }
  pid_t tid() const { return tid_; }
  void rename(const char* n) {
    renamed_ = false;
    rename_ = n;
    while (!renamed_) std::this_thread::yield();
  }
  void join() {
    stop_ = true;
    if (th_.joinable()) th_.join();
  }

 private:
  std::thread th_;
  std::atomic<pid_t> tid_{0};
  std::atomic<const char*> rename_{nullptr};
  std::atomic<bool> renamed_{false}, stop_{false};
};

void expect_same(const std::optional<Identity>& a, const std::optional<Identity>& b) {
  ASSERT_EQ(a.has_value(), b.has_value());
  if (!a) return;
  EXPECT_EQ(a->tgid, b->tgid);
  EXPECT_EQ(a->comm, b->comm);
}

TEST(IdentityCache, AsProcStatusSaysForEveryThread) {
  IdentityCache cache;
  auto self = cache.get(gettid());
  ASSERT_TRUE(self);
  EXPECT_EQ(getpid(), self->tgid);
  Named odd("a\\b\nc");
  for (int k = 0; k < 2; k++) {  // the second time from the cache
    auto id = cache.get(odd.tid());
    ASSERT_TRUE(id);
    EXPECT_EQ(getpid(), id->tgid) << "a thread names its process";
    EXPECT_EQ("a\\\\b\\nc", id->comm) << "escaped as in /proc/TID/status";
    expect_same(id, identity_of(odd.tid()));
  }
  EXPECT_EQ(2u, cache.size());
}

TEST(IdentityCache, FollowsRenames) {
  IdentityCache cache;
  Named t("first");
  EXPECT_EQ("first", cache.get(t.tid())->comm);
  t.rename("second");
  EXPECT_EQ("second", cache.get(t.tid())->comm);
}

TEST(IdentityCache, AThreadGoneIsReadAfresh) {
  IdentityCache cache;
  Named t("gone");
  const pid_t tid = t.tid();
  ASSERT_TRUE(cache.get(tid));
  t.join();
  // join() returns once the thread has left user space, a moment before the kernel reaps it.
  std::string task = "/proc/self/task/" + std::to_string(tid);
  for (int k = 0; k < 5000 && access(task.c_str(), F_OK) == 0; k++)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The kernel may have given the number to another thread already: then that one is named.
  auto now = cache.get(tid);
  if (now) {
    EXPECT_NE("gone", now->comm);
  }
  expect_same(now, identity_of(tid));
}

TEST(IdentityCache, KeepsAtMostItsCapacity) {
  IdentityCache cache(2);
  std::vector<std::unique_ptr<Named>> ts;
  for (const char* n : {"t1", "t2", "t3"}) ts.push_back(std::make_unique<Named>(n));
  for (int round = 0; round < 2; round++)
    for (size_t k = 0; k < ts.size(); k++) {
      auto id = cache.get(ts[k]->tid());
      ASSERT_TRUE(id);
      EXPECT_EQ("t" + std::to_string(k + 1), id->comm);
    }
  EXPECT_EQ(2u, cache.size());
}

}  // namespace
}  // namespace fencefs::proc
