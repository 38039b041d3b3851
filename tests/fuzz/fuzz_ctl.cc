// libFuzzer target for the control-line and token parsers (src/ctl/protocol.cc,
// src/fence/token.cc), quoted domains with spaces and UTF-8 included.
//
// Every input is fed, whole, to parse_command, parse_token, parse_token_text, valid_domain_path
// and verify, and the results are checked against independent oracles and round-trip invariants.
// Any violation aborts, which libFuzzer reports as a crash with the input saved as an artifact.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "ctl/protocol.h"
#include "fence/token.h"

namespace {

using fencefs::ctl::Command;
using fencefs::ctl::ParseResult;
using fencefs::ctl::Verb;
using fencefs::fence::Epoch;
using fencefs::fence::kMaxToken;
using fencefs::fence::TokenText;

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

bool is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool printable_ascii(std::string_view s) {
  for (char c : s) {
    if (c < 0x20 || c >= 0x7f) return false;
  }
  return true;
}

// Independent oracle for the token grammar: accumulate in 128 bits so overflow cannot hide.
bool oracle_token(std::string_view s, Epoch* value) {
  if (s.empty() || s.size() > 40 || s[0] == '0') return false;
  unsigned __int128 v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v < 1 || v > kMaxToken) return false;
  *value = static_cast<Epoch>(v);
  return true;
}

bool same_command(const Command& a, const Command& b) {
  return a.verb == b.verb && a.domain == b.domain && a.token.epoch == b.token.epoch &&
         a.token.signature == b.token.signature && a.force == b.force;
}

void check_token(std::string_view s) {
  Epoch expected = 0;
  const bool oracle_ok = oracle_token(s, &expected);
  const std::optional<Epoch> got = fencefs::fence::parse_token(s);
  FUZZ_CHECK(got.has_value() == oracle_ok);
  if (got) {
    FUZZ_CHECK(*got == expected);
    FUZZ_CHECK(*got >= 1 && *got <= kMaxToken);
    FUZZ_CHECK(std::to_string(*got) == s);  // only canonical decimal is ever accepted
  }
}

void check_token_text(std::string_view s) {
  const std::optional<TokenText> t = fencefs::fence::parse_token_text(s);
  const std::string_view why = fencefs::fence::token_text_error(s);
  FUZZ_CHECK(t.has_value() == why.empty());
  FUZZ_CHECK(printable_ascii(why));
  if (!t) return;
  FUZZ_CHECK(t->epoch >= 1 && t->epoch <= kMaxToken);
  FUZZ_CHECK(t->signature.empty() || t->signature.size() == 64);
  for (char c : t->signature) FUZZ_CHECK(is_lower_hex(c));
  FUZZ_CHECK(fencefs::fence::format_token_text(*t) == s);
  // Without the key, the fuzzer must never produce an accepted signature.
  if (!t->signature.empty()) {
    const bool ok = fencefs::fence::verify("fuzz-key", "/", t->epoch, t->signature);
    FUZZ_CHECK(ok == (t->signature == fencefs::fence::sign("fuzz-key", "/", t->epoch)));
  }
}

void check_domain(std::string_view s) {
  const bool valid = fencefs::ctl::valid_domain_path(s);
  const std::string_view why = fencefs::ctl::domain_path_error(s);
  FUZZ_CHECK(valid == why.empty());
  FUZZ_CHECK(printable_ascii(why));
  if (!valid) return;
  FUZZ_CHECK(s.size() <= 4095 && s[0] == '/');
  FUZZ_CHECK(s == "/" || s.back() != '/');
  FUZZ_CHECK(s.find("//") == std::string_view::npos);
  FUZZ_CHECK(s.find("/./") == std::string_view::npos && s.find("/../") == std::string_view::npos);
  FUZZ_CHECK(!s.ends_with("/.") && !s.ends_with("/.."));
  FUZZ_CHECK(s.find_first_of(std::string_view("\0\n\r\t", 4)) == std::string_view::npos);
  // A valid domain that fits in a command is accepted by the protocol, unchanged: written as
  // format_command writes it (quoted when it has spaces or UTF-8) in every command that takes one.
  Command c;
  c.domain = std::string(s);
  for (Verb v : {Verb::Unbind, Verb::DomainAdd, Verb::Bind, Verb::Advance}) {
    c.verb = v;
    c.token.epoch = v == Verb::Bind || v == Verb::Advance ? 7 : 0;
    const std::string line = fencefs::ctl::format_command(c);
    if (line.size() > fencefs::ctl::kMaxCommandBytes) continue;
    const ParseResult r = fencefs::ctl::parse_command(line);
    FUZZ_CHECK(r.ok && same_command(r.command, c));
  }
}

void check_command(std::string_view s) {
  const ParseResult r = fencefs::ctl::parse_command(s);
  if (!r.ok) {
    FUZZ_CHECK(!r.error.empty());
    FUZZ_CHECK(r.error.size() <= 200);
    FUZZ_CHECK(printable_ascii(r.error));
    return;
  }
  FUZZ_CHECK(r.error.empty());
  FUZZ_CHECK(!s.empty() && s.size() <= fencefs::ctl::kMaxCommandBytes);
  const Command& c = r.command;
  FUZZ_CHECK(fencefs::ctl::valid_domain_path(c.domain));
  if (c.verb == Verb::Bind || c.verb == Verb::Advance) {
    FUZZ_CHECK(c.token.epoch >= 1 && c.token.epoch <= kMaxToken);
    FUZZ_CHECK(c.token.signature.empty() || c.token.signature.size() == 64);
  } else {
    FUZZ_CHECK(c.token.epoch == 0 && c.token.signature.empty());
  }
  FUZZ_CHECK(!c.force || c.verb == Verb::Advance);
  // Without quotes the grammar has one spelling per command: the input is the canonical form,
  // give or take "\n". Quoting is needed only for spaces and UTF-8, and optional otherwise.
  const std::string canonical = fencefs::ctl::format_command(c);
  if (s.find('"') == std::string_view::npos)
    FUZZ_CHECK(canonical == s || canonical == std::string(s) + "\n");
  // Re-serialising and re-parsing gives back the same command, and the canonical form is stable.
  const ParseResult again = fencefs::ctl::parse_command(canonical);
  FUZZ_CHECK(again.ok && same_command(again.command, c));
  FUZZ_CHECK(fencefs::ctl::format_command(again.command) == canonical);
  // Every accepted buffer is a single line; outside a quoted DOMAIN it is printable ASCII.
  const std::string_view line = s.ends_with('\n') ? s.substr(0, s.size() - 1) : s;
  FUZZ_CHECK(line.find('\n') == std::string_view::npos);
  if (s.find('"') == std::string_view::npos) FUZZ_CHECK(printable_ascii(line));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  check_command(input);
  check_token(input);
  check_token_text(input);
  check_domain(input);
  // The same bytes as the token and domain words of a command: exercises the word-level paths.
  if (size < 64) {
    check_command("bind / " + std::string(input));
    check_command("advance " + std::string(input) + " 1 force");
    check_command("domain add \"" + std::string(input) + "\"");  // the quoted-word paths
  }
  return 0;
}
