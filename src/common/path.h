// Path-prefix tests on normalised absolute paths ("/" or "/a/b": no trailing slash, no "//",
// no "." or ".." components), the form mount points, BACKING and domain paths are kept in.
#pragma once
#include <string_view>

namespace fencefs::common {

// True when `path` is `dir` or lies below it: "/a/b" is under "/a" but "/ab" is not, and every
// path is under "/".
bool under(std::string_view path, std::string_view dir);

}  // namespace fencefs::common
