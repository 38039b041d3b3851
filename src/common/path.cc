#include "common/path.h"

namespace fencefs::common {

bool under(std::string_view path, std::string_view dir) {
  if (path == dir) return true;
  if (dir == "/") return path.size() > 1 && path.front() == '/';
  return path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/';
}

}  // namespace fencefs::common
