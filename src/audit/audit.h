// The audit trail: one JSON object per line in STATE/audit.log, rotated by size. Epoch changes
// are also appended to STATE/epochs.jsonl, which is never rotated, and refusals are rate-limited
// per caller (uid) with a summary of what was left out, so nobody can push the record of an
// advance out of the trail. Format, fields, rotation and failures: docs/audit.md.
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_writer.h"

namespace fencefs::audit {

struct Event {
  std::string op;        // "write", "create", "bind", "advance", "recover", ...
  std::string decision;  // "refused", "advanced", "bound", "unbound", "declared", "info", ...
  std::string reason;    // "stale", "missing", "malformed", "unauthorised", "too_far", ...
  std::string domain;
  std::string path;
  std::string path2;  // rename destination, link name
  std::string token;  // as presented (text), "" when none
  uint64_t epoch_before = 0;
  uint64_t epoch_after = 0;
  int err = 0;    // errno returned to the caller, 0 when accepted
  pid_t pid = 0;  // process (thread group); a thread id given here is resolved by record()
  pid_t tid = 0;  // the calling thread when it is not the process's main thread, else 0
  bool pid_resolved = false;  // pid is already the thread group (set by whoever resolved it)
  uid_t uid = 0;
  gid_t gid = 0;
  std::string comm;
  std::string message;  // human-readable why
};

struct Options {
  std::string dir;                   // state dir; the log is DIR/audit.log
  uint64_t max_bytes = 16ull << 20;  // rotate when the current file would pass this
  int keep = 4;                      // rotated files kept: audit.log.1 .. audit.log.N
  // Refusals recorded one by one per uid: a burst, then this many per second; the rest are
  // counted and summarised (one record per uid at most every kSummaryNs).
  double refusal_burst = 200;
  double refusal_rate = 5;
};

// Epoch changes (advances, floors, recoveries, declared domains) go to the epochs trail too.
bool is_epoch_change(const Event& e);

class Log {
 public:
  explicit Log(Options opts);
  ~Log();
  Log(const Log&) = delete;
  Log& operator=(const Log&) = delete;

  // kSuppressed: a refusal beyond the caller's rate, counted in a later summary record.
  enum class Outcome { kWritten, kRepeat, kFailed, kSuppressed };
  // Appends one line. Never changes a mutation's decision: a failure to write is counted,
  // reported in the daemon log (1st, 2nd, 4th, 8th ... failure) and in metrics, and the
  // decision stands. Once writing works again, a record says how many were lost
  // (docs/audit.md, "When the log cannot be written").
  // kRepeat: an ESTALE refusal identical to one of the same thread less than kRepeatWindowNs
  // ago was not written again: the kernel retries every path operation that fails with ESTALE
  // once (VFS retry_estale), so one system call reaches the daemon twice.
  // resolve, when given, fills in who the caller is (a /proc read): called only for a record
  // that is written, so a flood of refusals beyond the rate costs no /proc reads.
  Outcome record(Event e, const std::function<void(Event&)>& resolve = {});
  static constexpr int64_t kRepeatWindowNs = 1000000000;
  static constexpr int64_t kSummaryNs = 5000000000;
  uint64_t repeats() const { return repeats_.load(); }
  uint64_t suppressed() const { return suppressed_.load(); }
  uint64_t failures() const { return failures_.load(); }
  uint64_t bytes() const { return bytes_.load(); }
  uint64_t records() const { return records_.load(); }
  uint64_t rotations() const { return rotations_.load(); }
  const Options& options() const { return opts_; }

 private:
  bool open_locked();
  bool take_locked(uid_t uid, int64_t now);
  void summarize_locked(int64_t now, bool all);
  bool write_epoch_locked(const std::string& line);
  void rotate_locked();
  bool write_locked(const std::string& line);
  void failed_locked(const char* what, int err);
  Options opts_;
  std::mutex mu_;
  int fd_ = -1;
  bool partial_ = false;    // a short write left an unterminated line in the file
  uint64_t lost_ = 0;       // records lost since the last successful write
  int64_t lost_since_ = 0;  // unix ns of the first of them
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> records_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> rotations_{0};
  std::atomic<uint64_t> repeats_{0};
  struct Last {
    std::string key;
    int64_t at = 0;
  };
  std::map<pid_t, Last> last_stale_;  // by thread id
  struct Bucket {
    double tokens = 0;
    int64_t last = 0;
    uint64_t suppressed = 0;  // refusals not written since `since`
    int64_t since = 0;
  };
  std::map<uid_t, Bucket> buckets_;
  std::atomic<uint64_t> suppressed_{0};
  int epochs_fd_ = -1;  // DIR/epochs.jsonl, never rotated
};

// One record as a line of JSON (with the trailing newline).
std::string to_json(const Event& e, int64_t unix_ns);
// The inside of a JSON string (common/json_writer.h).
using common::json_escape;

// --- Reading the trail (fencectl audit) ---

// The log files of a state directory, oldest first: audit.log.N ... audit.log.1, audit.log.
// Only existing files are listed.
std::vector<std::string> log_files(const std::string& dir);

// Opens a file of the trail as a regular file only: never through a symlink, and never a FIFO or
// device put in its place, whose open could block (an advance writing its record, a mount or
// fencectl reading the trail) or send the bytes elsewhere. -1 with errno (EINVAL: not a regular
// file). O_CLOEXEC, O_NOFOLLOW and O_NONBLOCK are added to flags; *st (if given) gets its fstat.
int open_regular(const std::string& path, int flags, mode_t mode = 0, struct stat* st = nullptr);
// Every stored record of a state directory, oldest first: the epoch changes that rotation took
// out of the logs (from epochs.jsonl), then the lines of log_files(). fn gets each line, where it
// is ("FILE:LINE") and whether it is complete (the last line of a file may be partial).
// Returns the files that exist but could not be read, with the reason.
std::vector<std::string> for_each_record(
    const std::string& dir,
    const std::function<void(const std::string& line, const std::string& where, bool complete)>&
        fn);
// When each domain's epoch last advanced ({domain path -> unix ns}), from the "advanced" records
// in the last `window` bytes of DIR/epochs.jsonl: the daemon starts its last-advance times there.
// A missing or unreadable file gives an empty map.
std::map<std::string, int64_t> last_advances(const std::string& dir, size_t window = 1 << 20);
// A field made safe for a terminal: control characters, C1 controls, bidirectional overrides,
// line separators, invalid UTF-8 and backslashes become visible escapes (\n, \x1b, \u202e).
std::string display_escape(std::string_view s);
// "2026-12-02T10:00:00Z", "2026-12-02T10:00:00.123456Z", "2026-12-02T12:00:00+02:00",
// "2026-12-02 10:00", "2026-12-02" (no zone: UTC, like the records) -> unix ns.
std::optional<int64_t> parse_iso_time(std::string_view text);
// An ISO 8601 time as above, or a duration before `now_ns`: "90s", "10m", "2h", "1d", "1w".
std::optional<int64_t> parse_since(std::string_view text, int64_t now_ns);
// unix ns -> "2026-12-02T10:00:00.123456Z" (the format of the "time" field).
std::string format_time(int64_t unix_ns);
int64_t now_unix_ns();

}  // namespace fencefs::audit
