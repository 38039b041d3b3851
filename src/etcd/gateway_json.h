// etcd's JSON gateway encoding (v3 API over HTTP): keys and values travel base64, 64-bit
// integers as strings. Internal to the etcd client.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "etcd/client.h"

namespace fencefs::etcd::gateway {

using json = nlohmann::json;

std::string b64(const std::string& s);
// "" for input that is not base64.
std::string unb64(const std::string& s);
// The gateway writes 64-bit integers as strings; numbers are accepted too. 0 when absent.
int64_t i64(const json& j, const char* name);
std::string str(const json& j, const char* name);
KeyValue to_kv(const json& j);
// The end of a key range covering every key with this prefix (etcd's clientv3.GetPrefixRangeEnd).
std::string prefix_end(std::string p);
json op_json(const Op& op);
json compare_json(const Compare& c);

}  // namespace fencefs::etcd::gateway
