#include "common/error.h"

#include <string.h>

namespace fencefs::common {

std::string errstr(int err) {
  char buf[256];
  // GNU strerror_r: returns either buf or an immutable static string, never a shared buffer.
  return strerror_r(err, buf, sizeof buf);
}

std::string errname(int err) {
  const char* n = strerrorname_np(err);
  return n ? n : std::to_string(err);
}

}  // namespace fencefs::common
