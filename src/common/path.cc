#include "common/path.h"

#include <climits>
#include <cstdlib>

namespace fencefs::common {

bool under(std::string_view path, std::string_view dir) {
  if (path == dir) return true;
  if (dir == "/") return path.size() > 1 && path.front() == '/';
  return path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/';
}

std::optional<std::string> with_canonical_parent(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
  std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") return std::nullopt;
  char real[PATH_MAX];
  if (!realpath(parent.c_str(), real)) return std::nullopt;
  std::string out = real;
  return out == "/" ? "/" + name : out + "/" + name;
}

}  // namespace fencefs::common
