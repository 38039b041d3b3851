// The audit trail: one JSON object per line in STATE/audit.log, rotated by size.
// Format and fields: docs/audit.md.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace fencefs::audit {

struct Event {
  std::string op;        // "write", "create", "bind", "advance", "recover", ...
  std::string decision;  // "accepted", "refused", "advanced", "bound", "unbound", "info"
  std::string reason;    // "stale", "missing", "malformed", "unauthorised", "too_far", ...
  std::string domain;
  std::string path;
  std::string path2;     // rename destination, link name
  std::string token;     // as presented (text), "" when none
  uint64_t epoch_before = 0;
  uint64_t epoch_after = 0;
  int err = 0;           // errno returned to the caller, 0 when accepted
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string comm;
  std::string message;   // human-readable why
};

struct Options {
  std::string dir;                      // state dir; the log is DIR/audit.log
  uint64_t max_bytes = 16ull << 20;     // rotate when the current file passes this
  int keep = 4;                         // rotated files kept: audit.log.1 .. audit.log.N
};

class Log {
 public:
  explicit Log(Options opts);
  ~Log();
  // Appends one line. Never blocks a mutation's decision: a failure to write is counted and
  // reported in the daemon log and metrics, and the decision stands (docs/audit.md).
  void record(const Event& e);
  uint64_t failures() const { return failures_.load(); }
  uint64_t bytes() const { return bytes_.load(); }
  uint64_t records() const { return records_.load(); }
  const Options& options() const { return opts_; }

 private:
  void open_locked();
  void rotate_locked();
  Options opts_;
  std::mutex mu_;
  int fd_ = -1;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> records_{0};
  std::atomic<uint64_t> failures_{0};
};

std::string to_json(const Event& e, int64_t unix_ns);
std::string json_escape(std::string_view s);

}  // namespace fencefs::audit
