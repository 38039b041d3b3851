// The durable state of a mount: declared domains and their epochs (high-water marks).
// Format: docs/journal-format.md. Recovery = snapshot + journal replay.
#pragma once
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "journal/file_layer.h"

namespace fencefs::journal {

struct DomainRecord {
  uint32_t id = 0;     // 0 is the root domain "/"
  std::string path;    // "/" or "/a/b", relative to the mount root
  uint64_t epoch = 0;  // durable high-water mark
};

struct RecoveryReport {
  bool created = false;           // the state was initialised by this open
  bool torn_tail_cut = false;     // a partial or zeroed last record was cut
  uint64_t torn_tail_offset = 0;  // byte offset where the valid prefix of `journal` ends
  uint64_t records_replayed = 0;
  std::string incarnation;            // hex id of this state's lineage
  uint64_t generation = 0;            // bumped by every compaction
  std::vector<std::string> messages;  // human-readable, for logs and the audit trail
};

struct Options {
  uint64_t compact_threshold_bytes = 4u << 20;  // journal size that triggers a snapshot (0: never)
  bool create_if_missing = false;               // initialise an empty/missing dir
};

struct Stats {
  uint64_t journal_bytes = 0;
  uint64_t snapshot_bytes = 0;
  uint64_t syncs = 0;    // fdatasync calls on the journal
  uint64_t records = 0;  // records appended since open
  uint64_t compactions = 0;
  uint64_t sync_failures = 0;
  // fdatasync latency of journal batches: counts per upper bound (seconds) in kSyncBuckets, and
  // the total time, for a Prometheus histogram.
  static constexpr double kSyncBuckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                            0.01,   0.025,   0.05,   0.1,   0.25,   1.0};
  static constexpr size_t kNumSyncBuckets = std::size(kSyncBuckets);
  uint64_t sync_le[kNumSyncBuckets] = {};  // not cumulative: one bucket per sync
  double sync_seconds_sum = 0;
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // Recovers the state in `dir`. Returns nullptr on failure with *error naming the file and the
  // byte offset ("DIR/journal: bad CRC at byte 123 ...").
  static std::unique_ptr<StateStore> open(const std::string& dir, const Options& opts,
                                          FileLayer& fs, std::string* error);

  virtual std::vector<DomainRecord> domains() const = 0;
  virtual const RecoveryReport& report() const = 0;

  // Durably raises a domain's epoch; returns only after the record is synced (group commit:
  // concurrent callers share one fdatasync). 0, EINVAL (unknown domain) or EIO (sync failed, or
  // the store is poisoned). A failed sync poisons the store.
  // An epoch not above the durable one returns 0 at once, even when poisoned: it is already
  // durable and needs no new record. So 0 means "the durable epoch is now >= epoch", not "epoch
  // was the highest": comparing a caller's token with the durable epoch is the fence's job.
  virtual int advance(uint32_t domain_id, uint64_t epoch) = 0;
  // As advance(), without waiting for the sync: `done` runs once with what advance() would have
  // returned, after the record is synced, on the thread that synced it (a committer thread, or
  // this one when it finds the journal idle or needs no record). It must not call into the store.
  // Without start(), a caller that finds the journal busy waits for its record itself.
  using Done = std::function<void(int)>;
  virtual void advance_async(uint32_t domain_id, uint64_t epoch, Done done) {
    const Done run = std::move(done);
    run(advance(domain_id, epoch));
  }
  // Starts the committer thread, which syncs advance_async's records queued while the journal
  // is busy. Call it after daemonising (threads do not survive fork) from a thread whose umask
  // the journal's new files may take. 0, or the errno of the failed thread creation.
  virtual int start() { return 0; }
  // The durable epoch of a domain (the one that admits writes): 0, or EINVAL for an unknown one.
  // (Not pure, so that test doubles need not implement it: the default searches domains().)
  virtual int durable_epoch(uint32_t domain_id, uint64_t* epoch) const;
  // Durably declares a new domain at epoch 0. EEXIST if id or path exists, EINVAL for an invalid
  // path (not "/...", longer than 4096 bytes, or containing NUL), EIO as above.
  virtual int add_domain(uint32_t id, const std::string& path) = 0;
  // Rewrites the whole state as a fresh snapshot + empty journal; clears poison when it succeeds.
  virtual int rewrite() = 0;
  virtual bool poisoned() const = 0;
  virtual Stats stats() const = 0;
};

// Offline repair (`fencectl recover --state DIR --floor N`): salvages the longest valid prefix,
// raises every domain to at least `floor`, writes a fresh snapshot and journal (new incarnation).
// Returns 0 or an errno; *report describes what was found and done.
int recover_offline(const std::string& dir, uint64_t floor, FileLayer& fs, std::string* report);

// Offline check (`fencectl verify`): framing, CRCs, chaining, monotonic epochs. Never writes.
struct CheckResult {
  bool readable = false;              // false: could not check at all
  std::vector<std::string> findings;  // empty when clean
  std::vector<DomainRecord> domains;  // state as recovered from the valid prefix
};
CheckResult check(const std::string& dir, FileLayer& fs);

}  // namespace fencefs::journal
