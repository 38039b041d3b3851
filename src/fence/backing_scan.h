// What BACKING itself says about epochs: the last-epoch stamps of its files and the high-water
// copy on its root. One walk, shared by the daemon (refusing to start over lost state) and
// fencectl (verify, recover).
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace fencefs::fence {

struct ScanEntry {
  const std::string& rel;  // "/a/b" relative to BACKING
  int fd;                  // O_PATH of the file itself, which `st` describes
  const struct stat& st;
};

// Depth-first, in name order, over the regular files below `root`, skipping the state directory
// (.fencefs) at its top. Each entry is opened (O_PATH) before it is judged, so what is read of it
// is what was judged, even if something is mounted over its name meanwhile. FUSE mounts that
// users made (common::on_user_fuse) are not walked: on_skipped gets their paths. Directories that
// cannot be read go to on_error ("/" for root itself) and are skipped; on_dir sees each directory
// walked into (not the root).
void walk_backing(const std::string& root, const std::function<void(const ScanEntry&)>& on_file,
                  const std::function<void(const std::string&, int)>& on_error,
                  const std::function<void(const std::string&)>& on_skipped = {},
                  const std::function<void(const ScanEntry&)>& on_dir = {});

// Reads an xattr of a scanned file through its descriptor, never its name.
ssize_t entry_xattr(const ScanEntry& e, const char* key, char* buf, size_t size);

// The epoch a directory's own high-water copy gives it as a domain root (0: none, or a copy of
// another path's: a directory moved around the mount).
uint64_t own_mark(const ScanEntry& e);

// BACKING's high-water copies (domain path -> epoch): its root's, and the own copies of
// `domains`; empty when it has none. *err: errno of a failed read (0 when read or absent).
std::map<std::string, uint64_t> read_highwater(const std::string& backing,
                                               const std::vector<std::string>& domains, int* err);

struct StampScan {
  uint64_t highest = 0;                       // the highest epoch of any stamp or high-water entry
  uint64_t stamped_files = 0;                 // files with a well-formed stamp
  std::map<std::string, uint64_t> highwater;  // the root's copy and every own copy found
};
// The highest stamp below BACKING and in its high-water copy.
StampScan scan_stamps(const std::string& backing);

}  // namespace fencefs::fence
