#include "cluster/cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cluster/clock.h"
#include "common/anchored.h"
#include "common/error.h"
#include "common/log.h"

extern char** environ;

namespace fencefs::cluster {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using fence::Domain;
using fence::Epoch;
using Millis = std::chrono::milliseconds;

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 200) return false;
  for (char c : s)
    if (!isalnum(static_cast<unsigned char>(c)) && !strchr("._:-", c)) return false;
  return true;
}

}  // namespace

std::string validate(Options* o) {
  if (!valid_name(o->name)) return "cluster= must be 1-200 characters of [A-Za-z0-9._:-]";
  if (!valid_name(o->member)) return "member= must be 1-200 characters of [A-Za-z0-9._:-]";
  if (o->etcd.endpoints.empty()) return "cluster mode needs etcd=ENDPOINTS";
  if (o->lease_ttl < Millis(2000)) return "lease_ttl must be at least 2 seconds";
  if (o->isolation.count() == 0) o->isolation = o->lease_ttl / 2;
  if (o->isolation >= o->lease_ttl)
    return "isolation must be shorter than lease_ttl (a member must stop before its lease ends)";
  if (o->ack_timeout < Millis(100)) return "ack_timeout must be at least 0.1 s";
  return "";
}

Cluster::Cluster(Options opts, fence::Fence& fence, int backing_fd)
    : o_(std::move(opts)),
      fence_(fence),
      backing_fd_(backing_fd),
      prefix_("/fencefs/clusters/" + o_.name + "/") {
  etcd::Options ops = o_.etcd;
  ops.request_timeout = std::min<Millis>(ops.request_timeout, Millis(3000));
  ops_ = std::make_unique<etcd::Client>(ops);
  // A keepalive that hangs must not outlive the isolation bound it is meant to extend.
  etcd::Options ka = o_.etcd;
  ka.request_timeout = std::max<Millis>(o_.isolation / 4, Millis(200));
  ka.connect_timeout = std::min(ka.connect_timeout, ka.request_timeout);
  ka_ = std::make_unique<etcd::Client>(ka);
  watch_ = std::make_unique<etcd::Client>(ops);
}

Cluster::~Cluster() { stop_threads(); }

void Cluster::stop_threads() {
  stop_ = true;
  stop_cv_.notify_all();
  // The watch is a long poll: without this the exit waits for it to run out; calls they make
  // from here on are canceled.
  watch_->interrupt();
  ka_->interrupt();
  if (keepalive_.joinable()) keepalive_.join();
  if (watcher_.joinable()) watcher_.join();
}

std::string Cluster::encode(Value v) {
  return v.pending ? fmt::format("{} pending", v.epoch) : std::to_string(v.epoch);
}

bool Cluster::decode(const std::string& s, Value* v) {
  std::string_view t(s);
  v->pending = false;
  constexpr std::string_view kPending = " pending";
  if (t.size() > kPending.size() && t.substr(t.size() - kPending.size()) == kPending) {
    v->pending = true;
    t.remove_suffix(kPending.size());
  }
  auto r = std::from_chars(t.data(), t.data() + t.size(), v->epoch);
  // Above any token: a record no member writes, which would otherwise fence every holder out for
  // good (and overflow the next acquisition); malformed, so never followed.
  return r.ec == std::errc() && r.ptr == t.data() + t.size() && v->epoch <= fence::kMaxToken;
}

void Cluster::audit(const char* op, const char* decision, const char* reason,
                    const std::string& domain, Epoch before, Epoch after,
                    const std::string& message) {
  audit::Event e;
  e.op = op;
  e.decision = decision;
  e.reason = reason;
  e.domain = domain;
  e.epoch_before = before;
  e.epoch_after = after;
  e.message = message;
  fence_.audit(std::move(e), fence::Caller{getpid(), getuid(), getgid()});
}

int Cluster::register_member(etcd::Client& c, std::string* why) {
  int64_t lease = lease_.load();
  if (!lease) {
    int64_t ttl = 0;
    etcd::Status s = c.lease_grant(std::max<int64_t>(1, o_.lease_ttl.count() / 1000), &lease, &ttl);
    if (!s.ok()) {
      *why = fmt::format("cluster {}: cannot get a lease from etcd: {}", o_.name, s.message);
      return EIO;
    }
    lease_ = lease;
  }
  json info = {{"host", o_.host},
               {"mountpoint", o_.mountpoint},
               {"backing", o_.backing},
               {"pid", getpid()},
               {"lease", std::to_string(lease)}};
  // Membership is durable: only a clean leave or a successful fence hook ends it, since a
  // lapsed lease is no proof that the member stopped. The lease only says it is alive.
  etcd::TxnResult r;
  etcd::Status s = c.txn({},
                         {etcd::Op::Put(prefix_ + "members/" + o_.member, info.dump()),
                          etcd::Op::Put(prefix_ + "alive/" + o_.member, info.dump(), lease)},
                         {}, &r);
  if (s.ok() || s.message.find("lease not found") == std::string::npos) {
    if (!s.ok()) {
      *why = fmt::format("cluster {}: cannot register: {}", o_.name, s.message);
      return EIO;
    }
    return 0;
  }
  lease_ = 0;  // expired between grant and put
  *why = fmt::format("cluster {}: lease expired while registering", o_.name);
  return EIO;
}

Domain* Cluster::declare_local(const std::string& path) {
  if (Domain* d = fence_.domains().by_path(path)) return d;
  if (path.size() < 2 || path[0] != '/' || path.find("/.") != std::string::npos) {
    log::error("cluster {}: ignoring domain with a malformed path '{}'", o_.name, path);
    return nullptr;
  }
  std::vector<fence::PlaceStep> place;
  int fd = fence::resolve_place(backing_fd_, path, &place);
  int err = fd < 0 ? -fd : 0;
  if (fd >= 0) ::close(fd);
  std::string why;
  if (err) {
    why = fmt::format("domain {} declared by the cluster has no directory here: {}", path,
                      common::errstr(err));
  } else {
    // As a local `domain add`: nothing admitted meanwhile in the domain it is carved out of.
    Domain* owner = nullptr;
    auto lk = fence_.quiesce_owner(place, &owner);
    if (fence_.add_domain(path, std::move(place), &why, false) == 0) {
      lk.unlock();
      audit("cluster_domain", "declared", "", path, 0, 0, "declared by another member: " + why);
      return fence_.domains().by_path(path);
    }
  }
  log::error("cluster {}: {}", o_.name, why);
  audit("cluster_domain", "refused", "io", path, 0, 0, why);
  return fence_.domains().by_path(path);
}

void Cluster::ack(etcd::Client& c, Domain& d) {
  Epoch e = d.epoch.load();
  auto it = acked_.find(d.path);
  if (it != acked_.end() && it->second == e) return;
  etcd::Status s = c.put(ack_prefix(d.path) + o_.member, std::to_string(e));
  if (s.ok())
    acked_[d.path] = e;
  else
    log::warn("cluster {}: cannot acknowledge epoch {} of {}: {}", o_.name, e, d.path, s.message);
}

// An acknowledgement that could not be put (etcd failing over) is owed until it is.
void Cluster::retry_acks() {
  std::unique_lock lk(follow_mu_, std::try_to_lock);
  if (!lk.owns_lock()) return;  // an acknowledgement is being made: retried next tick
  for (Domain* d : fence_.domains().all()) {
    auto it = acked_.find(d->path);
    if (it == acked_.end() || it->second != d->epoch.load()) ack(*ops_, *d);
  }
}

void Cluster::clear_uncommitted(Domain& d, Epoch committed) {
  Epoch u = d.uncommitted.load();
  while (u && u <= committed && !d.uncommitted.compare_exchange_weak(u, 0)) {
  }
  std::lock_guard lk(commit_mu_);
  commit_cv_.notify_all();
}

void Cluster::apply(etcd::Client& c, const std::string& path, Value v, bool resync) {
  Domain* d = declare_local(path);
  if (!d) return;
  std::lock_guard lk(follow_mu_);
  // Pending at our epoch on a full read: our acknowledgement may be gone (etcd restored), or
  // never have been put. Put again.
  if (resync && v.pending && v.epoch == d->epoch.load()) acked_.erase(path);
  // A pending record older than a commit already seen (a lagging watch) was committed since.
  fence::Epoch& committed = committed_[path];
  if (resync) committed = 0;
  if (v.pending && v.epoch <= committed) v.pending = false;
  if (!v.pending) committed = std::max(committed, v.epoch);
  Epoch local = d->epoch.load();
  if (v.epoch < local && resync) {
    // The read may predate an advance this member applied meanwhile (inline, or on another
    // thread): only a value read after the local view was raised, and still below it, is etcd
    // going back. (The local view only ever rises after etcd held that epoch.)
    std::optional<etcd::KeyValue> kv;
    Value fresh;
    if (!c.get(epoch_key(path), &kv).ok() ||
        (kv && decode(kv->value, &fresh) && fresh.epoch >= local)) {
      ack(c, *d);
      return;
    }
  }
  if (v.epoch < local) {
    // Watch events can be older than what a resync already applied.
    if (resync && rolled_back_[path] < local) {
      rolled_back_[path] = local;
      std::string msg = fmt::format(
          "rollback detected: etcd says domain {} is at epoch {} but this member acknowledged "
          "{} (etcd restored from an older snapshot?); advances to {} or below are refused "
          "with EIO until one above it heals the domain",
          path, v.epoch, local, local);
      log::error("cluster {}: {}", o_.name, msg);
      audit("cluster_resync", "detected", "rollback", path, local, v.epoch, msg);
    }
    ack(c, *d);
    return;
  }
  if (auto it = rolled_back_.find(path); it != rolled_back_.end() && v.epoch > it->second) {
    audit("cluster_resync", "info", "", path, it->second, v.epoch,
          fmt::format("domain {} healed: etcd's epoch {} is above the rolled-back {}", path,
                      v.epoch, it->second));
    rolled_back_.erase(it);
  }
  if (v.epoch > local || (v.pending && v.epoch == local)) {
    std::string why;
    // (a) d's lock exclusively, (b) the data written under the old epoch durable on the
    // backing, (c) the new epoch in this member's journal: then acknowledge.
    int fd = backing_fd_;
    int err = fence_.follow(
        *d, v.epoch, v.pending, [fd] { return syncfs(fd) == 0 ? 0 : errno; }, &why);
    if (err) {
      log::error("cluster {}: {}", o_.name, why);
      return;  // no acknowledgement: the advancer's hook decides
    }
  }
  if (!v.pending) clear_uncommitted(*d, v.epoch);
  ack(c, *d);
}

int Cluster::resync(etcd::Client& c, int64_t* revision, std::string* why) {
  if (int err = check_identity(c, false, why)) return err;
  std::vector<etcd::KeyValue> kvs;
  etcd::Status s = c.get_prefix(prefix_ + "epoch/", &kvs, revision);
  if (!s.ok()) {
    *why = fmt::format("cluster {}: cannot read the epochs: {}", o_.name, s.message);
    return EIO;
  }
  raise_to(max_revision_, *revision);
  std::set<std::string> seen;
  for (auto& kv : kvs) {
    std::string path = kv.key.substr(prefix_.size() + 5);
    Value v;
    if (!decode(kv.value, &v)) {
      log::error("cluster {}: malformed epoch record {}='{}'", o_.name, kv.key, kv.value);
      continue;
    }
    seen.insert(path);
    apply(c, path, v, true);
  }
  // Domains this member knows and etcd does not (a new cluster, a domain declared here while
  // etcd was away, or a restored etcd): declared at this member's epoch (epochs only rise), as
  // committed only where that is known: every member acknowledged it. Else pending, so that no
  // member admits it before every member has followed it.
  for (Domain* d : fence_.domains().all()) {
    if (seen.count(d->path)) continue;
    Epoch e = d->epoch.load();
    bool proven = e == 0 || founded_;
    {
      std::lock_guard lk(follow_mu_);
      auto it = committed_.find(d->path);
      proven = proven || (d->uncommitted.load() == 0 && it != committed_.end() && it->second >= e);
    }
    std::string msg;
    bool created = false;
    if (int err = create_record(d->path, {e, !proven}, &created, &msg)) {
      *why = msg;
      return err;
    }
    if (!proven && created) {
      msg = fmt::format(
          "domain {} is at epoch {} here but etcd has no record of it (etcd wiped or restored "
          "from an older snapshot?), and this member does not know every member acknowledged "
          "it: published as pending; tokens at {} or above wait until `fencectl advance {} {}` "
          "has every member's acknowledgement (or its fence hook succeeds)",
          d->path, e, e, d->path, e);
      log::error("cluster {}: {}", o_.name, msg);
      audit("cluster_resync", "detected", "rollback", d->path, e, 0, msg);
      {
        std::lock_guard lk(follow_mu_);
        acked_.erase(d->path);  // a new record: no acknowledgement of it is in etcd
      }
      apply(c, d->path, Value{e, true}, false);
      continue;
    }
    std::lock_guard lk(follow_mu_);
    ack(c, *d);
  }
  return 0;
}

int Cluster::join(std::string* why) {
  if (int err = check_identity(*ops_, true, why)) return err;
  // A registration of this member's previous life (killed, its host lost) is not ours to end:
  // what that life wrote may not be durable yet, and only an acknowledgement (a syncfs) or the
  // fence hook may let an advance pass it.
  std::optional<etcd::KeyValue> prior;
  if (etcd::Status s = ops_->get(prefix_ + "members/" + o_.member, &prior); !s.ok()) {
    *why = fmt::format("cluster {}: etcd: {}", o_.name, s.message);
    return EIO;
  }
  if (int err = register_member(*ops_, why)) return err;
  int64_t t0 = mono_ns();
  int64_t rev = 0;
  int err = resync(*ops_, &rev, why);
  founded_ = false;  // a proof for this first read only: later ones may follow other members
  if (err) {
    // Registered but not joined: a member key we made would stall every advance.
    if (!prior) {
      leave();
    } else {  // as it was: a hook acts on the registration's pid, which is not ours
      etcd::TxnResult r;
      (void)ops_->txn({},
                      {etcd::Op::Put(prefix_ + "members/" + o_.member, prior->value),
                       etcd::Op::Delete(prefix_ + "alive/" + o_.member)},
                      {}, &r);
      if (int64_t l = lease_.exchange(0)) ops_->lease_revoke(l);
    }
    return err;
  }
  watch_from_ = rev + 1;
  admit_until_ns_ = t0 + ns(o_.isolation);
  isolated_ = false;
  audit("cluster_join", "info", "", "", 0, 0,
        fmt::format("member {} ({}:{}) joined cluster {}", o_.member, o_.host, o_.mountpoint,
                    o_.name));
  return 0;
}

void Cluster::start() {
  // After daemonising the pid changed: the registration names the daemon a hook may stop.
  std::string why;
  if (register_member(*ops_, &why) != 0) log::warn("{}", why);
  keepalive_ = std::thread([this] { keepalive_loop(); });
  watcher_ = std::thread([this] { watch_loop(); });
}

void Cluster::leave() {
  admit_until_ns_ = 0;
  stop_threads();
  // Acknowledgements first, in transactions below etcd's 128-operation limit; membership last.
  etcd::Status s;
  std::vector<etcd::Op> ops;
  etcd::TxnResult r;
  for (Domain* d : fence_.domains().all()) {
    ops.push_back(etcd::Op::Delete(ack_prefix(d->path) + o_.member));
    if (ops.size() == 100) {
      if (s.ok()) s = ops_->txn({}, ops, {}, &r);
      ops.clear();
    }
  }
  ops.push_back(etcd::Op::Delete(prefix_ + "members/" + o_.member));
  ops.push_back(etcd::Op::Delete(prefix_ + "alive/" + o_.member));
  if (s.ok()) s = ops_->txn({}, ops, {}, &r);
  if (int64_t l = lease_.exchange(0)) ops_->lease_revoke(l);
  if (!s.ok())
    log::warn("cluster {}: could not deregister (advances will fence this member): {}", o_.name,
              s.message);
  else
    log::info("cluster {}: member {} left", o_.name, o_.member);
}

// Once per keepalive, one read: is this member still registered (a fence hook of another member
// removes it), and did etcd's revision go back (restored from a snapshot)? The watch covers the
// epochs only, so that an advance is not delivered to every member once per acknowledgement.
std::string Cluster::status_json() {
  json out;
  out["name"] = o_.name;
  out["member"] = o_.member;
  out["etcd"] = o_.etcd.endpoints;
  std::string why;
  bool admitting = admissible(&why) == 0;
  out["standing"] = admitting ? "admitting" : "isolated";
  if (!admitting) out["isolated_why"] = why;
  out["ack_timeout_ms"] = o_.ack_timeout.count();
  out["isolation_ms"] = o_.isolation.count();
  out["fence_hook"] = o_.fence_hook;
  {
    std::lock_guard lk(follow_mu_);
    json rb = json::object();
    for (auto& [p, e] : rolled_back_) rb[p] = e;
    out["rolled_back"] = rb;
  }
  std::vector<etcd::KeyValue> kvs;
  // Short timeout: reading the status file must not hang while etcd is away.
  etcd::Status s = ka_->get_prefix(prefix_, &kvs);
  out["etcd_reachable"] = s.ok();
  json members = json::array();
  json domains = json::array();
  if (s.ok()) {
    std::map<std::string, json> by_id;
    std::set<std::string> alive;
    std::map<std::string, std::map<std::string, Epoch>> acks;  // member -> domain -> epoch
    for (auto& kv : kvs) {
      std::string k = kv.key.substr(prefix_.size());
      if (k.rfind("members/", 0) == 0) {
        json m = json::parse(kv.value, nullptr, false);
        by_id[k.substr(8)] = m.is_object() ? m : json::object();
      } else if (k.rfind("alive/", 0) == 0) {
        alive.insert(k.substr(6));
      } else if (k.rfind("ack", 0) == 0) {
        size_t at = k.rfind("/@");
        if (at == std::string::npos) continue;
        Epoch e = 0;
        std::from_chars(kv.value.data(), kv.value.data() + kv.value.size(), e);
        acks[k.substr(at + 2)][k.substr(3, at - 3)] = e;
      } else if (k.rfind("epoch/", 0) == 0) {
        Value v;
        if (!decode(kv.value, &v)) continue;
        domains.push_back({{"path", k.substr(5)},
                           {"epoch", v.epoch},
                           {"epoch_str", std::to_string(v.epoch)},
                           {"pending", v.pending},
                           {"pending_str", std::to_string(v.pending)}});
      }
    }
    for (auto& [id, m] : by_id) {
      json acked = json::object();
      for (auto& [p, e] : acks[id]) acked[p] = e;
      members.push_back({{"id", id},
                         {"host", m.value("host", "")},
                         {"mountpoint", m.value("mountpoint", "")},
                         {"pid", m.value("pid", 0)},
                         {"standing", alive.count(id) ? "live" : "unresponsive"},
                         {"acked", acked}});
    }
  }
  out["members"] = members;
  out["domains"] = domains;
  return out.dump();
}

}  // namespace fencefs::cluster
