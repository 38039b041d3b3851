#include "common/umask.h"

#include <sys/stat.h>

namespace fencefs::common {
namespace {
// What umask(2) holds for this thread, as far as set_thread_umask knows: 0 until a worker sets a
// caller's (the daemon sets 0 before any thread starts).
thread_local mode_t t_umask = 0;
}  // namespace

void set_thread_umask(mode_t m) {
  if (m == t_umask) return;
  ::umask(m);
  t_umask = m;
}

void own_files_umask() {
  if (t_umask != 0) set_thread_umask(0);
}

}  // namespace fencefs::common
