#include "fence/fence.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "common/log.h"
#include "common/proc.h"

namespace fencefs::fence {
namespace {

std::string token_text(Epoch t) { return t ? std::to_string(t) : std::string(); }

}  // namespace

Fence::Fence(Config cfg, DomainTable& domains, journal::StateStore& store, audit::Log* audit,
             HighWater* highwater, proc::ProcessInfo& procs)
    : cfg_(std::move(cfg)),
      domains_(domains),
      store_(store),
      audit_(audit),
      highwater_(highwater),
      procs_(procs) {}

std::vector<std::string> Fence::check_rollback() {
  std::vector<std::string> out;
  if (!highwater_) return out;
  std::vector<std::string> paths;
  for (Domain* d : domains_.all()) paths.push_back(d->path);
  auto marks = highwater_->load(paths);
  // Every domain's own copy written from the start (one missing would keep it in the root's).
  for (Domain* d : domains_.all()) {
    auto [dev, ino] = domains_.root_of(*d);
    highwater_->note(d->path, d->epoch.load(), {dev, ino});
  }
  highwater_->flush();
  for (Domain* d : domains_.all()) {
    auto it = marks.find(d->path);
    if (it == marks.end() || it->second <= d->epoch.load()) continue;
    Epoch seen = d->max_stamp.load();
    if (it->second > seen) d->max_stamp = it->second;
    out.push_back(fmt::format(
        "rollback detected: domain {} was at epoch {} but the state says {} (restored from an "
        "older copy?); tokens below {} are refused with EIO until a floor is applied",
        d->path, it->second, d->epoch.load(), it->second));
  }
  return out;
}

std::string Fence::describe(const Target& t) const {
  if (t.fd < 0) return t.name ? t.name : "";
  char link[64], buf[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", t.fd);
  ssize_t n = readlink(link, buf, sizeof buf - 1);
  std::string p = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
  if (p.compare(0, cfg_.backing.size(), cfg_.backing) == 0) {
    p = p.substr(cfg_.backing.size());
    if (p.empty()) p = "/";
  }
  if (t.name) p = (p == "/" ? "" : p) + "/" + t.name;
  return p;
}

audit::Log::Outcome Fence::audit(audit::Event e, const Caller& c) const {
  if (!audit_) return audit::Log::Outcome::kWritten;
  e.pid = c.pid;
  e.uid = c.uid;
  e.gid = c.gid;
  if (c.pid <= 0) return audit_->record(std::move(e));
  // FUSE names the calling thread; the audit trail names its process (one /proc read, made only
  // for a record that is written: not for refusals beyond the caller's rate).
  return audit_->record(std::move(e), [this, pid = c.pid](audit::Event& ev) {
    if (auto id = procs_.identity(pid)) {
      if (ev.comm.empty()) ev.comm = id->comm;
      if (id->tgid != pid) {
        ev.tid = pid;
        ev.pid = id->tgid;
      }
      ev.pid_resolved = true;
    }
  });
}

audit::Event Fence::event_of(const Subject& s) const {
  audit::Event e;
  e.op = s.op;
  e.domain = s.domain ? s.domain->path : std::string(s.domain_path);
  if (s.target.fd >= 0 || s.target.name) e.path = describe(s.target);
  if (s.target2.fd >= 0 || s.target2.name) e.path2 = describe(s.target2);
  e.token = s.token;
  if (s.domain) e.epoch_before = e.epoch_after = s.domain->epoch.load();
  return e;
}

int Fence::refuse(const Caller& c, const Subject& s, Reason r, int err, std::string message) {
  audit::Event e = event_of(s);
  e.decision = "refused";
  e.reason = reason_name(r);
  e.err = err;
  e.message = std::move(message);
  if (s.target.fd >= 0 || s.target.name)
    log::debug("refused {} of {} in domain {} (pid {}): {}", e.op, e.path, e.domain, c.pid,
               e.message);
  else
    log::info("refused {} {} from pid {} uid {}: {}", e.op, e.domain, c.pid, c.uid, e.message);
  if (audit(std::move(e), c) != audit::Log::Outcome::kRepeat && s.domain)
    s.domain->refused[static_cast<int>(r)].fetch_add(1, std::memory_order_relaxed);
  return err;
}

void Fence::note(const Caller& c, const Subject& s, const char* decision, std::string message) {
  audit::Event e = event_of(s);
  e.decision = decision;
  e.message = std::move(message);
  audit(std::move(e), c);
}

Decision Fence::decide(RequestKind kind, const Domain& d, Epoch token, bool force,
                       bool stale_handle) const {
  Request r;
  r.kind = kind;
  r.token = token;
  r.epoch = d.epoch.load(std::memory_order_acquire);
  r.max_stamp = d.max_stamp.load(std::memory_order_acquire);
  r.max_jump = cfg_.max_jump;
  r.force = force;
  r.stale_handle = stale_handle;
  r.domain = d.path;
  return fence::decide(r);
}

int Fence::check_jump(const Domain& d, Epoch token, std::string* why) const {
  Decision dec = decide(RequestKind::Bind, d, token);
  if (dec.refused()) *why = std::move(dec.message);
  return dec.err;
}

int Fence::raise(Domain& d, Epoch token, const Caller& c, const Op& op, Epoch* acquired,
                 std::string* why) {
  if (authority_) {
    // Cluster mode: the authority raises every member, this one included, before returning.
    std::string msg;
    int err = authority_->advance(d, token, &msg, acquired);
    if (err && why) *why = msg;
    return err;
  }
  return raise_local(d, token, c, op, {}, false, acquired);
}

int Fence::follow(Domain& d, Epoch token, bool uncommitted, const std::function<int()>& flush,
                  std::string* why) {
  Caller self{getpid(), getuid(), getgid()};
  int err =
      raise_local(d, token, self, Op{uncommitted ? "cluster_prepare" : "cluster_commit", {}, {}},
                  flush, uncommitted);
  if (err) {
    *why = fmt::format("domain {}: could not make epoch {} durable: {}", d.path, token,
                       common::errstr(err));
    return err;
  }
  return 0;
}

int Fence::admit(Domain& d, Epoch token, Epoch stamp, const Caller& c, const Op& op,
                 Admission* out) {
  if (stamp > d.epoch.load(std::memory_order_acquire)) {
    Epoch seen = d.max_stamp.load();
    while (stamp > seen && !d.max_stamp.compare_exchange_weak(seen, stamp)) {
    }
  }
  std::string tok = token_text(token);
  Subject s{op.name, &d, {}, tok, op.target, op.target2};
  std::shared_lock<WriterPreferringLock> lk;
  if (int err = settle(d, token, c, op, s, &lk)) return err;
  d.accepted.fetch_add(1, std::memory_order_relaxed);
  out->first_ = std::move(lk);
  out->token_ = token;
  return 0;
}

int Fence::judge_held(const Domain& d, Epoch token, const Caller& c, const Subject& s,
                      bool* settled, bool* raise_due) {
  *settled = false;
  if (raise_due) *raise_due = false;
  if (authority_) {
    // Checked under the lock: a long raise or wait must not outlive the isolation bound.
    std::string why;
    if (int err = authority_->admissible(&why)) return refuse(c, s, Reason::Io, err, why);
  }
  Decision dec = decide(RequestKind::Admit, d, token);
  if (dec.refused()) return refuse(c, s, std::move(dec));
  if (dec.raise) {
    if (raise_due) *raise_due = true;
    return 0;
  }
  // Not every member has acknowledged this epoch yet: the commit is still due.
  if (Epoch u = d.uncommitted.load(std::memory_order_acquire); u && token >= u) return 0;
  *settled = true;
  return 0;
}

int Fence::settle(Domain& d, Epoch token, const Caller& c, const Op& op, const Subject& s,
                  std::shared_lock<WriterPreferringLock>* hold) {
  // Refusals no later state can lift (no token; a token below the epoch, which never falls) are
  // made without the lock: behind an advance waiting for a slow admitted operation, each would
  // hold a worker, and tokenless callers could take every worker of the daemon.
  if (token == 0 || token < d.epoch.load(std::memory_order_acquire)) {
    Decision dec = decide(RequestKind::Admit, d, token);
    if (dec.refused() && (dec.reason == Reason::Missing || dec.reason == Reason::Stale))
      return refuse(c, s, std::move(dec));
  }
  for (;;) {
    std::shared_lock lk(d.mu);
    bool settled = false, raise_due = false;
    if (int err = judge_held(d, token, c, s, &settled, &raise_due)) return err;
    if (settled) {
      if (hold) *hold = std::move(lk);
      return 0;
    }
    // Never raise or wait with a domain lock held: a follower needs it exclusively.
    lk.unlock();
    std::string why;
    if (!raise_due && authority_) {
      if (int err = authority_->await_commit(d, token, &why))
        return refuse(c, s, Reason::Io, err, why);
      continue;
    }
    if (int err = raise(d, token, c, op, nullptr, &why)) {
      if (why.empty()) return refuse(c, s, durability_failure(token, err));
      // A rolled-back authority reaches a writer as the local rollback does: EIO.
      if (err == EUCLEAN) return refuse(c, s, Reason::Rollback, EIO, why);
      return refuse(c, s, Reason::Io, err, why);
    }
    // Re-judged under the shared lock: a higher epoch may have landed since.
  }
}

int Fence::admit2(Domain& a, Epoch ta, Domain& b, Epoch tb, const Caller& c, const Op& op,
                  Admission* out) {
  if (&a == &b) return admit(a, ta, 0, c, op, out);
  Domain* first = a.id < b.id ? &a : &b;
  Domain* second = first == &a ? &b : &a;
  Epoch tfirst = first == &a ? ta : tb;
  Epoch tsecond = first == &a ? tb : ta;
  std::string tok1 = token_text(tfirst), tok2 = token_text(tsecond);
  Subject s1{op.name, first, {}, tok1, op.target, op.target2};
  Subject s2{op.name, second, {}, tok2, op.target, op.target2};
  for (;;) {
    // Each domain brought up with no lock held, then both judged again under both locks.
    if (int err = settle(*first, tfirst, c, op, s1, nullptr)) return err;
    if (int err = settle(*second, tsecond, c, op, s2, nullptr)) return err;
    std::shared_lock l1(first->mu);
    std::shared_lock l2(second->mu);
    bool ok1 = false, ok2 = false;
    if (int err = judge_held(*first, tfirst, c, s1, &ok1)) return err;
    if (int err = judge_held(*second, tsecond, c, s2, &ok2)) return err;
    if (!ok1 || !ok2) continue;  // moved meanwhile: bring it up again, unlocked
    first->accepted.fetch_add(1, std::memory_order_relaxed);
    second->accepted.fetch_add(1, std::memory_order_relaxed);
    out->first_ = std::move(l1);
    out->second_ = std::move(l2);
    out->token_ = ta;
    return 0;
  }
}

int Fence::advance(Domain& d, Epoch token, bool force, const Caller& c, std::string* why) {
  Op op{"advance", {}, {}};
  std::string tok = token_text(token);
  Subject s{op.name, &d, {}, tok};
  Decision dec = decide(RequestKind::Advance, d, token, force);
  *why = dec.message;
  if (dec.refused()) return refuse(c, s, std::move(dec));
  // Equal is a no-op, unless an earlier cluster advance to this epoch did not complete.
  bool complete = authority_ && d.uncommitted.load() != 0 && d.uncommitted.load() <= token;
  if (!dec.raise && !complete) return 0;
  int err = raise(d, token, c, op, nullptr, why);
  if (err && authority_)
    return refuse(c, s, err == EUCLEAN ? Reason::Rollback : Reason::Io, err, *why);
  if ((err = settled_advance(d, token, c, err, why))) return err;
  *why = fmt::format("domain {} advanced to epoch {}", d.path, token);
  return 0;
}

int Fence::acquire(Domain& d, Epoch token, const char* op_name, const Caller& c, Epoch* acquired,
                   std::string* why) {
  Op op{op_name, {}, {}};
  auto refused = [&](Reason r, int err, Epoch t, const std::string& message) {
    std::string tok = token_text(t);
    return refuse(c, Subject{op_name, &d, {}, tok}, r, err, message);
  };
  Epoch want = token ? token : d.epoch.load() + 1;
  // The rule as for any advance; a token not above the epoch is judged under the exclusive lock
  // by raise(), which says "issuer behind".
  Decision dec = decide(RequestKind::Advance, d, want);
  if (dec.refused() && dec.reason != Reason::Stale) {
    // Its own errno (not EIO), so that a coordinator can tell a rollback from a journal failure.
    if (dec.reason == Reason::Rollback) dec.err = EUCLEAN;
    *why = dec.message;
    std::string tok = token_text(want);
    return refuse(c, Subject{op_name, &d, {}, tok}, std::move(dec));
  }
  int err = raise(d, token, c, op, acquired);
  if (err == ESTALE) {
    *why = fmt::format(
        "token {} is not above epoch {} of domain {}: the issuer is behind the resource "
        "(restored from an older backup?)",
        token, *acquired, d.path);
    return refused(Reason::Stale, ESTALE, token, *why);
  }
  if (err == ERANGE) {
    *why = fmt::format("domain {} is at the highest epoch", d.path);
    return refused(Reason::TooFar, err, want, *why);
  }
  if (err) {
    *why = fmt::format("could not make epoch {} durable: {}", want, common::errstr(err));
    return refused(err == EUCLEAN ? Reason::Rollback : Reason::Io, err, want, *why);
  }
  *why = fmt::format("domain {} acquired at epoch {}", d.path, *acquired);
  return 0;
}

int Fence::apply_floor(Epoch floor, std::string* why) {
  Caller self{getpid(), getuid(), getgid()};
  for (Domain* d : domains_.all()) {
    if (d->epoch.load() >= floor) continue;
    int err = raise(*d, floor, self, Op{"floor", {}, {}});
    if (err) {
      *why = fmt::format("domain {}: could not apply floor {}: {}", d->path, floor,
                         common::errstr(err));
      return err;
    }
  }
  *why = fmt::format("every domain is at epoch >= {}", floor);
  return 0;
}

bool Fence::is_issuer(const Caller& c) const {
  if (std::find(cfg_.issuer_uids.begin(), cfg_.issuer_uids.end(), c.uid) != cfg_.issuer_uids.end())
    return true;
  if (cfg_.issuer_gids.empty()) return false;
  if (std::find(cfg_.issuer_gids.begin(), cfg_.issuer_gids.end(), c.gid) != cfg_.issuer_gids.end())
    return true;
  for (gid_t g : procs_.groups(c.pid))
    if (std::find(cfg_.issuer_gids.begin(), cfg_.issuer_gids.end(), g) != cfg_.issuer_gids.end())
      return true;
  return false;
}

int Fence::authorize(const Caller& c, const Domain& d, const TokenText& t, bool need_issuer,
                     std::string* why, bool opened_by_issuer) const {
  const bool issuer = is_issuer(c);
  if (issuer && opened_by_issuer) return 0;
  const std::string who = issuer ? "the control file was opened by a process outside the issuer set"
                                 : fmt::format("uid {} is not in the issuer set", c.uid);
  if (need_issuer) {
    *why = who;
    return EACCES;
  }
  if (t.signature.empty()) {
    *why = who + " and the token is not signed";
    return EACCES;
  }
  if (cfg_.token_key.empty()) {
    *why = "signed token, but this mount has no token_key";
    return EACCES;
  }
  if (!verify(cfg_.token_key, d.path, t.epoch, t.signature)) {
    *why = fmt::format("bad signature for domain {} epoch {}", d.path, t.epoch);
    return EACCES;
  }
  return 0;
}

std::unique_lock<WriterPreferringLock> Fence::quiesce_owner(const std::vector<PlaceStep>& place,
                                                            Domain** owner) {
  auto owner_of = [&] {
    for (size_t k = place.size() - 1; k-- > 0;)
      if (Domain* d = domains_.by_root_inode(place[k].dev, place[k].ino)) return d;
    return domains_.root();
  };
  Domain* o = owner_of();
  std::unique_lock lk(o->mu);
  while (owner_of() != o) {  // another declaration made a deeper owner meanwhile
    lk.unlock();
    o = owner_of();
    lk = std::unique_lock(o->mu);
  }
  if (before_advance_) before_advance_(*o, o->epoch.load());
  *owner = o;
  return lk;
}

int Fence::add_domain(const std::string& rel, std::vector<PlaceStep> place, std::string* why,
                      bool announce) {
  common::MutexLock lk(domain_add_mu_);
  if (place.empty()) {
    *why = fmt::format("{} is not a directory below the mount root", rel);
    return EINVAL;
  }
  dev_t dev = place.back().dev;
  ino_t ino = place.back().ino;
  if (Domain* d = domains_.by_path(rel)) {
    if (domains_.by_root_inode(dev, ino) == d) {
      *why = fmt::format("{} is already a domain", rel);
      return EEXIST;
    }
    // Its directory was replaced or moved outside fencefs: the operator names the new one.
    domains_.rebind(*d, std::move(place));
    *why = fmt::format("domain {} re-declared at the directory now at that path (epoch {})", rel,
                       d->epoch.load());
    return 0;
  }
  if (domains_.by_root_inode(dev, ino)) {
    *why = fmt::format("{} is already a domain under another name", rel);
    return EEXIST;
  }
  uint32_t id = domains_.next_id();
  int err = store_.add_domain(id, rel);
  if (err) {
    *why = fmt::format("could not record domain {}: {}", rel, common::errstr(err));
    return err;
  }
  // Declared before and lost with a discarded part of the journal (recover): a token the old
  // domain refused must not pass the new one, from the moment it is visible.
  Epoch mark = highwater_ ? highwater_->load({rel})[rel] : 0;
  domains_.add(id, rel, 0, std::move(place), mark);
  *why = fmt::format("domain {} declared at epoch 0", rel);
  if (mark > 0)
    *why += fmt::format(
        "; BACKING's high-water copy says {} was at epoch {} before: tokens below {} are refused "
        "(EIO, rollback) until it is advanced to {} or above (`advance {} {} force` when that is "
        "more than max_jump)",
        rel, mark, mark, mark, rel, mark);
  if (authority_ && announce) return authority_->declare(rel, 0, why);
  return 0;
}

}  // namespace fencefs::fence
