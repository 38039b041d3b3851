// The one replay engine for the state files: the record rules of docs/journal-format.md
// (section 5 for the journal, 6.2 for the snapshot) live here once. As with LevelDB's log reader,
// the engine does not decide what a defect means: it stops at the first record it cannot apply
// and reports where and why; the caller decides (open() refuses or cuts a torn tail, check()
// lists findings, recover_offline() salvages the prefix and goes on).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "journal/format.h"
#include "journal/journal.h"

namespace fencefs::journal {

enum class ReplayPolicy {
  // open() and check(): every rule holds. An ADVANCE must raise its domain's epoch, a DOMAIN_ADD
  // must be new, SNAPSHOT_END must count the records before it.
  kStrict,
  // recover_offline(): salvage what the records say, as long as it can only fence more. An
  // ADVANCE keeps the higher of the two epochs, a DOMAIN_ADD of a domain already known with the
  // same path is skipped, SNAPSHOT_END's count is not checked. Unknown domains, conflicting
  // domains and record types out of place still end the replay.
  kLenient,
};

// Domains and epochs while replaying files.
struct ReplayState {
  std::unordered_map<uint32_t, DomainRecord> by_id;
  std::unordered_set<std::string> paths;

  void add(uint32_t id, const std::string& path, uint64_t epoch);
  std::vector<DomainRecord> sorted() const;  // by id
};

struct ReplayResult {
  format::ScanResult scan;    // the valid prefix and, unless kClean, where and why it ends
  bool snapshot_end = false;  // a snapshot's SNAPSHOT_END was applied
  uint64_t advances = 0;      // ADVANCE records that raised an epoch
  uint64_t adds = 0;          // domains added (DOMAIN_ADD or DOMAIN_STATE)
  uint64_t skipped = 0;       // lenient: records valid but with nothing to apply
};

// Replays the records of `file` (whose header the caller decoded: `seed` is its chain value)
// into *state under `policy`. Records already applied stay applied when the replay stops early.
ReplayResult replay(std::string_view file, format::FileKind kind, uint32_t seed,
                    ReplayPolicy policy, ReplayState* state);

}  // namespace fencefs::journal
