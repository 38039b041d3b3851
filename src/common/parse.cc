#include "common/parse.h"

#include <charconv>

namespace fencefs::common {

bool parse_u64(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace fencefs::common
