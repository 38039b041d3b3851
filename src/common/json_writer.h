// Writing JSON (audit lines, the status page, fencectl --json): one escaper and a small streaming
// writer on top of it. nlohmann's writer cannot write a byte of a name that is not UTF-8 as
// \udcXX, so the daemon and fencectl write through this instead.
#pragma once
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fencefs::common {

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one (overlong, surrogate,
// out of range or truncated).
size_t utf8_len(std::string_view s, size_t i);

// The inside of a JSON string. Valid UTF-8 passes through; control characters and DEL are
// \u00XX; each byte of an invalid UTF-8 sequence is \udcXX (Python's "surrogateescape", so
// os.fsencode(json.loads(...)) gives the original bytes back).
std::string json_escape(std::string_view s);
// The same, appended to *out.
void json_escape_to(std::string* out, std::string_view s);

// Appends to a string; commas between members and elements are its business. Keys and string
// values go through json_escape. Misuse (a value where a key is due) is the caller's bug.
class JsonWriter {
 public:
  explicit JsonWriter(std::string* out) : out_(out) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(uint64_t v);
  JsonWriter& value(int64_t v);
  JsonWriter& value(uint32_t v) { return value(static_cast<uint64_t>(v)); }
  JsonWriter& value(int32_t v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(bool b);
  JsonWriter& value(double d);
  JsonWriter& null();
  // Text already in JSON form (a nested document, a number kept as text).
  JsonWriter& raw(std::string_view json);

  // key(k).value(v)
  template <typename T>
  JsonWriter& member(std::string_view k, const T& v) {
    return key(k).value(v);
  }

 private:
  void before_value();
  template <typename T>
  void append_number(T v) {
    char buf[24];
    out_->append(buf, static_cast<size_t>(std::to_chars(buf, buf + sizeof buf, v).ptr - buf));
  }
  std::string* out_;
  std::vector<bool> first_;  // per open container: nothing written into it yet
  bool after_key_ = false;
};

}  // namespace fencefs::common
