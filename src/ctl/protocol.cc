// The control-file protocol: a strict, allocation-light parser for one command per write(2).
//
// Checks run in a fixed order, and the first failure is the one reported:
//   1. size: empty buffer, then more than kMaxCommandBytes;
//   2. bytes, left to right: NUL, non-ASCII, CR, tab, other control bytes, and any "\n" that is
//      not the very last byte ("one command per write");
//   3. the line (buffer minus its optional final "\n"): empty, leading, trailing or double spaces;
//   4. the verb, then the arity, then DOMAIN, then TOKEN, then the optional "force".
// By stage 3 every byte is printable ASCII, so words echoed in messages are printable as well;
// they are still passed through printable() and truncated, as a second line of defence.
#include "ctl/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>

namespace fencefs::ctl {
namespace {

constexpr size_t kMaxDomainBytes = 4095;
constexpr size_t kMaxSegmentBytes = 255;
constexpr size_t kMaxEchoBytes = 16;  // how much of an unknown word an error message repeats
constexpr size_t kMaxWords = 5;       // one more than the longest command, to detect excess

bool is_printable_ascii(unsigned char c) { return c >= 0x20 && c < 0x7f; }

// A short, printable rendering of untrusted bytes for an error message.
std::string printable(std::string_view text) {
  std::string out;
  const size_t n = std::min(text.size(), kMaxEchoBytes);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (is_printable_ascii(c) && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (text.size() > n) out += "...";
  return out;
}

ParseResult fail(std::string error) {
  ParseResult r;
  r.error = std::move(error);
  return r;
}

// Stage 2: every byte of the buffer. Returns "" when all are acceptable.
std::string byte_error(std::string_view buf) {
  for (size_t i = 0; i < buf.size(); ++i) {
    const auto c = static_cast<unsigned char>(buf[i]);
    if (c == '\n') {
      if (i + 1 != buf.size()) return fmt::format("one command per write (newline at byte {})", i);
      continue;
    }
    if (c == '\0') return fmt::format("NUL byte at byte {}", i);
    if (c >= 0x80) return fmt::format("non-ASCII byte 0x{:02x} at byte {}", c, i);
    if (c == '\r') return fmt::format("carriage return at byte {} (end lines with \\n only)", i);
    if (c == '\t') return fmt::format("tab at byte {} (separate words with one space)", i);
    if (!is_printable_ascii(c)) return fmt::format("control byte 0x{:02x} at byte {}", c, i);
  }
  return {};
}

// Splits on single spaces; the caller has ruled out empty words. Stops after kMaxWords.
size_t split_words(std::string_view line, std::array<std::string_view, kMaxWords>* words) {
  size_t count = 0;
  while (count < kMaxWords) {
    const size_t space = line.find(' ');
    (*words)[count++] = line.substr(0, space);
    if (space == std::string_view::npos) break;
    line.remove_prefix(space + 1);
  }
  return count;
}

}  // namespace

std::string_view domain_path_error(std::string_view path) {
  if (path.empty()) return "empty domain";
  if (path.front() != '/') return "domain must be an absolute path starting with '/'";
  if (path.size() > kMaxDomainBytes) return "domain longer than 4095 bytes";
  for (char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (!is_printable_ascii(c) || c == ' ') return "domain must be printable ASCII without spaces";
  }
  if (path == "/") return {};
  std::string_view rest = path.substr(1);
  while (true) {
    const size_t slash = rest.find('/');
    const std::string_view segment = rest.substr(0, slash);
    if (segment.empty()) {
      return slash == std::string_view::npos ? "domain must not end with '/'"
                                             : "domain has an empty segment ('//')";
    }
    if (segment == ".") return "domain has a '.' segment";
    if (segment == "..") return "domain has a '..' segment";
    if (segment.size() > kMaxSegmentBytes) return "domain segment longer than 255 bytes";
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  return {};
}

bool valid_domain_path(std::string_view path) { return domain_path_error(path).empty(); }

// long: the grammar's stages in order (size, bytes, line, words, verb), each with its refusal.
ParseResult parse_command(std::string_view buf) {
  // Stage 1: size.
  if (buf.empty()) return fail("empty command");
  if (buf.size() > kMaxCommandBytes) {
    return fail(fmt::format("command too long ({} bytes, max {})", buf.size(), kMaxCommandBytes));
  }
  // Stage 2: bytes.
  if (std::string err = byte_error(buf); !err.empty()) return fail(std::move(err));

  // Stage 3: the line and its spaces.
  std::string_view line = buf;
  if (line.back() == '\n') line.remove_suffix(1);
  if (line.empty()) return fail("empty command");
  if (line.front() == ' ') return fail("leading space");
  if (line.back() == ' ') return fail("trailing space");
  if (line.find("  ") != std::string_view::npos) {
    return fail("more than one space between words");
  }

  // Stage 4: words.
  std::array<std::string_view, kMaxWords> w;
  const size_t n = split_words(line, &w);

  ParseResult r;
  Command& cmd = r.command;
  std::string_view verb = w[0];
  std::string_view usage;
  size_t min_words = 0, max_words = 0;  // including the verb word(s)
  size_t domain_at = 1;
  if (verb == "bind") {
    cmd.verb = Verb::Bind;
    usage = "bind DOMAIN TOKEN";
    min_words = max_words = 3;
  } else if (verb == "unbind") {
    cmd.verb = Verb::Unbind;
    usage = "unbind DOMAIN";
    min_words = max_words = 2;
  } else if (verb == "advance") {
    cmd.verb = Verb::Advance;
    usage = "advance DOMAIN TOKEN [force]";
    min_words = 3;
    max_words = 4;
  } else if (verb == "domain") {
    cmd.verb = Verb::DomainAdd;
    usage = "domain add DOMAIN";
    if (n < 2) return fail("domain: missing subcommand (usage: domain add DOMAIN)");
    if (w[1] != "add") {
      return fail(fmt::format("domain: unknown subcommand '{}' (usage: domain add DOMAIN)",
                              printable(w[1])));
    }
    verb = "domain add";
    min_words = max_words = 3;
    domain_at = 2;
  } else {
    return fail(fmt::format("unknown command '{}'", printable(verb)));
  }

  if (n < min_words) {
    const char* missing = n <= domain_at ? "domain" : "token";
    return fail(fmt::format("{}: missing {} (usage: {})", verb, missing, usage));
  }
  if (n > max_words) return fail(fmt::format("{}: too many words (usage: {})", verb, usage));

  const std::string_view domain = w[domain_at];
  if (std::string_view why = domain_path_error(domain); !why.empty()) {
    return fail(fmt::format("{}: bad domain '{}': {}", verb, printable(domain), why));
  }
  cmd.domain.assign(domain);

  if (cmd.verb == Verb::Bind || cmd.verb == Verb::Advance) {
    const std::string_view token = w[2];
    std::optional<fence::TokenText> parsed = fence::parse_token_text(token);
    if (!parsed) {
      return fail(fmt::format("{}: bad token '{}': {}", verb, printable(token),
                              fence::token_text_error(token)));
    }
    cmd.token = std::move(*parsed);
  }
  if (cmd.verb == Verb::Advance && n == 4) {
    if (w[3] != "force") {
      return fail(
          fmt::format("advance: expected 'force' after the token, got '{}'", printable(w[3])));
    }
    cmd.force = true;
  }
  r.ok = true;
  return r;
}

std::string format_command(const Command& command) {
  switch (command.verb) {
    case Verb::Bind:
      return fmt::format("bind {} {}\n", command.domain, fence::format_token_text(command.token));
    case Verb::Unbind:
      return fmt::format("unbind {}\n", command.domain);
    case Verb::Advance:
      return fmt::format("advance {} {}{}\n", command.domain,
                         fence::format_token_text(command.token), command.force ? " force" : "");
    case Verb::DomainAdd:
      return fmt::format("domain add {}\n", command.domain);
  }
  return {};
}

}  // namespace fencefs::ctl
