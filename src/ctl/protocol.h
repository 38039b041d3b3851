// The control-file protocol: one command per write(2) to MOUNTPOINT/.fencefs/ctl.
#pragma once
#include <string>
#include <string_view>

#include "fence/token.h"

namespace fencefs::ctl {

enum class Verb { Bind, Unbind, Advance, DomainAdd };

struct Command {
  Verb verb = Verb::Bind;
  std::string domain;      // normalised domain path: "/" or "/a/b"
  fence::TokenText token;  // Bind and Advance
  bool force = false;      // "advance DOMAIN TOKEN force"
};

struct ParseResult {
  bool ok = false;
  Command command;
  std::string error;  // why, when !ok (the errno is always EINVAL)
};

constexpr size_t kMaxCommandBytes = 4096;

// Grammar (single spaces between words, one optional trailing "\n"):
//   bind DOMAIN TOKEN | unbind DOMAIN | advance DOMAIN TOKEN [force] | domain add DOMAIN
// DOMAIN is "/" or "/seg[/seg...]" with no empty, "." or ".." segments and no trailing slash.
// A DOMAIN with spaces or non-ASCII characters (UTF-8) is written in double quotes, inside which
// \" and \\ stand for " and \: domain add "/srv/my data/café". Everything else is printable ASCII.
ParseResult parse_command(std::string_view write_buffer);

// Validates a domain path (same rules as above). Also: valid UTF-8 without control characters,
// each segment at most 255 bytes, the whole path at most 4095 bytes. Accepted paths are already
// in normal form.
bool valid_domain_path(std::string_view path);
// Why valid_domain_path(path) refuses `path`, as a short printable phrase; empty when it accepts.
std::string_view domain_path_error(std::string_view path);

// DOMAIN as a command word: quoted (and escaped) when it has spaces or non-ASCII bytes.
std::string quote_domain(std::string_view domain);
// The canonical one-line form of a command, ending in "\n" (for fencectl and tests); it parses
// back to the same command. For every accepted buffer B without quotes,
// format_command(parse_command(B).command) is B with its "\n" made present.
std::string format_command(const Command& command);

}  // namespace fencefs::ctl
