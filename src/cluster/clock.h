// Time and counters the cluster's halves share.
#pragma once
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace fencefs::cluster {

inline int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);  // monotonic, and counts a suspended host's sleep
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t ns(std::chrono::milliseconds m) { return static_cast<int64_t>(m.count()) * 1000000; }

// Raises a to v unless it is already higher.
inline void raise_to(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load();
  while (cur < v && !a.compare_exchange_weak(cur, v)) {
  }
}

}  // namespace fencefs::cluster
