#include "audit/audit.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

#include "common/log.h"

namespace fencefs::audit {

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          out += fmt::format("\\u{:04x}", c);  // bytes, not code points: paths need not be UTF-8
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string to_json(const Event& e, int64_t unix_ns) {
  time_t secs = static_cast<time_t>(unix_ns / 1000000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char ts[64];
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = fmt::format(
      "{{\"time\":\"{}.{:06d}Z\",\"op\":\"{}\",\"decision\":\"{}\",\"reason\":\"{}\","
      "\"domain\":\"{}\",\"path\":\"{}\"",
      ts, static_cast<int>((unix_ns / 1000) % 1000000), json_escape(e.op), json_escape(e.decision),
      json_escape(e.reason), json_escape(e.domain), json_escape(e.path));
  if (!e.path2.empty()) out += fmt::format(",\"path2\":\"{}\"", json_escape(e.path2));
  out += fmt::format(
      ",\"token\":\"{}\",\"epoch_before\":{},\"epoch_after\":{},\"errno\":{},\"error\":\"{}\","
      "\"pid\":{},\"uid\":{},\"gid\":{},\"comm\":\"{}\",\"message\":\"{}\"}}\n",
      json_escape(e.token), e.epoch_before, e.epoch_after, e.err,
      e.err ? strerrorname_np(e.err) ? strerrorname_np(e.err) : "" : "", e.pid, e.uid, e.gid,
      json_escape(e.comm), json_escape(e.message));
  return out;
}

Log::Log(Options opts) : opts_(std::move(opts)) {
  std::lock_guard lk(mu_);
  open_locked();
}

Log::~Log() {
  if (fd_ >= 0) ::close(fd_);
}

void Log::open_locked() {
  std::string path = opts_.dir + "/audit.log";
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    log::error("audit: cannot open {}: {}", path, strerror(errno));
    return;
  }
  struct stat st;
  if (fstat(fd_, &st) == 0) bytes_ = static_cast<uint64_t>(st.st_size);
}

void Log::rotate_locked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::string base = opts_.dir + "/audit.log";
  if (opts_.keep <= 0) {
    ::unlink(base.c_str());
  } else {
    ::unlink((base + "." + std::to_string(opts_.keep)).c_str());
    for (int i = opts_.keep - 1; i >= 1; --i) {
      std::string from = base + "." + std::to_string(i);
      std::string to = base + "." + std::to_string(i + 1);
      ::rename(from.c_str(), to.c_str());
    }
    ::rename(base.c_str(), (base + ".1").c_str());
  }
  bytes_ = 0;
  open_locked();
}

void Log::record(const Event& e) {
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::string line = to_json(e, now);
  std::lock_guard lk(mu_);
  if (fd_ < 0) open_locked();
  if (fd_ >= 0 && bytes_ + line.size() > opts_.max_bytes && bytes_ > 0) rotate_locked();
  ssize_t n = fd_ >= 0 ? ::write(fd_, line.data(), line.size()) : -1;
  if (n != static_cast<ssize_t>(line.size())) {
    uint64_t f = failures_.fetch_add(1);
    if (f == 0 || (f & (f - 1)) == 0)  // log the 1st, 2nd, 4th, ... failure, not every one
      log::error("audit: cannot write {}/audit.log ({} failures so far): {}", opts_.dir, f + 1,
                 n < 0 ? strerror(errno) : "short write");
    return;
  }
  bytes_ += line.size();
  records_++;
}

}  // namespace fencefs::audit
