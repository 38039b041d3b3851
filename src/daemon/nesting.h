// One daemon per tree: a backing may not lie inside another served one, nor hold one.
#pragma once
#include <string>

namespace fencefs::daemon {

// Whether BACKING (canonical) holds, or is held in, a tree another fencefs daemon serves: its
// files would then be fenced by two daemons, each with its own epochs. "" when not, else why.
// Ancestors are found by their locked markers, descendants through this namespace's mount table.
std::string nested_backing(const std::string& backing);

}  // namespace fencefs::daemon
