// The daemon's side of /dev/fuse, under libfuse: reads and writes pass through here
// (fuse_session_custom_io) so that the daemon can
// - take what libfuse 3.14 drops from a request: the kernel's "kill set-id bits" flags on WRITE,
//   SETATTR, OPEN and CREATE (FUSE_WRITE_KILL_SUIDGID, FATTR_KILL_SUIDGID, FUSE_OPEN_KILL_SUIDGID);
// - answer INIT with FUSE_HANDLE_KILLPRIV_V2, which libfuse 3.14 cannot send. With it the kernel
//   marks inodes S_NOSEC once checked and stops asking for security.capability (a GETXATTR)
//   before every cached write; in exchange the daemon clears set-id bits where the flags say.
#pragma once
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <string>

namespace fencefs::fs::kernel_io {

// Installs the pass-through on a mounted session (after fuse_session_mount); INIT is answered
// with FUSE_HANDLE_KILLPRIV_V2 when the kernel offers it. False with *error if libfuse refused.
bool install(fuse_session* se, std::string* error);

// Notes what the request in buf asks of this thread (the kill flags), before it is served.
void note_request(const char* buf, size_t n);

// Asks for FUSE over io_uring at INIT (ring.h), per_cpu threads per CPU. On the main thread,
// after the mount and before the session loop.
void want_rings(int per_cpu);
// Whether INIT will be answered with the rings (wanted and offered): known once op_init runs.
bool rings_offered();

// Whether the kernel asked the daemon to clear set-user-ID and set-group-ID for the request this
// thread is serving (libfuse serves a request on the thread that read it).
bool kill_suidgid();

// Whether the kernel accepted FUSE_HANDLE_KILLPRIV_V2 at INIT.
bool killpriv_v2();

// After the session loop: how the kernel ended the connection, if it did. Aborted
// (/sys/fs/fuse/connections/N/abort) leaves the mount in place, dead; Ended is an unmount, or
// what else ends a connection first and leaves the mount if busy (`umount -f`, the kernel's
// request timeout). Known from a read of /dev/fuse once the connection is gone (ECONNABORTED, as
// asked for at INIT, against ENODEV); Live after a stop by a signal.
enum class End { Live, Ended, Aborted };
End connection_end();

// Where a handler reads a reply's data of size bytes (a READ's) for fuse_reply_buf, when libfuse
// would otherwise copy it through a buffer it allocates per reply: a ring's entry, or a buffer
// this thread keeps for replies too large to splice. nullptr: reply with fuse_reply_data.
char* reply_buffer(size_t size);

// Drops the kernel's cached attributes of ino: the daemon changed them without a reply that
// carries them (set-id bits cleared during a WRITE or an OPEN). Safe inside a handler.
void attributes_changed(fuse_ino_t ino);

}  // namespace fencefs::fs::kernel_io
