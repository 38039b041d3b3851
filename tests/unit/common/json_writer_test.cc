// Writing JSON: the escaper (non-UTF-8 bytes as \udcXX) and the writer's commas and nesting.
// What it writes must read back through common/json.h with the same bytes.
#include "common/json_writer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/json.h"

namespace fencefs::common {
namespace {

TEST(JsonEscape, QuotesControlsAndUtf8) {
  EXPECT_EQ(R"(a\"b\\c\n\t\r)", json_escape("a\"b\\c\n\t\r"));
  EXPECT_EQ("\\u0001\\u001f\\u007f", json_escape(std::string("\x01\x1f\x7f")));
  EXPECT_EQ("\\u0000", json_escape(std::string_view("\0", 1)));
  EXPECT_EQ("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
            json_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
}

TEST(JsonEscape, InvalidUtf8BytesBecomeLoneSurrogates) {
  EXPECT_EQ("\\udcff", json_escape("\xff"));
  EXPECT_EQ("a\\udcc3", json_escape("a\xc3"));                                 // truncated sequence
  EXPECT_EQ("\\udcc0\\udcaf", json_escape("\xc0\xaf"));                        // overlong '/'
  EXPECT_EQ("\\udced\\udca0\\udc80", json_escape("\xed\xa0\x80"));             // a surrogate
  EXPECT_EQ("\\udcf4\\udc90\\udc80\\udc80", json_escape("\xf4\x90\x80\x80"));  // > U+10FFFF
}

TEST(JsonEscape, AppendsAfterWhatIsThere) {
  std::string out = "x";
  json_escape_to(&out,
                 "ab\"cd\x01\xff"
                 "ef");
  EXPECT_EQ("xab\\\"cd\\u0001\\udcffef", out);
  json_escape_to(&out, "");
  EXPECT_EQ("xab\\\"cd\\u0001\\udcffef", out);
}

// Every byte alone and in random mixes (runs of plain text between escapes, sequences cut short)
// reads back through the parser as the same bytes.
TEST(JsonEscape, AnyBytesReadBackTheSame) {
  std::mt19937 rng(20261204);
  const std::string pieces[] = {"a",
                                "/",
                                "\"",
                                "\\",
                                "\n",
                                std::string(1, '\0'),
                                "\x7f",
                                "\xc3\xa9",
                                "\xe2\x82\xac",
                                "\xf0\x9f\x98\x80",
                                "\xc3",
                                "\xed\xa0\x80",
                                "\xff"};
  std::vector<std::string> inputs;
  for (int b = 0; b < 256; b++) inputs.emplace_back(1, static_cast<char>(b));
  for (int n = 0; n < 2000; n++) {
    std::string s;
    for (size_t k = rng() % 12; k > 0; k--) s += pieces[rng() % std::size(pieces)];
    inputs.push_back(s);
  }
  for (const std::string& s : inputs) {
    std::string escaped = json_escape(s);
    for (unsigned char c : escaped) ASSERT_TRUE(c >= 0x20 && c != 0x7f) << s;
    auto v = json::parse("\"" + escaped + "\"");
    ASSERT_TRUE(v) << escaped;
    EXPECT_EQ(s, v->str) << escaped;
  }
}

TEST(JsonWriter, CommasAndNesting) {
  std::string out;
  JsonWriter w(&out);
  w.begin_object()
      .member("a", 1)
      .key("b")
      .begin_array()
      .end_array()
      .key("c")
      .begin_object()
      .end_object()
      .key("d")
      .begin_array()
      .value("x")
      .begin_object()
      .member("k", true)
      .member("f", false)
      .end_object()
      .begin_array()
      .value(int64_t{-1})
      .null()
      .end_array()
      .raw("{\"r\":0}")
      .end_array()
      .member("e", 0.5)
      .end_object();
  EXPECT_EQ(R"({"a":1,"b":[],"c":{},"d":["x",{"k":true,"f":false},[-1,null],{"r":0}],"e":0.5})",
            out);
}

TEST(JsonWriter, SixtyFourBitValuesAreExact) {
  std::string out;
  JsonWriter w(&out);
  w.begin_array()
      .value(std::numeric_limits<uint64_t>::max())
      .value(std::numeric_limits<int64_t>::min())
      .value(uint64_t{9007199254740993})  // 2^53 + 1: a double would round it
      .end_array();
  EXPECT_EQ("[18446744073709551615,-9223372036854775808,9007199254740993]", out);
  auto v = json::parse(out);
  ASSERT_TRUE(v);
  EXPECT_EQ(std::numeric_limits<uint64_t>::max(), v->arr[0].as_u64());
  EXPECT_EQ(9007199254740993u, v->arr[2].as_u64());
}

TEST(JsonWriter, KeysAndValuesAreEscapedAndReadBack) {
  std::string name = "d\xff\"\n/\xc3\xa9";
  std::string out;
  JsonWriter w(&out);
  w.begin_object().member(name, name).end_object();
  EXPECT_EQ(R"({"d\udcff\"\n/)"
            "\xc3\xa9"
            R"(":"d\udcff\"\n/)"
            "\xc3\xa9"
            R"("})",
            out);
  auto v = json::parse(out);
  ASSERT_TRUE(v);
  ASSERT_EQ(1u, v->obj.size());
  EXPECT_EQ(name, v->obj[0].first);
  EXPECT_EQ(name, v->obj[0].second.str);
}

}  // namespace
}  // namespace fencefs::common
