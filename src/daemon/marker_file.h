// The marker files of a claim (BACKING/.fencefs/owner, STATE/lock).
#pragma once
#include <string>

namespace fencefs::daemon {

// Overwrites, then cuts, then syncs: a daemon starting meanwhile never reads an empty marker (a
// free backing) while one is being rewritten. False with errno.
bool write_marker(int fd, const std::string& text);

// Keeps a block allocated past the end of an emptied marker (fallocate, FALLOC_FL_KEEP_SIZE), so
// that the next start can write it on a backing that filled up meanwhile. Best effort: false
// where the file system has no room or no fallocate.
bool keep_marker_block(int fd);

}  // namespace fencefs::daemon
