#include "daemon/nesting.h"

#include <fmt/format.h>

#include "daemon/claim.h"
#include "daemon/mounts.h"

namespace fencefs::daemon {

std::string nested_backing(const std::string& backing) {
  for (std::string p = backing; p != "/";) {
    size_t slash = p.rfind('/');
    if (slash == std::string::npos) break;
    p = slash == 0 ? "/" : p.substr(0, slash);
    if (std::string who = served_by(p); !who.empty())
      return fmt::format(
          "backing {} is inside {}, which a fencefs daemon serves ({}): its files would be fenced "
          "twice, with two epochs per domain; serve {} alone (`domain add` gives {} epochs of "
          "its own), or unmount that daemon first",
          backing, p, who, p, backing.substr(p == "/" ? 0 : p.size()));
  }
  const std::string below = backing == "/" ? backing : backing + "/";
  for (const std::string& src : fencefs_backings())
    if (src.size() > below.size() && src.compare(0, below.size(), below) == 0)
      if (std::string who = served_by(src); !who.empty())
        return fmt::format(
            "backing {} holds {}, which a fencefs daemon serves ({}): its files would be fenced "
            "twice, with two epochs per domain; unmount that daemon first (then `domain add` "
            "gives {} epochs of its own)",
            backing, src, who, src.substr(backing == "/" ? 0 : backing.size()));
  return "";
}

}  // namespace fencefs::daemon
