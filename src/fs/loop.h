// The multithreaded request loop.
//
// libfuse 3.14's loop lets every idle worker wait in read(2) on /dev/fuse, and the kernel hands a
// request to the reader that has waited longest. A caller's requests then rotate over all idle
// workers, each woken cold and often preempting the one that has just replied. Here at most two
// workers wait in read(2); the others park until both are busy, so a sequential caller is served
// by two warm threads while up to `max_workers` requests can still block at once (an advance's
// fdatasync, a slow backing).
#pragma once

struct fuse_session;

namespace fencefs::fs {

// Serves `se` until the session ends (unmount, stop_serving()). Returns 0, or the negative errno
// that ended it. With max_workers 1 requests are served one at a time (-s).
int serve_workers(fuse_session* se, int max_workers);

// Ends the loop, now or as soon as it starts. Async-signal-safe.
void stop_serving();

// The loop's workers right now, for the metrics.
struct WorkerCounts {
  int started = 0;  // threads alive in the loop
  int reading = 0;  // waiting in read(2) on /dev/fuse
  int parked = 0;   // idle, waiting for both readers to be busy
  int busy = 0;     // processing a request
};
WorkerCounts worker_counts();

}  // namespace fencefs::fs
