#include "audit/audit.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <unordered_set>

#include "common/anchored.h"
#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
#include "common/parse.h"
#include "common/proc.h"

namespace fencefs::audit {
namespace {

constexpr const char* kBase = "audit.log";
constexpr const char* kEpochs = "epochs.jsonl";

bool append_all(int fd, const std::string& buf, size_t* done, int* err) {
  *done = 0;
  *err = 0;
  while (*done < buf.size()) {
    ssize_t n = ::write(fd, buf.data() + *done, buf.size() - *done);
    if (n < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return false;
    }
    if (n == 0) return false;
    *done += static_cast<size_t>(n);
  }
  return true;
}

int open_trail(const std::string& path) {
  return open_regular(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
}

}  // namespace

int open_regular(const std::string& path, int flags, mode_t mode, struct stat* out) {
  int fd = common::anchored_open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, mode);
  if (fd < 0) return -1;
  struct stat own;
  struct stat& st = out ? *out : own;
  int err = fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : EINVAL;
  if (err == 0) return fd;
  ::close(fd);
  errno = err;
  return -1;
}

int64_t now_unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string to_json(const Event& e, int64_t unix_ns) {
  std::string out;
  common::JsonWriter w(&out);
  w.begin_object()
      .member("time", format_time(unix_ns))
      .member("op", e.op)
      .member("decision", e.decision)
      .member("reason", e.reason)
      .member("domain", e.domain)
      .member("path", e.path);
  if (!e.path2.empty()) w.member("path2", e.path2);
  const char* ename = e.err ? strerrorname_np(e.err) : nullptr;
  // 64-bit values also as strings: jq reads numbers as doubles (docs/status-json.md).
  w.member("token", e.token)
      .member("epoch_before", e.epoch_before)
      .member("epoch_before_str", std::to_string(e.epoch_before))
      .member("epoch_after", e.epoch_after)
      .member("epoch_after_str", std::to_string(e.epoch_after))
      .member("errno", e.err)
      .member("error", ename ? ename : "")
      .member("pid", e.pid);
  if (e.tid > 0 && e.tid != e.pid) w.member("tid", e.tid);
  w.member("uid", e.uid)
      .member("gid", e.gid)
      .member("comm", e.comm)
      .member("message", e.message)
      .end_object();
  out += '\n';
  return out;
}

bool is_epoch_change(const Event& e) {
  return e.decision == "advanced" || e.op == "floor" || e.op == "recover" ||
         e.decision == "declared";
}

Log::Log(Options opts) : opts_(std::move(opts)) {
  std::lock_guard lk(mu_);
  if (!open_locked()) failed_locked("open", errno);
}

Log::~Log() {
  std::lock_guard lk(mu_);
  summarize_locked(now_unix_ns(), true);
  if (fd_ >= 0) ::close(fd_);
  if (epochs_fd_ >= 0) ::close(epochs_fd_);
}

bool Log::take_locked(uid_t uid, int64_t now) {
  auto [it, fresh] = buckets_.try_emplace(uid);
  Bucket& b = it->second;
  if (fresh) {
    b.tokens = opts_.refusal_burst;
    b.last = now;
  }
  double refill = static_cast<double>(now - b.last) / 1e9 * opts_.refusal_rate;
  b.tokens = std::min(opts_.refusal_burst, b.tokens + std::max(0.0, refill));
  b.last = now;
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return true;
  }
  if (b.suppressed++ == 0) b.since = now;
  suppressed_++;
  return false;
}

void Log::summarize_locked(int64_t now, bool all) {
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    Bucket& b = it->second;
    if (b.suppressed && (all || now - b.since >= kSummaryNs)) {
      Event s;
      s.op = "audit";
      s.decision = "info";
      s.reason = "suppressed";
      s.pid = getpid();
      s.uid = it->first;
      s.message = fmt::format(
          "{} refusal(s) of uid {} since {} were counted but not recorded one by one (more "
          "than {} per second)",
          b.suppressed, it->first, format_time(b.since), opts_.refusal_rate);
      if (write_locked(to_json(s, now))) b.suppressed = 0;
    }
    // Forget callers whose bucket is full again, so the table stays small.
    double refill = static_cast<double>(now - b.last) / 1e9 * opts_.refusal_rate;
    if (!b.suppressed && b.tokens + refill >= opts_.refusal_burst && buckets_.size() > 1024)
      it = buckets_.erase(it);
    else
      ++it;
  }
}

bool Log::write_epoch_locked(const std::string& line) {
  if (epochs_fd_ < 0) {
    std::string path = opts_.dir + "/" + kEpochs;
    epochs_fd_ = open_trail(path);
    if (epochs_fd_ < 0) {
      failed_locked("open epochs trail", errno);
      return false;
    }
  }
  size_t done;
  int err;
  if (append_all(epochs_fd_, line, &done, &err)) return true;
  if (done > 0 && ftruncate(epochs_fd_, lseek(epochs_fd_, 0, SEEK_END) - static_cast<off_t>(done)))
    (void)!::write(epochs_fd_, "\n", 1);  // whole lines only: end the fragment instead
  failed_locked("write epochs trail", err);
  return false;
}

bool Log::open_locked() {
  std::string path = opts_.dir + "/" + kBase;
  fd_ = open_trail(path);
  if (fd_ < 0) return false;
  struct stat st;
  if (fstat(fd_, &st) == 0) {
    bytes_ = static_cast<uint64_t>(st.st_size);
    // A line cut short before a crash or a full disk: terminate it before the next record.
    if (st.st_size > 0) {
      char last = '\n';
      if (pread(fd_, &last, 1, st.st_size - 1) == 1 && last != '\n') partial_ = true;
    }
  }
  return true;
}

void Log::rotate_locked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::string base = opts_.dir + "/" + kBase;
  // Files beyond `keep` (left by a mount with a larger audit_keep) go first.
  for (const std::string& f : log_files(opts_.dir)) {
    std::string_view name(f);
    name.remove_prefix(name.rfind('/') + 1);
    if (name.size() <= strlen(kBase) + 1) continue;
    int k = 0;
    std::from_chars(name.data() + strlen(kBase) + 1, name.data() + name.size(), k);
    if (k >= opts_.keep) common::anchored_unlink(f);
  }
  int err = 0;
  if (opts_.keep <= 0) {
    if (common::anchored_unlink(base) != 0) err = errno;
  } else {
    for (int i = opts_.keep - 1; i >= 1; --i) {
      std::string from = base + "." + std::to_string(i);
      std::string to = base + "." + std::to_string(i + 1);
      common::anchored_rename(from, to);  // ENOENT for the ones not there yet
    }
    if (common::anchored_rename(base, base + ".1") != 0) err = errno;
  }
  if (err) {
    // Keep appending to the same file rather than retrying on every record.
    log::error("audit: cannot rotate {}: {}; appending to it", base, common::errstr(err));
  }
  bytes_ = 0;
  partial_ = false;
  rotations_++;
  if (!open_locked()) failed_locked("open", errno);
}

void Log::failed_locked(const char* what, int err) {
  uint64_t f = failures_.fetch_add(1) + 1;
  if ((f & (f - 1)) == 0)  // the 1st, 2nd, 4th, 8th ... failure: a full disk does not flood
    log::error(
        "audit: cannot {} {}/{} ({} failure{} so far; decisions are unaffected, the "
        "records are lost): {}",
        what, opts_.dir, kBase, f, f == 1 ? "" : "s", err ? common::errstr(err) : "short write");
}

bool Log::write_locked(const std::string& line) {
  if (fd_ < 0 && !open_locked()) {
    failed_locked("open", errno);
    return false;
  }
  if (bytes_ > 0 && bytes_ + line.size() > opts_.max_bytes) rotate_locked();
  if (fd_ < 0) return false;  // reopening after the rotation failed (already counted)
  std::string buf = partial_ ? "\n" + line : line;
  size_t done = 0;
  int err = 0;
  if (append_all(fd_, buf, &done, &err)) {
    bytes_ += done;
    partial_ = false;
    records_++;
    return true;
  }
  if (done > 0) {
    // Whole records or nothing: cut the fragment off again (a full disk allows shrinking).
    struct stat st;
    if (fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) >= done &&
        ftruncate(fd_, st.st_size - static_cast<off_t>(done)) == 0) {
      // the file is as before this record
    } else {
      bytes_ += done;
      partial_ = true;  // terminated before the next record instead
    }
  }
  failed_locked("write", err);
  if (err == EBADF || err == EIO) {  // reopen next time: the file may have been replaced
    ::close(fd_);
    fd_ = -1;
  }
  return false;
}

Log::Outcome Log::record(Event e, const std::function<void(Event&)>& resolve) {
  const pid_t thread = e.tid ? e.tid : e.pid;
  // Who the caller is, and the line, only for a record that is written; outside mu_.
  auto finish = [&e](const std::function<void(Event&)>& res, int64_t at) {
    if (res) res(e);
    if (e.pid > 0 && !e.pid_resolved) {
      // FUSE names the calling thread; the audit trail names its process.
      if (auto tgid = proc::tgid_of(e.pid); tgid && *tgid != e.pid) {
        e.tid = e.pid;
        e.pid = *tgid;
      }
    }
    return to_json(e, at);
  };
  int64_t now = now_unix_ns();
  // A refusal may be a repeat or beyond its uid's rate: known only under mu_.
  const bool refusal = e.decision == "refused" && !is_epoch_change(e);
  std::string line;
  if (!refusal) line = finish(resolve, now);
  std::unique_lock lk(mu_);
  if (e.err == ESTALE && thread > 0) {
    // The kernel's retry of a path operation refused with ESTALE is the same call.
    std::string key = e.op + '\0' + e.decision + '\0' + e.reason + '\0' + e.domain + '\0' + e.path +
                      '\0' + e.path2 + '\0' + e.token;
    Last& last = last_stale_[thread];
    bool repeat = last.key == key && now - last.at < kRepeatWindowNs;
    last.key = std::move(key);
    last.at = now;
    if (last_stale_.size() > 4096) {  // forget threads not seen for a while
      for (auto it = last_stale_.begin(); it != last_stale_.end();)
        it = now - it->second.at >= kRepeatWindowNs ? last_stale_.erase(it) : std::next(it);
    }
    if (repeat) {
      repeats_++;
      return Outcome::kRepeat;
    }
  }
  // The epochs trail first: it never rotates and is what an operator must always find.
  if (is_epoch_change(e)) write_epoch_locked(line);
  summarize_locked(now, false);
  if (refusal) {
    if (!take_locked(e.uid, now)) return Outcome::kSuppressed;
    lk.unlock();
    line = finish(resolve, now);
    lk.lock();
  }
  if (lost_ > 0) {
    Event gap;
    gap.op = "audit";
    gap.decision = "info";
    gap.reason = "lost";
    gap.pid = getpid();
    gap.uid = getuid();
    gap.gid = getgid();
    gap.comm = proc::comm_of(gap.pid);
    gap.message = fmt::format(
        "{} audit record(s) could not be written since {} (see the daemon log); they are "
        "missing here",
        lost_, format_time(lost_since_));
    if (!write_locked(to_json(gap, now))) {
      lost_++;
      return Outcome::kFailed;
    }
    lost_ = 0;
  }
  if (!write_locked(line)) {
    if (lost_++ == 0) lost_since_ = now;
    return Outcome::kFailed;
  }
  return Outcome::kWritten;
}

std::vector<std::string> log_files(const std::string& dir) {
  std::vector<std::pair<uint64_t, std::string>> rotated;
  bool have_base = false;
  if (DIR* d = common::anchored_opendir(dir)) {
    const size_t blen = strlen(kBase);
    while (dirent* ent = readdir(d)) {
      std::string_view name(ent->d_name);
      if (name == kBase) {
        have_base = true;
        continue;
      }
      uint64_t k = 0;
      if (name.size() > blen + 1 && name.substr(0, blen) == kBase && name[blen] == '.' &&
          common::parse_u64(name.substr(blen + 1), &k)) {
        rotated.emplace_back(k, dir + "/" + std::string(name));
      }
    }
    closedir(d);
  }
  std::sort(rotated.begin(), rotated.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  out.reserve(rotated.size() + 1);
  for (auto& [k, p] : rotated) out.push_back(p);
  if (have_base) out.push_back(dir + "/" + kBase);
  return out;
}

std::vector<std::string> for_each_record(
    const std::string& dir,
    const std::function<void(const std::string& line, const std::string& where, bool complete)>&
        fn) {
  std::vector<std::string> errors;
  auto read_lines = [&](const std::string& file,
                        const std::function<void(const std::string&, uint64_t, bool)>& each) {
    int fd = open_regular(file, O_RDONLY);
    if (fd < 0) {
      if (errno == EINVAL || errno == ELOOP)
        errors.push_back(file + ": not a regular file");
      else if (errno != ENOENT)
        errors.push_back(file + ": " + common::errstr(errno));
      return;
    }
    std::string pending;
    uint64_t lineno = 0;
    char buf[65536];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
      pending.append(buf, static_cast<size_t>(n));
      size_t from = 0;
      for (size_t nl; (nl = pending.find('\n', from)) != std::string::npos; from = nl + 1) {
        lineno++;
        if (nl > from) each(pending.substr(from, nl - from), lineno, true);
      }
      pending.erase(0, from);
    }
    ::close(fd);
    if (!pending.empty()) each(pending, ++lineno, false);  // a cut last line
  };
  // Epoch changes still in the logs are shown from there, in place; the others come first (the
  // logs lost them to rotation, so they are older than anything left there).
  std::vector<std::pair<std::string, uint64_t>> epochs;
  std::unordered_set<std::string> pending;
  read_lines(dir + "/" + kEpochs, [&](const std::string& l, uint64_t n, bool complete) {
    if (!complete) return;
    epochs.emplace_back(l, n);
    pending.insert(l);
  });
  std::vector<std::string> logs = log_files(dir);
  if (!pending.empty()) {
    for (const std::string& f : logs)
      read_lines(f, [&](const std::string& l, uint64_t, bool) { pending.erase(l); });
  }
  for (auto& [l, n] : epochs)
    if (pending.count(l)) fn(l, fmt::format("{}/{}:{}", dir, kEpochs, n), true);
  for (const std::string& f : logs)
    read_lines(f, [&](const std::string& l, uint64_t n, bool complete) {
      fn(l, fmt::format("{}:{}", f, n), complete);
    });
  return errors;
}

std::map<std::string, int64_t> last_advances(const std::string& dir, size_t window) {
  std::map<std::string, int64_t> out;
  struct stat st;
  int fd = open_regular(dir + "/" + kEpochs, O_RDONLY, 0, &st);  // read at mount, before serving
  if (fd < 0) return out;
  // The file only grows: its tail holds the newest records. Reading a window keeps mounting
  // fast however long the history is; a domain last advanced before it has no time until the next.
  auto size = static_cast<uint64_t>(st.st_size);
  uint64_t from = size > window ? size - window : 0;
  std::string buf(size - from, '\0');
  ssize_t n = pread(fd, buf.data(), buf.size(), static_cast<off_t>(from));
  close(fd);
  if (n <= 0) return out;
  buf.resize(static_cast<size_t>(n));
  size_t pos = 0;
  if (from > 0) pos = std::min(buf.find('\n'), buf.size() - 1) + 1;  // skip a partial first line
  while (pos < buf.size()) {
    size_t end = buf.find('\n', pos);
    if (end == std::string::npos) break;  // a partial last line
    auto v = json::parse(std::string_view(buf).substr(pos, end - pos));
    pos = end + 1;
    if (!v) continue;
    const json::Value* decision = v->get("decision");
    const json::Value* domain = v->get("domain");
    const json::Value* time = v->get("time");
    if (!decision || !domain || !time || decision->as_string() != "advanced") continue;
    if (auto t = parse_iso_time(time->as_string())) {
      int64_t& last = out[domain->as_string()];
      last = std::max(last, *t);
    }
  }
  return out;
}

}  // namespace fencefs::audit
