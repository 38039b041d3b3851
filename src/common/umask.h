// The calling thread's umask, set only when it changes. A FUSE worker has a umask of its own
// (unshare(CLONE_FS)) and keeps the last caller's between creations: setting it is a system call
// (about 1 us on these machines) and callers mostly share one. The daemon's own files are created
// with it back at the daemon's 0 (own_files_umask(), in the helpers that create them), and so
// are the programs the daemon starts (fence hooks).
#pragma once
#include <sys/types.h>

namespace fencefs::common {

// Only on a thread whose umask is its own: on any other it would change the whole process's.
void set_thread_umask(mode_t m);
// Before creating one of the daemon's own files (journal, audit trail, logs, state) or starting
// a program: a caller's umask left on this worker goes. Costs nothing when none is left.
void own_files_umask();

}  // namespace fencefs::common
