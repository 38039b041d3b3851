// The byte format of the state files: headers, payloads, framing, and the scan's torn-tail and
// corruption rules.
#include "journal/format.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/crc32c.h"

namespace fencefs::journal::format {
namespace {

std::string header(FileKind kind, uint64_t gen, uint8_t inc_byte, uint32_t* chain) {
  FileHeader h;
  h.incarnation.fill(inc_byte);
  h.generation = gen;
  return encode_header(kind, h, chain);
}

std::vector<Record> sample_records() {
  std::vector<Record> v;
  Record a;
  a.type = kDomainAdd;
  a.id = 7;
  a.path = "/a/b";
  v.push_back(a);
  Record b;
  b.type = kAdvance;
  b.id = 7;
  b.epoch = 0x0102030405060708ull;
  v.push_back(b);
  Record c;
  c.type = kDomainState;
  c.id = 9;
  c.epoch = 42;
  c.path = std::string(kMaxPathBytes - 1, 'x');
  c.path[0] = '/';
  v.push_back(c);
  Record d;
  d.type = kSnapshotEnd;
  d.count = 3;
  v.push_back(d);
  return v;
}

TEST(Format, HeaderRoundTrip) {
  for (FileKind kind : {FileKind::kSnapshot, FileKind::kJournal}) {
    uint32_t chain = 0;
    std::string h = header(kind, 0x1122334455667788ull, 0xAB, &chain);
    ASSERT_EQ(h.size(), kHeaderSize);
    FileHeader out;
    uint32_t chain2 = 0;
    EXPECT_EQ(decode_header(h, kind, &out, &chain2), "");
    EXPECT_EQ(out.generation, 0x1122334455667788ull);
    EXPECT_EQ(out.version, kVersion);
    EXPECT_EQ(out.incarnation[5], 0xAB);
    EXPECT_EQ(chain, chain2);
    EXPECT_EQ(chain, crc32c(h.data(), 36));
    FileKind other = kind == FileKind::kSnapshot ? FileKind::kJournal : FileKind::kSnapshot;
    EXPECT_NE(decode_header(h, other, &out, &chain2), "");
  }
}

TEST(Format, HeaderRejectsEveryFlipAndTruncation) {
  uint32_t chain = 0;
  const std::string h = header(FileKind::kJournal, 3, 1, &chain);
  FileHeader out;
  for (size_t i = 0; i < h.size(); ++i) {
    std::string bad = h;
    bad[i] ^= 0x01;
    EXPECT_NE(decode_header(bad, FileKind::kJournal, &out, nullptr), "") << i;
    EXPECT_NE(decode_header(h.substr(0, i), FileKind::kJournal, &out, nullptr), "") << i;
  }
}

TEST(Format, HeaderLayoutIsAsDocumented) {
  FileHeader h;
  for (int i = 0; i < 16; ++i) h.incarnation[i] = static_cast<uint8_t>(0xA0 + i);
  h.generation = 5;
  std::string b = encode_header(FileKind::kJournal, h, nullptr);
  EXPECT_EQ(b.substr(0, 8), "FENCJRNL");
  EXPECT_EQ(b.substr(8, 4), std::string("\x01\0\0\0", 4));
  EXPECT_EQ(static_cast<uint8_t>(b[12]), 0xA0);
  EXPECT_EQ(static_cast<uint8_t>(b[27]), 0xAF);
  EXPECT_EQ(b.substr(28, 8), std::string("\x05\0\0\0\0\0\0\0", 8));
  uint32_t stored = 0;
  for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<uint8_t>(b[36 + i]);
  EXPECT_EQ(stored, crc32c_mask(crc32c(b.data(), 36)));
  EXPECT_EQ(encode_header(FileKind::kSnapshot, h, nullptr).substr(0, 8), "FENCSNAP");
}

TEST(Format, RecordRoundTripAndChaining) {
  uint32_t chain = 0;
  std::string file = header(FileKind::kJournal, 0, 2, &chain);
  const uint32_t seed = chain;
  std::vector<Record> recs = sample_records();
  std::vector<uint64_t> offsets;
  for (const auto& r : recs) {
    offsets.push_back(file.size());
    append_record(&file, &chain, r);
    EXPECT_EQ(file.size() - offsets.back(), record_size(r));
  }
  std::vector<Record> seen;
  std::vector<uint64_t> seen_off;
  ScanResult sr = scan(file, seed, [&](uint64_t off, const Record& r) {
    seen.push_back(r);
    seen_off.push_back(off);
    return std::string();
  });
  EXPECT_EQ(sr.end, ScanEnd::kClean);
  EXPECT_EQ(sr.valid_end, file.size());
  EXPECT_EQ(sr.chain, chain);
  EXPECT_EQ(sr.records, recs.size());
  ASSERT_EQ(seen.size(), recs.size());
  EXPECT_EQ(seen_off, offsets);
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(seen[i].type, recs[i].type);
    EXPECT_EQ(seen[i].id, recs[i].id);
    EXPECT_EQ(seen[i].epoch, recs[i].epoch);
    EXPECT_EQ(seen[i].path, recs[i].path);
    EXPECT_EQ(seen[i].count, recs[i].count);
  }
  // Same records under another seed (another file, incarnation or position) do not validate.
  ScanResult other = scan(file, seed ^ 1, [](uint64_t, const Record&) { return std::string(); });
  EXPECT_EQ(other.end, ScanEnd::kCorrupt);
  EXPECT_EQ(other.bad_offset, kHeaderSize);
}

TEST(Format, LengthFieldCarriesItsComplement) {
  uint32_t chain = 0;
  std::string file = header(FileKind::kJournal, 0, 2, &chain);
  Record r;
  r.type = kAdvance;
  r.id = 1;
  r.epoch = 1;
  append_record(&file, &chain, r);
  EXPECT_EQ(file.substr(kHeaderSize, 4), std::string("\x0c\x00\xf3\xff", 4));
  EXPECT_EQ(static_cast<uint8_t>(file[kHeaderSize + 8]), kAdvance);
}

// The worked example in docs/journal-format.md, section 4.
TEST(Format, DocumentedExample) {
  FileHeader h;
  for (int i = 0; i < 16; ++i) h.incarnation[i] = static_cast<uint8_t>(i);
  uint32_t chain = 0;
  std::string file = encode_header(FileKind::kJournal, h, &chain);
  EXPECT_EQ(chain, 0x9cac0e50u);
  Record add;
  add.type = kDomainAdd;
  add.id = 1;
  add.path = "/a";
  append_record(&file, &chain, add);
  EXPECT_EQ(chain, 0xbfe35777u);
  Record adv;
  adv.type = kAdvance;
  adv.id = 1;
  adv.epoch = 7;
  append_record(&file, &chain, adv);
  EXPECT_EQ(chain, 0x1d38a097u);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (char c : file) {
    hex += kHex[static_cast<uint8_t>(c) >> 4];
    hex += kHex[static_cast<uint8_t>(c) & 15];
  }
  EXPECT_EQ(hex,
            "46454e434a524e4c01000000000102030405060708090a0b0c0d0e0f0000000000000000302424bf"
            "0600f9ff9e6a725102010000002f610c00f3ff4925b1e301010000000700000000000000");
}

TEST(Format, PayloadValidation) {
  Record r;
  EXPECT_NE(decode_payload(0, "", &r), "");
  EXPECT_NE(decode_payload(kIssuerSeq, std::string(8, '\0'), &r), "");
  EXPECT_NE(decode_payload(99, "", &r), "");
  EXPECT_NE(decode_payload(kAdvance, std::string(11, '\0'), &r), "");
  EXPECT_NE(decode_payload(kDomainAdd, std::string("\x01\0\0\0", 4) + "rel", &r), "");
  EXPECT_NE(decode_payload(kDomainAdd, std::string("\0\0\0\0", 4) + "/root", &r), "");
  EXPECT_EQ(decode_payload(kDomainAdd, std::string("\x01\0\0\0", 4) + "/ok", &r), "");
  EXPECT_NE(decode_payload(kSnapshotEnd, std::string(5, '\0'), &r), "");
  EXPECT_TRUE(valid_path("/"));
  EXPECT_FALSE(valid_path(""));
  EXPECT_FALSE(valid_path(std::string("/a\0b", 4)));
  EXPECT_FALSE(valid_path("/" + std::string(kMaxPathBytes, 'a')));
}

TEST(Format, IncarnationsAreRandom) {
  Incarnation a, b;
  ASSERT_EQ(random_incarnation(&a), 0);
  ASSERT_EQ(random_incarnation(&b), 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(incarnation_hex(a).size(), 32u);
}

}  // namespace
}  // namespace fencefs::journal::format
