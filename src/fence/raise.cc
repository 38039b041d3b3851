// How an epoch moves: the exclusive lock, the durable record, then the new epoch, for the
// synchronous raise and for advance_async, whose completion runs on the thread that synced.
#include <unistd.h>

#include <chrono>
#include <utility>

#include "common/error.h"
#include "common/log.h"
#include "fence/fence.h"

namespace fencefs::fence {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string token_text(Epoch t) { return t ? std::to_string(t) : std::string(); }

}  // namespace

std::unique_lock<WriterPreferringLock> Fence::lock_for_advance(Domain& d) {
  const auto asked = std::chrono::steady_clock::now();
  if (d.advances_waiting.fetch_add(1) == 0) d.advance_waiting_since_unix_ns.store(now_ns());
  std::unique_lock lk(d.mu);  // waits for every operation admitted under the old epoch
  if (d.advances_waiting.fetch_sub(1) == 1) d.advance_waiting_since_unix_ns.store(0);
  if (double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
      waited >= 1)
    log::warn(
        "domain {}: an advance waited {:.1f} s for the operations admitted before it to finish "
        "(epoch {} then)",
        d.path, waited, d.epoch.load());
  return lk;
}

int Fence::begin_raise(Domain& d, Epoch* token, const Caller& c, const std::function<int()>& flush,
                       bool uncommitted, Epoch* acquired, Epoch* before) {
  *before = d.epoch.load();
  if (acquired) {
    *acquired = *before;
    if (*token == 0 && *before >= kMaxToken) return ERANGE;
    if (*token == 0) *token = *before + 1;
    if (*token <= *before) return ESTALE;
  }
  if (*before >= *token) {
    // Restarted while an advance was pending: the journal has it, the commit is still due.
    if (uncommitted && *before == *token) d.uncommitted.store(*token, std::memory_order_release);
    return 0;  // someone else advanced meanwhile; the caller re-judges
  }
  if (flush) {
    if (int err = flush()) return err;
  }
  if (store_.poisoned()) {
    int err = heal_journal(c);
    if (err) return err;
  }
  if (before_advance_) before_advance_(d, *before);
  return kProceed;
}

void Fence::end_raise(Domain& d, Epoch token, bool uncommitted, Epoch* acquired) {
  // Set under the exclusive lock, so no admission sees the new epoch without the mark.
  if (uncommitted) d.uncommitted.store(token, std::memory_order_release);
  d.epoch.store(token, std::memory_order_release);
  if (after_advance_) after_advance_(d, token);
  if (acquired) *acquired = token;
  if (highwater_) {
    auto [dev, ino] = domains_.root_of(d);
    highwater_->record(d.path, token, {dev, ino});
  }
  d.advances.fetch_add(1, std::memory_order_relaxed);
  d.last_advance_unix_ns = now_ns();
}

void Fence::audit_raise(Domain& d, Epoch token, Epoch before, const Caller& c, const Op& op) {
  audit::Event e;
  e.op = op.name;
  e.decision = "advanced";
  e.domain = d.path;
  e.path = describe(op.target);
  e.token = token_text(token);
  e.epoch_before = before;
  e.epoch_after = token;
  e.message = fmt::format("epoch {} -> {}", before, token);
  log::debug("domain {}: epoch {} -> {} by {} (pid {})", d.path, before, token, op.name, c.pid);
  audit(std::move(e), c);
}

int Fence::raise_local(Domain& d, Epoch token, const Caller& c, const Op& op,
                       const std::function<int()>& flush, bool uncommitted, Epoch* acquired) {
  std::unique_lock lk = lock_for_advance(d);
  Epoch before = 0;
  if (int r = begin_raise(d, &token, c, flush, uncommitted, acquired, &before); r != kProceed)
    return r;
  if (int err = store_.advance(d.id, token)) return err;
  end_raise(d, token, uncommitted, acquired);
  lk.unlock();
  audit_raise(d, token, before, c, op);
  return 0;
}

void Fence::advance_async(Domain& d, Epoch token, const Caller& c, AdvanceDone done) {
  if (authority_) {
    std::string why;
    return done(advance(d, token, false, c, &why));
  }
  std::string tok = token_text(token);
  Subject s{"advance", &d, {}, tok};
  Decision dec = decide(RequestKind::Advance, d, token);
  if (dec.refused()) return done(refuse(c, s, std::move(dec)));
  if (!dec.raise) return done(0);
  std::unique_lock lk = lock_for_advance(d);
  Epoch before = 0;
  if (int r = begin_raise(d, &token, c, {}, false, nullptr, &before); r != kProceed) {
    lk.unlock();
    return done(settled_advance(d, token, c, r));
  }
  lk.release();  // released by complete_async, on the thread that synced the record
  async_pending_.fetch_add(1);
  store_.advance_async(d.id, token, [this, &d, token, before, c, done = std::move(done)](int err) {
    complete_async(d, token, before, c, err, done);
    async_pending_.fetch_sub(1);
  });
}

void Fence::complete_async(Domain& d, Epoch token, Epoch before, const Caller& c, int err,
                           const AdvanceDone& done) {
  if (err == 0) end_raise(d, token, false, nullptr);
  d.mu.unlock();
  if (err == 0) audit_raise(d, token, before, c, Op{"advance", {}, {}});
  done(settled_advance(d, token, c, err));
}

int Fence::settled_advance(Domain& d, Epoch token, const Caller& c, int err, std::string* why) {
  std::string tok = token_text(token);
  Subject s{"advance", &d, {}, tok};
  // A higher advance may have landed first: the same rule says what this one gets.
  Decision dec =
      err ? durability_failure(token, err) : decide(RequestKind::Advance, d, token, true);
  if (!dec.refused()) return 0;
  if (why) *why = dec.message;
  return refuse(c, s, std::move(dec));
}

void Fence::quiesce() {
  while (async_pending_.load() > 0) usleep(1000);
}

int Fence::heal_journal(const Caller& c) {
  // A failed fsync is never retried: the durable state is written anew into fresh files, and only
  // a rewrite whose every sync succeeded lifts the poison. At most one attempt per 100 ms.
  int64_t now = now_ns();
  int64_t last = last_heal_ns_.load();
  if (now - last < 100000000 || !last_heal_ns_.compare_exchange_strong(last, now)) return EIO;
  int err = store_.rewrite();
  audit::Event e;
  e.op = "journal_rewrite";
  e.decision = err ? "refused" : "info";
  e.reason = err ? "io" : "";
  e.err = err ? EIO : 0;
  e.message =
      err ? fmt::format("journal still failing after a failed fsync: {}", common::errstr(err))
          : "journal rewritten after a failed fsync; advances resume";
  log::warn("{}", e.message);
  audit(std::move(e), c);
  return err ? EIO : 0;
}

}  // namespace fencefs::fence
