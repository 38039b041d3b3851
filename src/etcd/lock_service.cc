#include "etcd/lock_service.h"

#include <charconv>

namespace fencefs::etcd {
namespace {

using Clock = std::chrono::steady_clock;

bool parse_u64(const std::string& s, uint64_t* v) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

EtcdLockService::EtcdLockService(Options opts, std::string prefix)
    : client_(std::move(opts)), prefix_(std::move(prefix)) {}

Status EtcdLockService::acquire(const std::string& name, int64_t ttl_s, Millis wait, Grant* g) {
  *g = Grant{};
  int64_t granted = 0;
  Status s = client_.lease_grant(ttl_s, &g->lease, &granted);
  if (!s.ok()) return s;
  // The lease must outlive a long wait: keep it alive while the lock call blocks, and stop
  // waiting if it is lost anyway.
  std::atomic<bool> lost{false};
  KeepAlive ka(*this, g->lease, granted > 0 ? granted : ttl_s,
               [&](const std::string&) { lost = true; });
  s = client_.lock(lock_name(name), g->lease, wait, &g->key, &lost);
  ka.stop();
  if (s.ok() && lost) s = {Status::kNotFound, "lease lost while waiting for the lock"};
  if (!s.ok()) {
    client_.lease_revoke(g->lease);  // withdraws a waiting key
    g->lease = 0;
  }
  return s;
}

Status EtcdLockService::bump(const std::string& name, const Grant& g,
                             const std::function<uint64_t(uint64_t)>& next, uint64_t* value) {
  const std::string ckey = counter_key(name);
  for (int attempt = 0; attempt < 16; attempt++) {
    std::optional<KeyValue> cur;
    Status s = client_.get(ckey, &cur);
    if (!s.ok()) return s;
    uint64_t v = 0;
    if (cur && !parse_u64(cur->value, &v))
      return {Status::kError, "counter " + ckey + " holds '" + cur->value + "', not a number"};
    uint64_t nv = next(v);
    std::vector<Compare> cmp;
    // The lock is still ours: its key exists under our lease.
    cmp.push_back({g.key, Compare::Target::kLease, Compare::Result::kEqual, g.lease, {}});
    // Nobody moved the counter since we read it.
    if (cur)
      cmp.push_back({ckey, Compare::Target::kMod, Compare::Result::kEqual, cur->mod_revision, {}});
    else
      cmp.push_back({ckey, Compare::Target::kVersion, Compare::Result::kEqual, 0, {}});
    TxnResult r;
    s = client_.txn(cmp, {Op::Put(ckey, std::to_string(nv))}, {Op::Range(g.key)}, &r);
    if (!s.ok()) return s;
    if (r.succeeded) {
      *value = nv;
      return s;
    }
    if (r.ranges.empty() || r.ranges[0].empty() || r.ranges[0][0].lease != g.lease)
      return {Status::kNotFound, "the lock is no longer held under lease " +
                                     std::to_string(g.lease) + " (lease expired?)"};
    // Someone else moved the counter (a resync): read it again.
  }
  return {Status::kError, "counter " + ckey + " keeps changing under a held lock"};
}

Status EtcdLockService::next_token(const std::string& name, Grant* g) {
  return bump(
      name, *g, [](uint64_t v) { return v + 1; }, &g->token);
}

Status EtcdLockService::resync(const std::string& name, uint64_t floor, Grant* g) {
  return bump(
      name, *g, [floor](uint64_t v) { return v < floor ? floor : v; }, &g->token);
}

Status EtcdLockService::release(const Grant& g) {
  if (!g.lease) return Status::Ok();
  // Revoking the lease deletes the lock key with it.
  return client_.lease_revoke(g.lease);
}

Status EtcdLockService::keepalive(int64_t lease, int64_t* ttl) {
  return client_.lease_keepalive(lease, ttl);
}

Status EtcdLockService::counter(const std::string& name, uint64_t* value) {
  std::optional<KeyValue> cur;
  Status s = client_.get(counter_key(name), &cur);
  if (!s.ok()) return s;
  *value = 0;
  if (cur && !parse_u64(cur->value, value))
    return {Status::kError, "counter holds '" + cur->value + "', not a number"};
  return s;
}

KeepAlive::KeepAlive(LockService& svc, int64_t lease, int64_t ttl_s,
                     std::function<void(std::string)> on_lost)
    : svc_(svc), lease_(lease), ttl_s_(ttl_s > 0 ? ttl_s : 1), on_lost_(std::move(on_lost)) {
  thread_ = std::thread([this] { run(); });
}

KeepAlive::~KeepAlive() { stop(); }

void KeepAlive::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KeepAlive::run() {
  const auto ttl = std::chrono::milliseconds(ttl_s_ * 1000);
  const auto period = std::max(std::chrono::milliseconds(100), ttl / 3);
  // A lease is only known alive up to `ttl` after the last keepalive was *sent*.
  auto alive_until = Clock::now() + ttl;
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, period, [this] { return stop_; });
    if (stop_) break;
    lk.unlock();
    auto sent = Clock::now();
    int64_t left = 0;
    Status s = svc_.keepalive(lease_, &left);
    std::string why;
    if (s.ok()) {
      alive_until = sent + std::chrono::seconds(left);
    } else if (s.code == Status::kNotFound) {
      why = "etcd says lease " + std::to_string(lease_) + " expired";
    } else if (Clock::now() >= alive_until) {
      why = "no keepalive of lease " + std::to_string(lease_) + " succeeded within its TTL (" +
            s.message + ")";
    }
    lk.lock();
    if (!why.empty()) {
      lost_ = true;
      lk.unlock();
      on_lost_(why);
      return;
    }
  }
}

}  // namespace fencefs::etcd
