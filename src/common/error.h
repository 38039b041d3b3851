// Error text that is safe on any thread (strerror(3) may return a shared buffer).
#pragma once
#include <string>

namespace fencefs::common {

// The message of errno value `err` ("No such file or directory").
std::string errstr(int err);
// The symbolic name of errno value `err` ("ENOENT"), or its number when it has none.
std::string errname(int err);

}  // namespace fencefs::common
