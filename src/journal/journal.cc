#include "journal/journal.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "journal/format.h"

namespace fencefs::journal {
namespace {

using format::FileHeader;
using format::FileKind;
using format::Incarnation;
using format::Record;
using format::ScanEnd;
using format::ScanResult;

std::string errstr(int e) { return std::error_code(e, std::generic_category()).message(); }

std::string strip_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string parent_dir(const std::string& dir) {
  size_t slash = dir.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return dir.substr(0, slash);
}

struct Paths {
  explicit Paths(const std::string& d)
      : dir(strip_slashes(d)),
        snapshot(dir + "/snapshot"),
        journal(dir + "/journal"),
        snapshot_tmp(dir + "/snapshot.tmp"),
        journal_tmp(dir + "/journal.tmp") {}
  std::string dir, snapshot, journal, snapshot_tmp, journal_tmp;
};

std::string at(const std::string& file, uint64_t offset, const std::string& reason) {
  return file + ": " + reason + " at byte " + std::to_string(offset);
}

std::string refusal_hint(const std::string& dir) {
  return "; refusing to open. Inspect with `fencectl verify BACKING --state " + dir +
         "`; the audited way out is `fencectl recover --state " + dir +
         " --floor N` (docs/journal-format.md)";
}

// Domains and epochs while replaying files.
struct ReplayState {
  std::unordered_map<uint32_t, DomainRecord> by_id;
  std::unordered_set<std::string> paths;

  std::vector<DomainRecord> sorted() const {
    std::vector<DomainRecord> v;
    v.reserve(by_id.size());
    for (const auto& [id, d] : by_id) v.push_back(d);
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    return v;
  }
  void add(uint32_t id, const std::string& path, uint64_t epoch) {
    by_id[id] = DomainRecord{id, path, epoch};
    paths.insert(path);
  }
};

// The strict replay rules of a journal record (open() and check()).
std::string apply_journal_record(ReplayState* s, const Record& r) {
  switch (r.type) {
    case format::kAdvance: {
      auto it = s->by_id.find(r.id);
      if (it == s->by_id.end()) return "ADVANCE for unknown domain id " + std::to_string(r.id);
      if (r.epoch <= it->second.epoch) {
        return "ADVANCE of domain " + std::to_string(r.id) + " to epoch " +
               std::to_string(r.epoch) + ", not above its epoch " +
               std::to_string(it->second.epoch);
      }
      it->second.epoch = r.epoch;
      return "";
    }
    case format::kDomainAdd:
      if (s->by_id.count(r.id)) return "DOMAIN_ADD of existing domain id " + std::to_string(r.id);
      if (s->paths.count(r.path)) return "DOMAIN_ADD of existing domain path " + r.path;
      s->add(r.id, r.path, 0);
      return "";
    default:
      return "record type " + std::to_string(r.type) + " is not allowed in a journal";
  }
}

std::string snapshot_bytes(const Incarnation& inc, uint64_t generation,
                           const std::vector<DomainRecord>& domains) {
  FileHeader h;
  h.incarnation = inc;
  h.generation = generation;
  uint32_t chain = 0;
  std::string out = format::encode_header(FileKind::kSnapshot, h, &chain);
  for (const auto& d : domains) {
    Record r;
    r.type = format::kDomainState;
    r.id = d.id;
    r.epoch = d.epoch;
    r.path = d.path;
    format::append_record(&out, &chain, r);
  }
  Record end;
  end.type = format::kSnapshotEnd;
  end.count = static_cast<uint32_t>(domains.size());
  format::append_record(&out, &chain, end);
  return out;
}

std::string journal_header(const Incarnation& inc, uint64_t generation, uint32_t* chain) {
  FileHeader h;
  h.incarnation = inc;
  h.generation = generation;
  return format::encode_header(FileKind::kJournal, h, chain);
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

struct SnapshotLoad {
  bool ok = false;
  FileHeader header;
  ReplayState state;
  std::string error;  // "PATH: reason at byte N"
};

SnapshotLoad load_snapshot(const std::string& path, std::string_view data) {
  SnapshotLoad out;
  uint32_t seed = 0;
  std::string why = format::decode_header(data, FileKind::kSnapshot, &out.header, &seed);
  if (!why.empty()) {
    out.error = at(path, 0, why);
    return out;
  }
  bool seen_end = false;
  uint32_t count = 0;
  ScanResult sr = format::scan(data, seed, [&](uint64_t, const Record& r) -> std::string {
    if (seen_end) return "record after SNAPSHOT_END";
    if (r.type == format::kSnapshotEnd) {
      if (r.count != count) {
        return "SNAPSHOT_END counts " + std::to_string(r.count) + " domains but " +
               std::to_string(count) + " precede it";
      }
      seen_end = true;
      return "";
    }
    if (r.type != format::kDomainState) {
      return "record type " + std::to_string(r.type) + " is not allowed in a snapshot";
    }
    if (out.state.by_id.count(r.id)) return "duplicate domain id " + std::to_string(r.id);
    if (out.state.paths.count(r.path)) return "duplicate domain path " + r.path;
    out.state.add(r.id, r.path, r.epoch);
    count++;
    return "";
  });
  // A snapshot is synced before it is renamed into place, so unlike the journal it can have no
  // torn tail: anything short of a clean end is corruption.
  if (sr.end != ScanEnd::kClean) {
    out.error = at(path, sr.bad_offset, sr.reason);
    return out;
  }
  if (!seen_end) {
    out.error = at(path, sr.valid_end, "missing SNAPSHOT_END (truncated snapshot)");
    return out;
  }
  auto root = out.state.by_id.find(0);
  if (root == out.state.by_id.end() || root->second.path != "/") {
    out.error = at(path, format::kHeaderSize, "no root domain (id 0, path \"/\")");
    return out;
  }
  out.ok = true;
  return out;
}

// Everything open() and check() learn from the files, without writing anything.
struct Loaded {
  enum Kind { kOk, kNoState, kFatal } kind = kOk;
  std::string message;  // kNoState: why; kFatal: "PATH: reason at byte N"
  ReplayState state;    // from the valid prefixes (also when kFatal)
  FileHeader snapshot_header;
  FileHeader journal_header;
  uint64_t snapshot_size = 0;
  std::string journal;  // the journal's bytes
  uint64_t journal_valid_end = 0;
  uint32_t chain = 0;  // chained CRC at journal_valid_end
  uint64_t records = 0;
  bool torn = false;
  std::string torn_reason;
  bool stale_journal = false;          // generation below the snapshot's: covered by it
  std::vector<std::string> leftovers;  // *.tmp files of an interrupted compaction
  bool unreadable = false;             // a file could not be read at all
};

Loaded load(const Paths& p, FileLayer& fs) {
  Loaded L;
  if (!fs.exists(p.dir)) {
    L.kind = Loaded::kNoState;
    L.message = "no state in " + p.dir + " (use --init to create)";
    return L;
  }
  for (const auto* tmp : {&p.snapshot_tmp, &p.journal_tmp}) {
    if (fs.exists(*tmp)) L.leftovers.push_back(*tmp);
  }
  std::string snap;
  int rs = fs.read_file(p.snapshot, &snap);
  int rj = fs.read_file(p.journal, &L.journal);
  auto fatal = [&](std::string msg) {
    L.kind = Loaded::kFatal;
    L.message = std::move(msg);
    return L;
  };
  L.unreadable = (rs != 0 && rs != ENOENT) || (rj != 0 && rj != ENOENT);
  if (rs != 0 && rs != ENOENT) return fatal(p.snapshot + ": cannot read: " + errstr(rs));
  if (rj != 0 && rj != ENOENT) return fatal(p.journal + ": cannot read: " + errstr(rj));
  if (rs == ENOENT && rj == ENOENT) {
    L.kind = Loaded::kNoState;
    L.message = "no state in " + p.dir + " (use --init to create)";
    return L;
  }
  if (rs == ENOENT) {
    // Initialisation writes the (empty) journal first and the snapshot second, so an empty
    // generation-0 journal alone is an interrupted initialisation, which held nothing.
    FileHeader h;
    uint32_t seed = 0;
    std::string why = format::decode_header(L.journal, FileKind::kJournal, &h, &seed);
    if (why.empty() && h.generation == 0 && L.journal.size() == format::kHeaderSize) {
      L.kind = Loaded::kNoState;
      L.message = "no state in " + p.dir +
                  " (an initialisation was interrupted before it completed; use --init to create)";
      return L;
    }
    return fatal(p.snapshot + ": missing while " + p.journal +
                 " exists (the journal alone cannot be trusted)");
  }
  L.snapshot_size = snap.size();
  SnapshotLoad s = load_snapshot(p.snapshot, snap);
  L.snapshot_header = s.header;
  L.state = std::move(s.state);
  if (!s.ok) return fatal(s.error);
  if (rj == ENOENT) {
    return fatal(p.journal + ": missing while " + p.snapshot +
                 " exists (records since the last snapshot may be lost)");
  }
  std::string why =
      format::decode_header(L.journal, FileKind::kJournal, &L.journal_header, &L.chain);
  if (!why.empty()) return fatal(at(p.journal, 0, why));
  if (L.journal_header.incarnation != L.snapshot_header.incarnation) {
    return fatal(p.journal + ": incarnation " +
                 format::incarnation_hex(L.journal_header.incarnation) + " differs from " +
                 p.snapshot + " incarnation " +
                 format::incarnation_hex(L.snapshot_header.incarnation) +
                 " (files of different state lineages)");
  }
  const uint64_t jg = L.journal_header.generation;
  const uint64_t sg = L.snapshot_header.generation;
  if (jg > sg) {
    return fatal(p.journal + ": generation " + std::to_string(jg) + " is newer than " + p.snapshot +
                 " generation " + std::to_string(sg) +
                 " (the snapshot is stale, e.g. restored from an older copy)");
  }
  if (jg < sg) {
    // Compaction renames the new snapshot into place before the new journal: everything in an
    // older journal is already in the snapshot.
    L.stale_journal = true;
    L.journal_valid_end = L.journal.size();
    return L;
  }
  ScanResult sr = format::scan(L.journal, L.chain, [&](uint64_t, const Record& r) {
    return apply_journal_record(&L.state, r);
  });
  L.records = sr.records;
  L.chain = sr.chain;
  L.journal_valid_end = sr.valid_end;
  if (sr.end == ScanEnd::kCorrupt) return fatal(at(p.journal, sr.bad_offset, sr.reason));
  if (sr.end == ScanEnd::kTorn) {
    L.torn = true;
    L.torn_reason = sr.reason;
  }
  return L;
}

// How long a would-be leader waits for the callers of the previous batch to queue their next
// records. Far below an fdatasync (0.1 ms on fast flash, milliseconds on disks), so it only ever
// trades a sliver of latency for a batch that would otherwise need its own sync.
constexpr auto kGatherWindow = std::chrono::microseconds(50);

class Store final : public StateStore {
 public:
  Store(const Paths& p, const Options& o, FileLayer& fs) : p_(p), opts_(o), fs_(fs) {}

  ~Store() override {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !busy_; });
    if (journal_ != nullptr) journal_->close();
  }

  // Takes over the recovered state; `journal` is open for appending at its valid end.
  void init(const ReplayState& s, std::unique_ptr<File> journal, uint32_t chain,
            const Incarnation& inc, uint64_t generation, uint64_t journal_size,
            uint64_t snapshot_size, RecoveryReport report) {
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
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<DomainRecord> v;
    for (const auto& [id, d] : domains_) {
      if (d.added) v.push_back(DomainRecord{id, d.path, d.durable});
    }
    return v;
  }

  int durable_epoch(uint32_t id, uint64_t* epoch) const override {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = domains_.find(id);
    if (it == domains_.end() || !it->second.added) return EINVAL;
    *epoch = it->second.durable;
    return 0;
  }

  const RecoveryReport& report() const override { return report_; }

  int advance(uint32_t id, uint64_t epoch) override {
    std::unique_lock<std::mutex> lk(mu_);
    auto it = domains_.find(id);
    if (it == domains_.end()) return EINVAL;
    Domain& d = it->second;
    if (epoch <= d.durable) return 0;  // already durable: needs no new durability
    if (poisoned_) return EIO;
    if (epoch <= d.pending && d.last != nullptr) {
      // A queued or in-flight record already covers this epoch: share its outcome rather than
      // write a record that would not rise above it.
      std::shared_ptr<Op> op = d.last;
      return wait_done(lk, op);
    }
    auto op = std::make_shared<Op>();
    op->rec.type = format::kAdvance;
    op->rec.id = id;
    op->rec.epoch = epoch;
    d.pending = epoch;
    d.last = op;
    queue_.push_back(op);
    enqueued();
    return wait_done(lk, op);
  }

  int add_domain(uint32_t id, const std::string& path) override {
    if (!format::valid_path(path)) return EINVAL;
    std::unique_lock<std::mutex> lk(mu_);
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
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !busy_; });
    busy_ = true;
    bool kept = false;
    int rc = write_fresh(lk, &kept);
    if (rc == 0) {
      poisoned_ = false;
    } else {
      poison();
    }
    busy_ = false;
    cv_.notify_all();
    return rc;
  }

  bool poisoned() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return poisoned_;
  }

  Stats stats() const override {
    std::lock_guard<std::mutex> lk(mu_);
    Stats s = stats_;
    s.journal_bytes = journal_size_;
    s.snapshot_bytes = snapshot_size_;
    return s;
  }

 private:
  struct Op {
    Record rec;
    bool done = false;
    int result = 0;
  };
  struct Domain {
    std::string path;
    uint64_t durable = 0;      // synced: admits writes
    uint64_t pending = 0;      // highest enqueued
    bool added = true;         // false while its DOMAIN_ADD is not yet durable
    std::shared_ptr<Op> last;  // latest unfinished ADVANCE (covers epochs up to `pending`)
  };

  // Group commit: whoever finds the journal idle with work queued becomes the leader and writes
  // and syncs everything queued so far; the others wait for their record's batch.
  int wait_done(std::unique_lock<std::mutex>& lk, const std::shared_ptr<Op>& op) {
    bool gathered = false;
    while (!op->done) {
      if (busy_ || queue_.empty()) {
        cv_.wait(lk);
      } else if (!gathered && queue_.size() < gather_target_) {
        // The callers of the previous batch were all woken together and are coming back with
        // their next records. Leading now would sync whoever queued first and leave the others
        // a whole fdatasync behind (batches would alternate, each half the callers). Give them a
        // moment, far less than a sync, to join.
        gathered = true;
        gatherers_++;
        gather_cv_.wait_for(lk, kGatherWindow,
                            [&] { return busy_ || op->done || queue_.size() >= gather_target_; });
        gatherers_--;
      } else {
        lead(lk);
      }
    }
    return op->result;
  }

  // Under mu_, after queue_ grew.
  void enqueued() {
    if (gatherers_ > 0 && queue_.size() >= gather_target_) gather_cv_.notify_all();
  }

  void lead(std::unique_lock<std::mutex>& lk) {
    busy_ = true;
    std::vector<std::shared_ptr<Op>> batch(queue_.begin(), queue_.end());
    queue_.clear();
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
    finish(batch, rc);
    // Next batch: those already queued plus this batch's callers, who will be back shortly.
    gather_target_ = batch.size() + queue_.size();
    if (rc != 0) {
      // Never retry a failed fsync and trust it: the kernel may have dropped the dirty pages and
      // a second fsync would "succeed" without them.
      poison();
    } else if (opts_.compact_threshold_bytes > 0 && journal_size_ > opts_.compact_threshold_bytes &&
               journal_size_ >= retry_compaction_at_) {
      cv_.notify_all();  // this batch is durable: its callers need not wait for the compaction
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
    busy_ = false;
    cv_.notify_all();
  }

  // Owner of the journal file (busy_, or during init): extend the allocated room past its end.
  void keep_reserve() {
    uint64_t end = journal_size_ + kJournalReserve;
    if (journal_->reserve(end) == 0) reserved_end_ = end;
  }

  // Marks a batch done and moves the durable/pending epochs. Under mu_.
  void finish(const std::vector<std::shared_ptr<Op>>& batch, int rc) {
    for (const auto& op : batch) {
      op->done = true;
      op->result = rc;
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
  void poison() {
    poisoned_ = true;
    std::vector<std::shared_ptr<Op>> queued(queue_.begin(), queue_.end());
    queue_.clear();
    finish(queued, EIO);
  }

  // Compaction and rewrite(): the durable state as a snapshot of generation g+1 (temp file, sync,
  // rename, sync dir), then an empty journal of generation g+1 the same way. Called with mu_ held
  // and busy_ owned; drops mu_ during the I/O. Both new files are written (and the journal's
  // reserve allocated) before anything is renamed: until then a failure, such as a full disk,
  // leaves the current journal in force (*kept), with the room it has.
  int write_fresh(std::unique_lock<std::mutex>& lk, bool* kept) {
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

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint32_t, Domain> domains_;
  std::unordered_set<std::string> paths_;
  std::deque<std::shared_ptr<Op>> queue_;
  size_t gather_target_ = 0;  // records the next batch waits for (briefly): see wait_done
  int gatherers_ = 0;         // would-be leaders waiting for the batch to fill
  std::condition_variable gather_cv_;
  bool busy_ = false;  // a leader, compaction or rewrite owns the journal file
  bool poisoned_ = false;
  uint64_t generation_ = 0;
  Incarnation inc_{};
  uint64_t journal_size_ = 0;
  uint64_t snapshot_size_ = 0;
  Stats stats_;
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
    int rc = 0;
    journal = fs.open_append(p.journal, false, &rc);
    if (journal == nullptr) return fail(p.journal + ": cannot open: " + errstr(rc));
  }
  rep.torn_tail_offset = jsize;
  rep.messages.push_back("recovered " + std::to_string(L.state.by_id.size()) + " domains from " +
                         p.snapshot + " (generation " + std::to_string(gen) + ") and " +
                         std::to_string(L.records) + " records of " + p.journal);
  store->init(L.state, std::move(journal), chain, inc, gen, jsize, L.snapshot_size, std::move(rep));
  return store;
}

int recover_offline(const std::string& dir, uint64_t floor, FileLayer& fs, std::string* report) {
  const Paths p(dir);
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  auto done = [&](int rc) {
    if (report != nullptr) *report = out;
    return rc;
  };
  if (!fs.exists(p.dir)) {
    line("no state directory " + p.dir + ": nothing to recover (use --init to create)");
    return done(ENOENT);
  }
  std::string snap, jrnl;
  int rs = fs.read_file(p.snapshot, &snap);
  int rj = fs.read_file(p.journal, &jrnl);
  if (rs != 0 && rs != ENOENT) {
    line(p.snapshot + ": cannot read: " + errstr(rs));
    return done(rs);
  }
  if (rj != 0 && rj != ENOENT) {
    line(p.journal + ": cannot read: " + errstr(rj));
    return done(rj);
  }
  if (rs == ENOENT && rj == ENOENT) {
    line("no state in " + p.dir + ": nothing to recover (use --init to create)");
    return done(ENOENT);
  }

  // Salvage: the longest valid prefix of each file, merged by taking the highest epoch seen
  // (raising an epoch can only fence more, never admit a superseded owner).
  ReplayState s;
  uint64_t max_gen = 0;
  bool any_header = false;
  Incarnation snap_inc{};
  bool have_snap_inc = false;
  if (rs == ENOENT) {
    line(p.snapshot + ": missing");
  } else {
    FileHeader h;
    uint32_t seed = 0;
    std::string why = format::decode_header(snap, FileKind::kSnapshot, &h, &seed);
    if (!why.empty()) {
      line(at(p.snapshot, 0, why) + ": nothing salvaged from it");
    } else {
      any_header = true;
      max_gen = h.generation;
      snap_inc = h.incarnation;
      have_snap_inc = true;
      bool seen_end = false;
      ScanResult sr = format::scan(snap, seed, [&](uint64_t, const Record& r) -> std::string {
        if (seen_end) return "record after SNAPSHOT_END";
        if (r.type == format::kSnapshotEnd) {
          seen_end = true;
          return "";
        }
        if (r.type != format::kDomainState) return "record type not allowed in a snapshot";
        if (s.by_id.count(r.id) || s.paths.count(r.path)) return "duplicate domain";
        s.add(r.id, r.path, r.epoch);
        return "";
      });
      line(p.snapshot + ": generation " + std::to_string(h.generation) + ", incarnation " +
           format::incarnation_hex(h.incarnation) + ", " + std::to_string(s.by_id.size()) +
           " domains salvaged from " + std::to_string(sr.valid_end) + " of " +
           std::to_string(snap.size()) + " bytes");
      if (sr.end != ScanEnd::kClean) {
        line(at(p.snapshot, sr.bad_offset, sr.reason) + ": the rest of the snapshot is ignored");
      } else if (!seen_end) {
        line(at(p.snapshot, sr.valid_end, "missing SNAPSHOT_END (truncated snapshot)"));
      }
    }
  }
  if (rj == ENOENT) {
    line(p.journal + ": missing");
  } else {
    FileHeader h;
    uint32_t seed = 0;
    std::string why = format::decode_header(jrnl, FileKind::kJournal, &h, &seed);
    if (!why.empty()) {
      line(at(p.journal, 0, why) + ": nothing salvaged from it");
    } else {
      any_header = true;
      max_gen = std::max(max_gen, h.generation);
      if (have_snap_inc && h.incarnation != snap_inc) {
        line(p.journal + ": incarnation " + format::incarnation_hex(h.incarnation) +
             " differs from the snapshot's; its records are merged anyway (highest epoch wins)");
      }
      uint64_t advances = 0, adds = 0;
      ScanResult sr = format::scan(jrnl, seed, [&](uint64_t, const Record& r) -> std::string {
        if (r.type == format::kAdvance) {
          auto it = s.by_id.find(r.id);
          if (it == s.by_id.end()) return "ADVANCE for unknown domain id " + std::to_string(r.id);
          it->second.epoch = std::max(it->second.epoch, r.epoch);
          advances++;
          return "";
        }
        if (r.type == format::kDomainAdd) {
          auto it = s.by_id.find(r.id);
          if (it != s.by_id.end() && it->second.path == r.path) return "";  // already known
          if (it != s.by_id.end() || s.paths.count(r.path)) {
            return "DOMAIN_ADD conflicting with a known domain (id " + std::to_string(r.id) +
                   ", path " + r.path + ")";
          }
          s.add(r.id, r.path, 0);
          adds++;
          return "";
        }
        return "record type " + std::to_string(r.type) + " is not allowed in a journal";
      });
      line(p.journal + ": generation " + std::to_string(h.generation) + ", " +
           std::to_string(sr.records) + " records salvaged (" + std::to_string(advances) +
           " advances, " + std::to_string(adds) + " new domains) from " +
           std::to_string(sr.valid_end) + " of " + std::to_string(jrnl.size()) + " bytes");
      if (sr.end == ScanEnd::kCorrupt) {
        line(at(p.journal, sr.bad_offset, "corruption: " + sr.reason) +
             ": the rest of the journal is ignored");
      } else if (sr.end == ScanEnd::kTorn) {
        line(at(p.journal, sr.bad_offset, "torn tail: " + sr.reason) + ": cut");
      }
    }
  }
  if (!s.by_id.count(0)) {
    if (s.paths.count("/")) {
      line("the path \"/\" belongs to a domain other than 0; refusing to guess");
      return done(EUCLEAN);
    }
    s.add(0, "/", 0);
    line("root domain 0 \"/\" was not salvaged: recreated at epoch 0 (before the floor)");
  }

  uint64_t raised = 0;
  for (auto& [id, d] : s.by_id) {
    if (d.epoch < floor) {
      d.epoch = floor;
      raised++;
    }
  }
  line("floor " + std::to_string(floor) + ": raised " + std::to_string(raised) + " of " +
       std::to_string(s.by_id.size()) + " domains");

  Incarnation inc;
  int rc = format::random_incarnation(&inc);
  if (rc != 0) {
    line("cannot get random bytes for a new incarnation: " + errstr(rc));
    return done(rc);
  }
  const uint64_t gen = any_header ? max_gen + 1 : 1;
  const std::vector<DomainRecord> domains = s.sorted();
  const std::string sbytes = snapshot_bytes(inc, gen, domains);
  uint32_t seed = 0;
  const std::string jbytes = journal_header(inc, gen, &seed);
  // Both temp files durable first, then both renames and one directory sync. A crash between
  // the renames leaves files of two incarnations, which open() refuses: run recover again.
  auto write_tmp = [&](const std::string& path, const std::string& bytes) {
    int err = 0;
    std::unique_ptr<File> f = fs.open_append(path, true, &err);
    if (f == nullptr) return err != 0 ? err : EIO;
    err = f->append(bytes.data(), bytes.size());
    if (err == 0) err = f->sync();
    int cerr = f->close();
    return err != 0 ? err : cerr;
  };
  rc = write_tmp(p.snapshot_tmp, sbytes);
  if (rc == 0) rc = write_tmp(p.journal_tmp, jbytes);
  if (rc == 0) rc = fs.rename(p.snapshot_tmp, p.snapshot);
  if (rc == 0) rc = fs.rename(p.journal_tmp, p.journal);
  if (rc == 0) rc = fs.sync_dir(p.dir);
  if (rc != 0) {
    line("writing the recovered state failed: " + errstr(rc) + " (run recover again)");
    return done(rc);
  }
  line("wrote a new state: incarnation " + format::incarnation_hex(inc) + ", generation " +
       std::to_string(gen));
  for (const auto& d : domains) {
    line("  domain " + std::to_string(d.id) + " " + d.path + ": epoch " + std::to_string(d.epoch));
  }
  return done(0);
}

CheckResult check(const std::string& dir, FileLayer& fs) {
  const Paths p(dir);
  CheckResult r;
  Loaded L = load(p, fs);
  if (L.kind == Loaded::kNoState) {
    r.findings.push_back(L.message);
    return r;
  }
  r.readable = !L.unreadable;
  if (L.kind == Loaded::kFatal) r.findings.push_back(L.message);
  if (L.torn) {
    r.findings.push_back(at(p.journal, L.journal_valid_end, "torn tail (" + L.torn_reason + ")") +
                         ": open() will cut " +
                         std::to_string(L.journal.size() - L.journal_valid_end) + " bytes");
  }
  if (L.stale_journal) {
    r.findings.push_back(p.journal + ": generation " + std::to_string(L.journal_header.generation) +
                         " is older than " + p.snapshot + " generation " +
                         std::to_string(L.snapshot_header.generation) +
                         ": covered by the snapshot (interrupted compaction); open() will "
                         "replace it");
  }
  for (const auto& tmp : L.leftovers) {
    r.findings.push_back(tmp + ": left by an interrupted compaction; open() will remove it");
  }
  r.domains = L.state.sorted();
  return r;
}

}  // namespace fencefs::journal
