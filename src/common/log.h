// Daemon log: stderr, and syslog once the daemon is in the background.
#pragma once
#include <fmt/format.h>

#include <string_view>

namespace fencefs::log {

enum class Level { Error = 0, Warn = 1, Info = 2, Debug = 3 };

void set_level(Level level);
void use_syslog(bool on);
bool enabled(Level level);
void write(Level level, std::string_view msg);

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
