// A reader/writer lock that prefers the writer: once an exclusive locker waits, new shared
// lockers wait behind it, so an advance waits only for the operations already admitted and a
// stream of overlapping writers cannot postpone it (glibc's default, like std::shared_mutex,
// prefers readers). Not recursive: a thread holding it shared must not lock it shared again
// (it would wait behind a waiting writer that waits for it).
//
// The exclusive lock belongs to no thread: an advance takes it on the worker that received the
// request and the journal's committer releases it once the new epoch is durable (pthread's
// rwlock cannot do that: its unlock by another thread is taken as a reader's).
#pragma once
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "common/thread_annotations.h"

namespace fencefs::fence {

class CAPABILITY("mutex") WriterPreferringLock {
 public:
  WriterPreferringLock() = default;
  WriterPreferringLock(const WriterPreferringLock&) = delete;
  WriterPreferringLock& operator=(const WriterPreferringLock&) = delete;

  void lock() ACQUIRE() {
    // Claim the writer bit (new readers wait from now on), then wait for the readers to leave.
    uint32_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      if (s & kWriter) {
        wait(s);
        s = state_.load(std::memory_order_relaxed);
      } else if (state_.compare_exchange_weak(s, s | kWriter, std::memory_order_acquire)) {
        break;
      }
    }
    while ((s = state_.load(std::memory_order_acquire)) != kWriter) wait(s);
  }
  bool try_lock() TRY_ACQUIRE(true) {
    uint32_t s = 0;
    return state_.compare_exchange_strong(s, kWriter, std::memory_order_acquire);
  }
  // From any thread.
  void unlock() RELEASE() {
    state_.fetch_and(~kWriter, std::memory_order_release);
    wake();
  }
  void lock_shared() ACQUIRE_SHARED() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      if (s & kWriter) {
        wait(s);
        s = state_.load(std::memory_order_relaxed);
      } else if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire)) {
        return;
      }
    }
  }
  bool try_lock_shared() TRY_ACQUIRE_SHARED(true) {
    uint32_t s = state_.load(std::memory_order_relaxed);
    while (!(s & kWriter))
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire)) return true;
    return false;
  }
  void unlock_shared() RELEASE_SHARED() {
    // The last reader out wakes a writer waiting for the readers to leave.
    if (state_.fetch_sub(1, std::memory_order_release) == (kWriter | 1)) wake();
  }

 private:
  static constexpr uint32_t kWriter = 1u << 31;  // below it: the number of readers

  // Sleeps while the state is still s. Counting the sleepers lets unlock skip the system call
  // when nobody sleeps; both counts are sequentially consistent with the state's changes, so a
  // waker either sees the sleeper or the sleeper's futex sees the new state.
  void wait(uint32_t s) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAIT_PRIVATE, s, nullptr,
            nullptr, 0);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  void wake() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0)
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
              nullptr, 0);
  }

  std::atomic<uint32_t> state_{0};
  std::atomic<uint32_t> sleepers_{0};
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                std::atomic<uint32_t>::is_always_lock_free);
};

}  // namespace fencefs::fence
