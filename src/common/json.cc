#include "common/json.h"

#include <charconv>
#include <cstdlib>

namespace fencefs::json {
namespace {

struct Parser {
  std::string_view s;
  size_t i = 0;
  std::string err;

  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) i++;
  }
  bool fail(const char* what) {
    if (err.empty()) err = std::string(what) + " at byte " + std::to_string(i);
    return false;
  }
  bool lit(std::string_view w) {
    if (s.substr(i, w.size()) != w) return fail("bad literal");
    i += w.size();
    return true;
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool string(std::string& out) {
    if (i >= s.size() || s[i] != '"') return fail("expected string");
    i++;
    while (i < s.size() && s[i] != '"') {
      char c = s[i++];
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= s.size()) return fail("truncated escape");
      char e = s[i++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (i + 4 > s.size()) return fail("truncated \\u");
          unsigned cp = 0;
          auto r = std::from_chars(s.data() + i, s.data() + i + 4, cp, 16);
          if (r.ptr != s.data() + i + 4) return fail("bad \\u");
          i += 4;
          utf8(out, cp);
          break;
        }
        default:
          return fail("bad escape");
      }
    }
    if (i >= s.size()) return fail("unterminated string");
    i++;
    return true;
  }
  bool value(Value& v, int depth) {
    if (depth > 64) return fail("nested too deeply");
    ws();
    if (i >= s.size()) return fail("unexpected end");
    char c = s[i];
    if (c == '{') {
      v.type = Value::Type::Object;
      i++;
      ws();
      if (i < s.size() && s[i] == '}') return i++, true;
      for (;;) {
        ws();
        std::string k;
        if (!string(k)) return false;
        ws();
        if (i >= s.size() || s[i] != ':') return fail("expected ':'");
        i++;
        Value child;
        if (!value(child, depth + 1)) return false;
        v.obj.push_back({std::move(k), std::move(child)});
        ws();
        if (i < s.size() && s[i] == ',') {
          i++;
          continue;
        }
        if (i < s.size() && s[i] == '}') return i++, true;
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.type = Value::Type::Array;
      i++;
      ws();
      if (i < s.size() && s[i] == ']') return i++, true;
      for (;;) {
        Value child;
        if (!value(child, depth + 1)) return false;
        v.arr.push_back(std::move(child));
        ws();
        if (i < s.size() && s[i] == ',') {
          i++;
          continue;
        }
        if (i < s.size() && s[i] == ']') return i++, true;
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.type = Value::Type::String;
      return string(v.str);
    }
    if (c == 't') return v.type = Value::Type::Bool, v.b = true, lit("true");
    if (c == 'f') return v.type = Value::Type::Bool, v.b = false, lit("false");
    if (c == 'n') return v.type = Value::Type::Null, lit("null");
    size_t start = i;
    if (i < s.size() && s[i] == '-') i++;
    while (i < s.size() && (isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' ||
                            s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-'))
      i++;
    if (start == i) return fail("unexpected character");
    v.type = Value::Type::Number;
    v.raw_number = std::string(s.substr(start, i - start));
    v.num = strtod(v.raw_number.c_str(), nullptr);
    return true;
  }
};

}  // namespace

const Value* Value::get(std::string_view key) const {
  for (auto& [k, v] : obj)
    if (k == key) return &v;
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
  if (type == Type::Number)
    std::from_chars(raw_number.data(), raw_number.data() + raw_number.size(), v);
  return v;
}

std::optional<Value> parse(std::string_view text, std::string* error) {
  Parser p{text};
  Value v;
  if (!p.value(v, 0)) {
    if (error) *error = p.err;
    return std::nullopt;
  }
  p.ws();
  if (p.i != text.size()) {
    if (error) *error = "trailing data at byte " + std::to_string(p.i);
    return std::nullopt;
  }
  return v;
}

}  // namespace fencefs::json
