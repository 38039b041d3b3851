// CRC-32C: known vectors, the portable and hardware paths agreeing, incremental use, masking.
#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace fencefs {
namespace {

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  std::string buf(32, '\0');
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  buf.assign(32, '\xff');
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<char>(i);
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<char>(31 - i);
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x113FDB5Cu);
}

TEST(Crc32c, PortableMatchesDispatchedOnAllLengthsAndAlignments) {
  std::mt19937 rng(7);
  std::string data(1024 + 16, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  for (size_t align = 0; align < 8; ++align) {
    for (size_t len = 0; len < 300; ++len) {
      const char* p = data.data() + align;
      ASSERT_EQ(crc32c_extend(0, p, len), crc32c_extend_portable(0, p, len)) << align << "/" << len;
    }
  }
  EXPECT_EQ(crc32c_extend_portable(0, "123456789", 9), 0xE3069283u);
  RecordProperty("hardware", crc32c_hardware() ? "sse4.2" : "none");
}

TEST(Crc32c, ExtendEqualsWhole) {
  const std::string s = "hello, fencing tokens and chained checksums";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    uint32_t a = crc32c(s.data(), cut);
    EXPECT_EQ(crc32c_extend(a, s.data() + cut, s.size() - cut), crc32c(s.data(), s.size()));
  }
}

TEST(Crc32c, MaskRoundTripsAndChangesValue) {
  for (uint32_t v : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x12345678u}) {
    EXPECT_EQ(crc32c_unmask(crc32c_mask(v)), v);
    EXPECT_NE(crc32c_mask(v), v);
    EXPECT_NE(crc32c_mask(crc32c_mask(v)), crc32c_mask(v));
  }
}

}  // namespace
}  // namespace fencefs
