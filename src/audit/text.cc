// The audit trail's text: escaping for a terminal of what fencectl shows, and the times both
// read and write. (JSON escaping: common/json_writer.)
#include <fmt/format.h>
#include <time.h>

#include <charconv>
#include <cstring>
#include <ctime>

#include "audit/audit.h"
#include "common/json_writer.h"

namespace fencefs::audit {
namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Reads exactly `n` digits at s[*i] into *v.
bool digits(std::string_view s, size_t* i, size_t n, int* v) {
  if (*i + n > s.size() || !all_digits(s.substr(*i, n))) return false;
  std::from_chars(s.data() + *i, s.data() + *i + n, *v);
  *i += n;
  return true;
}

bool take(std::string_view s, size_t* i, char c) {
  if (*i < s.size() && s[*i] == c) {
    ++*i;
    return true;
  }
  return false;
}

}  // namespace

std::string format_time(int64_t unix_ns) {
  int64_t secs = unix_ns / 1000000000;
  int64_t ns = unix_ns % 1000000000;
  if (ns < 0) {
    ns += 1000000000;
    secs -= 1;
  }
  time_t t = static_cast<time_t>(secs);
  struct tm tm;
  gmtime_r(&t, &tm);
  char ts[64];
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:06d}Z", ts, static_cast<int>(ns / 1000));
}

std::string display_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\' || c < 0x20 || c == 0x7f) {
      switch (c) {
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\r':
          out += "\\r";
          break;
        default:
          out += fmt::format("\\x{:02x}", c);
      }
      i++;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      i++;
    } else if (size_t n = common::utf8_len(s, i)) {
      uint32_t cp = n == 2   ? ((c & 0x1fu) << 6) | (s[i + 1] & 0x3fu)
                    : n == 3 ? ((c & 0x0fu) << 12) | ((s[i + 1] & 0x3fu) << 6) | (s[i + 2] & 0x3fu)
                             : 0x10000;
      // C1 controls (0x9b is a CSI), line and paragraph separators, bidirectional overrides.
      bool unsafe = (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
                    (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) ||
                    cp == 0x200e || cp == 0x200f || cp == 0x061c;
      if (unsafe)
        out += fmt::format("\\u{:04x}", cp);
      else
        out.append(s.substr(i, n));
      i += n;
    } else {
      out += fmt::format("\\x{:02x}", c);
      i++;
    }
  }
  return out;
}

std::optional<int64_t> parse_iso_time(std::string_view s) {
  size_t i = 0;
  struct tm tm {};
  int year = 0, mon = 0, day = 0, hh = 0, mm = 0, ss = 0;
  if (!digits(s, &i, 4, &year) || !take(s, &i, '-') || !digits(s, &i, 2, &mon) ||
      !take(s, &i, '-') || !digits(s, &i, 2, &day))
    return std::nullopt;
  int64_t frac_ns = 0;
  int64_t offset_s = 0;
  if (i < s.size() && (s[i] == 'T' || s[i] == 't' || s[i] == ' ')) {
    i++;
    if (!digits(s, &i, 2, &hh) || !take(s, &i, ':') || !digits(s, &i, 2, &mm)) return std::nullopt;
    if (take(s, &i, ':')) {
      if (!digits(s, &i, 2, &ss)) return std::nullopt;
      if (take(s, &i, '.') || take(s, &i, ',')) {
        int64_t scale = 100000000;
        size_t start = i;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
          frac_ns += (s[i] - '0') * scale;
          scale /= 10;
          i++;
        }
        if (i == start) return std::nullopt;
      }
    }
    if (take(s, &i, 'Z') || take(s, &i, 'z')) {
      // UTC
    } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
      int sign = s[i] == '-' ? -1 : 1;
      i++;
      int oh, om = 0;
      if (!digits(s, &i, 2, &oh)) return std::nullopt;
      take(s, &i, ':');
      if (i < s.size() && !digits(s, &i, 2, &om)) return std::nullopt;
      offset_s = sign * (int64_t{oh} * 3600 + int64_t{om} * 60);
    }
  }
  if (i != s.size()) return std::nullopt;
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60)
    return std::nullopt;
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hh;
  tm.tm_min = mm;
  tm.tm_sec = ss;
  time_t t = timegm(&tm);
  if (tm.tm_mday != day) return std::nullopt;  // 2026-02-31 and such
  return (static_cast<int64_t>(t) - offset_s) * 1000000000 + frac_ns;
}

std::optional<int64_t> parse_since(std::string_view s, int64_t now_ns) {
  if (s.size() >= 2 && all_digits(s.substr(0, s.size() - 1))) {
    int64_t unit;
    switch (s.back()) {
      case 's':
        unit = 1;
        break;
      case 'm':
        unit = 60;
        break;
      case 'h':
        unit = 3600;
        break;
      case 'd':
        unit = 86400;
        break;
      case 'w':
        unit = int64_t{7} * 86400;
        break;
      default:
        return parse_iso_time(s);
    }
    int64_t n = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size() - 1, n);
    if (r.ec != std::errc() || n > (int64_t{1} << 62) / 1000000000 / unit) return std::nullopt;
    return now_ns - n * unit * 1000000000;
  }
  return parse_iso_time(s);
}

}  // namespace fencefs::audit
