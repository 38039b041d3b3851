#include "fs/loop.h"

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/umask.h"
#include "fs/fs.h"

namespace fencefs::fs {
namespace {

constexpr int kReaders = 2;  // workers waiting in read(2) at once, at most

// Copies of the one loop's counts, written under its mutex, read without it by the metrics.
std::atomic<int> g_started, g_reading, g_parked, g_busy;

// Posted by every worker that leaves, by one that wants another started, and by stop_serving(),
// which may run before the loop, after it, or in a signal handler on any thread: so it outlives
// the loop, and the stop is a flag of its own, not libfuse's (a session may be gone by then).
sem_t g_wake;
[[maybe_unused]] const int g_wake_init = sem_init(&g_wake, 0, 0);  // private, 0: cannot fail
std::atomic<bool> g_stop{false};

class Loop {
 public:
  Loop(fuse_session* se, int max_workers) : se_(se), max_(max_workers) {}

  int run() {
    {
      std::lock_guard lk(mu_);
      if (!spawn_locked()) return -EAGAIN;
    }
    // A worker is started here, never by a worker, so that every worker begins with the
    // process's umask (0) and keeps it if it cannot have its own (see work()).
    while (!ended()) {
      sem_wait(&g_wake);
      std::lock_guard lk(mu_);
      if (!wanted_ || ended_flag_ || ended()) continue;
      wanted_ = false;
      if (readers_ > 0) continue;  // one went back to read(2) meanwhile
      if (parked_ > 0) {
        parked_cv_.notify_one();
      } else if (static_cast<int>(workers_.size()) < max_) {
        spawn_locked();
      }
    }
    std::vector<pthread_t> all;
    {
      std::lock_guard lk(mu_);
      ended_flag_ = true;
      // Only a worker waiting in read(2) can be cancelled there (see work()); one processing a
      // request finishes it, and a parked one wakes below.
      for (auto& w : workers_) pthread_cancel(w->thread);
      for (auto& w : workers_) all.push_back(w->thread);
    }
    parked_cv_.notify_all();
    for (pthread_t t : all) pthread_join(t, nullptr);
    return error_;
  }

 private:
  struct Worker {
    Loop* loop;
    pthread_t thread{};
    fuse_buf buf{};
    ~Worker() { free(buf.mem); }
  };

  static void* start(void* arg) {
    auto* w = static_cast<Worker*>(arg);
    w->loop->work(*w);
    return nullptr;
  }

  // Under mu_. Signals go to the daemon's signal thread, never to a worker.
  bool spawn_locked() {
    auto w = std::make_unique<Worker>();
    w->loop = this;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int err = pthread_create(&w->thread, nullptr, &Loop::start, w.get());
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (err != 0) {
      // Out of threads (threads-max, pid_max): said once, not once per request.
      if (!spawn_failed_)
        log::warn("cannot start a FUSE worker: {} (serving with {})", common::errstr(err),
                  workers_.size());
      spawn_failed_ = true;
      return false;
    }
    pthread_setname_np(w->thread, "fencefs-worker");
    workers_.push_back(std::move(w));
    publish();
    return true;
  }

  void work(Worker& w) {
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
    // Shares the process's umask until it has its own. One that cannot (unshare failed) masks
    // callers' modes itself and leaves the umask alone; had it been started by a worker, it
    // would share that worker's, which keeps the last caller's (common/umask.h).
    common::own_thread_umask();
    std::unique_lock lk(mu_);
    while (!ended_flag_ && !ended()) {
      if (readers_ >= kReaders + busy_) {
        parked_++;
        publish();
        parked_cv_.wait(lk);
        parked_--;
        continue;
      }
      readers_++;
      publish();
      lk.unlock();
      pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr);
      int r = fuse_session_receive_buf(se_, &w.buf);
      pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
      lk.lock();
      readers_--;
      if (r == -EINTR || r == -EAGAIN) continue;
      if (r <= 0) {  // 0: unmounted (libfuse has ended the session)
        if (r < 0) {
          error_ = r;
          fuse_session_exit(se_);
        }
        break;
      }
      // Nobody left in read(2): another worker must be, or later requests would wait behind
      // this one however long it takes. A new one is started by run().
      if (readers_ == 0 && !ended_flag_) {
        if (parked_ > 0) {
          parked_cv_.notify_one();
        } else if (static_cast<int>(workers_.size()) < max_ && !wanted_) {
          wanted_ = true;
          sem_post(&g_wake);
        }
      }
      busy_++;
      publish();
      lk.unlock();
      fuse_session_process_buf(se_, &w.buf);
      lk.lock();
      busy_--;
    }
    left_++;
    publish();
    lk.unlock();
    parked_cv_.notify_all();
    sem_post(&g_wake);
  }

  // A stop, an unmount, or an error.
  bool ended() const { return g_stop.load() || fuse_session_exited(se_); }

  void publish() {  // under mu_
    g_started.store(static_cast<int>(workers_.size()) - left_, std::memory_order_relaxed);
    g_reading.store(readers_, std::memory_order_relaxed);
    g_parked.store(parked_, std::memory_order_relaxed);
    g_busy.store(busy_, std::memory_order_relaxed);
  }

  fuse_session* se_;
  const int max_;
  std::mutex mu_;
  std::condition_variable parked_cv_;
  std::vector<std::unique_ptr<Worker>> workers_;  // under mu_; kept until the loop ends
  int readers_ = 0;                               // under mu_
  int parked_ = 0;                                // under mu_
  int busy_ = 0;                                  // under mu_: workers processing a request
  int left_ = 0;                                  // under mu_: workers that have returned
  bool spawn_failed_ = false;                     // under mu_
  bool wanted_ = false;                           // under mu_: a worker asked run() for another
  bool ended_flag_ = false;                       // under mu_
  int error_ = 0;                                 // under mu_ (read after the joins)
};

}  // namespace

void stop_serving() {
  g_stop.store(true);
  sem_post(&g_wake);
}

int serve_workers(fuse_session* se, int max_workers) {
  Loop loop(se, max_workers);
  return loop.run();
}

WorkerCounts worker_counts() {
  return WorkerCounts{
      g_started.load(std::memory_order_relaxed), g_reading.load(std::memory_order_relaxed),
      g_parked.load(std::memory_order_relaxed), g_busy.load(std::memory_order_relaxed)};
}

}  // namespace fencefs::fs
