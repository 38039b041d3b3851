// Error text that is safe on any thread (strerror(3) may return a shared buffer).
#pragma once
#include <string>

namespace fencefs::common {

// The message of errno value `err` ("No such file or directory").
std::string errstr(int err);

}  // namespace fencefs::common
