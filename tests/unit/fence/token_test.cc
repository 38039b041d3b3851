// Token parsing (every malformed form, every boundary) and HMAC signing/verification.
#include "fence/token.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace fencefs::fence {
namespace {

using namespace std::string_literals;

// ---------------------------------------------------------------------------------------------
// parse_token

struct Malformed {
  const char* name;
  std::string text;
};

void PrintTo(const Malformed& m, std::ostream* os) { *os << m.name; }

class MalformedToken : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedToken, IsRefused) {
  const std::string& text = GetParam().text;
  EXPECT_EQ(parse_token(text), std::nullopt) << "accepted: " << GetParam().name;
  EXPECT_EQ(parse_token_text(text), std::nullopt) << "accepted as text: " << GetParam().name;
  const std::string_view why = token_text_error(text);
  EXPECT_FALSE(why.empty());
  for (char c : why) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "unprintable byte in reason";
}

INSTANTIATE_TEST_SUITE_P(
    EveryForm, MalformedToken,
    ::testing::Values(Malformed{"Empty", ""}, Malformed{"Zero", "0"}, Malformed{"DoubleZero", "00"},
                      Malformed{"Negative", "-1"}, Malformed{"PlusSign", "+1"},
                      Malformed{"LeadingSpace", " 1"}, Malformed{"TrailingSpace", "1 "},
                      Malformed{"InnerSpace", "1 2"}, Malformed{"LeadingZero", "01"},
                      Malformed{"LeadingZeros", "007"}, Malformed{"Fraction", "1.5"},
                      Malformed{"TrailingDot", "1."}, Malformed{"Exponent", "1e3"},
                      Malformed{"Hex", "0x10"}, Malformed{"HexDigits", "ff"},
                      Malformed{"Int64MaxPlusOne", "9223372036854775808"},
                      Malformed{"Uint64Max", "18446744073709551615"},
                      Malformed{"Uint64MaxPlusOne", "18446744073709551616"},
                      Malformed{"TwentyDigits", "10000000000000000000"},
                      Malformed{"TwentyNines", "99999999999999999999"},
                      Malformed{"Huge", std::string(4000, '9')},
                      Malformed{"FullwidthOne", "\xef\xbc\x91"},             // U+FF11
                      Malformed{"ArabicIndicSeven", "\xd9\xa7"},             // U+0667
                      Malformed{"DevanagariOne", "\xe0\xa5\xa7"},            // U+0967
                      Malformed{"MixedAsciiAndFullwidth", "1\xef\xbc\x92"},  // "1" U+FF12
                      Malformed{"SuperscriptTwo", "\xc2\xb2"},               // U+00B2
                      Malformed{"TrailingNewline", "1\n"}, Malformed{"TrailingCrlf", "1\r\n"},
                      Malformed{"Tab", "\t1"},
                      Malformed{"EmbeddedNul",
                                "1\0"s
                                "2"},
                      Malformed{"TrailingNul", "7\0"s}, Malformed{"OnlyNul", "\0"s},
                      Malformed{"Letters", "seven"}, Malformed{"Underscore", "1_000"},
                      Malformed{"Comma", "1,000"}),
    [](const ::testing::TestParamInfo<Malformed>& info) { return info.param.name; });

TEST(ParseToken, ValidBoundaries) {
  EXPECT_EQ(parse_token("1"), 1u);
  EXPECT_EQ(parse_token("9"), 9u);
  EXPECT_EQ(parse_token("10"), 10u);
  EXPECT_EQ(parse_token("100"), 100u);
  EXPECT_EQ(parse_token("1000000000000000000"), 1000000000000000000u);  // 19 digits
  EXPECT_EQ(parse_token("9223372036854775806"), kMaxToken - 1);
  EXPECT_EQ(parse_token("9223372036854775807"), kMaxToken);
  EXPECT_EQ(kMaxToken, static_cast<Epoch>(INT64_MAX));
}

TEST(ParseToken, EveryDigitRoundTrips) {
  for (Epoch v = 1; v <= 1000; ++v) {
    EXPECT_EQ(parse_token(std::to_string(v)), v);
  }
}

TEST(ParseToken, ReasonsSayWhy) {
  EXPECT_EQ(token_text_error(""), "empty token");
  EXPECT_EQ(token_text_error("0"), "token 0 is not a valid epoch");
  EXPECT_EQ(token_text_error("01"), "leading zero");
  EXPECT_EQ(token_text_error("-1"), "token must not have a sign");
  EXPECT_EQ(token_text_error("9223372036854775808"), "token too large (max 9223372036854775807)");
  EXPECT_EQ(token_text_error("\xef\xbc\x91"), "token must use ASCII digits only");
  EXPECT_EQ(token_text_error("7"), "");
}

// ---------------------------------------------------------------------------------------------
// parse_token_text

const std::string kSig(64, 'a');

TEST(ParseTokenText, Unsigned) {
  auto t = parse_token_text("42");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->epoch, 42u);
  EXPECT_EQ(t->signature, "");
}

TEST(ParseTokenText, Signed) {
  const std::string sig = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  auto t = parse_token_text("9223372036854775807." + sig);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->epoch, kMaxToken);
  EXPECT_EQ(t->signature, sig);
  EXPECT_EQ(format_token_text(*t), "9223372036854775807." + sig);
}

TEST(ParseTokenText, MalformedForms) {
  for (const std::string& bad : {
           "."s, "7."s, "." + kSig, "0." + kSig, "01." + kSig, "-7." + kSig,
           "9223372036854775808." + kSig,
           "7." + kSig.substr(1),                         // 63 hex digits
           "7." + kSig + "a",                             // 65 hex digits
           "7." + std::string(63, 'a') + "A",             // uppercase
           "7." + std::string(64, 'A'),                   // all uppercase
           "7." + std::string(63, 'a') + "g",             // not hex
           "7." + kSig + ".",                             // second dot
           "7.." + kSig.substr(1),                        // double dot
           "7." + kSig + "\n",                            // trailing newline
           "7 ." + kSig,                                  // space
           "7." + std::string(63, 'a') + "\0"s,           // NUL in signature
           "7." + std::string(62, 'a') + "\xef\xbd\x81",  // fullwidth 'a' (U+FF41)
       }) {
    EXPECT_EQ(parse_token_text(bad), std::nullopt) << "accepted: " << bad;
    EXPECT_FALSE(token_text_error(bad).empty()) << bad;
  }
}

TEST(ParseTokenText, SignatureReasonMentionsSignature) {
  EXPECT_NE(token_text_error("7.ABC").find("signature"), std::string_view::npos);
  EXPECT_NE(token_text_error("1.5").find("signature"), std::string_view::npos);
}

TEST(FormatTokenText, RoundTrip) {
  EXPECT_EQ(format_token_text({1, ""}), "1");
  EXPECT_EQ(format_token_text({kMaxToken, ""}), "9223372036854775807");
  EXPECT_EQ(format_token_text({7, kSig}), "7." + kSig);
}

// ---------------------------------------------------------------------------------------------
// sign / verify

// Known answers, obtained once in a shell with OpenSSL 3.0:
//   printf 'fencefs-v1\n/\n7' | openssl dgst -sha256 -hmac 'test-key'
//   printf 'fencefs-v1\n/jobs/nightly\n9223372036854775807' |
//     openssl dgst -sha256 -hmac 'coordinator secret'
//   printf 'fencefs-v1\n/a\n1' | openssl dgst -sha256 -hmac "$(printf 'k%.0s' $(seq 100))"
//     (a 100-byte key: longer than the SHA-256 block, so HMAC hashes it first)
constexpr std::string_view kKey = "test-key";
constexpr std::string_view kRootSeven =
    "425c79eb83940ea890f4e3f037fa2b8479e682e6a9ae99b28131f00cd83a5e87";
constexpr std::string_view kNightlyMax =
    "9ef206e92517b214350a7434ea804cde192b5b4f8f9c78426db0ec3baa9c3aaf";

constexpr std::string_view kLongKeyA1 =
    "57ed73f45e804d37a7c7c242841a01dfb1228e279c6356486e71757d2d09604f";

TEST(Sign, KnownAnswers) {
  EXPECT_EQ(sign(kKey, "/", 7), kRootSeven);
  EXPECT_EQ(sign("coordinator secret", "/jobs/nightly", kMaxToken), kNightlyMax);
  EXPECT_EQ(sign(std::string(100, 'k'), "/a", 1), kLongKeyA1);
}

TEST(Sign, Is64LowercaseHex) {
  const std::string s = sign(kKey, "/a", 1);
  ASSERT_EQ(s.size(), 64u);
  for (char c : s) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << s;
}

TEST(Verify, AcceptsKnownAnswers) {
  EXPECT_TRUE(verify(kKey, "/", 7, kRootSeven));
  EXPECT_TRUE(verify("coordinator secret", "/jobs/nightly", kMaxToken, kNightlyMax));
  EXPECT_TRUE(verify(kKey, "/a/b", 12345, sign(kKey, "/a/b", 12345)));
}

TEST(Verify, RefusesTamperedSignature) {
  // Flip every position in turn to another valid lowercase hex digit.
  for (size_t i = 0; i < kRootSeven.size(); ++i) {
    std::string tampered(kRootSeven);
    tampered[i] = tampered[i] == '0' ? '1' : '0';
    EXPECT_FALSE(verify(kKey, "/", 7, tampered)) << "position " << i;
  }
}

TEST(Verify, RefusesTruncatedOrExtendedSignature) {
  for (size_t len = 0; len < kRootSeven.size(); ++len) {
    EXPECT_FALSE(verify(kKey, "/", 7, kRootSeven.substr(0, len))) << "length " << len;
  }
  EXPECT_FALSE(verify(kKey, "/", 7, std::string(kRootSeven) + "0"));
  EXPECT_FALSE(verify(kKey, "/", 7, std::string(kRootSeven) + "\n"));
}

TEST(Verify, RefusesUppercaseHex) {
  std::string upper(kRootSeven);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_NE(upper, kRootSeven);
  EXPECT_FALSE(verify(kKey, "/", 7, upper));
}

TEST(Verify, RefusesOtherDomain) {
  EXPECT_FALSE(verify(kKey, "/a", 7, kRootSeven));
  EXPECT_FALSE(verify(kKey, "//", 7, kRootSeven));
  EXPECT_FALSE(verify(kKey, "", 7, kRootSeven));
  EXPECT_FALSE(verify(kKey, "/a", 7, sign(kKey, "/a/b", 7)));
  EXPECT_FALSE(verify(kKey, "/a/b", 7, sign(kKey, "/a", 7)));
}

TEST(Verify, RefusesOtherEpoch) {
  EXPECT_FALSE(verify(kKey, "/", 8, kRootSeven));
  EXPECT_FALSE(verify(kKey, "/", 6, kRootSeven));
  EXPECT_FALSE(verify(kKey, "/", 70, kRootSeven));
  // The domain/epoch separator keeps "/1" + "23" and "/12" + "3" apart.
  EXPECT_FALSE(verify(kKey, "/12", 3, sign(kKey, "/1", 23)));
}

TEST(Verify, RefusesOtherKey) {
  EXPECT_FALSE(verify("test-kez", "/", 7, kRootSeven));
  EXPECT_FALSE(verify("test-key\n", "/", 7, kRootSeven));
}

TEST(Verify, RefusesEmptyKeyAndOutOfRangeEpochs) {
  EXPECT_FALSE(verify("", "/", 7, sign("", "/", 7)));
  EXPECT_FALSE(verify(kKey, "/", 0, sign(kKey, "/", 0)));
  EXPECT_FALSE(verify(kKey, "/", kMaxToken + 1, sign(kKey, "/", kMaxToken + 1)));
}

TEST(Verify, KeyMayContainAnyBytes) {
  const std::string key = "\0\xff\n binary"s;
  const std::string sig = sign(key, "/", 1);
  EXPECT_TRUE(verify(key, "/", 1, sig));
  EXPECT_FALSE(verify(key.substr(0, 1), "/", 1, sig));
}

}  // namespace
}  // namespace fencefs::fence
