#include "fence/stamp.h"

#include <fmt/format.h>

#include "common/parse.h"

namespace fencefs::fence {

using common::parse_u64;

std::string encode_stamp(Epoch epoch, uint64_t size, int64_t mtime_sec, int64_t mtime_nsec,
                         uint32_t domain) {
  if (domain == kAnyDomain)
    return fmt::format("{} {} {}.{:09d}", epoch, size, mtime_sec, mtime_nsec);
  return fmt::format("{} {} {}.{:09d} d{}", epoch, size, mtime_sec, mtime_nsec, domain);
}

std::optional<Stamp> decode_stamp(std::string_view v) {
  Stamp s;
  size_t a = v.find(' ');
  if (!parse_u64(v.substr(0, a), &s.epoch)) return std::nullopt;
  if (a == std::string_view::npos) return s;
  v.remove_prefix(a + 1);
  size_t b = v.find(' ');
  if (!parse_u64(v.substr(0, b), &s.size)) return std::nullopt;
  s.has_size = true;
  if (b == std::string_view::npos) return s;
  v.remove_prefix(b + 1);
  size_t c = v.find(' ');
  if (c != std::string_view::npos) {
    std::string_view d = v.substr(c + 1);
    uint64_t id = 0;
    if (d.size() < 2 || d[0] != 'd' || !parse_u64(d.substr(1), &id) || id >= kAnyDomain)
      return std::nullopt;
    s.domain = static_cast<uint32_t>(id);
    v = v.substr(0, c);
  }
  size_t dot = v.find('.');
  uint64_t sec = 0, nsec = 0;
  if (dot == std::string_view::npos || !parse_u64(v.substr(0, dot), &sec) ||
      !parse_u64(v.substr(dot + 1), &nsec) || nsec >= 1000000000 || sec > INT64_MAX)
    return std::nullopt;
  s.mtime_sec = static_cast<int64_t>(sec);
  s.mtime_nsec = static_cast<int64_t>(nsec);
  s.has_mtime = true;
  return s;
}

}  // namespace fencefs::fence
