#include "common/json_writer.h"

#include <fmt/format.h>

namespace fencefs::common {

size_t utf8_len(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t n;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; k++) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;  // overlong, out of range, or a surrogate
  return n;
}

void json_escape_to(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t run = 0;  // start of the bytes not yet appended: they pass through unchanged
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      i++;
      continue;
    }
    size_t n = c >= 0x80 ? utf8_len(s, i) : 0;
    if (n) {
      i += n;
      continue;
    }
    out->append(s.data() + run, i - run);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\r':
        *out += "\\r";
        break;
      default:
        // A control character or DEL as \u00XX; a stray byte as \udcXX (paths need not be UTF-8).
        const bool stray = c >= 0x80;
        const char esc[] = {'\\',         'u',         stray ? 'd' : '0', stray ? 'c' : '0',
                            kHex[c >> 4], kHex[c & 15]};
        out->append(esc, sizeof esc);
        break;
    }
    run = ++i;
  }
  out->append(s.data() + run, s.size() - run);
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  json_escape_to(&out, s);
  return out;
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) *out_ += ',';
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  *out_ += '{';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  *out_ += '}';
  if (!first_.empty()) first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  *out_ += '[';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  *out_ += ']';
  if (!first_.empty()) first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view k) {
  before_value();
  *out_ += '"';
  json_escape_to(out_, k);
  *out_ += "\":";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  before_value();
  *out_ += '"';
  json_escape_to(out_, s);
  *out_ += '"';
  return *this;
}

JsonWriter& JsonWriter::value(uint64_t v) {
  before_value();
  append_number(v);
  return *this;
}

JsonWriter& JsonWriter::value(int64_t v) {
  before_value();
  append_number(v);
  return *this;
}

JsonWriter& JsonWriter::value(bool b) {
  before_value();
  *out_ += b ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::value(double d) {
  before_value();
  fmt::format_to(std::back_inserter(*out_), "{}", d);
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  *out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  before_value();
  *out_ += json;
  return *this;
}

}  // namespace fencefs::common
