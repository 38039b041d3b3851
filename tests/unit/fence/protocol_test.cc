// The control-file protocol: every accepted form, and a defined error for every hostile one.
#include "ctl/protocol.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace fencefs::ctl {
namespace {

using namespace std::string_literals;
using fence::kMaxToken;

const std::string kSig = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

bool all_printable(std::string_view s) {
  for (char c : s) {
    if (c < 0x20 || c >= 0x7f) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Accepted commands

TEST(ParseCommand, Bind) {
  for (const std::string& buf : {"bind / 7"s, "bind / 7\n"s}) {
    ParseResult r = parse_command(buf);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.command.verb, Verb::Bind);
    EXPECT_EQ(r.command.domain, "/");
    EXPECT_EQ(r.command.token.epoch, 7u);
    EXPECT_EQ(r.command.token.signature, "");
    EXPECT_FALSE(r.command.force);
    EXPECT_EQ(r.error, "");
  }
}

TEST(ParseCommand, BindSignedTokenInNestedDomain) {
  ParseResult r = parse_command("bind /srv/data/db 9223372036854775807." + kSig + "\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.command.verb, Verb::Bind);
  EXPECT_EQ(r.command.domain, "/srv/data/db");
  EXPECT_EQ(r.command.token.epoch, kMaxToken);
  EXPECT_EQ(r.command.token.signature, kSig);
}

TEST(ParseCommand, Unbind) {
  ParseResult r = parse_command("unbind /a\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.command.verb, Verb::Unbind);
  EXPECT_EQ(r.command.domain, "/a");
  EXPECT_EQ(r.command.token.epoch, 0u);
}

TEST(ParseCommand, Advance) {
  ParseResult r = parse_command("advance /a 3\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.command.verb, Verb::Advance);
  EXPECT_EQ(r.command.domain, "/a");
  EXPECT_EQ(r.command.token.epoch, 3u);
  EXPECT_FALSE(r.command.force);

  r = parse_command("advance /a 3 force");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.command.force);

  r = parse_command("advance / 4." + kSig + " force\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.command.token.epoch, 4u);
  EXPECT_EQ(r.command.token.signature, kSig);
  EXPECT_TRUE(r.command.force);
}

TEST(ParseCommand, DomainAdd) {
  ParseResult r = parse_command("domain add /jobs/nightly\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.command.verb, Verb::DomainAdd);
  EXPECT_EQ(r.command.domain, "/jobs/nightly");
}

TEST(ParseCommand, TokenBoundaries) {
  for (const auto& [text, value] :
       {std::pair{"1", 1ull}, std::pair{"9", 9ull}, std::pair{"10", 10ull},
        std::pair{"9223372036854775807", 9223372036854775807ull}}) {
    ParseResult r = parse_command("bind / "s + text + "\n");
    ASSERT_TRUE(r.ok) << text << ": " << r.error;
    EXPECT_EQ(r.command.token.epoch, value);
  }
}

TEST(ParseCommand, ExactlyMaxBytesIsAccepted) {
  // "domain add " + domain + "\n" == 4096 bytes, using 255-byte segments.
  std::string domain;
  while (domain.size() + 256 <= 4096 - 12) domain += "/" + std::string(255, 's');
  domain += "/" + std::string(4096 - 12 - domain.size() - 1, 't');
  const std::string buf = "domain add " + domain + "\n";
  ASSERT_EQ(buf.size(), kMaxCommandBytes);
  ParseResult r = parse_command(buf);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.command.domain, domain);
  EXPECT_EQ(format_command(r.command), buf);
}

TEST(FormatCommand, RoundTripsEveryVerb) {
  for (const std::string& line :
       {"bind / 1\n"s, "bind /a/b 9223372036854775807." + kSig + "\n", "unbind /x\n"s,
        "advance /x 5\n"s, "advance /x 5 force\n"s, "advance /x 5." + kSig + " force\n",
        "domain add /a.b/c-d_e\n"s}) {
    ParseResult r = parse_command(line);
    ASSERT_TRUE(r.ok) << line << ": " << r.error;
    EXPECT_EQ(format_command(r.command), line);
  }
}

// ---------------------------------------------------------------------------------------------
// Refused commands: each hostile form has one defined error

struct Refused {
  const char* name;
  std::string buffer;
  std::string error;  // the exact message
};

void PrintTo(const Refused& c, std::ostream* os) { *os << c.name; }

class RefusedCommand : public ::testing::TestWithParam<Refused> {};

TEST_P(RefusedCommand, HasDefinedError) {
  const Refused& c = GetParam();
  ParseResult r = parse_command(c.buffer);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, c.error);
  EXPECT_TRUE(all_printable(r.error)) << r.error;
  EXPECT_LE(r.error.size(), 160u) << r.error;
}

std::string long_domain() {  // 4336 bytes of well-formed segments
  std::string d = "/" + std::string(255, 'a');
  for (int i = 0; i < 16; ++i) d += "/" + std::string(254, 'b');
  return d;
}
const std::string kDomain4096 = long_domain();
const std::string kSeg256 = "/" + std::string(256, 'x');

INSTANTIATE_TEST_SUITE_P(
    Hostile, RefusedCommand,
    ::testing::Values(
        // Size.
        Refused{"EmptyWrite", "", "empty command"}, Refused{"OnlyNewline", "\n", "empty command"},
        Refused{"OverLongLine", "bind / 1" + std::string(5000, '1') + "\n",
                "command too long (5009 bytes, max 4096)"},
        Refused{"OneByteOver", "bind / 1" + std::string(4089, ' '),
                "command too long (4097 bytes, max 4096)"},
        Refused{"MegabyteOfGarbage", std::string(1 << 20, '\0'),
                "command too long (1048576 bytes, max 4096)"},
        // Bytes.
        Refused{"NulInsideToken",
                "bind / 1\0"s
                "2\n",
                "NUL byte at byte 8"},
        Refused{"NulAfterNewline", "bind / 1\n\0"s, "one command per write (newline at byte 8)"},
        Refused{"NulOnly", "\0"s, "NUL byte at byte 0"},
        Refused{"TrailingNul", "bind / 1\0"s, "NUL byte at byte 8"},
        Refused{"TwoCommands", "bind / 1\nbind / 2\n", "one command per write (newline at byte 8)"},
        Refused{"TwoCommandsNoFinalNewline", "bind / 1\nunbind /",
                "one command per write (newline at byte 8)"},
        Refused{"DoubleNewline", "bind / 1\n\n", "one command per write (newline at byte 8)"},
        Refused{"LeadingNewline", "\nbind / 1", "one command per write (newline at byte 0)"},
        Refused{"Crlf", "bind / 1\r\n", "carriage return at byte 8 (end lines with \\n only)"},
        Refused{"BareCr", "bind / 1\r", "carriage return at byte 8 (end lines with \\n only)"},
        Refused{"TabSeparator", "bind\t/ 1\n", "tab at byte 4 (separate words with one space)"},
        Refused{"TrailingTab", "bind / 1\t\n", "tab at byte 8 (separate words with one space)"},
        Refused{"Escape", "bind / \x1b[31m1\n", "control byte 0x1b at byte 7"},
        Refused{"Delete", "bind / 1\x7f", "control byte 0x7f at byte 8"},
        Refused{"VerticalTab", "bind\v/ 1", "control byte 0x0b at byte 4"},
        Refused{"FullwidthDigit", "bind / \xef\xbc\x91\n", "non-ASCII byte 0xef at byte 7"},
        Refused{"ArabicIndicDigit", "bind / \xd9\xa7\n", "non-ASCII byte 0xd9 at byte 7"},
        Refused{"NonAsciiDomain", "domain add /caf\xc3\xa9\n", "non-ASCII byte 0xc3 at byte 15"},
        Refused{"NonBreakingSpace", "bind\xc2\xa0/ 1", "non-ASCII byte 0xc2 at byte 4"},
        // Spaces.
        Refused{"OnlySpace", " ", "leading space"},
        Refused{"LeadingSpace", " bind / 1\n", "leading space"},
        Refused{"TrailingSpace", "bind / 1 \n", "trailing space"},
        Refused{"TrailingSpaceNoNewline", "bind / 1 ", "trailing space"},
        Refused{"DoubleSpace", "bind  / 1\n", "more than one space between words"},
        Refused{"PartialBindTrailingSpace", "bind / ", "trailing space"},
        // Verbs and arity.
        Refused{"UnknownVerb", "rebind / 1\n", "unknown command 'rebind'"},
        Refused{"UpperCaseVerb", "BIND / 1\n", "unknown command 'BIND'"},
        Refused{"PartialVerb", "bin", "unknown command 'bin'"},
        Refused{"LongUnknownVerb", std::string(3000, 'z'),
                "unknown command '" + std::string(16, 'z') + "...'"},
        Refused{"QuoteInVerb", "it's / 1", "unknown command 'it\\x27s'"},
        Refused{"BindAlone", "bind\n", "bind: missing domain (usage: bind DOMAIN TOKEN)"},
        Refused{"BindNoToken", "bind /\n", "bind: missing token (usage: bind DOMAIN TOKEN)"},
        Refused{"BindExtraWord", "bind / 1 force\n",
                "bind: too many words (usage: bind DOMAIN TOKEN)"},
        Refused{"BindManyWords", "bind / 1 2 3 4 5 6 7\n",
                "bind: too many words (usage: bind DOMAIN TOKEN)"},
        Refused{"UnbindAlone", "unbind", "unbind: missing domain (usage: unbind DOMAIN)"},
        Refused{"UnbindWithToken", "unbind / 1", "unbind: too many words (usage: unbind DOMAIN)"},
        Refused{"AdvanceNoToken", "advance /a\n",
                "advance: missing token (usage: advance DOMAIN TOKEN [force])"},
        Refused{"AdvanceBadFlag", "advance /a 2 now\n",
                "advance: expected 'force' after the token, got 'now'"},
        Refused{"AdvanceForceFirst", "advance /a force 2\n",
                "advance: bad token 'force': token must be decimal digits only"},
        Refused{"AdvanceTooMany", "advance /a 2 force force\n",
                "advance: too many words (usage: advance DOMAIN TOKEN [force])"},
        Refused{"DomainAlone", "domain\n", "domain: missing subcommand (usage: domain add DOMAIN)"},
        Refused{"DomainRemove", "domain remove /a\n",
                "domain: unknown subcommand 'remove' (usage: domain add DOMAIN)"},
        Refused{"DomainAddAlone", "domain add\n",
                "domain add: missing domain (usage: domain add DOMAIN)"},
        Refused{"DomainAddTwo", "domain add /a /b\n",
                "domain add: too many words (usage: domain add DOMAIN)"},
        // Tokens.
        Refused{"ZeroToken", "bind / 0\n", "bind: bad token '0': token 0 is not a valid epoch"},
        Refused{"NegativeToken", "bind / -1\n", "bind: bad token '-1': token must not have a sign"},
        Refused{"PlusToken", "bind / +1\n", "bind: bad token '+1': token must not have a sign"},
        Refused{"LeadingZeroToken", "bind / 007\n", "bind: bad token '007': leading zero"},
        Refused{"FractionToken", "bind / 1.5\n",
                "bind: bad token '1.5': after '.', a signature must be exactly 64 lowercase hex "
                "digits"},
        Refused{"ExponentToken", "bind / 1e3\n",
                "bind: bad token '1e3': token must be decimal digits only"},
        Refused{"HexToken", "bind / 0x10\n",
                "bind: bad token '0x10': token must be decimal digits only"},
        Refused{"Int64MaxPlusOne", "bind / 9223372036854775808\n",
                "bind: bad token '9223372036854775...': token too large (max "
                "9223372036854775807)"},
        Refused{"TwentyDigits", "advance / 18446744073709551616\n",
                "advance: bad token '1844674407370955...': token too large (max "
                "9223372036854775807)"},
        Refused{"HugeNumber", "bind / " + std::string(4000, '9'),
                "bind: bad token '9999999999999999...': token too large (max "
                "9223372036854775807)"},
        Refused{"UppercaseSignature", "bind / 7." + std::string(64, 'A'),
                "bind: bad token '7.AAAAAAAAAAAAAA...': after '.', a signature must be exactly 64 "
                "lowercase hex digits"},
        Refused{"ShortSignature", "bind / 7." + kSig.substr(1),
                "bind: bad token '7.123456789abcde...': after '.', a signature must be exactly 64 "
                "lowercase hex digits"},
        // Domains.
        Refused{"RelativeDomain", "bind a 1\n",
                "bind: bad domain 'a': domain must be an absolute path starting with '/'"},
        Refused{"DoubleSlash", "bind // 1\n",
                "bind: bad domain '//': domain has an empty segment ('//')"},
        Refused{"InnerDoubleSlash", "unbind /a//b\n",
                "unbind: bad domain '/a//b': domain has an empty segment ('//')"},
        Refused{"TrailingSlash", "bind /a/ 1\n",
                "bind: bad domain '/a/': domain must not end with '/'"},
        Refused{"DotDot", "bind /a/../b 1\n",
                "bind: bad domain '/a/../b': domain has a '..' segment"},
        Refused{"Dot", "domain add /./a\n",
                "domain add: bad domain '/./a': domain has a '.' segment"},
        Refused{"FinalDotDot", "unbind /a/..\n",
                "unbind: bad domain '/a/..': domain has a '..' segment"},
        Refused{"SegmentTooLong", "domain add " + kSeg256,
                "domain add: bad domain '/xxxxxxxxxxxxxxx...': domain segment longer than 255 "
                "bytes"},
        // A 4095-byte domain cannot fit in one command, so the command length is what fails.
        Refused{"DomainTooLongForCommand", "domain add " + kDomain4096.substr(0, 4095),
                "command too long (4106 bytes, max 4096)"},
        Refused{"TokenAsDomain", "bind 7 /\n",
                "bind: bad domain '7': domain must be an absolute path starting with '/'"}),
    [](const ::testing::TestParamInfo<Refused>& info) { return info.param.name; });

TEST(ParseCommand, QuotedDomainsHoldSpacesAndUtf8) {
  struct Case {
    std::string buf, domain, canonical;
  } cases[] = {
      {"domain add \"/my data\"\n", "/my data", "domain add \"/my data\"\n"},
      {"bind \"/caf\xc3\xa9/\xe6\x97\xa5 \xf0\x9f\x93\x81\" 3",
       "/caf\xc3\xa9/\xe6\x97\xa5 \xf0\x9f\x93\x81",
       "bind \"/caf\xc3\xa9/\xe6\x97\xa5 \xf0\x9f\x93\x81\" 3\n"},
      {"advance \"/a \\\"q\\\" \\\\b\" 4 force\n", "/a \"q\" \\b",
       "advance \"/a \\\"q\\\" \\\\b\" 4 force\n"},
      {"unbind \"/plain\"\n", "/plain", "unbind /plain\n"},
      {"unbind /a\"b\n", "/a\"b", "unbind /a\"b\n"},  // a quote inside a word is a character
  };
  for (const Case& c : cases) {
    ParseResult r = parse_command(c.buf);
    ASSERT_TRUE(r.ok) << c.buf << ": " << r.error;
    EXPECT_EQ(c.domain, r.command.domain) << c.buf;
    EXPECT_EQ(c.canonical, format_command(r.command)) << c.buf;
    ParseResult again = parse_command(format_command(r.command));
    ASSERT_TRUE(again.ok) << again.error;
    EXPECT_EQ(c.domain, again.command.domain);
  }
}

TEST(ParseCommand, BadQuotingIsRefused) {
  const std::pair<std::string, std::string> cases[] = {
      {"domain add \"/a b\n", "unterminated quote"},
      {"domain add \"/a\"b\n", "a quoted word must end at a space"},
      {"domain add \"/a\\n\"\n", "unknown escape at byte 15 (only \\\" and \\\\)"},
      {"domain add \"/a  b\"\n", ""},  // two spaces inside quotes are part of the name
      {"domain  add \"/a\"\n", "more than one space between words"},
      {"\"bind\" / 1", "unknown command '\"bind\"'"},
      {"bind / \"1\"", "bind: only DOMAIN may be quoted (usage: bind DOMAIN TOKEN)"},
      {"domain add /caf\xc3\xa9\n", "non-ASCII byte 0xc3 at byte 15"},  // UTF-8 must be quoted
      {"domain add \"/caf\xc3\"\n", "invalid UTF-8 at byte 16"},
      {"domain add \"/a\x01\"\n", "control byte 0x01 at byte 14"},
      {"domain add \"/a/../b\"\n",
       "domain add: bad domain '\"/a/../b\"': domain has a '..' segment"},
  };
  for (const auto& [buf, error] : cases) {
    ParseResult r = parse_command(buf);
    if (error.empty()) {
      EXPECT_TRUE(r.ok) << buf << ": " << r.error;
      continue;
    }
    EXPECT_FALSE(r.ok) << buf;
    EXPECT_EQ(error, r.error) << buf;
    EXPECT_TRUE(all_printable(r.error)) << r.error;
  }
}

TEST(ParseCommand, RefusalLeavesNoCommandData) {
  // A refused parse must not hand back a half-filled command someone could act on.
  ParseResult r = parse_command("advance /a 5 now\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.command.domain, "");
  EXPECT_EQ(r.command.token.epoch, 0u);
  EXPECT_FALSE(r.command.force);
}

// ---------------------------------------------------------------------------------------------
// valid_domain_path

TEST(ValidDomainPath, Accepts) {
  for (std::string_view p :
       {"/", "/a", "/a/b", "/a.b", "/...", "/.a", "/a..", "/-/_/~", "/UPPER/lower/123", "/a b",
        "/caf\xc3\xa9", "/\xe6\x97\xa5\xe6\x9c\xac", "/\xf0\x9f\x93\x81 x"}) {
    EXPECT_TRUE(valid_domain_path(p)) << p;
    EXPECT_EQ(domain_path_error(p), "") << p;
  }
  EXPECT_TRUE(valid_domain_path("/" + std::string(255, 'a')));
  std::string max = "/" + std::string(200, 'a');
  while (max.size() + 256 <= 4095) max += "/" + std::string(255, 'b');
  max += "/" + std::string(4095 - max.size() - 1, 'c');
  ASSERT_EQ(max.size(), 4095u);
  EXPECT_TRUE(valid_domain_path(max));
  EXPECT_FALSE(valid_domain_path(max + "d"));
}

TEST(ValidDomainPath, Refuses) {
  for (const std::string& p : {""s,
                               "a"s,
                               "a/b"s,
                               "."s,
                               ".."s,
                               "//"s,
                               "///"s,
                               "/a/"s,
                               "/a//b"s,
                               "/."s,
                               "/.."s,
                               "/./a"s,
                               "/a/."s,
                               "/a/../b"s,
                               "/a\tb"s,
                               "/a\nb"s,
                               "/a\0b"s,
                               "/caf\xc3"s,           // truncated UTF-8
                               "/caf\xc3\x28"s,       // bad continuation
                               "/\xc0\xaf"s,          // overlong '/'
                               "/\xed\xa0\x80"s,      // surrogate
                               "/\xf4\x90\x80\x80"s,  // above U+10FFFF
                               "/\xc2\x85"s,          // C1 control (NEL)
                               "/\xff"s,
                               "\\a"s,
                               "/" + std::string(256, 'a'),
                               "~/a"s}) {
    EXPECT_FALSE(valid_domain_path(p)) << p;
    EXPECT_TRUE(all_printable(domain_path_error(p))) << p;
    EXPECT_FALSE(domain_path_error(p).empty()) << p;
  }
}

}  // namespace
}  // namespace fencefs::ctl
