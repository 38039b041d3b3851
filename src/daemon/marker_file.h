// The marker files of a claim (BACKING/.fencefs/owner, STATE/lock).
#pragma once
#include <string>

namespace fencefs::daemon {

// Overwrites, then cuts, then syncs: a daemon starting meanwhile never reads an empty marker (a
// free backing) while one is being rewritten. False with errno.
bool write_marker(int fd, const std::string& text);

// Empties the marker but keeps allocated (fallocate, FALLOC_FL_KEEP_SIZE) the blocks its text
// took, so that the next start can write it on a backing that filled up meanwhile. False with
// errno if it could not be emptied; *kept: the blocks are kept (best effort: not where the file
// system has no fallocate, or another writer took them first).
bool empty_marker(int fd, bool* kept);

}  // namespace fencefs::daemon
