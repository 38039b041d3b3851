// Reading a state directory without writing anything: what open() and check() start from.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "journal/file_layer.h"
#include "journal/format.h"
#include "journal/replay.h"
#include "journal/state_files.h"

namespace fencefs::journal {

// Everything open() and check() learn from the files, without writing anything.
struct Loaded {
  enum Kind { kOk, kNoState, kFatal } kind = kOk;
  std::string message;  // kNoState: why; kFatal: "PATH: reason at byte N"
  ReplayState state;    // from the valid prefixes (also when kFatal)
  format::FileHeader snapshot_header;
  format::FileHeader journal_header;
  uint64_t snapshot_size = 0;
  std::string journal;  // the journal's bytes
  uint64_t journal_valid_end = 0;
  uint32_t chain = 0;  // chained CRC at journal_valid_end
  uint64_t records = 0;
  bool torn = false;
  std::string torn_reason;
  bool stale_journal = false;          // generation below the snapshot's: covered by it
  std::vector<std::string> leftovers;  // *.tmp files of an interrupted compaction
  bool unreadable = false;             // a file could not be read at all
};

// Reads both files under the strict policy (docs/journal-format.md, section 6).
Loaded load(const Paths& p, FileLayer& fs);

}  // namespace fencefs::journal
