// Reading JSON: the tree fencectl walks, on the shapes the daemon writes, and refusals of
// malformed text.
#include "common/json.h"

#include <gtest/gtest.h>

#include <string>

namespace fencefs::json {
namespace {

TEST(Json, ReadsTheStatusShape) {
  std::string err;
  auto v = parse(R"({"state":"/b/.fencefs","journal":{"bytes":123,"syncs":4},
    "domains":[{"path":"/","epoch":18446744073709551615,"bound":[],"ok":true,"x":null}]})",
                 &err);
  ASSERT_TRUE(v) << err;
  ASSERT_EQ(Value::Type::Object, v->type);
  EXPECT_EQ("/b/.fencefs", v->get("state")->as_string());
  EXPECT_EQ(123u, v->get("journal")->get("bytes")->as_u64());
  EXPECT_EQ(nullptr, v->get("missing"));
  const Value& d = v->get("domains")->arr.at(0);
  EXPECT_EQ(UINT64_MAX, d.get("epoch")->as_u64());  // exact beyond double precision
  EXPECT_EQ("18446744073709551615", d.get("epoch")->as_string());
  EXPECT_EQ(Value::Type::Array, d.get("bound")->type);
  EXPECT_EQ("true", d.get("ok")->as_string());
  EXPECT_EQ(Value::Type::Null, d.get("x")->type);
}

TEST(Json, KeepsDocumentOrderAndDecodesEscapes) {
  auto v = parse(R"({"z":1,"a":"tab\there \u00e9 \ud83d\ude00 \"q\""})");
  ASSERT_TRUE(v);
  ASSERT_EQ(2u, v->obj.size());
  EXPECT_EQ("z", v->obj[0].first);
  EXPECT_EQ("a", v->obj[1].first);
  EXPECT_EQ("tab\there \xc3\xa9 \xf0\x9f\x98\x80 \"q\"", v->obj[1].second.str);
}

TEST(Json, StrayByteEscapesReadBackAsTheBytes) {
  // The audit log's surrogateescape: bytes of a name that are not UTF-8.
  std::string err;
  auto v = parse(R"({"path":"/bad\udcff\uDCFE/ok","\udc80k":"\ud83d\ude00"})", &err);
  ASSERT_TRUE(v) << err;
  EXPECT_EQ("/bad\xff\xfe/ok", v->get("path")->str);
  EXPECT_EQ("\x80k", v->obj[1].first);
  EXPECT_EQ("\xf0\x9f\x98\x80", v->obj[1].second.str);  // a real pair is a character
  EXPECT_FALSE(parse(R"(["\ud83d"])"));                 // a lone high surrogate is not a byte
  auto q = parse(R"(["\\udcff", "a\"\udcff"])");        // an escaped backslash is not an escape
  ASSERT_TRUE(q);
  EXPECT_EQ("\\udcff", q->arr[0].str);
  EXPECT_EQ("a\"\xff", q->arr[1].str);
}

TEST(Json, NumbersThatAreNotCountsReadAsZero) {
  auto v = parse(R"([-1, 2.5, "7"])");
  ASSERT_TRUE(v);
  EXPECT_EQ(0u, v->arr[0].as_u64());
  EXPECT_EQ("-1", v->arr[0].as_string());
  EXPECT_EQ(0u, v->arr[1].as_u64());
  EXPECT_EQ(0u, v->arr[2].as_u64());  // a string is not a number
}

TEST(Json, RefusesMalformedText) {
  for (const char* bad : {"", "{", "{\"a\":}", "[1,]", "{\"a\":1} x", "'a'", "{a:1}", "nul"}) {
    std::string err;
    EXPECT_FALSE(parse(bad, &err)) << bad;
    EXPECT_FALSE(err.empty()) << bad;
  }
}

}  // namespace
}  // namespace fencefs::json
