// The last-epoch stamp: the current form names its domain; every older form still reads.
#include "fence/stamp.h"

#include <gtest/gtest.h>

using namespace fencefs::fence;

TEST(Stamp, NamesItsDomain) {
  std::string v = encode_stamp(7, 4096, 1764680000, 123456789, 3);
  EXPECT_EQ("7 4096 1764680000.123456789 d3", v);
  auto s = decode_stamp(v);
  ASSERT_TRUE(s);
  EXPECT_EQ(7u, s->epoch);
  EXPECT_EQ(3u, s->domain);
  EXPECT_EQ(4096u, s->size);
  EXPECT_EQ(1764680000, s->mtime_sec);
  EXPECT_EQ(123456789, s->mtime_nsec);
}

TEST(Stamp, OlderFormsReadWithoutADomain) {
  auto s = decode_stamp("7 4096 1764680000.000000001");
  ASSERT_TRUE(s);
  EXPECT_EQ(7u, s->epoch);
  EXPECT_EQ(kAnyDomain, s->domain);
  EXPECT_TRUE(s->has_mtime);
  s = decode_stamp("9 12");
  ASSERT_TRUE(s);
  EXPECT_EQ(kAnyDomain, s->domain);
  EXPECT_FALSE(s->has_mtime);
  s = decode_stamp("5");
  ASSERT_TRUE(s);
  EXPECT_EQ(5u, s->epoch);
  EXPECT_EQ(kAnyDomain, s->domain);
}

TEST(Stamp, MalformedDomainIsMalformed) {
  for (const char* v : {"7 1 2.3 d", "7 1 2.3 x3", "7 1 2.3 d-1", "7 1 2.3 d3 ",
                        "7 1 2.3 d4294967295", "7 1 2.3 d3 d4"})
    EXPECT_FALSE(decode_stamp(v)) << v;
}
