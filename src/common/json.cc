#include "common/json.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/parse.h"

namespace fencefs::json {
namespace {

using Json = nlohmann::ordered_json;

// The audit log writes a byte that is not valid UTF-8 as a lone low surrogate \udc80..\udcff
// (Python's surrogateescape; docs/audit.md), which strict JSON readers refuse. Before parsing,
// each such escape becomes U+FDD0 (a noncharacter, never written for a real name) followed by
// U+00XX; after parsing, that pair becomes the byte XX again.
constexpr std::string_view kMarker = "\xEF\xB7\x90";  // U+FDD0 in UTF-8

int hex4(std::string_view s) {
  int v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// Rewrites lone \udcXX escapes (XX >= 80) inside strings; false when there were none.
bool mark_stray_bytes(std::string_view text, std::string* out) {
  bool any = false;
  bool in_string = false;
  bool after_high = false;  // the previous escape was a high surrogate: a pair, not a stray byte
  out->reserve(text.size() + 16);
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (!in_string || c != '\\' || i + 1 >= text.size()) {
      if (c == '"') in_string = !in_string;
      after_high = false;
      *out += c;
      i++;
      continue;
    }
    if (text[i + 1] != 'u' || i + 6 > text.size()) {
      after_high = false;
      out->append(text.substr(i, 2));  // \" \\ \n ...: never a string's end
      i += 2;
      continue;
    }
    const int cp = hex4(text.substr(i + 2, 4));
    if (cp >= 0xDC80 && cp <= 0xDCFF && !after_high) {
      static constexpr char kHex[] = "0123456789abcdef";
      *out += "\\ufdd0\\u00";
      *out += kHex[(cp >> 4) & 0xF];
      *out += kHex[cp & 0xF];
      any = true;
      after_high = false;
    } else {
      out->append(text.substr(i, 6));
      after_high = cp >= 0xD800 && cp <= 0xDBFF;
    }
    i += 6;
  }
  return any;
}

// U+FDD0 followed by U+0080..U+00FF (C2/C3 xx in UTF-8) back to the byte.
void unmark_stray_bytes(std::string* s) {
  size_t at = s->find(kMarker);
  if (at == std::string::npos) return;
  std::string out;
  out.reserve(s->size());
  size_t i = 0;
  for (; at != std::string::npos; at = s->find(kMarker, i)) {
    const size_t b = at + kMarker.size();
    if (b + 1 < s->size() && ((*s)[b] == '\xC2' || (*s)[b] == '\xC3')) {
      out.append(*s, i, at - i);
      out += static_cast<char>(((static_cast<unsigned char>((*s)[b]) & 0x03) << 6) |
                               (static_cast<unsigned char>((*s)[b + 1]) & 0x3F));
      i = b + 2;
    } else {
      out.append(*s, i, b - i);
      i = b;
    }
  }
  out.append(*s, i, std::string::npos);
  *s = std::move(out);
}

Value convert(const Json& j, bool marked) {
  Value v;
  switch (j.type()) {
    case Json::value_t::boolean:
      v.type = Value::Type::Bool;
      v.b = j.get<bool>();
      break;
    case Json::value_t::number_unsigned:
      v.type = Value::Type::Number;
      v.raw_number = std::to_string(j.get<uint64_t>());
      v.num = j.get<double>();
      break;
    case Json::value_t::number_integer:
      v.type = Value::Type::Number;
      v.raw_number = std::to_string(j.get<int64_t>());
      v.num = j.get<double>();
      break;
    case Json::value_t::number_float:
      v.type = Value::Type::Number;
      v.raw_number = j.dump();
      v.num = j.get<double>();
      break;
    case Json::value_t::string:
      v.type = Value::Type::String;
      v.str = j.get<std::string>();
      if (marked) unmark_stray_bytes(&v.str);
      break;
    case Json::value_t::array:
      v.type = Value::Type::Array;
      v.arr.reserve(j.size());
      for (const auto& e : j) v.arr.push_back(convert(e, marked));
      break;
    case Json::value_t::object:
      v.type = Value::Type::Object;
      v.obj.reserve(j.size());
      for (const auto& [k, e] : j.items()) {
        v.obj.push_back(Member{k, convert(e, marked)});
        if (marked) unmark_stray_bytes(&v.obj.back().first);
      }
      break;
    default:  // null (binary and discarded never come out of parse)
      break;
  }
  return v;
}

}  // namespace

const Value* Value::get(std::string_view key) const {
  for (const auto& [k, v] : obj) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string Value::as_string() const {
  switch (type) {
    case Type::String:
      return str;
    case Type::Number:
      return raw_number;
    case Type::Bool:
      return b ? "true" : "false";
    case Type::Null:
      return "";
    default:
      return "…";
  }
}

uint64_t Value::as_u64() const {
  uint64_t v = 0;
  return type == Type::Number && common::parse_u64(raw_number, &v) ? v : 0;
}

std::optional<Value> parse(std::string_view text, std::string* error) {
  try {
    std::string marked;
    if (mark_stray_bytes(text, &marked)) return convert(Json::parse(marked), true);
    return convert(Json::parse(text), false);
  } catch (const Json::exception& e) {
    if (error != nullptr) *error = e.what();
    return std::nullopt;
  }
}

}  // namespace fencefs::json
