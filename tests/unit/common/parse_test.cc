// Strict decimal parsing of unsigned 64-bit numbers.
#include "common/parse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fencefs::common {
namespace {

TEST(ParseU64, AcceptsDigitsOnly) {
  uint64_t v = 1;
  ASSERT_TRUE(parse_u64("0", &v));
  EXPECT_EQ(0u, v);
  ASSERT_TRUE(parse_u64("42", &v));
  EXPECT_EQ(42u, v);
  ASSERT_TRUE(parse_u64("007", &v));
  EXPECT_EQ(7u, v);
  ASSERT_TRUE(parse_u64("000000000000000000000000001", &v));  // leading zeros: no length limit
  EXPECT_EQ(1u, v);
}

TEST(ParseU64, Boundaries) {
  uint64_t v = 0;
  ASSERT_TRUE(parse_u64("18446744073709551615", &v));
  EXPECT_EQ(UINT64_MAX, v);
  EXPECT_FALSE(parse_u64("18446744073709551616", &v));
  EXPECT_FALSE(parse_u64("99999999999999999999999", &v));
}

TEST(ParseU64, RefusesEverythingElse) {
  uint64_t v = 0;
  const std::vector<std::string> bad = {"",
                                        " ",
                                        "1 ",
                                        " 1",
                                        "+1",
                                        "-1",
                                        "0x10",
                                        "1e3",
                                        "1.0",
                                        "12a",
                                        "a12",
                                        "١٢",
                                        std::string("1\0", 2)};
  for (const auto& s : bad) {
    EXPECT_FALSE(parse_u64(s, &v)) << "'" << s << "'";
  }
}

}  // namespace
}  // namespace fencefs::common
