// A member's standing: the lease kept alive, the watch on the cluster's epochs, isolation when
// etcd stops confirming contact, and what admissions may run meanwhile.

#include "cluster/clock.h"
#include "cluster/cluster.h"
#include "common/error.h"
#include "common/log.h"

namespace fencefs::cluster {
namespace {

using Millis = std::chrono::milliseconds;

constexpr const char* kFenced =
    "fenced by another member (its fence hook reported this member cut off)";

}  // namespace

using fence::Domain;
using fence::Epoch;

void Cluster::check_standing() {
  etcd::TxnResult r;
  etcd::Status s = ka_->txn(
      {}, {etcd::Op::Range(prefix_ + "meta"), etcd::Op::Range(prefix_ + "members/" + o_.member)},
      {}, &r);
  if (!s.ok() || r.ranges.size() != 2 || r.revision == 0) return;
  if (r.ranges[1].empty() && !stop_) {
    // Stop at once; the next tick registers anew and re-reads every epoch.
    admit_until_ns_ = 0;
    fenced_ = true;
    set_isolated(kFenced);
    return;
  }
  int64_t rev = r.revision;
  int64_t seen = max_revision_.load();
  if (rev >= seen) {
    raise_to(max_revision_, rev);
    return;
  }
  std::string msg = fmt::format(
      "etcd's revision went back from {} to {} (restored from an older snapshot?): re-reading "
      "every epoch",
      seen, rev);
  log::error("cluster {}: {}", o_.name, msg);
  audit("cluster_resync", "detected", "rollback", "", 0, 0, msg);
  max_revision_ = rev;
  resync_due_ = true;
}

void Cluster::note_if_fenced() {
  {
    std::lock_guard lk(state_mu_);
    if (isolated_why_ == kFenced) return;  // said already
  }
  etcd::TxnResult r;
  etcd::Status s = ka_->txn({}, {etcd::Op::Range(prefix_ + "members/" + o_.member)}, {}, &r);
  if (!s.ok() || r.ranges.size() != 1 || !r.ranges[0].empty()) return;
  {
    std::lock_guard lk(state_mu_);
    isolated_why_ = kFenced;
  }
  log::error("cluster {}: {}", o_.name, kFenced);
  audit("cluster_isolated", "detected", "io", "", 0, 0, kFenced);
}

void Cluster::set_isolated(const std::string& why) {
  if (isolated_.exchange(true)) return;
  {
    std::lock_guard lk(state_mu_);
    isolated_why_ = why;
  }
  log::error("cluster {}: {}", o_.name, why);
  audit("cluster_isolated", "detected", "io", "", 0, 0, why);
}

int Cluster::admissible(std::string* why) {
  if (mono_ns() < admit_until_ns_.load(std::memory_order_acquire)) return 0;
  std::lock_guard lk(state_mu_);
  *why = fmt::format(
      "cluster {}: member {} is isolated from etcd ({}); mutations are refused until it has "
      "re-registered and re-read every epoch",
      o_.name, o_.member,
      isolated_why_.empty() ? "no keepalive confirmed within the isolation bound" : isolated_why_);
  return EIO;
}

void Cluster::keepalive_loop() {
  Millis interval = std::max<Millis>(o_.isolation / 4, Millis(100));
  uint64_t ticks = 0;
  while (!stop_) {
    {
      std::unique_lock lk(stop_mu_);
      stop_cv_.wait_for(lk, interval, [this] { return stop_.load(); });
    }
    if (stop_) break;
    int64_t t0 = mono_ns();
    bool lapsed = t0 >= admit_until_ns_.load();
    if (lapsed)
      set_isolated(fmt::format("no keepalive confirmed by etcd for {} ms", o_.isolation.count()));
    std::string why;
    bool registered = false;
    if (fenced_ || lease_.load() == 0) {
      // Fenced by another member, or the lease lapsed: register anew, then read every epoch.
      if (register_member(*ka_, &why) != 0) {
        if (!stop_) log::warn("{}", why);  // leaving interrupts it
        continue;
      }
      registered = true;
    } else {
      int64_t ttl = 0;
      etcd::Status s = ka_->lease_keepalive(lease_.load(), &ttl);
      if (s.code == etcd::Status::kNotFound || (s.ok() && ttl <= 0)) {
        lease_ = 0;
        set_isolated("the member's etcd lease expired");
        continue;
      }
      if (!s.ok()) continue;
      if (!lapsed && !isolated_) {
        admit_until_ns_ = t0 + ns(o_.isolation);
        // Nothing here may wait for a domain's lock (a long write, an acknowledgement in
        // progress): this thread is what keeps the member admitting.
        retry_acks();
        check_standing();
        // Anti-entropy: a watch can miss events (etcd restored and written past the revision it
        // waits for); every few ticks the watch thread reads every record again.
        if (++ticks % 4 == 0) resync_due_ = true;
        continue;
      }
    }
    // Back in contact after an isolation: resume only once registered (a fence may have removed
    // this member meanwhile: advances must wait for it again) and every epoch was re-read, in
    // that order, as at join.
    if (!registered) note_if_fenced();
    if (!registered && register_member(*ka_, &why) != 0) {
      if (!stop_) log::warn("{}", why);
      continue;
    }
    int64_t rev = 0;
    if (resync(*ops_, &rev, &why) != 0) {
      set_isolated(why);
      log::warn("{}", why);
      continue;
    }
    fenced_ = false;
    admit_until_ns_ = t0 + ns(o_.isolation);
    isolated_ = false;
    log::info("cluster {}: member {} re-registered and re-read every epoch; admitting again",
              o_.name, o_.member);
    audit("cluster_join", "info", "", "", 0, 0,
          fmt::format("member {} re-registered and re-read every epoch", o_.member));
  }
}

void Cluster::watch_loop() {
  int64_t from = watch_from_.load();
  const std::string epochs = prefix_ + "epoch/";
  while (!stop_) {
    if (resync_due_.exchange(false)) {
      int64_t rev = 0;
      std::string why;
      if (resync(*watch_, &rev, &why) == 0) {
        from = rev + 1;  // everything up to rev is applied
      } else {
        if (!stop_) log::warn("{}", why);
        resync_due_ = true;
      }
    }
    etcd::Status s =
        watch_->watch(epochs, true, from, Millis(2000), [&](const etcd::WatchEvent& ev) {
          if (stop_) return false;
          from = std::max(from, ev.kv.mod_revision + 1);
          raise_to(max_revision_, ev.kv.mod_revision);
          Value v;
          if (ev.type == etcd::WatchEvent::Type::kPut && decode(ev.kv.value, &v))
            apply(*ops_, ev.kv.key.substr(epochs.size() - 1), v, false);
          return true;
        });
    if (stop_) break;
    if (!s.ok()) {
      // Events may be lost (compaction, etcd restarted or restored): read the current state.
      log::warn("cluster {}: watch: {}", o_.name, s.message);
      {
        std::unique_lock lk(stop_mu_);
        stop_cv_.wait_for(lk, Millis(200), [this] { return stop_.load(); });
      }
      resync_due_ = true;
    }
  }
}

}  // namespace fencefs::cluster
