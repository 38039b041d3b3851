// A reader/writer lock that prefers the writer: once an exclusive locker waits, new shared
// lockers wait behind it, so an advance waits only for the operations already admitted and a
// stream of overlapping writers cannot postpone it (glibc's default, like std::shared_mutex,
// prefers readers). Not recursive: a thread holding it shared must not lock it shared again
// (it would wait behind a waiting writer that waits for it).
#pragma once
#include <pthread.h>

#include "common/thread_annotations.h"

namespace fencefs::fence {

class CAPABILITY("mutex") WriterPreferringLock {
 public:
  WriterPreferringLock() {
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&l_, &a);
    pthread_rwlockattr_destroy(&a);
  }
  ~WriterPreferringLock() { pthread_rwlock_destroy(&l_); }
  WriterPreferringLock(const WriterPreferringLock&) = delete;
  WriterPreferringLock& operator=(const WriterPreferringLock&) = delete;

  void lock() ACQUIRE() { pthread_rwlock_wrlock(&l_); }
  bool try_lock() TRY_ACQUIRE(true) { return pthread_rwlock_trywrlock(&l_) == 0; }
  void unlock() RELEASE() { pthread_rwlock_unlock(&l_); }
  void lock_shared() ACQUIRE_SHARED() { pthread_rwlock_rdlock(&l_); }
  bool try_lock_shared() TRY_ACQUIRE_SHARED(true) { return pthread_rwlock_tryrdlock(&l_) == 0; }
  void unlock_shared() RELEASE_SHARED() { pthread_rwlock_unlock(&l_); }

 private:
  pthread_rwlock_t l_;
};

}  // namespace fencefs::fence
