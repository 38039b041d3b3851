// The calling thread's umask, set only when it changes. A FUSE worker has a umask of its own
// (unshare(CLONE_FS)) and keeps the last caller's between creations: setting it is a system call
// (about 1 us on these machines) and callers mostly share one. The daemon's own files are created
// with it back at the daemon's 0 (own_files_umask(), in the helpers that create them), and so
// are the programs the daemon starts (fence hooks).
#pragma once
#include <sys/types.h>

namespace fencefs::common {

// Gives the calling thread a umask of its own, at 0 (a worker, once, before serving). False when
// the kernel refused: the thread then shares the process's, which nothing here changes.
bool own_thread_umask();
// Sets the calling thread's own umask to m unless it is that already. False, changing nothing,
// on a thread without one of its own (it would change the whole process's).
bool set_thread_umask(mode_t m);
// Before creating one of the daemon's own files (journal, audit trail, logs, state) or starting
// a program: a caller's umask left on this worker goes. Costs nothing when none is left.
void own_files_umask();

}  // namespace fencefs::common
