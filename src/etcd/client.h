// A small client of etcd's v3 API, spoken through etcd's JSON gateway (libcurl + nlohmann-json).
// Every call fails over across the endpoint list: an endpoint that cannot be reached (or has no
// leader) is skipped and the next one is tried until the call's deadline.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fencefs::etcd {

using Millis = std::chrono::milliseconds;

struct Options {
  std::vector<std::string> endpoints;  // "http://host:port", "https://…" or "host:port"
  std::string cacert, cert, key;       // TLS, as etcdctl's --cacert/--cert/--key
  Millis request_timeout{5000};        // per call, across every endpoint tried
  Millis connect_timeout{1000};        // per endpoint
};

// Splits "a:1,b:2" into endpoints; "host:port" becomes http:// (https:// when TLS is asked).
std::vector<std::string> parse_endpoints(const std::string& list, bool tls);

// Why these options cannot be used as given ("" when they can): TLS files with a plain http://
// endpoint (curl would silently send everything in clear), a key without its certificate, a file
// that cannot be read, a scheme that is neither http nor https.
std::string check_options(const Options& o);

struct Status {
  enum Code {
    kOk,
    kUnreachable,  // no endpoint answered before the deadline
    kTimeout,      // an endpoint answered but the call did not complete in time (lock wait)
    kNotFound,     // the lease does not exist (expired or revoked)
    kError,        // etcd refused the call (message says why)
    kCanceled,     // ended by Client::interrupt()
  };
  Code code = kOk;
  std::string message;
  bool ok() const { return code == kOk; }
  static Status Ok() { return {}; }
};

struct KeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

// One comparison of a transaction (etcd's Compare message).
struct Compare {
  enum class Target { kVersion, kCreate, kMod, kValue, kLease };
  enum class Result { kEqual, kGreater, kLess, kNotEqual };
  std::string key;
  Target target = Target::kVersion;
  Result result = Result::kEqual;
  int64_t number = 0;  // for every target but kValue
  std::string value;   // for kValue
};

// One request of a transaction branch: put, range (a single key) or delete.
struct Op {
  enum class Kind { kPut, kRange, kDelete };
  Kind kind = Kind::kRange;
  std::string key, value;
  int64_t lease = 0;
  static Op Put(std::string k, std::string v, int64_t lease = 0) {
    return {Kind::kPut, std::move(k), std::move(v), lease};
  }
  static Op Range(std::string k) { return {Kind::kRange, std::move(k), {}, 0}; }
  static Op Delete(std::string k) { return {Kind::kDelete, std::move(k), {}, 0}; }
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;
  std::vector<std::vector<KeyValue>> ranges;  // one per kRange op of the branch taken, in order
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;
};

class Client {
 public:
  explicit Client(Options opts);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Options& options() const { return opts_; }

  Status lease_grant(int64_t ttl_s, int64_t* id, int64_t* granted_ttl = nullptr);
  // One keepalive round trip. *ttl is the renewed TTL; kNotFound when the lease is gone.
  Status lease_keepalive(int64_t id, int64_t* ttl);
  // Remaining TTL without renewing (kNotFound when gone).
  Status lease_ttl(int64_t id, int64_t* ttl);
  Status lease_revoke(int64_t id);

  // etcd's lock service: blocks until `name` is held under `lease` or `wait` passes (kTimeout;
  // the caller should revoke the lease, which withdraws the waiting key). *key is the lock's
  // ownership key, which exists exactly as long as the lock is held. When *cancel turns true the
  // wait ends with kNotFound (the lease was lost meanwhile).
  Status lock(const std::string& name, int64_t lease, Millis wait, std::string* key,
              const std::atomic<bool>* cancel = nullptr);
  Status unlock(const std::string& key);

  // A single key; *kv is empty when absent. *revision is the store's revision.
  Status get(const std::string& key, std::optional<KeyValue>* kv, int64_t* revision = nullptr);
  // Every key under prefix, in key order.
  Status get_prefix(const std::string& prefix, std::vector<KeyValue>* kvs,
                    int64_t* revision = nullptr);
  Status put(const std::string& key, const std::string& value, int64_t lease = 0);
  Status del(const std::string& key);
  Status txn(const std::vector<Compare>& compare, const std::vector<Op>& success,
             const std::vector<Op>& failure, TxnResult* out);

  // Streams events of key (or of every key under it with prefix) from start_revision (0: now) to
  // fn until fn returns false or `limit` passes (then Ok with no more events).
  Status watch(const std::string& key, bool prefix, int64_t start_revision, Millis limit,
               const std::function<bool(const WatchEvent&)>& fn);

  // Ends the call in progress at once, from any thread, and every later call of this client,
  // with kCanceled: a daemon leaving must not wait for a watch's long poll to run out.
  void interrupt();

  // The member id of the leader as seen by the first endpoint that answers, and that endpoint.
  Status status(std::string* endpoint, uint64_t* member_id, uint64_t* leader);

 private:
  struct Impl;
  Options opts_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fencefs::etcd
