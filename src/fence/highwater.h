// A copy of every domain's epoch kept beside the data, in an xattr of BACKING's root directory.
// The journal is the authority; this copy is how a restored older state is noticed at mount, even
// before any stamped file is touched.
#pragma once
#include <map>
#include <mutex>
#include <string>

#include "fence/token.h"

namespace fencefs::fence {

class HighWater {
 public:
  static constexpr const char* kXattr = "trusted.fencefs.hwm";
  // dir_fd: an O_RDONLY fd of BACKING's root (kept open).
  explicit HighWater(int dir_fd);
  ~HighWater();
  // Epochs recorded so far, by domain path ("v1\n/ 5\n/a 7\n" in the xattr).
  std::map<std::string, Epoch> load();
  // Raises the recorded epoch of a domain. Best effort: a failure is logged, not fatal.
  void record(const std::string& domain, Epoch epoch);

  static std::string encode(const std::map<std::string, Epoch>& m);
  static std::map<std::string, Epoch> decode(std::string_view text);

 private:
  int fd_;
  std::mutex mu_;
  std::map<std::string, Epoch> cur_;
  bool loaded_ = false;
};

}  // namespace fencefs::fence
