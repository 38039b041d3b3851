// Reading JSON (the status page, audit lines): nlohmann-json parses; Value is the small read-only
// tree fencectl walks to filter and print. A lone \udc80..\udcff escape (how the audit log writes
// a byte of a name that is not UTF-8) reads back as that byte.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencefs::json {

struct Member;

struct Value {
  enum class Type { Null, Bool, Number, String, Array, Object } type = Type::Null;
  bool b = false;
  double num = 0;
  std::string raw_number;  // exact digits, for integers beyond double precision
  std::string str;
  std::vector<Value> arr;
  std::vector<Member> obj;  // in document order

  const Value* get(std::string_view key) const;
  std::string as_string() const;  // strings as-is, numbers as written, others as JSON-ish text
  uint64_t as_u64() const;        // a non-negative integer, else 0
};

struct Member {
  std::string first;
  Value second;
};

// nullopt on malformed input (with *error saying where).
std::optional<Value> parse(std::string_view text, std::string* error = nullptr);

}  // namespace fencefs::json
