// The daemon's state files, reached through a descriptor of their directory taken when it was
// checked, never again through its path. The default state directory, BACKING/.fencefs, sits in
// a directory that whoever may write BACKING's root can rename entries of: they could move it
// away and put a link (or a directory of their own) in its place, and root, opening by path,
// would write, truncate and rename files wherever that points.
//
// These calls take the paths the code and its messages use; a path inside the anchored
// directory is resolved relative to its descriptor, without following a link in its last
// component. Every other path is used as given (fencectl, option paths, tests).
#pragma once
#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <string>

namespace fencefs::common {

// From now on, paths directly inside `dir` go through `dirfd`, an O_RDONLY directory descriptor
// this takes and keeps for the life of the process. Set once, before any thread uses it.
void anchor_dir(const std::string& dir, int dirfd);

// Like open(2), opendir(3), rename(2), unlink(2), remove(3), lstat(2), mkdir(2) and an fsync of a
// directory: -1 (nullptr) with errno set on failure.
int anchored_open(const std::string& path, int flags, mode_t mode = 0);
DIR* anchored_opendir(const std::string& dir);
int anchored_rename(const std::string& from, const std::string& to);
int anchored_unlink(const std::string& path);
int anchored_remove(const std::string& path);
int anchored_lstat(const std::string& path, struct stat* st);
int anchored_mkdir(const std::string& path, mode_t mode);
int anchored_sync_dir(const std::string& dir);

}  // namespace fencefs::common
