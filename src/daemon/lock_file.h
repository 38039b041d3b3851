// Lock files: an OFD lock on the file a name names, and the backing's lock in /run/fencefs.
#pragma once
#include <fcntl.h>

#include <string>

namespace fencefs::daemon {

enum class Lock { Taken, Busy, Error };

// Opens NAME in directory DIRFD (creating it when missing) and takes an exclusive OFD lock on it
// without waiting. Retries when the file was replaced between open and lock, so the lock is on
// the file the name names. PATH names it in messages.
Lock lock_file(int dirfd, const std::string& name, const std::string& path, int* fd_out,
               bool* created, std::string* error, short type = F_WRLCK);

// BACKING itself is locked too, through a file of root's named after its root directory's
// identity: whoever may write BACKING's root can rename BACKING/.fencefs away while a daemon
// runs, and the next daemon would find a free owner file in a new one. Not a lock on BACKING's
// root: anyone who may read it could hold one and keep every daemon off. Local to this host. The
// locked descriptor, or -1 (*busy: a daemon holds it; else it could not be made, e.g. not root).
int lock_backing_identity(const std::string& backing, bool shared, bool* busy,
                          std::string* name_out);

// At exit, the backing's lock file goes when no other daemon (a cluster member) holds it: the
// upgrade to an exclusive lock proves that. Unlinked while locked: a daemon that opened it just
// before finds, once it holds the lock, that the path names another file or none, and retries.
void unlink_backing_identity(int fd, const std::string& name);
// The same for NAME in DIRFD, locked as FD: true when it was removed.
bool unlink_if_last(int dirfd, int fd, const std::string& name);

}  // namespace fencefs::daemon
