// The marker files of a claim (BACKING/.fencefs/owner, STATE/lock): whole rewrites, and the block
// kept for the backing's marker so that a full backing can still be mounted.
#pragma once
#include <string>

namespace fencefs::daemon {

// Overwrites, then cuts, then syncs: a daemon starting meanwhile never reads an empty marker (a
// free backing) while one is being rewritten. False with errno.
bool write_marker(int fd, const std::string& text);

// The reserve's name in BACKING/.fencefs.
inline constexpr const char* kMarkerReserve = "owner.reserve";

// write_marker, and when the file system is full, again once the reserve in DIRFD has been
// emptied (*took: it was). False with errno.
bool write_marker_or_reserve(int dirfd, int fd, const std::string& text, bool* took);

// Allocates the reserve in DIRFD (a block of the size LIKE_FD's file system writes) unless it
// holds one already. Best effort; true when it allocated one now.
bool keep_marker_reserve(int dirfd, int like_fd);

}  // namespace fencefs::daemon
