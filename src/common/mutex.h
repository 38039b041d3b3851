// Mutexes the compiler can check (clang -Wthread-safety): std::mutex and std::shared_mutex with
// capability annotations, and scoped locks that say what they hold. libstdc++'s own types carry
// no annotations, so a member GUARDED_BY a std::mutex could not be checked.
#pragma once
#include <mutex>
#include <shared_mutex>

#include "common/thread_annotations.h"

namespace fencefs::common {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For std::condition_variable: wait through a std::unique_lock of this, while a MutexLock of
  // the same mutex is held (the analysis sees it held throughout, as it is on return).
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

class CAPABILITY("mutex") SharedMutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  void lock_shared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a Mutex (or any exclusive capability with lock/unlock) for its scope.
template <typename M>
class SCOPED_CAPABILITY ExclusiveLock {
 public:
  explicit ExclusiveLock(M& m) ACQUIRE(m) : m_(m) { m_.lock(); }
  ~ExclusiveLock() RELEASE() { m_.unlock(); }
  ExclusiveLock(const ExclusiveLock&) = delete;
  ExclusiveLock& operator=(const ExclusiveLock&) = delete;

 private:
  M& m_;
};

// Holds a shared capability (lock_shared/unlock_shared) for its scope.
template <typename M>
class SCOPED_CAPABILITY SharedLock {
 public:
  explicit SharedLock(M& m) ACQUIRE_SHARED(m) : m_(m) { m_.lock_shared(); }
  ~SharedLock() RELEASE() { m_.unlock_shared(); }
  SharedLock(const SharedLock&) = delete;
  SharedLock& operator=(const SharedLock&) = delete;

 private:
  M& m_;
};

// Holds a Mutex and may let it go and take it again within its scope; native() is the
// std::unique_lock a std::condition_variable waits on.
class SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& m) ACQUIRE(m) : lk_(m.native()) {}
  ~UniqueLock() RELEASE() {}
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;
  void lock() ACQUIRE() { lk_.lock(); }
  void unlock() RELEASE() { lk_.unlock(); }
  std::unique_lock<std::mutex>& native() { return lk_; }

 private:
  std::unique_lock<std::mutex> lk_;
};

using MutexLock = ExclusiveLock<Mutex>;
using WriterLock = ExclusiveLock<SharedMutex>;
using ReaderLock = SharedLock<SharedMutex>;

}  // namespace fencefs::common
