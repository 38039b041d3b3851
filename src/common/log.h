// Daemon log. Sinks: stderr and a file (one timestamped line per message), syslog and the
// systemd journal (the platform's own records). An unreachable syslog or journal falls back to
// stderr, saying so once, rather than dropping messages.
#pragma once
#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>

namespace fencefs::log {

enum class Level { Error = 0, Warn = 1, Info = 2, Debug = 3 };
enum class Sink { Stderr, Syslog, Journal, File };

struct Target {
  Sink sink = Sink::Stderr;
  std::string file;  // Sink::File: an absolute path
};

// "stderr", "syslog", "journal" or an absolute file path.
std::optional<Target> parse_target(std::string_view spec, std::string* error);
// "error", "warning" (or "warn"), "info", "debug".
std::optional<Level> parse_level(std::string_view name);
const char* level_name(Level level);

void set_level(Level level);
bool enabled(Level level);
// Switches to a sink. A file is opened for appending (created 0640); false with *error when it
// cannot be. Syslog and the journal fall back to stderr when unreachable (true, with a warning).
bool open(const Target& target, std::string* error);
// Keeps messages for stderr on a duplicate of the current stderr when it is a terminal or a
// file, so they still reach it after the daemon detaches (and stdio points at /dev/null).
void keep_stderr();
// Reopens the log file by path (after rotation); no-op for other sinks. Safe beside writers.
void reopen();
void write(Level level, std::string_view msg);

// Kept for callers of the former interface: syslog on or stderr.
void use_syslog(bool on);

template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Error, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::Info)) write(Level::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::Debug)) write(Level::Debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace fencefs::log
