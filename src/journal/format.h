// Byte-level encoding of the state files (`snapshot`, `journal`). docs/journal-format.md is the
// normative description; this file and that document must change together.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace fencefs::journal::format {

inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHeaderSize = 40;       // magic 8, version 4, incarnation 16, gen 8, crc 4
inline constexpr size_t kRecordHeaderSize = 9;  // length 4, masked crc 4, type 1
inline constexpr size_t kMaxPathBytes = 4096;
inline constexpr size_t kMaxPayload = 12 + kMaxPathBytes;  // DOMAIN_STATE with the longest path
inline constexpr char kSnapshotMagic[8] = {'F', 'E', 'N', 'C', 'S', 'N', 'A', 'P'};
inline constexpr char kJournalMagic[8] = {'F', 'E', 'N', 'C', 'J', 'R', 'N', 'L'};

enum class FileKind { kSnapshot, kJournal };

// 0 is never valid, so a zeroed region can never decode as a record.
enum RecordType : uint8_t {
  kAdvance = 1,      // journal: {domain_id u32, epoch u64}
  kDomainAdd = 2,    // journal: {domain_id u32, path}
  kDomainState = 3,  // snapshot: {domain_id u32, epoch u64, path}
  kSnapshotEnd = 4,  // snapshot, last record: {domain_count u32}
  kIssuerSeq = 5,    // reserved (issuer sequence); version-1 readers reject it
};

using Incarnation = std::array<uint8_t, 16>;

struct FileHeader {
  uint32_t version = kVersion;
  Incarnation incarnation{};
  uint64_t generation = 0;
};

struct Record {
  RecordType type = kAdvance;
  uint32_t id = 0;
  uint64_t epoch = 0;
  std::string path;
  uint32_t count = 0;  // kSnapshotEnd
};

std::string incarnation_hex(const Incarnation& inc);
// 16 bytes from getrandom(2). 0 or an errno.
int random_incarnation(Incarnation* out);
// A domain path as the journal accepts it: starts with '/', 1..kMaxPathBytes bytes, no NUL.
bool valid_path(std::string_view path);

// The 40 header bytes. *chain receives the CRC that seeds the first record's chained CRC.
std::string encode_header(FileKind kind, const FileHeader& h, uint32_t* chain);
// Empty on success, else why the header is unacceptable.
std::string decode_header(std::string_view file, FileKind kind, FileHeader* h, uint32_t* chain);

std::string encode_payload(const Record& r);
// Empty on success, else why `payload` is not a valid payload of `type`.
std::string decode_payload(uint8_t type, std::string_view payload, Record* r);
// Appends the framed record to *out and advances *chain to this record's CRC.
void append_record(std::string* out, uint32_t* chain, const Record& r);
// Size of the framed record.
size_t record_size(const Record& r);

enum class ScanEnd {
  kClean,    // the file ends exactly after a valid record (or the header)
  kTorn,     // a torn tail starts at bad_offset (incomplete or zeroed final record)
  kCorrupt,  // an invalid record starts at bad_offset and is not a torn tail
};

struct ScanResult {
  ScanEnd end = ScanEnd::kClean;
  uint64_t valid_end = 0;   // offset just past the last valid record
  uint32_t chain = 0;       // chained CRC after the last valid record
  uint64_t records = 0;     // valid records visited
  uint64_t bad_offset = 0;  // start of the torn tail or bad record (== valid_end)
  std::string reason;       // for kTorn and kCorrupt
};

// Called for each framed, CRC-valid, decoded record; returns "" to accept it, or why the record
// is inconsistent with the state so far (which makes it corruption at `offset`).
using Visitor = std::function<std::string(uint64_t offset, const Record& r)>;

// Walks the records of `file` from byte kHeaderSize, the first record chained to `seed`.
// Recovery rules (docs/journal-format.md, "Reading"):
//  - only zero bytes from a record boundary to EOF: torn (zeroed tail);
//  - fewer than 9 bytes left, or a well-formed length that runs past EOF: torn (incomplete);
//  - a bad CRC on a record followed by nothing or only zero bytes: torn (torn final write);
//  - anything else invalid (bad length field, bad CRC with bytes after it, bad type or payload,
//    rejected by `visit`): corruption.
ScanResult scan(std::string_view file, uint32_t seed, const Visitor& visit);

}  // namespace fencefs::journal::format
