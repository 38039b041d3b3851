// The one module every mutation goes through: validate the token, compare it with the domain's
// durable epoch, advance durably when it is higher, and hold the domain's shared lock while the
// caller's mutation runs.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "audit/audit.h"
#include "common/mutex.h"
#include "common/proc.h"
#include "fence/authority.h"
#include "fence/decision.h"
#include "fence/domain.h"
#include "fence/highwater.h"
#include "fence/rule.h"
#include "fence/token.h"
#include "journal/journal.h"

namespace fencefs::fence {

constexpr Epoch kDefaultMaxJump = 1000000;

struct Config {
  std::string backing;  // canonical path of BACKING, to name files in messages
  Epoch max_jump = kDefaultMaxJump;
  std::vector<uid_t> issuer_uids{0};
  std::vector<gid_t> issuer_gids;
  std::string token_key;  // empty: signed tokens are not accepted
};

struct Caller {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Names the object of an operation for the audit trail, resolved only when needed.
struct Target {
  int fd = -1;                 // an fd in the daemon (O_PATH is fine), or -1
  const char* name = nullptr;  // entry name below fd, or nullptr for fd itself
};

struct Op {
  const char* name;  // "write", "create", ...
  Target target;
  Target target2;  // rename destination, link name
};

// What a refusal or a control event is about, for the audit trail and the counters.
struct Subject {
  const char* op;                // "write", "bind", "advance", "ctl", ...
  Domain* domain = nullptr;      // counted and named when known
  std::string_view domain_path;  // named when there is no Domain (unknown or new domain)
  std::string_view token;        // as presented, "" when none
  Target target = {};
  Target target2 = {};
};

// Holds the shared lock(s) of the admitted domain(s) until destroyed: the mutation runs
// between admit() and the end of the Admission's life.
class Admission {
 public:
  Admission() = default;
  Admission(Admission&&) = default;
  Admission& operator=(Admission&&) = default;
  Epoch token() const { return token_; }

 private:
  friend class Fence;
  std::shared_lock<WriterPreferringLock> first_, second_;
  Epoch token_ = 0;
};

class Fence {
 public:
  Fence(Config cfg, DomainTable& domains, journal::StateStore& store, audit::Log* audit,
        HighWater* highwater = nullptr, proc::ProcessInfo& procs = proc::system());

  // Compares the high-water copy in BACKING with the journal's epochs: a domain whose journal
  // epoch is lower was rolled back, and refuses every token below the copy (EIO) until healed by
  // a token at least that high or a floor. Returns a message per rolled-back domain.
  std::vector<std::string> check_rollback();

  // 0 and *out holds the lock; or an errno (ESTALE, EPERM, ERANGE, EIO) and nothing may change.
  // `stamp` is the last-epoch stamp of the object (0 when none or unknown).
  int admit(Domain& d, Epoch token, Epoch stamp, const Caller& c, const Op& op, Admission* out);
  // Two domains (rename, link across domains); locks taken in id order.
  int admit2(Domain& a, Epoch ta, Domain& b, Epoch tb, const Caller& c, const Op& op,
             Admission* out);

  // The coordinated step: raise d's epoch to `token` now. Equal is a no-op; lower is ESTALE.
  int advance(Domain& d, Epoch token, bool force, const Caller& c, std::string* why);
  // As advance(), without waiting on this thread for the record's sync: `done` gets what
  // advance() would have returned, from the thread that made the epoch durable (the calling
  // thread when nothing was waited for). d's exclusive lock is held from before the record is
  // queued until the epoch is durable and set, as in advance(). Cluster mode: synchronous.
  using AdvanceDone = std::function<void(int err)>;
  void advance_async(Domain& d, Epoch token, const Caller& c, AdvanceDone done);
  // Waits until every advance_async has called its `done` (before the session goes away).
  void quiesce();
  // Acquisition: makes `token` (0: the epoch + 1, issued here) d's epoch in one durable record,
  // only if it is above the epoch (ESTALE otherwise: the issuer is behind the resource).
  // *acquired is the epoch now held, or the epoch that refused it. op_name: "acquire", "resync".
  int acquire(Domain& d, Epoch token, const char* op_name, const Caller& c, Epoch* acquired,
              std::string* why);
  // Raise every domain to at least `floor` (recovery after a rollback). Audited.
  int apply_floor(Epoch floor, std::string* why);

  // May this caller present this token for this domain (bind, advance, ioctl)?
  // need_issuer: signed tokens are not enough (force, domain add).
  // opened_by_issuer: false when the caller writes through a control file that someone outside the
  // issuer set opened (a set-uid program writing to a descriptor it was handed): then only a
  // signed token authorises, as for any caller outside the set.
  int authorize(const Caller& c, const Domain& d, const TokenText& t, bool need_issuer,
                std::string* why, bool opened_by_issuer = true) const;
  bool is_issuer(const Caller& c) const;
  // The rule applied to a request of this kind against d's current epoch (decision.h).
  Decision decide(RequestKind kind, const Domain& d, Epoch token, bool force = false,
                  bool stale_handle = false) const;
  // ESTALE or ERANGE when a token may not be bound now: below the epoch, or more than max_jump
  // above it (decide(Bind)).
  int check_jump(const Domain& d, Epoch token, std::string* why) const;

  // The one way to refuse: logs, audits and counts (per domain and reason, once per refused
  // system call), then returns err. For the FUSE handlers and the control file alike.
  int refuse(const Caller& c, const Subject& s, Reason r, int err, std::string message);
  int refuse(const Caller& c, const Subject& s, Decision d) {
    return refuse(c, s, d.reason, d.err, std::move(d.message));
  }
  // Records an accepted control event (bound, unbound, declared) in the audit trail.
  void note(const Caller& c, const Subject& s, const char* decision, std::string message);

  // Durably declares a domain rooted at the existing directory rel (relative path "/a/b"), found
  // along `place`. Declaring an existing domain's path again re-binds it to the directory there.
  // announce: also declare it to the epoch authority (false when the authority told us).
  int add_domain(const std::string& rel, std::vector<PlaceStep> place, std::string* why,
                 bool announce = true);
  // Before a domain is declared at `place`: locks exclusively the domain it is carved out of
  // (the deepest one rooted above it, found again once locked), so that nothing is admitted
  // there meanwhile, and runs the before-advance step on it at its epoch: handles open there
  // whose file moves are refused from then on and will not restamp at close.
  std::unique_lock<WriterPreferringLock> quiesce_owner(const std::vector<PlaceStep>& place,
                                                       Domain** owner);

  // Cluster mode: the authority owns advances; this member follows. Unset: the local journal is
  // the only authority. Set before mounting.
  void set_authority(EpochAuthority* a) { authority_ = a; }
  EpochAuthority* authority() const { return authority_; }
  // Runs under d's exclusive lock just before its epoch moves past `old`: nothing admitted under
  // `old` is in flight, nothing is admitted until it returns. The filesystem stamps the files its
  // still-open handles wrote under `old`. Set before mounting.
  void set_before_advance(std::function<void(Domain& d, Epoch old)> f) {
    before_advance_ = std::move(f);
  }
  // Runs under d's exclusive lock once its epoch is `now`, before anything is admitted under it.
  // The filesystem drops what handles superseded by it left in the kernel's page cache.
  void set_after_advance(std::function<void(Domain& d, Epoch now)> f) {
    after_advance_ = std::move(f);
  }
  // This member's part of a cluster advance: waits for every operation admitted below `token`
  // (d's lock, exclusively), runs flush (data written under the old epoch made durable), then
  // makes `token` d's durable local epoch. uncommitted: tokens >= it wait for the commit.
  // Returns 0 when d's epoch is now >= token.
  int follow(Domain& d, Epoch token, bool uncommitted, const std::function<int()>& flush,
             std::string* why);

  // Records an event; kRepeat when it repeated one just recorded (the kernel retries a path
  // operation refused with ESTALE once), so callers count it once.
  audit::Log::Outcome audit(audit::Event e, const Caller& c) const;
  std::string describe(const Target& t) const;  // path relative to the mount root
  const Config& config() const { return cfg_; }
  DomainTable& domains() { return domains_; }
  journal::StateStore& store() { return store_; }
  audit::Log* audit_log() const { return audit_; }

 private:
  // With `acquired`, the raise is an acquisition (see acquire): token 0 is issued as epoch + 1
  // under the exclusive lock, and a token not above the epoch is ESTALE. In cluster mode the
  // authority raises every member; *why then says why it could not.
  int raise(Domain& d, Epoch token, const Caller& c, const Op& op, Epoch* acquired = nullptr,
            std::string* why = nullptr);
  // Brings d up for `token` (raise, or wait for the commit) until it is admissible as is, with
  // no lock held while raising or waiting; with `hold`, returns holding the shared lock.
  int settle(Domain& d, Epoch token, const Caller& c, const Op& op, const Subject& s,
             std::shared_lock<WriterPreferringLock>* hold);
  // Under d's shared lock: refused (an errno), or 0 with *settled when admissible as is, else
  // *raise_due when a raise (not a commit) is due.
  int judge_held(const Domain& d, Epoch token, const Caller& c, const Subject& s, bool* settled,
                 bool* raise_due = nullptr);
  int raise_local(Domain& d, Epoch token, const Caller& c, const Op& op,
                  const std::function<int()>& flush = {}, bool uncommitted = false,
                  Epoch* acquired = nullptr);
  // raise_local in parts: take d's exclusive lock (counted as waiting); then under it, decide
  // whether a record is due (kProceed) or what to return; then, once the record is durable, set
  // the epoch (still under it); then audit (after the unlock).
  static constexpr int kProceed = -1;
  std::unique_lock<WriterPreferringLock> lock_for_advance(Domain& d);
  int begin_raise(Domain& d, Epoch* token, const Caller& c, const std::function<int()>& flush,
                  bool uncommitted, Epoch* acquired, Epoch* before);
  void end_raise(Domain& d, Epoch token, bool uncommitted, Epoch* acquired);
  void audit_raise(Domain& d, Epoch token, Epoch before, const Caller& c, const Op& op);
  // advance_async's completion (err from the journal), on the thread that synced the record:
  // releases d's exclusive lock taken on another thread (which the analysis cannot follow).
  void complete_async(Domain& d, Epoch token, Epoch before, const Caller& c, int err,
                      const AdvanceDone& done) NO_THREAD_SAFETY_ANALYSIS;
  // What an advance to `token` returns once its raise returned err.
  int settled_advance(Domain& d, Epoch token, const Caller& c, int err, std::string* why = nullptr);
  int heal_journal(const Caller& c);
  audit::Event event_of(const Subject& s) const;

  Config cfg_;
  DomainTable& domains_;
  journal::StateStore& store_;
  audit::Log* audit_;
  HighWater* highwater_;
  proc::ProcessInfo& procs_;
  EpochAuthority* authority_ = nullptr;
  std::function<void(Domain&, Epoch)> before_advance_;
  std::function<void(Domain&, Epoch)> after_advance_;
  std::atomic<int64_t> last_heal_ns_{0};
  std::atomic<int> async_pending_{0};  // advance_async calls whose done has not run
  common::Mutex domain_add_mu_;        // one add_domain at a time; before the DomainTable's lock
};

}  // namespace fencefs::fence
