#include "common/umask.h"

#include <sched.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>

#include "common/error.h"
#include "common/log.h"

namespace fencefs::common {
namespace {
thread_local bool t_own = false;  // unshare(CLONE_FS) succeeded on this thread
thread_local mode_t t_umask = 0;  // what umask(2) holds for it, once t_own
}  // namespace

bool own_thread_umask() {
  if (t_own) return true;
  if (unshare(CLONE_FS) != 0) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      log::warn("a worker cannot have a umask of its own: {}", errstr(errno));
    return false;
  }
  ::umask(0);
  t_own = true;
  t_umask = 0;
  return true;
}

bool set_thread_umask(mode_t m) {
  if (!t_own) return false;
  if (m != t_umask) {
    ::umask(m);
    t_umask = m;
  }
  return true;
}

void own_files_umask() {
  if (t_own && t_umask != 0) set_thread_umask(0);
}

}  // namespace fencefs::common
