// Fence tokens: the text forms a caller may present, and HMAC signatures for coordinators.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fencefs::fence {

using Epoch = uint64_t;  // 0 means "no epoch yet" for a domain, "no token" for a caller
constexpr Epoch kMaxToken = 9223372036854775807ULL;

// Strict decimal: ASCII digits only, no sign, no spaces, no leading zeros, 1..kMaxToken.
std::optional<Epoch> parse_token(std::string_view text);

// "EPOCH" or "EPOCH.SIG" where SIG is 64 lowercase hex digits (HMAC-SHA256).
struct TokenText {
  Epoch epoch = 0;
  std::string signature;  // empty when unsigned
};
std::optional<TokenText> parse_token_text(std::string_view text);
// Why parse_token_text(text) refuses `text`: a short printable phrase naming the first problem
// found, for logs and error replies. Empty exactly when parse_token_text(text) accepts.
std::string_view token_text_error(std::string_view text);
// The canonical text of a token: "EPOCH" or "EPOCH.SIG"; parse_token_text() inverts it.
std::string format_token_text(const TokenText& token);

// HMAC-SHA256 over "fencefs-v1\n" DOMAIN "\n" EPOCH, as 64 lowercase hex digits.
std::string sign(std::string_view key, std::string_view domain, Epoch epoch);
// Constant-time comparison against sign(key, domain, epoch). False, without comparing, when the
// key is empty (anyone could mint such signatures), the epoch is outside 1..kMaxToken, or sig_hex
// is not exactly 64 lowercase hex digits.
bool verify(std::string_view key, std::string_view domain, Epoch epoch, std::string_view sig_hex);

}  // namespace fencefs::fence
