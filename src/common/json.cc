#include "common/json.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/parse.h"

namespace fencefs::json {
namespace {

using Json = nlohmann::ordered_json;

Value convert(const Json& j) {
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
      break;
    case Json::value_t::array:
      v.type = Value::Type::Array;
      v.arr.reserve(j.size());
      for (const auto& e : j) v.arr.push_back(convert(e));
      break;
    case Json::value_t::object:
      v.type = Value::Type::Object;
      v.obj.reserve(j.size());
      for (const auto& [k, e] : j.items()) v.obj.push_back(Member{k, convert(e)});
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
    return convert(Json::parse(text));
  } catch (const Json::exception& e) {
    if (error != nullptr) *error = e.what();
    return std::nullopt;
  }
}

}  // namespace fencefs::json
