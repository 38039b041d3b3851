#include "etcd/gateway_json.h"

#include <openssl/evp.h>

namespace fencefs::etcd::gateway {

std::string b64(const std::string& s) {
  std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
  int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string unb64(const std::string& s) {
  if (s.empty()) return {};
  std::string out(3 * (s.size() / 4) + 3, '\0');
  int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  if (n < 0) return {};
  size_t len = static_cast<size_t>(n);
  // EVP_DecodeBlock counts the bytes of padding as zeros.
  for (size_t k = s.size(); k > 0 && s[k - 1] == '=' && len > 0; k--) len--;
  out.resize(len);
  return out;
}

int64_t i64(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number()) return it->get<int64_t>();
  if (it->is_string()) {
    try {
      return static_cast<int64_t>(std::stoull(it->get<std::string>()));
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

std::string str(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

KeyValue to_kv(const json& j) {
  KeyValue kv;
  kv.key = unb64(str(j, "key"));
  kv.value = unb64(str(j, "value"));
  kv.create_revision = i64(j, "create_revision");
  kv.mod_revision = i64(j, "mod_revision");
  kv.version = i64(j, "version");
  kv.lease = i64(j, "lease");
  return kv;
}

std::string prefix_end(std::string p) {
  while (!p.empty()) {
    if (static_cast<unsigned char>(p.back()) < 0xff) {
      p.back() = static_cast<char>(static_cast<unsigned char>(p.back()) + 1);
      return p;
    }
    p.pop_back();
  }
  return std::string(1, '\0');
}

json op_json(const Op& op) {
  switch (op.kind) {
    case Op::Kind::kPut: {
      json p = {{"key", b64(op.key)}, {"value", b64(op.value)}};
      if (op.lease) p["lease"] = std::to_string(op.lease);
      return {{"request_put", p}};
    }
    case Op::Kind::kRange:
      return {{"request_range", {{"key", b64(op.key)}}}};
    case Op::Kind::kDelete:
      return {{"request_delete_range", {{"key", b64(op.key)}}}};
  }
  return {};
}

namespace {

const char* target_name(Compare::Target t) {
  switch (t) {
    case Compare::Target::kVersion:
      return "VERSION";
    case Compare::Target::kCreate:
      return "CREATE";
    case Compare::Target::kMod:
      return "MOD";
    case Compare::Target::kValue:
      return "VALUE";
    case Compare::Target::kLease:
      return "LEASE";
  }
  return "VERSION";
}

const char* result_name(Compare::Result r) {
  switch (r) {
    case Compare::Result::kEqual:
      return "EQUAL";
    case Compare::Result::kGreater:
      return "GREATER";
    case Compare::Result::kLess:
      return "LESS";
    case Compare::Result::kNotEqual:
      return "NOT_EQUAL";
  }
  return "EQUAL";
}

}  // namespace

json compare_json(const Compare& c) {
  json j = {
      {"key", b64(c.key)}, {"target", target_name(c.target)}, {"result", result_name(c.result)}};
  switch (c.target) {
    case Compare::Target::kVersion:
      j["version"] = std::to_string(c.number);
      break;
    case Compare::Target::kCreate:
      j["create_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kMod:
      j["mod_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kValue:
      j["value"] = b64(c.value);
      break;
    case Compare::Target::kLease:
      j["lease"] = std::to_string(c.number);
      break;
  }
  return j;
}

}  // namespace fencefs::etcd::gateway
