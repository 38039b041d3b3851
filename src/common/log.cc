#include "common/log.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <syslog.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

#include "common/error.h"
#include "common/umask.h"

namespace fencefs::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::Info)};
std::atomic<int> g_sink{static_cast<int>(Sink::Stderr)};
std::atomic<int> g_stderr_fd{STDERR_FILENO};
std::atomic<int> g_file_fd{-1};
std::mutex g_mu;  // guards g_file and sink switches (never held while writing a line)
std::string g_file;
const char* kNames[] = {"error", "warning", "info", "debug"};

// glibc's syslog() drops messages silently when nothing listens on /dev/log: probe first.
bool syslog_reachable() {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, "/dev/log", sizeof addr.sun_path - 1);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

bool journal_reachable() { return access("/run/systemd/journal/socket", W_OK) == 0; }

std::string timestamp() {
  timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char buf[40];
  size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(tv.tv_usec / 1000));
  return buf;
}

void emit_line(int fd, Level level, std::string_view msg) {
  std::string line = fmt::format("{} fencefs[{}]: {}: {}\n", timestamp(), getpid(),
                                 kNames[static_cast<int>(level)], msg);
  // One write(2) per line keeps lines from concurrent threads whole.
  if (::write(fd, line.data(), line.size()) < 0) {
    // nowhere left to report
  }
}
}  // namespace

std::optional<Target> parse_target(std::string_view spec, std::string* error) {
  Target t;
  if (spec == "stderr") return t;
  if (spec == "syslog") {
    t.sink = Sink::Syslog;
    return t;
  }
  if (spec == "journal") {
    t.sink = Sink::Journal;
    return t;
  }
  if (!spec.empty() && spec.front() == '/') {
    t.sink = Sink::File;
    t.file = spec;
    return t;
  }
  *error = fmt::format("log={}: use syslog, journal, stderr or an absolute file path", spec);
  return std::nullopt;
}

std::optional<Level> parse_level(std::string_view name) {
  if (name == "error" || name == "err") return Level::Error;
  if (name == "warning" || name == "warn") return Level::Warn;
  if (name == "info" || name == "notice") return Level::Info;
  if (name == "debug") return Level::Debug;
  return std::nullopt;
}

const char* level_name(Level level) { return kNames[static_cast<int>(level)]; }

void set_level(Level level) { g_level = static_cast<int>(level); }
bool enabled(Level level) { return static_cast<int>(level) <= g_level.load(); }

bool open(const Target& target, std::string* error) {
  std::unique_lock lk(g_mu);
  switch (target.sink) {
    case Sink::Stderr:
      g_sink = static_cast<int>(Sink::Stderr);
      return true;
    case Sink::File: {
      common::own_files_umask();
      int fd = ::open(target.file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
      if (fd < 0) {
        *error = fmt::format("log file {}: {}", target.file, common::errstr(errno));
        return false;
      }
      int old = g_file_fd.exchange(fd);
      if (old >= 0) close(old);
      g_file = target.file;
      g_sink = static_cast<int>(Sink::File);
      return true;
    }
    case Sink::Syslog:
      if (!syslog_reachable()) {
        g_sink = static_cast<int>(Sink::Stderr);
        lk.unlock();
        warn("syslog is unreachable (nothing listens on /dev/log): logging to stderr");
        return true;
      }
      openlog("fencefs", LOG_PID, LOG_DAEMON);
      g_sink = static_cast<int>(Sink::Syslog);
      return true;
    case Sink::Journal:
      if (!journal_reachable()) {
        g_sink = static_cast<int>(Sink::Stderr);
        lk.unlock();
        warn("the systemd journal is unreachable (/run/systemd/journal/socket): logging to stderr");
        return true;
      }
      g_sink = static_cast<int>(Sink::Journal);
      return true;
  }
  return false;
}

void keep_stderr() {
  // Only a terminal or a file: holding a pipe open would keep `x=$(fencefs …)` or an ssh
  // session waiting for the daemon to exit.
  struct stat st;
  if (fstat(STDERR_FILENO, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISREG(st.st_mode))) return;
  int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (fd >= 0) g_stderr_fd = fd;
}

void reopen() {
  std::lock_guard lk(g_mu);
  if (static_cast<Sink>(g_sink.load()) != Sink::File || g_file.empty()) return;
  common::own_files_umask();
  int fd = ::open(g_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) return;  // keep writing to the old file rather than nowhere
  // dup2 swaps the file under the same descriptor number: concurrent writers never see a gap.
  int cur = g_file_fd.load();
  if (cur >= 0 && dup3(fd, cur, O_CLOEXEC) >= 0) {
    close(fd);
  } else {
    g_file_fd = fd;
  }
}

void use_syslog(bool on) {
  std::string ignored;
  open(Target{on ? Sink::Syslog : Sink::Stderr, {}}, &ignored);
}

void write(Level level, std::string_view msg) {
  if (!enabled(level)) return;
  static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
  int p = prio[static_cast<int>(level)];
  switch (static_cast<Sink>(g_sink.load())) {
    case Sink::Syslog:
      syslog(p, "%.*s", static_cast<int>(msg.size()), msg.data());
      return;
    case Sink::Journal:
      if (sd_journal_send("MESSAGE=%.*s", static_cast<int>(msg.size()), msg.data(), "PRIORITY=%d",
                          p, "SYSLOG_IDENTIFIER=fencefs", nullptr) >= 0)
        return;
      break;  // journal gone meanwhile: stderr below
    case Sink::File:
      emit_line(g_file_fd.load(), level, msg);
      return;
    case Sink::Stderr:
      break;
  }
  emit_line(g_stderr_fd.load(), level, msg);
}

}  // namespace fencefs::log
