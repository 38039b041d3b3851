// FUSE over io_uring (Linux 6.14 and later, /sys/module/fuse/parameters/enable_uring): requests
// come through one io_uring per CPU instead of read(2) on /dev/fuse, and a reply and the fetch of
// the next request are one system call. libfuse 3.14 knows nothing of it: the daemon asks for it
// in its INIT reply (kernel_io) and feeds the requests the rings deliver to libfuse as if read.
// FORGET, INTERRUPT and notifications still go through /dev/fuse (the kernel's choice).
#pragma once
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace fencefs::fs::ring {

// Payload bytes a ring entry must hold for this connection (the kernel refuses smaller).
size_t payload_size(uint32_t max_write, uint32_t max_pages);

// Starts per_cpu threads for each online CPU's queue (per_cpu <= 0: 16 per CPU up to 4 CPUs,
// 64 in all up to 32, then 2 per CPU), one for each possible CPU not online, waiting for go(). On
// the daemon's main thread, before the session loop: a thread started by a FUSE worker would share
// that worker's umask (common/umask.h). False with the reason if they could not start.
bool prepare(int per_cpu, std::string* why);
// The fds the rings hold now (each thread's io_uring and eventfd), for the daemon's fd budget:
// none before arm(), nor once they fell back to /dev/fuse.
size_t fds_held();

// Before the INIT reply asks for the rings: each thread's io_uring and entry of `payload` bytes
// (the kernel refuses entries smaller than its payload size). Once the reply has asked, the
// kernel holds every request until each CPU's queue has an entry: the rings are asked for only
// when this succeeded. False with the reason (the threads then end).
bool arm(size_t payload, std::string* why);

// The INIT reply reached the kernel (it refuses registrations before): each thread registers.
void go(fuse_session* se, int fd);

// Ends the threads (the kernel did not offer the rings, or the session has ended), each once
// its entry's request has its reply: a reply another thread makes (an advance's) is waited for.
void stop();

// Whether the ring serves the request `unique`: its reply is then taken here (copied into the
// entry's buffers and committed by the queue's thread). Returns the bytes taken, or -1 when the
// request did not come through a ring (the caller writes the reply to /dev/fuse).
ssize_t reply(uint64_t unique, const iovec* iov, int count);

// On a ring thread serving a request that brought no payload (a READ): where in its entry a
// reply's data of up to len bytes can be written, so that it is committed without a copy; else
// nullptr. Valid until the reply.
char* reply_buffer(size_t len);

// Whether the rings were started.
bool active();
// Threads serving the rings, requests they have served, and replies made on another thread
// and handed to the entry's (metrics).
int threads();
uint64_t served();
uint64_t handed_over();

}  // namespace fencefs::fs::ring
