// Fence tokens: strict parsing of the text forms, and HMAC-SHA256 signatures.
#include "fence/token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <charconv>
#include <climits>

namespace fencefs::fence {
namespace {

constexpr size_t kSignatureHexChars = 64;  // HMAC-SHA256: 32 bytes, two hex digits each
constexpr size_t kMaxTokenDigits = 19;     // strlen("9223372036854775807")
constexpr std::string_view kSignedPrefix = "fencefs-v1\n";

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool is_lower_hex(char c) { return is_ascii_digit(c) || (c >= 'a' && c <= 'f'); }

// The single source of truth for the epoch grammar: the reason `text` is refused, or "" if valid.
// On success `*out` holds the value.
std::string_view epoch_error(std::string_view text, Epoch* out) {
  if (text.empty()) return "empty token";
  // Byte-wise checks only: a multi-byte UTF-8 digit (fullwidth, Arabic-Indic...) starts with a
  // non-ASCII byte and is refused here, whatever the locale.
  for (char c : text) {
    if (!is_ascii_digit(c)) {
      if (c == '-' || c == '+') return "token must not have a sign";
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
        return "token must not contain whitespace";
      if (c == '\0') return "token must not contain a NUL byte";
      if (static_cast<unsigned char>(c) >= 0x80) return "token must use ASCII digits only";
      return "token must be decimal digits only";
    }
  }
  if (text[0] == '0') return text.size() == 1 ? "token 0 is not a valid epoch" : "leading zero";
  if (text.size() > kMaxTokenDigits) return "token too large (max 9223372036854775807)";
  Epoch value = 0;
  for (char c : text) {
    const Epoch digit = static_cast<Epoch>(c - '0');
    // Overflow-safe even though 19 digits always fit in a uint64_t: no wrap-around, ever.
    if (value > (kMaxToken - digit) / 10) return "token too large (max 9223372036854775807)";
    value = value * 10 + digit;
  }
  *out = value;
  return {};
}

std::string_view token_text_error_impl(std::string_view text, TokenText* out) {
  const size_t dot = text.find('.');
  const std::string_view epoch_part = text.substr(0, dot);
  Epoch epoch = 0;
  if (std::string_view why = epoch_error(epoch_part, &epoch); !why.empty()) return why;
  std::string_view sig;
  if (dot != std::string_view::npos) {
    sig = text.substr(dot + 1);
    if (sig.size() != kSignatureHexChars) {
      return "after '.', a signature must be exactly 64 lowercase hex digits";
    }
    for (char c : sig) {
      if (!is_lower_hex(c)) return "after '.', a signature must be exactly 64 lowercase hex digits";
    }
  }
  if (out != nullptr) {
    out->epoch = epoch;
    out->signature.assign(sig);
  }
  return {};
}

std::string epoch_decimal(Epoch epoch) {
  std::array<char, 24> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), epoch);
  (void)ec;  // 24 bytes always hold a uint64_t
  return std::string(buf.data(), end);
}

}  // namespace

std::optional<Epoch> parse_token(std::string_view text) {
  Epoch value = 0;
  if (!epoch_error(text, &value).empty()) return std::nullopt;
  return value;
}

std::optional<TokenText> parse_token_text(std::string_view text) {
  TokenText token;
  if (!token_text_error_impl(text, &token).empty()) return std::nullopt;
  return token;
}

std::string_view token_text_error(std::string_view text) {
  return token_text_error_impl(text, nullptr);
}

std::string format_token_text(const TokenText& token) {
  std::string text = epoch_decimal(token.epoch);
  if (!token.signature.empty()) {
    text += '.';
    text += token.signature;
  }
  return text;
}

std::string sign(std::string_view key, std::string_view domain, Epoch epoch) {
  if (key.size() > static_cast<size_t>(INT_MAX)) return {};
  std::string message;
  message.reserve(kSignedPrefix.size() + domain.size() + 1 + kMaxTokenDigits + 1);
  message += kSignedPrefix;
  message += domain;
  message += '\n';
  message += epoch_decimal(epoch);

  // A null key pointer means "reuse the previous key" to parts of the HMAC API; never pass one.
  static const unsigned char kEmptyKey = 0;
  const void* key_ptr = key.empty() ? static_cast<const void*>(&kEmptyKey) : key.data();
  std::array<unsigned char, EVP_MAX_MD_SIZE> mac{};
  unsigned int mac_len = 0;
  if (HMAC(EVP_sha256(), key_ptr, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(),
           &mac_len) == nullptr ||
      size_t{mac_len} * 2 != kSignatureHexChars) {
    OPENSSL_cleanse(mac.data(), mac.size());
    return {};  // never a valid signature: verify() refuses it
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(kSignatureHexChars, '0');
  for (unsigned int i = 0; i < mac_len; ++i) {
    hex[size_t{2} * i] = kHex[mac[i] >> 4];
    hex[size_t{2} * i + 1] = kHex[mac[i] & 0x0f];
  }
  OPENSSL_cleanse(mac.data(), mac.size());
  return hex;
}

bool verify(std::string_view key, std::string_view domain, Epoch epoch, std::string_view sig_hex) {
  if (key.empty()) return false;
  if (epoch < 1 || epoch > kMaxToken) return false;
  // Length and alphabet are public properties of the format, so checking them first leaks nothing
  // about the expected value.
  if (sig_hex.size() != kSignatureHexChars) return false;
  for (char c : sig_hex) {
    if (!is_lower_hex(c)) return false;
  }
  const std::string expected = sign(key, domain, epoch);
  if (expected.size() != kSignatureHexChars) return false;
  return CRYPTO_memcmp(expected.data(), sig_hex.data(), kSignatureHexChars) == 0;
}

}  // namespace fencefs::fence
