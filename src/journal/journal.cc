// long: Store, the state store (group commit, space reservation, compaction), is one class private
// to this file; open() builds it.
#include "journal/journal.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <deque>
#include <map>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "journal/format.h"
#include "journal/load.h"
#include "journal/replay.h"
#include "journal/state_files.h"

namespace fencefs::journal {
namespace {

using format::FileHeader;
using format::FileKind;
using format::Incarnation;
using format::Record;
using format::ScanEnd;
using format::ScanResult;

using common::errstr;

std::string refusal_hint(const std::string& dir) {
  return "; refusing to open. Inspect with `fencectl verify BACKING --state " + dir +
         "`; the audited way out is `fencectl recover --state " + dir +
         " --floor N` (docs/journal-format.md)";
}

// Room kept allocated past the end of the journal, so that advances append without needing free
// space on the disk (about 20,000 records).
constexpr uint64_t kJournalReserve = 1u << 20;

// Writes `bytes` to a new `tmp` and syncs it; the file stays open in *f.
int write_synced(FileLayer& fs, const std::string& tmp, const std::string& bytes,
                 std::unique_ptr<File>* f) {
  int rc = 0;
  *f = fs.open_append(tmp, true, &rc);
  if (*f == nullptr) return rc != 0 ? rc : EIO;
  rc = (*f)->append(bytes.data(), bytes.size());
  if (rc == 0) rc = (*f)->sync();
  if (rc != 0) (*f)->close();
  return rc;
}

// Writes `bytes` to `tmp`, syncs it, renames it over `final`, syncs the directory. The new file
// stays open for appending in *keep when keep is not null.
int replace_file(FileLayer& fs, const std::string& tmp, const std::string& final,
                 const std::string& dir, const std::string& bytes, std::unique_ptr<File>* keep) {
  std::unique_ptr<File> f;
  int rc = write_synced(fs, tmp, bytes, &f);
  if (rc != 0) return rc;
  rc = fs.rename(tmp, final);
  if (rc == 0) rc = fs.sync_dir(dir);
  if (rc != 0 || keep == nullptr) {
    f->close();
  } else {
    *keep = std::move(f);
  }
  return rc;
}

// Sleeps while `word` still holds `seen` (or until a spurious wake-up). A plain futex: the
// standard library's atomic wait spins and yields first, a context switch per waiter per batch.
void futex_wait(std::atomic<uint32_t>& word, uint32_t seen) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr,
          0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

// How long a would-be leader waits for the callers of the previous batch to queue their next
// records. Far below an fdatasync (0.1 ms on fast flash, milliseconds on disks), so it only ever
// trades a sliver of latency for a batch that would otherwise need its own sync.
constexpr auto kGatherWindow = std::chrono::microseconds(50);

class Store final : public StateStore {
 public:
  Store(const Paths& p, const Options& o, FileLayer& fs) : p_(p), opts_(o), fs_(fs) {}

  ~Store() override {
    std::thread committer;
    {
      common::UniqueLock lk(mu_);
      stopping_ = true;
      committer = std::move(committer_);
    }
    committer_cv_.notify_all();
    if (committer.joinable()) committer.join();  // after it led what was queued without a waiter
    common::UniqueLock lk(mu_);
    cv_.wait(lk.native(), [&]() REQUIRES(mu_) { return !busy_; });
    if (journal_ != nullptr) journal_->close();
  }

  // Takes over the recovered state; `journal` is open for appending at its valid end. Unchecked:
  // it runs before the store is shared, with nothing to lock against.
  void init(const ReplayState& s, std::unique_ptr<File> journal, uint32_t chain,
            const Incarnation& inc, uint64_t generation, uint64_t journal_size,
            uint64_t snapshot_size, RecoveryReport report) NO_THREAD_SAFETY_ANALYSIS {
    for (const auto& [id, d] : s.by_id) {
      Domain& dom = domains_[id];
      dom.path = d.path;
      dom.durable = dom.pending = d.epoch;
      paths_.insert(d.path);
    }
    journal_ = std::move(journal);
    chain_ = chain;
    inc_ = inc;
    generation_ = generation;
    journal_size_ = journal_size;
    snapshot_size_ = snapshot_size;
    report_ = std::move(report);
    keep_reserve();
  }

  std::vector<DomainRecord> domains() const override {
    common::MutexLock lk(mu_);
    std::vector<DomainRecord> v;
    for (const auto& [id, d] : domains_) {
      if (d.added) v.push_back(DomainRecord{id, d.path, d.durable});
    }
    return v;
  }

  int durable_epoch(uint32_t id, uint64_t* epoch) const override {
    common::MutexLock lk(mu_);
    auto it = domains_.find(id);
    if (it == domains_.end() || !it->second.added) return EINVAL;
    *epoch = it->second.durable;
    return 0;
  }

  const RecoveryReport& report() const override { return report_; }

  int advance(uint32_t id, uint64_t epoch) override {
    common::UniqueLock lk(mu_);
    std::shared_ptr<Op> op;
    if (int now = queue_advance(id, epoch, false, &op); now >= 0) return now;
    return wait_done(lk, op);
  }

  void advance_async(uint32_t id, uint64_t epoch, Done done) override {
    common::UniqueLock lk(mu_);
    std::shared_ptr<Op> op;
    const int now = queue_advance(id, epoch, true, &op);
    if (now >= 0) {
      lk.unlock();
      done(now);
      return;
    }
    op->dones.push_back(std::move(done));
    if (!busy_) {
      lead(lk);  // idle: no hand-off to another thread for a lone advance
    } else if (!committer_.joinable()) {
      wait_done(lk, op);  // no committer: as advance() does
    }
  }

  int start() override {
    common::MutexLock lk(mu_);
    if (committer_.joinable()) return 0;
    try {
      committer_ = std::thread([this] { commit(); });
    } catch (const std::system_error& e) {
      return e.code().value();
    }
    return 0;
  }

  int add_domain(uint32_t id, const std::string& path) override {
    if (!format::valid_path(path)) return EINVAL;
    common::UniqueLock lk(mu_);
    if (domains_.count(id) || paths_.count(path)) return EEXIST;
    if (poisoned_) return EIO;
    Domain& d = domains_[id];
    d.path = path;
    d.added = false;
    paths_.insert(path);
    auto op = std::make_shared<Op>();
    op->rec.type = format::kDomainAdd;
    op->rec.id = id;
    op->rec.path = path;
    queue_.push_back(op);
    enqueued();
    return wait_done(lk, op);
  }

  int rewrite() override {
    common::UniqueLock lk(mu_);
    cv_.wait(lk.native(), [&]() REQUIRES(mu_) { return !busy_; });
    busy_ = true;
    bool kept = false;
    int rc = write_fresh(lk, &kept);
    if (rc == 0) {
      poisoned_ = false;
    } else {
      poison();
    }
    release_journal();
    run_ready(lk);
    return rc;
  }

  // Without mu_: asked before every advance, while a leader may hold mu_.
  bool poisoned() const override { return poisoned_.load(std::memory_order_acquire); }

  Stats stats() const override {
    common::MutexLock lk(mu_);
    Stats s = stats_;
    s.journal_bytes = journal_size_;
    s.snapshot_bytes = snapshot_size_;
    return s;
  }

 private:
  // A queued record. Its waiters sleep on `wake` alone, so a batch's end wakes only the callers
  // whose records it made durable (and the next leader), not everyone waiting on the journal.
  struct Op {
    Record rec;
    std::atomic<bool> done{false};  // set (release) after `result`, once the batch is synced
    int result = 0;
    std::atomic<uint32_t> wake{0};      // bumped under mu_ when done, or when asked to lead
    std::atomic<uint32_t> sleepers{0};  // callers asleep on `wake` (raised under mu_)
    std::vector<Done> dones;            // advance_async's callers (under mu_ until done)
    bool async = false;                 // queued by advance_async: no caller waits to lead it
    void bump() { wake.fetch_add(1, std::memory_order_relaxed); }  // under mu_
    // After bump(), with or without mu_: a sleeper that saw the old value is woken.
    void wake_sleepers() {
      if (sleepers.load(std::memory_order_relaxed) > 0) futex_wake_all(wake);
    }
    void wake_up() {  // under mu_
      bump();
      wake_sleepers();
    }
  };
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                std::atomic<uint32_t>::is_always_lock_free);
  struct Domain {
    std::string path;
    uint64_t durable = 0;      // synced: admits writes
    uint64_t pending = 0;      // highest enqueued
    bool added = true;         // false while its DOMAIN_ADD is not yet durable
    std::shared_ptr<Op> last;  // latest unfinished ADVANCE (covers epochs up to `pending`)
  };

  // Group commit: whoever finds the journal idle with work queued becomes the leader and writes
  // and syncs everything queued so far; the others wait for their record's batch.
  // Returns with mu_ released when the record was done by another leader. Unchecked: it drops and
  // retakes mu_ through the caller's lock, which the analysis cannot follow.
  int wait_done(common::UniqueLock& lk, const std::shared_ptr<Op>& op)
      REQUIRES(mu_) NO_THREAD_SAFETY_ANALYSIS {
    bool gathered = false;
    while (!op->done.load(std::memory_order_acquire)) {
      if (busy_ || queue_.empty()) {
        // Woken by the batch that syncs this record, or to lead the next one: bumps of `wake`
        // happen under mu_, so none is missed between the unlock and the wait. The done check
        // after waking needs no mu_, so a batch's callers do not queue up on it.
        const uint32_t seen = op->wake.load(std::memory_order_relaxed);
        op->sleepers.fetch_add(1, std::memory_order_relaxed);
        lk.unlock();
        futex_wait(op->wake, seen);
        op->sleepers.fetch_sub(1, std::memory_order_relaxed);
        if (op->done.load(std::memory_order_acquire)) break;
        lk.lock();
      } else if (!gathered && queue_.size() < gather_target_) {
        // The callers of the previous batch were all woken together and are coming back with
        // their next records. Leading now would sync whoever queued first and leave the others
        // a whole fdatasync behind (batches would alternate, each half the callers). Give them a
        // moment, far less than a sync, to join.
        gathered = true;
        gatherers_++;
        gather_cv_.wait_for(lk.native(), kGatherWindow, [&]() REQUIRES(mu_) {
          return busy_ || op->done || queue_.size() >= gather_target_;
        });
        gatherers_--;
      } else {
        lead(lk);
      }
    }
    return op->result;
  }

  // After queue_ grew.
  void enqueued() REQUIRES(mu_) {
    if (gatherers_ > 0 && queue_.size() >= gather_target_) gather_cv_.notify_all();
  }

  // Unchecked: drops mu_ around its I/O through the caller's lock (see wait_done).
  void lead(common::UniqueLock& lk) REQUIRES(mu_) NO_THREAD_SAFETY_ANALYSIS {
    busy_ = true;
    std::vector<std::shared_ptr<Op>> batch(queue_.begin(), queue_.end());
    queue_.clear();
    for (const auto& op : batch) async_queued_ -= op->async;
    int rc = EIO;
    if (!poisoned_) {
      lk.unlock();
      std::string buf;
      uint32_t chain = chain_;
      for (const auto& op : batch) format::append_record(&buf, &chain, op->rec);
      rc = journal_->append(buf.data(), buf.size());
      const bool tried_sync = rc == 0;
      auto t0 = std::chrono::steady_clock::now();
      if (rc == 0) rc = journal_->sync();
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rc == 0) chain_ = chain;
      lk.lock();
      if (tried_sync) {
        size_t b = 0;
        while (b + 1 < Stats::kNumSyncBuckets && secs > Stats::kSyncBuckets[b]) b++;
        if (secs <= Stats::kSyncBuckets[b]) stats_.sync_le[b]++;  // beyond the last: +Inf only
        stats_.sync_seconds_sum += secs;
      }
      stats_.records += batch.size();
      journal_size_ += buf.size();
      if (tried_sync) stats_.syncs++;
      if (tried_sync && rc != 0) stats_.sync_failures++;
    }
    finish(batch, rc, false);
    // The wake-ups outside mu_: the callers woken do not need it, the next ones to queue do.
    lk.unlock();
    for (const auto& op : batch) op->wake_sleepers();
    lk.lock();
    run_ready(lk);
    // Next batch: those already queued plus this batch's callers, who will be back shortly.
    gather_target_ = batch.size() + queue_.size();
    if (rc != 0) {
      // Never retry a failed fsync and trust it: the kernel may have dropped the dirty pages and
      // a second fsync would "succeed" without them.
      poison();
    } else if (opts_.compact_threshold_bytes > 0 && journal_size_ > opts_.compact_threshold_bytes &&
               journal_size_ >= retry_compaction_at_) {
      bool kept = false;
      if (write_fresh(lk, &kept) != 0) {
        if (!kept) {
          poison();
        } else {
          // Short of space, most likely: the journal stays valid and keeps its reserve; try
          // again after a while rather than on every batch.
          retry_compaction_at_ = journal_size_ + opts_.compact_threshold_bytes / 8;
        }
      }
    }
    if (rc == 0 && journal_size_ + kJournalReserve / 2 > reserved_end_) {
      lk.unlock();
      keep_reserve();
      lk.lock();
    }
    release_journal();
    run_ready(lk);  // those a poisoning failed
  }

  // What advance() returns without a new record (>= 0: unknown domain, already durable,
  // poisoned), or -1 with *op the record to wait for: a queued or in-flight one that already
  // covers epoch (its outcome is shared rather than a record written that would not rise above
  // it), else a new one queued here, marked async when advance_async queued it.
  int queue_advance(uint32_t id, uint64_t epoch, bool async, std::shared_ptr<Op>* op)
      REQUIRES(mu_) {
    auto it = domains_.find(id);
    if (it == domains_.end()) return EINVAL;
    Domain& d = it->second;
    if (epoch <= d.durable) return 0;  // already durable: needs no new durability
    if (poisoned_) return EIO;
    if (epoch <= d.pending && d.last != nullptr) {
      *op = d.last;
      return -1;
    }
    *op = std::make_shared<Op>();
    (*op)->rec.type = format::kAdvance;
    (*op)->rec.id = id;
    (*op)->rec.epoch = epoch;
    (*op)->async = async;
    d.pending = epoch;
    d.last = *op;
    queue_.push_back(*op);
    async_queued_ += async;
    enqueued();
    return -1;
  }

  // Runs the callbacks of finished advance_async calls, without mu_. Unchecked: drops mu_ through
  // the caller's lock.
  void run_ready(common::UniqueLock& lk) REQUIRES(mu_) NO_THREAD_SAFETY_ANALYSIS {
    while (!ready_.empty()) {
      std::vector<std::pair<Done, int>> ready;
      ready.swap(ready_);
      lk.unlock();
      for (auto& [done, rc] : ready) done(rc);
      lk.lock();
    }
  }

  // The committer: leads the batches of records queued by advance_async, whose callers do not
  // wait to lead them.
  void commit() {
    pthread_setname_np(pthread_self(), "fencefs-journal");  // told apart from the daemon's others
    common::UniqueLock lk(mu_);
    for (;;) {
      if (async_queued_ > 0 && !busy_) {
        lead(lk);
      } else if (stopping_ && async_queued_ == 0) {
        return;
      } else {
        committer_cv_.wait(lk.native());
      }
    }
  }

  // Under mu_, by the owner of busy_: hands the journal to the callers of the first queued
  // record (one of them leads the next batch), and to rewrite() or the destructor if waiting.
  void release_journal() REQUIRES(mu_) {
    busy_ = false;
    cv_.notify_all();
    if (!queue_.empty()) {
      queue_.front()->wake_up();
    }
    if (async_queued_ > 0) committer_cv_.notify_one();
  }

  // Owner of the journal file (busy_, or during init): extend the allocated room past its end.
  void keep_reserve() {
    uint64_t end = journal_size_ + kJournalReserve;
    if (journal_->reserve(end) == 0) reserved_end_ = end;
  }

  // Marks a batch done and moves the durable/pending epochs. Under mu_. Without wake, the caller
  // wakes the sleepers of the batch (wake_sleepers) later.
  void finish(const std::vector<std::shared_ptr<Op>>& batch, int rc, bool wake = true)
      REQUIRES(mu_) {
    for (const auto& op : batch) {
      op->result = rc;
      op->done.store(true, std::memory_order_release);
      for (auto& done : op->dones) ready_.emplace_back(std::move(done), rc);
      op->dones.clear();
      if (wake) {
        op->wake_up();
      } else {
        op->bump();
      }
      auto it = domains_.find(op->rec.id);
      if (it == domains_.end()) continue;
      Domain& d = it->second;
      if (op->rec.type == format::kAdvance) {
        if (rc == 0) d.durable = std::max(d.durable, op->rec.epoch);
        if (d.last == op) {
          d.last.reset();
          d.pending = d.durable;
        }
      } else if (op->rec.type == format::kDomainAdd && !d.added) {
        if (rc == 0) {
          d.added = true;
        } else {
          paths_.erase(d.path);
          domains_.erase(it);
        }
      }
    }
  }

  // Under mu_: refuse all further durability until rewrite() succeeds.
  void poison() REQUIRES(mu_) {
    poisoned_ = true;
    std::vector<std::shared_ptr<Op>> queued(queue_.begin(), queue_.end());
    queue_.clear();
    async_queued_ = 0;
    finish(queued, EIO);
  }

  // Compaction and rewrite(): the durable state as a snapshot of generation g+1 (temp file, sync,
  // rename, sync dir), then an empty journal of generation g+1 the same way. Called with mu_ held
  // and busy_ owned; drops mu_ during the I/O. Both new files are written (and the journal's
  // reserve allocated) before anything is renamed: until then a failure, such as a full disk,
  // leaves the current journal in force (*kept), with the room it has.
  // Unchecked: drops mu_ around its I/O through the caller's lock (see wait_done).
  int write_fresh(common::UniqueLock& lk, bool* kept) REQUIRES(mu_) NO_THREAD_SAFETY_ANALYSIS {
    std::vector<DomainRecord> snap;
    for (const auto& [id, d] : domains_) {
      if (d.added) snap.push_back(DomainRecord{id, d.path, d.durable});
    }
    const uint64_t gen = generation_ + 1;
    const Incarnation inc = inc_;
    lk.unlock();
    const std::string sbytes = snapshot_bytes(inc, gen, snap);
    uint32_t seed = 0;
    const std::string jbytes = journal_header(inc, gen, &seed);
    std::unique_ptr<File> fresh, snap_file;
    *kept = true;
    int rc = write_synced(fs_, p_.journal_tmp, jbytes, &fresh);
    if (rc == 0) {
      rc = fresh->reserve(jbytes.size() + kJournalReserve);
      if (rc == EOPNOTSUPP) rc = 0;
    }
    if (rc == 0) rc = write_synced(fs_, p_.snapshot_tmp, sbytes, &snap_file);
    if (rc == 0) snap_file->close();
    if (rc == 0) rc = fs_.rename(p_.snapshot_tmp, p_.snapshot);
    // Once the new snapshot is in place the old journal is covered (and ignored by recovery):
    // from here on, any failure leaves the store poisoned so nothing is appended to it.
    if (rc == 0) {
      *kept = false;
      rc = fs_.sync_dir(p_.dir);
      if (rc == 0) rc = fs_.rename(p_.journal_tmp, p_.journal);
      if (rc == 0) rc = fs_.sync_dir(p_.dir);
    }
    // Only want of space keeps the journal in force: any other failure (a failed fsync above
    // all) says the disk cannot be trusted.
    if (rc != 0 && rc != ENOSPC && rc != EDQUOT) *kept = false;
    if (rc != 0 && *kept) {
      if (fresh) fresh->close();
      fs_.remove(p_.journal_tmp);
      fs_.remove(p_.snapshot_tmp);
    }
    if (rc == 0) {
      journal_->close();
      journal_ = std::move(fresh);
      chain_ = seed;
    }
    lk.lock();
    if (rc == 0) {
      generation_ = gen;
      journal_size_ = jbytes.size();
      reserved_end_ = journal_size_ + kJournalReserve;
      retry_compaction_at_ = 0;
      snapshot_size_ = sbytes.size();
      stats_.compactions++;
    }
    return rc;
  }

  const Paths p_;
  const Options opts_;
  FileLayer& fs_;

  mutable common::Mutex mu_;
  std::condition_variable cv_;
  std::map<uint32_t, Domain> domains_ GUARDED_BY(mu_);
  std::unordered_set<std::string> paths_ GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Op>> queue_ GUARDED_BY(mu_);
  size_t gather_target_ GUARDED_BY(mu_) =
      0;                               // records the next batch waits for (briefly): see wait_done
  int gatherers_ GUARDED_BY(mu_) = 0;  // would-be leaders waiting for the batch to fill
  std::condition_variable gather_cv_;
  bool busy_ GUARDED_BY(mu_) = false;  // a leader, compaction or rewrite owns the journal file
  size_t async_queued_ GUARDED_BY(mu_) = 0;  // records in queue_ that advance_async queued
  std::vector<std::pair<Done, int>> ready_ GUARDED_BY(mu_);  // callbacks due, with their results
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread committer_ GUARDED_BY(mu_);  // see start()
  std::condition_variable committer_cv_;
  std::atomic<bool> poisoned_{false};  // written under mu_
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  Incarnation inc_{};
  uint64_t journal_size_ = 0;
  uint64_t snapshot_size_ GUARDED_BY(mu_) = 0;
  Stats stats_ GUARDED_BY(mu_);
  RecoveryReport report_;

  // Owned by the holder of busy_.
  std::unique_ptr<File> journal_;
  uint32_t chain_ = 0;
  uint64_t reserved_end_ = 0;         // blocks allocated up to here
  uint64_t retry_compaction_at_ = 0;  // after a compaction failed for want of space
};

// A new lineage: the empty journal first, then the snapshot (see load(): a lone empty journal
// means an interrupted initialisation).
int initialise(const Paths& p, FileLayer& fs, Incarnation* inc, std::unique_ptr<File>* journal,
               uint32_t* chain, uint64_t* journal_size, uint64_t* snapshot_size) {
  int rc = format::random_incarnation(inc);
  if (rc != 0) return rc;
  const std::string jbytes = journal_header(*inc, 0, chain);
  const std::string sbytes = snapshot_bytes(*inc, 0, {DomainRecord{0, "/", 0}});
  rc = replace_file(fs, p.journal_tmp, p.journal, p.dir, jbytes, journal);
  if (rc == 0) rc = replace_file(fs, p.snapshot_tmp, p.snapshot, p.dir, sbytes, nullptr);
  *journal_size = jbytes.size();
  *snapshot_size = sbytes.size();
  return rc;
}

}  // namespace

int StateStore::durable_epoch(uint32_t domain_id, uint64_t* epoch) const {
  for (const auto& d : domains()) {
    if (d.id == domain_id) {
      *epoch = d.epoch;
      return 0;
    }
  }
  return EINVAL;
}

// long: the three ways a state opens (created, replaced stale journal, cut torn tail) share the
// recovery report they fill.
std::unique_ptr<StateStore> StateStore::open(const std::string& dir, const Options& opts,
                                             FileLayer& fs, std::string* error) {
  const Paths p(dir);
  auto fail = [&](std::string msg) -> std::unique_ptr<StateStore> {
    if (error != nullptr) *error = std::move(msg);
    return nullptr;
  };
  RecoveryReport rep;
  if (!fs.exists(p.dir)) {
    if (!opts.create_if_missing) return fail("no state in " + p.dir + " (use --init to create)");
    int rc = fs.mkdir(p.dir);
    if (rc != 0 && rc != EEXIST) return fail(p.dir + ": cannot create: " + errstr(rc));
    rc = fs.sync_dir(parent_dir(p.dir));
    if (rc != 0) return fail(parent_dir(p.dir) + ": cannot sync directory: " + errstr(rc));
  }
  Loaded L = load(p, fs);
  if (L.kind == Loaded::kFatal) return fail(L.message + refusal_hint(p.dir));

  auto store = std::make_unique<Store>(p, opts, fs);
  std::unique_ptr<File> journal;
  if (L.kind == Loaded::kNoState) {
    if (!opts.create_if_missing) return fail(L.message);
    Incarnation inc;
    uint32_t chain = 0;
    uint64_t jsize = 0, ssize = 0;
    int rc = initialise(p, fs, &inc, &journal, &chain, &jsize, &ssize);
    if (rc != 0) return fail(p.dir + ": cannot initialise the state: " + errstr(rc));
    rep.created = true;
    rep.incarnation = format::incarnation_hex(inc);
    rep.torn_tail_offset = jsize;
    rep.messages.push_back("initialised a new state in " + p.dir + " (incarnation " +
                           rep.incarnation + ")");
    ReplayState s;
    s.add(0, "/", 0);
    store->init(s, std::move(journal), chain, inc, 0, jsize, ssize, std::move(rep));
    return store;
  }

  const Incarnation inc = L.snapshot_header.incarnation;
  const uint64_t gen = L.snapshot_header.generation;
  rep.incarnation = format::incarnation_hex(inc);
  rep.generation = gen;
  rep.records_replayed = L.records;
  for (const auto& tmp : L.leftovers) {
    // Temp files are never part of the state: an interrupted compaction left them.
    int rc = fs.remove(tmp);
    rep.messages.push_back(rc == 0 || rc == ENOENT
                               ? "removed " + tmp + " (left by an interrupted compaction)"
                               : "could not remove " + tmp + ": " + errstr(rc));
  }
  uint32_t chain = L.chain;
  uint64_t jsize = L.journal_valid_end;
  if (L.stale_journal) {
    const std::string fresh = journal_header(inc, gen, &chain);
    int rc = replace_file(fs, p.journal_tmp, p.journal, p.dir, fresh, &journal);
    if (rc != 0) return fail(p.journal + ": cannot replace the stale journal: " + errstr(rc));
    rep.messages.push_back(p.journal + ": generation " +
                           std::to_string(L.journal_header.generation) +
                           " is older than the snapshot's (" + std::to_string(gen) +
                           "): covered by the snapshot (interrupted compaction); replaced by an "
                           "empty journal");
    jsize = fresh.size();
  } else if (L.torn) {
    // Cut the tail durably (the FileLayer has no truncate: copy the valid prefix and rename).
    const std::string prefix = L.journal.substr(0, L.journal_valid_end);
    int rc = replace_file(fs, p.journal_tmp, p.journal, p.dir, prefix, &journal);
    if (rc != 0) return fail(p.journal + ": cannot cut the torn tail: " + errstr(rc));
    rep.torn_tail_cut = true;
    rep.messages.push_back(p.journal + ": torn tail cut at byte " +
                           std::to_string(L.journal_valid_end) + " (" + L.torn_reason + "; " +
                           std::to_string(L.journal.size() - L.journal_valid_end) +
                           " bytes discarded)");
  } else {
    // What was read may never have reached the disk: appended by a daemon that died before its
    // fdatasync, or whose fdatasync failed (the kernel then drops the dirty state, and a later
    // fsync of the same file succeeds without writing it), or renamed in without the directory's
    // sync. Replayed, it is trusted at once, so it is made durable first, in a new file.
    int rc = replace_file(fs, p.journal_tmp, p.journal, p.dir,
                          L.journal.substr(0, L.journal_valid_end), &journal);
    if (rc == ENOSPC || rc == EDQUOT) {
      // A full disk: the file in place, synced, covers all but a failed fsync's lost pages.
      const int why = rc;
      fs.remove(p.journal_tmp);
      journal = fs.open_append(p.journal, false, &rc);
      if (journal == nullptr) return fail(p.journal + ": cannot open: " + errstr(rc));
      if ((rc = journal->sync()) != 0 || (rc = fs.sync_dir(p.dir)) != 0)
        return fail(p.journal + ": cannot make the replayed journal durable: " + errstr(rc));
      rep.messages.push_back(p.journal + ": synced in place, not rewritten (" + errstr(why) +
                             "): a record whose fdatasync failed before this start may still be "
                             "lost at a power cut");
    } else if (rc != 0) {
      return fail(p.journal + ": cannot make the replayed journal durable: " + errstr(rc));
    }
  }
  rep.torn_tail_offset = jsize;
  rep.messages.push_back("recovered " + std::to_string(L.state.by_id.size()) + " domains from " +
                         p.snapshot + " (generation " + std::to_string(gen) + ") and " +
                         std::to_string(L.records) + " records of " + p.journal);
  store->init(L.state, std::move(journal), chain, inc, gen, jsize, L.snapshot_size, std::move(rep));
  return store;
}

}  // namespace fencefs::journal
