#include "common/error.h"

#include <string.h>

namespace fencefs::common {

std::string errstr(int err) {
  char buf[256];
  // GNU strerror_r: returns either buf or an immutable static string, never a shared buffer.
  return strerror_r(err, buf, sizeof buf);
}

}  // namespace fencefs::common
