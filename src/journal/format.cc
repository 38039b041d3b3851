#include "journal/format.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "common/crc32c.h"

namespace fencefs::journal::format {
namespace {

void put32(std::string* out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out->append(b, 4);
}

void put64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out->append(b, 8);
}

uint32_t get32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint64_t get64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

const char* magic_of(FileKind kind) {
  return kind == FileKind::kSnapshot ? kSnapshotMagic : kJournalMagic;
}

// The length field carries its own check (high half = low half XOR 0xFFFF): a damaged length
// must read as corruption, never as "the record runs past EOF" (which would look like a torn tail
// and silently cut the valid records after it).
uint32_t encode_length(size_t len) {
  auto l = static_cast<uint32_t>(len);
  return l | ((l ^ 0xFFFFu) << 16);
}

// CRC of one record: chained to the previous record's (or the header's) CRC.
uint32_t record_crc(uint32_t prev, uint8_t type, std::string_view payload) {
  char p[5];
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(prev >> (8 * i));
  p[4] = static_cast<char>(type);
  uint32_t c = crc32c(p, sizeof p);
  return crc32c_extend(c, payload.data(), payload.size());
}

bool all_zero(std::string_view s) {
  for (char c : s) {
    if (c != 0) return false;
  }
  return true;
}

}  // namespace

std::string incarnation_hex(const Incarnation& inc) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : inc) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

int random_incarnation(Incarnation* out) {
  size_t got = 0;
  while (got < out->size()) {
    ssize_t n = getrandom(out->data() + got, out->size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    got += static_cast<size_t>(n);
  }
  return 0;
}

bool valid_path(std::string_view path) {
  return !path.empty() && path.size() <= kMaxPathBytes && path[0] == '/' &&
         path.find('\0') == std::string_view::npos;
}

std::string encode_header(FileKind kind, const FileHeader& h, uint32_t* chain) {
  std::string out(magic_of(kind), 8);
  put32(&out, h.version);
  out.append(reinterpret_cast<const char*>(h.incarnation.data()), h.incarnation.size());
  put64(&out, h.generation);
  uint32_t crc = crc32c(out.data(), out.size());
  put32(&out, crc32c_mask(crc));
  if (chain != nullptr) *chain = crc;
  return out;
}

std::string decode_header(std::string_view file, FileKind kind, FileHeader* h, uint32_t* chain) {
  if (file.empty()) return "empty file (no header)";
  if (file.size() < kHeaderSize) {
    return "truncated header (" + std::to_string(file.size()) + " of " +
           std::to_string(kHeaderSize) + " bytes)";
  }
  const char* p = file.data();
  if (std::memcmp(p, magic_of(kind), 8) != 0) {
    const char* other = kind == FileKind::kSnapshot ? kJournalMagic : kSnapshotMagic;
    if (std::memcmp(p, other, 8) == 0) {
      return kind == FileKind::kSnapshot ? "bad magic (this is a journal, not a snapshot)"
                                         : "bad magic (this is a snapshot, not a journal)";
    }
    return "bad magic";
  }
  uint32_t crc = crc32c(p, kHeaderSize - 4);
  if (crc32c_mask(crc) != get32(p + 36)) return "bad header CRC";
  uint32_t version = get32(p + 8);
  if (version != kVersion) {
    return "unsupported format version " + std::to_string(version) + " (this build reads " +
           std::to_string(kVersion) + ")";
  }
  h->version = version;
  std::memcpy(h->incarnation.data(), p + 12, 16);
  h->generation = get64(p + 28);
  if (chain != nullptr) *chain = crc;
  return "";
}

std::string encode_payload(const Record& r) {
  std::string out;
  switch (r.type) {
    case kAdvance:
      put32(&out, r.id);
      put64(&out, r.epoch);
      break;
    case kDomainAdd:
      put32(&out, r.id);
      out += r.path;
      break;
    case kDomainState:
      put32(&out, r.id);
      put64(&out, r.epoch);
      out += r.path;
      break;
    case kSnapshotEnd:
      put32(&out, r.count);
      break;
    case kIssuerSeq:
      put64(&out, r.epoch);
      break;
  }
  return out;
}

std::string decode_payload(uint8_t type, std::string_view payload, Record* r) {
  const char* p = payload.data();
  const size_t n = payload.size();
  r->path.clear();
  r->id = 0;
  r->epoch = 0;
  r->count = 0;
  switch (type) {
    case kAdvance:
      if (n != 12) return "ADVANCE payload of " + std::to_string(n) + " bytes (expected 12)";
      r->type = kAdvance;
      r->id = get32(p);
      r->epoch = get64(p + 4);
      return "";
    case kDomainAdd:
      if (n < 5) return "DOMAIN_ADD payload of " + std::to_string(n) + " bytes (too short)";
      r->type = kDomainAdd;
      r->id = get32(p);
      r->path.assign(p + 4, n - 4);
      if (!valid_path(r->path)) return "DOMAIN_ADD with an invalid path";
      if (r->id == 0) return "DOMAIN_ADD for the root domain id 0";
      return "";
    case kDomainState:
      if (n < 13) return "DOMAIN_STATE payload of " + std::to_string(n) + " bytes (too short)";
      r->type = kDomainState;
      r->id = get32(p);
      r->epoch = get64(p + 4);
      r->path.assign(p + 12, n - 12);
      if (!valid_path(r->path)) return "DOMAIN_STATE with an invalid path";
      return "";
    case kSnapshotEnd:
      if (n != 4) return "SNAPSHOT_END payload of " + std::to_string(n) + " bytes (expected 4)";
      r->type = kSnapshotEnd;
      r->count = get32(p);
      return "";
    case kIssuerSeq:
      return "record type 5 (ISSUER_SEQ) is reserved and not supported by format version 1";
    default:
      return "unknown record type " + std::to_string(type);
  }
}

size_t record_size(const Record& r) {
  switch (r.type) {
    case kAdvance:
      return kRecordHeaderSize + 12;
    case kDomainAdd:
      return kRecordHeaderSize + 4 + r.path.size();
    case kDomainState:
      return kRecordHeaderSize + 12 + r.path.size();
    case kSnapshotEnd:
      return kRecordHeaderSize + 4;
    case kIssuerSeq:
      return kRecordHeaderSize + 8;
  }
  return kRecordHeaderSize;
}

void append_record(std::string* out, uint32_t* chain, const Record& r) {
  std::string payload = encode_payload(r);
  uint32_t crc = record_crc(*chain, r.type, payload);
  put32(out, encode_length(payload.size()));
  put32(out, crc32c_mask(crc));
  out->push_back(static_cast<char>(r.type));
  out->append(payload);
  *chain = crc;
}

ScanResult scan(std::string_view file, uint32_t seed, const Visitor& visit) {
  ScanResult res;
  res.chain = seed;
  uint64_t off = kHeaderSize;
  const uint64_t size = file.size();
  Record rec;
  auto stop = [&](ScanEnd end, std::string why) {
    res.end = end;
    res.valid_end = off;
    res.bad_offset = off;
    res.reason = std::move(why);
    return res;
  };
  if (size < off) return stop(ScanEnd::kCorrupt, "file shorter than its header");
  while (off < size) {
    const char* p = file.data() + off;
    const uint64_t left = size - off;
    if (all_zero(std::string_view(p, left))) {
      return stop(ScanEnd::kTorn, "zeroed tail of " + std::to_string(left) + " bytes");
    }
    if (left < kRecordHeaderSize) {
      return stop(ScanEnd::kTorn, "incomplete record header (" + std::to_string(left) + " bytes)");
    }
    uint32_t lf = get32(p);
    uint32_t len = lf & 0xFFFFu;
    if ((lf >> 16) != (len ^ 0xFFFFu)) return stop(ScanEnd::kCorrupt, "bad record length field");
    if (len > kMaxPayload) {
      return stop(ScanEnd::kCorrupt,
                  "record length " + std::to_string(len) + " exceeds the maximum");
    }
    if (left < kRecordHeaderSize + len) {
      return stop(ScanEnd::kTorn, "incomplete record (" + std::to_string(left) + " of " +
                                      std::to_string(kRecordHeaderSize + len) + " bytes)");
    }
    const uint8_t type = static_cast<uint8_t>(p[8]);
    std::string_view payload(p + kRecordHeaderSize, len);
    uint32_t crc = record_crc(res.chain, type, payload);
    if (crc32c_mask(crc) != get32(p + 4)) {
      // A torn write of the final record: nothing, or only zeros (blocks allocated but never
      // written), follows it. Zeros cannot hold a record, so no valid record is cut with it.
      if (all_zero(file.substr(off + kRecordHeaderSize + len))) {
        return stop(ScanEnd::kTorn, "bad CRC on the final record (torn write)");
      }
      return stop(ScanEnd::kCorrupt, "bad CRC");
    }
    std::string why = decode_payload(type, payload, &rec);
    if (why.empty()) why = visit(off, rec);
    if (!why.empty()) return stop(ScanEnd::kCorrupt, why);
    res.chain = crc;
    res.records++;
    off += kRecordHeaderSize + len;
  }
  res.end = ScanEnd::kClean;
  res.valid_end = off;
  res.bad_offset = off;
  return res;
}

}  // namespace fencefs::journal::format
