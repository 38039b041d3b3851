// The control-file protocol: a strict, allocation-light parser for one command per write(2).
//
// Checks run in a fixed order, and the first failure is the one reported:
//   1. size: empty buffer, then more than kMaxCommandBytes;
//   2. bytes, left to right: NUL, non-ASCII outside quotes (inside: invalid UTF-8), CR, tab, other
//      control bytes, an escape other than \" and \\, any "\n" that is not the very last byte
//      ("one command per write"), then an unterminated quote;
//   3. the line (buffer minus its optional final "\n"): empty, leading, trailing or double spaces
//      (outside quotes), text after a closing quote;
//   4. the verb, then the arity, then quoting (DOMAIN only), DOMAIN, TOKEN, the optional "force".
// Words echoed in messages pass through printable() and are truncated, so every message is
// printable ASCII.
#include "ctl/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
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

// Length of the valid UTF-8 sequence at s[0] (2..4 bytes, no overlong forms, surrogates, code
// points above U+10FFFF or C1 controls), or 0.
size_t utf8_sequence(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  size_t n = b0 >= 0xf0 ? 4 : b0 >= 0xe0 ? 3 : b0 >= 0xc0 ? 2 : 0;
  if (n == 0 || b0 > 0xf4 || s.size() < n) return 0;
  uint32_t cp = b0 & (0x7f >> n);
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  if (cp < 0xa0) return 0;  // C1 control
  return n;
}

// Stage 2: every byte of the buffer. Returns "" when all are acceptable. Tracks quoted words: a
// '"' at the start of a word opens one, an unescaped '"' closes it; non-ASCII bytes (valid UTF-8)
// are accepted inside quotes only.
std::string byte_error(std::string_view buf) {
  bool quoted = false, escaped = false;
  for (size_t i = 0; i < buf.size(); ++i) {
    const auto c = static_cast<unsigned char>(buf[i]);
    if (c == '\n') {
      if (i + 1 != buf.size()) return fmt::format("one command per write (newline at byte {})", i);
      continue;
    }
    if (c == '\0') return fmt::format("NUL byte at byte {}", i);
    if (c >= 0x80) {
      if (!quoted) return fmt::format("non-ASCII byte 0x{:02x} at byte {}", c, i);
      if (escaped) return fmt::format("unknown escape at byte {} (only \\\" and \\\\)", i);
      const size_t n = utf8_sequence(buf.substr(i));
      if (n == 0) return fmt::format("invalid UTF-8 at byte {}", i);
      i += n - 1;
      continue;
    }
    if (c == '\r') return fmt::format("carriage return at byte {} (end lines with \\n only)", i);
    if (c == '\t') return fmt::format("tab at byte {} (separate words with one space)", i);
    if (!is_printable_ascii(c)) return fmt::format("control byte 0x{:02x} at byte {}", c, i);
    if (quoted) {
      if (escaped) {
        if (c != '"' && c != '\\')
          return fmt::format("unknown escape at byte {} (only \\\" and \\\\)", i);
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        quoted = false;
      }
    } else if (c == '"' && (i == 0 || buf[i - 1] == ' ')) {
      quoted = true;
    }
  }
  if (quoted) return "unterminated quote";
  return {};
}

struct Word {
  std::string_view raw;  // as written, quotes included
  std::string value;     // unquoted and unescaped
  bool quoted = false;
};

// Splits the line (stage 2 passed) into words separated by single spaces; a quoted word may hold
// spaces. Stops after kMaxWords. Returns "" or why the spacing is wrong.
std::string split_words(std::string_view line, std::array<Word, kMaxWords>* words, size_t* count) {
  *count = 0;
  if (line.front() == ' ') return "leading space";
  if (line.back() == ' ') return "trailing space";
  size_t i = 0;
  while (*count < kMaxWords) {
    Word& w = (*words)[(*count)++];
    const size_t start = i;
    if (line[i] == '"') {
      w.quoted = true;
      for (++i; line[i] != '"'; ++i) {
        if (line[i] == '\\') ++i;
        w.value += line[i];
      }
      ++i;  // the closing quote (stage 2 saw it)
      if (i < line.size() && line[i] != ' ') return "a quoted word must end at a space";
    } else {
      while (i < line.size() && line[i] != ' ') ++i;
      w.value.assign(line.substr(start, i - start));
    }
    w.raw = line.substr(start, i - start);
    if (i == line.size()) break;
    ++i;  // the space
    if (line[i] == ' ') return "more than one space between words";
  }
  return {};
}

}  // namespace

std::string_view domain_path_error(std::string_view path) {
  if (path.empty()) return "empty domain";
  if (path.front() != '/') return "domain must be an absolute path starting with '/'";
  if (path.size() > kMaxDomainBytes) return "domain longer than 4095 bytes";
  for (size_t i = 0; i < path.size(); ++i) {
    const auto c = static_cast<unsigned char>(path[i]);
    if (c >= 0x80) {
      const size_t n = utf8_sequence(path.substr(i));
      if (n == 0) return "domain must be valid UTF-8 without control characters";
      i += n - 1;
    } else if (!is_printable_ascii(c)) {
      return "domain must not contain control characters";
    }
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
  std::array<Word, kMaxWords> w;
  size_t n = 0;
  if (std::string err = split_words(line, &w, &n); !err.empty()) return fail(std::move(err));

  // Stage 4: words.
  ParseResult r;
  Command& cmd = r.command;
  if (w[0].quoted) return fail(fmt::format("unknown command '{}'", printable(w[0].raw)));
  std::string_view verb = w[0].value;
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
    if (w[1].quoted || w[1].value != "add") {
      return fail(fmt::format("domain: unknown subcommand '{}' (usage: domain add DOMAIN)",
                              printable(w[1].raw)));
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

  for (size_t i = 0; i < n; ++i)
    if (w[i].quoted && i != domain_at)
      return fail(fmt::format("{}: only DOMAIN may be quoted (usage: {})", verb, usage));
  const std::string_view domain = w[domain_at].value;
  if (std::string_view why = domain_path_error(domain); !why.empty()) {
    return fail(fmt::format("{}: bad domain '{}': {}", verb, printable(w[domain_at].raw), why));
  }
  cmd.domain.assign(domain);

  if (cmd.verb == Verb::Bind || cmd.verb == Verb::Advance) {
    const std::string_view token = w[2].value;
    std::optional<fence::TokenText> parsed = fence::parse_token_text(token);
    if (!parsed) {
      return fail(fmt::format("{}: bad token '{}': {}", verb, printable(token),
                              fence::token_text_error(token)));
    }
    cmd.token = std::move(*parsed);
  }
  if (cmd.verb == Verb::Advance && n == 4) {
    if (w[3].value != "force") {
      return fail(
          fmt::format("advance: expected 'force' after the token, got '{}'", printable(w[3].raw)));
    }
    cmd.force = true;
  }
  r.ok = true;
  return r;
}

std::string quote_domain(std::string_view domain) {
  bool plain = !domain.empty() && domain.front() != '"';
  for (char c : domain)
    plain = plain && is_printable_ascii(static_cast<unsigned char>(c)) && c != ' ';
  if (plain) return std::string(domain);
  std::string out = "\"";
  for (char c : domain) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string format_command(const Command& command) {
  const std::string domain = quote_domain(command.domain);
  switch (command.verb) {
    case Verb::Bind:
      return fmt::format("bind {} {}\n", domain, fence::format_token_text(command.token));
    case Verb::Unbind:
      return fmt::format("unbind {}\n", domain);
    case Verb::Advance:
      return fmt::format("advance {} {}{}\n", domain, fence::format_token_text(command.token),
                         command.force ? " force" : "");
    case Verb::DomainAdd:
      return fmt::format("domain add {}\n", domain);
  }
  return {};
}

}  // namespace fencefs::ctl
