// Path-prefix tests on normalised absolute paths ("/" or "/a/b": no trailing slash, no "//",
// no "." or ".." components), the form mount points, BACKING and domain paths are kept in.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace fencefs::common {

// True when `path` is `dir` or lies below it: "/a/b" is under "/a" but "/ab" is not, and every
// path is under "/".
bool under(std::string_view path, std::string_view dir);

// PATH with its parent made canonical (realpath) and its last component as given, not followed:
// where a link there stands, not where it points. nullopt when the last component is empty, "."
// or "..", or the parent does not resolve (errno says why).
std::optional<std::string> with_canonical_parent(const std::string& path);

}  // namespace fencefs::common
