#include "etcd/client.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "etcd/gateway_json.h"

namespace fencefs::etcd {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace gateway;  // the encoding this client speaks

// Streamed responses (watch, keepalive) arrive as one JSON message per line.
struct Transfer {
  std::string body;
  std::function<bool(const json&)> on_message;  // set for streams; false stops the transfer
  bool stopped = false;
  std::string parse_error;
};

size_t on_data(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  t->body.append(p, size * n);
  if (!t->on_message) return size * n;
  size_t nl;
  while ((nl = t->body.find('\n')) != std::string::npos) {
    std::string line = t->body.substr(0, nl);
    t->body.erase(0, nl + 1);
    if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
    json msg = json::parse(line, nullptr, false);
    if (msg.is_discarded()) {
      t->parse_error = "malformed message from etcd: " + line.substr(0, 200);
      t->stopped = true;
      return 0;
    }
    if (!t->on_message(msg)) {
      t->stopped = true;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR), which is how a stream is left
    }
  }
  return size * n;
}

Status canceled() { return {Status::kCanceled, "canceled: the client is shutting down"}; }

bool retryable_message(const std::string& m) {
  return m.find("no leader") != std::string::npos ||
         m.find("leader changed") != std::string::npos ||
         m.find("timed out") != std::string::npos || m.find("not capable") != std::string::npos ||
         m.find("unhealthy") != std::string::npos;
}

}  // namespace

std::vector<std::string> parse_endpoints(const std::string& list, bool tls) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string e =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!e.empty() && e.back() == '/') e.pop_back();
    if (!e.empty()) {
      if (e.find("://") == std::string::npos) e = (tls ? "https://" : "http://") + e;
      out.push_back(e);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string check_options(const Options& o) {
  if (!o.key.empty() && o.cert.empty())
    return "an etcd client key needs its certificate too (etcdctl's --cert)";
  for (const auto& [what, file] : {std::pair{"CA certificate", &o.cacert},
                                   {"client certificate", &o.cert},
                                   {"client key", &o.key}})
    if (!file->empty() && access(file->c_str(), R_OK) != 0)
      return fmt::format("etcd {} {}: {}", what, *file,
                         std::error_code(errno, std::generic_category()).message());
  const bool tls = !o.cacert.empty() || !o.cert.empty();
  // Schemes are case-insensitive (curl's too).
  auto is = [](const std::string& e, const char* scheme) {
    return strncasecmp(e.c_str(), scheme, strlen(scheme)) == 0;
  };
  for (const auto& e : o.endpoints) {
    if (tls && is(e, "http://"))
      return fmt::format("etcd endpoint {} is plain HTTP, but TLS files were given: use https://",
                         e);
    if (!is(e, "http://") && !is(e, "https://"))
      return fmt::format("etcd endpoint {}: only http:// and https:// are spoken", e);
  }
  return "";
}

struct Client::Impl {
  std::mutex mu;
  size_t preferred = 0;          // the endpoint that answered last
  std::condition_variable wake;  // the pause between rounds of endpoints, ended by interrupt()
  std::set<CURLM*> active;       // transfers in progress, for interrupt() to wake (under mu)
  bool interrupted = false;      // under mu

  void interrupt() {
    std::lock_guard lk(mu);
    interrupted = true;
    for (CURLM* m : active) curl_multi_wakeup(m);
    wake.notify_all();
  }

  // False when interrupted.
  bool pause(Millis d) {
    std::unique_lock lk(mu);
    return !wake.wait_for(lk, d, [this] { return interrupted; });
  }

  // curl_easy_perform, but through a multi handle that interrupt() wakes at once; *cancel is
  // looked at least every 200 ms (easy_perform looks at it once a second at best).
  CURLcode perform(CURL* c, const std::atomic<bool>* cancel, bool* stopped) {
    CURLM* m = curl_multi_init();
    if (!m) return CURLE_OUT_OF_MEMORY;
    if (curl_multi_add_handle(m, c) != CURLM_OK) {
      curl_multi_cleanup(m);
      return CURLE_FAILED_INIT;
    }
    {
      std::lock_guard lk(mu);
      active.insert(m);
    }
    CURLcode rc = CURLE_ABORTED_BY_CALLBACK;
    for (;;) {
      {
        std::lock_guard lk(mu);
        if (interrupted) break;
      }
      if (cancel && cancel->load()) break;
      int running = 0;
      if (curl_multi_perform(m, &running) != CURLM_OK) {
        rc = CURLE_FAILED_INIT;
        break;
      }
      if (running == 0) {
        int left = 0;
        while (CURLMsg* msg = curl_multi_info_read(m, &left))
          if (msg->msg == CURLMSG_DONE) rc = msg->data.result;
        break;
      }
      if (curl_multi_poll(m, nullptr, 0, 200, nullptr) != CURLM_OK) {
        rc = CURLE_RECV_ERROR;  // never spin on a poll that keeps failing
        break;
      }
    }
    {
      std::lock_guard lk(mu);
      active.erase(m);
      *stopped = interrupted;
    }
    curl_multi_remove_handle(m, c);
    curl_multi_cleanup(m);
    return rc;
  }

  // POSTs body to path on the endpoints in turn until one answers or `limit` passes.
  // With on_message the response is a stream; `timeout_is_wait` says a deadline reached while
  // connected is the call's own timeout (kTimeout), not an unreachable cluster.
  // long: one loop over the endpoints; the handle, the request, the stream callback and the
  // mapping of errors share its state.
  Status call(const Options& o, const std::string& path, const json& body, Millis limit, json* out,
              const std::function<bool(const json&)>& on_message = {}, bool timeout_is_wait = false,
              const std::atomic<bool>* cancel = nullptr) {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    if (o.endpoints.empty()) return {Status::kUnreachable, "no etcd endpoint given"};
    auto deadline = Clock::now() + limit;
    std::string payload = body.dump();
    size_t n = o.endpoints.size();
    size_t start;
    {
      std::lock_guard lk(mu);
      start = preferred;
    }
    std::string last_error = "no endpoint tried";
    for (int round = 0;; round++) {
      for (size_t k = 0; k < n; k++) {
        size_t idx = (start + k) % n;
        auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
        if (left.count() <= 0) break;
        const std::string& ep = o.endpoints[idx];
        Transfer t;
        t.on_message = on_message;
        CURL* c = curl_easy_init();
        if (!c) return {Status::kError, "curl_easy_init failed"};
        std::string url = ep + path;
        curl_slist* hdr = curl_slist_append(nullptr, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_URL, url.c_str());
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload.c_str());
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        char detail[CURL_ERROR_SIZE] = "";  // says which TLS check failed, where strerror cannot
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, detail);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                         static_cast<long>(std::min(o.connect_timeout, left).count()));
        // A hung endpoint (a member without a leader, a stopped process) must not use up the
        // whole call: give each endpoint left in this round a share, except for waits and
        // watches, whose time is the call's own.
        Millis attempt = left;
        if (!timeout_is_wait && path != "/v3/watch")
          attempt = std::min(left, std::max(Millis(1000), left / static_cast<int64_t>(n - k)));
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(attempt.count()));
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
        if (!o.cacert.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, o.cacert.c_str());
        if (!o.cert.empty()) curl_easy_setopt(c, CURLOPT_SSLCERT, o.cert.c_str());
        if (!o.key.empty()) curl_easy_setopt(c, CURLOPT_SSLKEY, o.key.c_str());
        bool stopped = false;
        CURLcode rc = perform(c, cancel, &stopped);
        if (stopped || (cancel && cancel->load())) {
          curl_slist_free_all(hdr);
          curl_easy_cleanup(c);
          if (stopped) return canceled();
          return {Status::kNotFound, "canceled: the lease was lost"};
        }
        long http = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
        long connected_port = 0;
        curl_easy_getinfo(c, CURLINFO_PRIMARY_PORT, &connected_port);
        curl_slist_free_all(hdr);
        curl_easy_cleanup(c);
        if (t.stopped && t.parse_error.empty()) {
          std::lock_guard lk(mu);
          preferred = idx;
          return Status::Ok();
        }
        if (!t.parse_error.empty()) return {Status::kError, t.parse_error};
        if (rc == CURLE_OPERATION_TIMEDOUT && on_message && http == 200) {
          std::lock_guard lk(mu);
          preferred = idx;
          return Status::Ok();  // a stream that ran its full time
        }
        if (rc == CURLE_OPERATION_TIMEDOUT && timeout_is_wait && connected_port != 0)
          return {Status::kTimeout, "timed out at " + ep};
        if (rc != CURLE_OK) {
          last_error = ep + ": " + (detail[0] ? detail : curl_easy_strerror(rc));
          // A server wanting a client certificate breaks the handshake or the first reply; a
          // name that does not resolve or a server certificate that fails is another matter.
          bool broke = rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_RECV_ERROR ||
                       rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING;
          if (ep.rfind("https://", 0) == 0 && o.cert.empty() && broke)
            last_error += " (no client certificate was given: etcd may require one)";
          continue;  // not reached or the connection broke: the next endpoint
        }
        json reply = json::parse(t.body, nullptr, false);
        if (reply.is_discarded() && !on_message)
          return {Status::kError, ep + ": malformed reply: " + t.body.substr(0, 200)};
        if (http != 200) {
          std::string msg = reply.is_object() ? str(reply, "message") : t.body;
          if (msg.empty() && reply.is_object()) msg = str(reply, "error");
          if (msg.find("lease not found") != std::string::npos) return {Status::kNotFound, msg};
          if (retryable_message(msg) || http == 503) {
            last_error = ep + ": " + msg;
            continue;
          }
          return {Status::kError, ep + ": " + (msg.empty() ? "HTTP " + std::to_string(http) : msg)};
        }
        {
          std::lock_guard lk(mu);
          preferred = idx;
        }
        if (out) *out = std::move(reply);
        return Status::Ok();
      }
      if (Clock::now() >= deadline) break;
      if (!pause(std::min<Millis>(Millis(100 * (round + 1)), Millis(500)))) return canceled();
    }
    return {Status::kUnreachable, "etcd unreachable: " + last_error};
  }
};

Client::Client(Options opts) : opts_(std::move(opts)), impl_(std::make_unique<Impl>()) {}
Client::~Client() = default;

void Client::interrupt() { impl_->interrupt(); }

Status Client::lease_grant(int64_t ttl_s, int64_t* id, int64_t* granted_ttl) {
  json r;
  Status s = impl_->call(opts_, "/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}},
                         opts_.request_timeout, &r);
  if (!s.ok()) return s;
  if (!str(r, "error").empty()) return {Status::kError, str(r, "error")};
  *id = i64(r, "ID");
  if (granted_ttl) *granted_ttl = i64(r, "TTL");
  if (!*id) return {Status::kError, "lease grant returned no ID"};
  return s;
}

Status Client::lease_keepalive(int64_t id, int64_t* ttl) {
  json got;
  bool have = false;
  Status s = impl_->call(opts_, "/v3/lease/keepalive", {{"ID", std::to_string(id)}},
                         opts_.request_timeout, nullptr, [&](const json& m) {
                           got = m.contains("result") ? m["result"] : m;
                           have = true;
                           return false;
                         });
  if (!s.ok()) return s;
  if (!have) return {Status::kUnreachable, "keepalive: no answer"};
  if (got.contains("error")) return {Status::kError, got.dump()};
  *ttl = i64(got, "TTL");
  if (*ttl <= 0) return {Status::kNotFound, "lease " + std::to_string(id) + " expired"};
  return s;
}

Status Client::lease_ttl(int64_t id, int64_t* ttl) {
  json r;
  Status s = impl_->call(opts_, "/v3/kv/lease/timetolive", {{"ID", std::to_string(id)}},
                         opts_.request_timeout, &r);
  if (!s.ok()) return s;
  *ttl = i64(r, "TTL");
  if (*ttl <= 0) return {Status::kNotFound, "lease " + std::to_string(id) + " expired"};
  return s;
}

Status Client::lease_revoke(int64_t id) {
  return impl_->call(opts_, "/v3/kv/lease/revoke", {{"ID", std::to_string(id)}},
                     opts_.request_timeout, nullptr);
}

Status Client::lock(const std::string& name, int64_t lease, Millis wait, std::string* key,
                    const std::atomic<bool>* cancel) {
  json r;
  Status s =
      impl_->call(opts_, "/v3/lock/lock", {{"name", b64(name)}, {"lease", std::to_string(lease)}},
                  wait, &r, {}, true, cancel);
  if (!s.ok()) return s;
  *key = unb64(str(r, "key"));
  if (key->empty()) return {Status::kError, "lock returned no key"};
  return s;
}

Status Client::unlock(const std::string& key) {
  return impl_->call(opts_, "/v3/lock/unlock", {{"key", b64(key)}}, opts_.request_timeout, nullptr);
}

Status Client::get(const std::string& key, std::optional<KeyValue>* kv, int64_t* revision) {
  json r;
  Status s = impl_->call(opts_, "/v3/kv/range", {{"key", b64(key)}}, opts_.request_timeout, &r);
  if (!s.ok()) return s;
  kv->reset();
  if (r.contains("kvs") && r["kvs"].is_array() && !r["kvs"].empty()) *kv = to_kv(r["kvs"][0]);
  if (revision) *revision = r.contains("header") ? i64(r["header"], "revision") : 0;
  return s;
}

Status Client::get_prefix(const std::string& prefix, std::vector<KeyValue>* kvs,
                          int64_t* revision) {
  json r;
  Status s = impl_->call(opts_, "/v3/kv/range",
                         {{"key", b64(prefix)}, {"range_end", b64(prefix_end(prefix))}},
                         opts_.request_timeout, &r);
  if (!s.ok()) return s;
  kvs->clear();
  if (r.contains("kvs") && r["kvs"].is_array())
    for (const auto& j : r["kvs"]) kvs->push_back(to_kv(j));
  if (revision) *revision = r.contains("header") ? i64(r["header"], "revision") : 0;
  return s;
}

Status Client::put(const std::string& key, const std::string& value, int64_t lease) {
  json b = {{"key", b64(key)}, {"value", b64(value)}};
  if (lease) b["lease"] = std::to_string(lease);
  return impl_->call(opts_, "/v3/kv/put", b, opts_.request_timeout, nullptr);
}

Status Client::del(const std::string& key) {
  return impl_->call(opts_, "/v3/kv/deleterange", {{"key", b64(key)}}, opts_.request_timeout,
                     nullptr);
}

Status Client::txn(const std::vector<Compare>& compare, const std::vector<Op>& success,
                   const std::vector<Op>& failure, TxnResult* out) {
  json b = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const auto& c : compare) b["compare"].push_back(compare_json(c));
  for (const auto& o : success) b["success"].push_back(op_json(o));
  for (const auto& o : failure) b["failure"].push_back(op_json(o));
  json r;
  Status s = impl_->call(opts_, "/v3/kv/txn", b, opts_.request_timeout, &r);
  if (!s.ok()) return s;
  *out = TxnResult{};
  out->succeeded = r.value("succeeded", false);
  out->revision = r.contains("header") ? i64(r["header"], "revision") : 0;
  if (r.contains("responses") && r["responses"].is_array()) {
    for (const auto& resp : r["responses"]) {
      if (!resp.contains("response_range")) continue;
      std::vector<KeyValue> kvs;
      const json& rr = resp["response_range"];
      if (rr.contains("kvs") && rr["kvs"].is_array())
        for (const auto& j : rr["kvs"]) kvs.push_back(to_kv(j));
      out->ranges.push_back(std::move(kvs));
    }
  }
  return s;
}

Status Client::watch(const std::string& key, bool prefix, int64_t start_revision, Millis limit,
                     const std::function<bool(const WatchEvent&)>& fn) {
  json create = {{"key", b64(key)}};
  if (prefix) create["range_end"] = b64(prefix_end(key));
  if (start_revision) create["start_revision"] = std::to_string(start_revision);
  std::string err;
  Status s = impl_->call(
      opts_, "/v3/watch", {{"create_request", create}}, limit, nullptr, [&](const json& m) {
        const json& res = m.contains("result") ? m["result"] : m;
        if (m.contains("error")) {
          err = m["error"].dump();
          return false;
        }
        if (res.value("canceled", false)) {
          err = "watch canceled: " + str(res, "cancel_reason");
          return false;
        }
        if (!res.contains("events")) return true;
        for (const auto& e : res["events"]) {
          WatchEvent ev;
          ev.type = str(e, "type") == "DELETE" ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut;
          if (e.contains("kv")) ev.kv = to_kv(e["kv"]);
          if (!fn(ev)) return false;
        }
        return true;
      });
  if (s.ok() && !err.empty()) return {Status::kError, err};
  return s;
}

Status Client::status(std::string* endpoint, uint64_t* member_id, uint64_t* leader) {
  for (const auto& ep : opts_.endpoints) {
    Options one = opts_;
    one.endpoints = {ep};
    one.request_timeout = std::min(opts_.request_timeout, Millis(1000));
    json r;
    Impl impl;
    Status s = impl.call(one, "/v3/maintenance/status", json::object(), one.request_timeout, &r);
    if (!s.ok()) continue;
    *endpoint = ep;
    *member_id = r.contains("header") ? static_cast<uint64_t>(i64(r["header"], "member_id")) : 0;
    *leader = static_cast<uint64_t>(i64(r, "leader"));
    return s;
  }
  return {Status::kUnreachable, "no endpoint answered"};
}

}  // namespace fencefs::etcd
