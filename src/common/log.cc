#include "common/log.h"

#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <string>

namespace fencefs::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::Info)};
std::atomic<bool> g_syslog{false};
const char* kNames[] = {"error", "warning", "info", "debug"};
}  // namespace

void set_level(Level level) { g_level = static_cast<int>(level); }
void use_syslog(bool on) {
  if (on) openlog("fencefs", LOG_PID, LOG_DAEMON);
  g_syslog = on;
}
bool enabled(Level level) { return static_cast<int>(level) <= g_level.load(); }

void write(Level level, std::string_view msg) {
  if (!enabled(level)) return;
  if (g_syslog) {
    static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
    syslog(prio[static_cast<int>(level)], "%.*s", static_cast<int>(msg.size()), msg.data());
    return;
  }
  std::string line = fmt::format("fencefs: {}: {}\n", kNames[static_cast<int>(level)], msg);
  // One write(2) per line keeps lines from concurrent threads whole.
  if (::write(STDERR_FILENO, line.data(), line.size()) < 0) {
    // nowhere left to report
  }
}

}  // namespace fencefs::log
