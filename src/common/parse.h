// Strict number parsing for the text the project reads (stamps, options, file names, arguments).
#pragma once
#include <cstdint>
#include <string_view>

namespace fencefs::common {

// A decimal uint64: one or more ASCII digits and nothing else (no sign, no spaces, no "0x").
// Leading zeros are accepted ("007" is 7). False on anything else or on overflow; *v is then
// unspecified.
bool parse_u64(std::string_view s, uint64_t* v);

}  // namespace fencefs::common
