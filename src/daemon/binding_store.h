// Process bindings kept across daemon restarts. STATE/bindings is a log: a header with the boot
// id, then one line per bind and unbind naming the process exactly (pid, start time, pidfs
// inode) with its binding for the domain, history included (fence::Bindings::Superseded). A new
// daemon replays it and rebinds only processes that are still exactly the same ones; the log is
// rewritten from the live bindings at start and whenever it grew well past them.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "fence/bindings.h"

namespace fencefs::daemon {

class BindingStore {
 public:
  explicit BindingStore(std::string state_dir);
  ~BindingStore();
  BindingStore(const BindingStore&) = delete;
  BindingStore& operator=(const BindingStore&) = delete;

  struct Restored {
    size_t restored = 0;  // bindings (process, domain) rebound
    size_t dropped = 0;   // gone, recycled, or their domain no longer exists
  };
  // Rebinds the saved processes that still run, for domains that exist, then rewrites the log
  // from what is live.
  Restored restore(fence::Bindings& bindings, const std::function<bool(uint32_t)>& domain_exists);
  // Appends what a bind or unbind left of `pid`'s binding for `domain`. Not fsynced: the file must
  // outlive the daemon, not the machine, whose crash ends every bound process as well.
  void record(fence::Bindings& bindings, pid_t pid, uint32_t domain);

 private:
  void rewrite_locked(fence::Bindings& bindings);
  std::string path_;
  std::mutex mu_;
  int fd_ = -1;  // O_APPEND
  size_t lines_ = 0, live_ = 0;
};

}  // namespace fencefs::daemon
