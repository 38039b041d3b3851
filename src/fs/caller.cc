// Who a request acts for: its caller's identity and token, and the credentials the daemon takes
// on for the caller's syscalls (native permission checks, resources charged to the caller).
#include <linux/capability.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <optional>

#include "common/error.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/umask.h"
#include "fs/fs.h"

namespace fencefs::fs {

int Fs::charge_open(fuse_req_t req, Domain* d) {
  return budget_->take(fuse_req_ctx(req)->uid, [&] {
    return fence_.is_issuer(caller(req)) || (d && token_for(req, *d) != 0);
  });
}

fence::Caller Fs::caller(fuse_req_t req) const {
  const fuse_ctx* c = fuse_req_ctx(req);
  return fence::Caller{c->pid, c->uid, c->gid};
}

Epoch Fs::token_for(fuse_req_t req, Domain& d) {
  return bindings_.resolve(fuse_req_ctx(req)->pid, d.id);
}

AsCaller::AsCaller(fuse_req_t req, mode_t mode, bool dac, const struct stat* file) {
  const fuse_ctx* c = fuse_req_ctx(req);
  if (c->uid == 0 && c->gid == 0 && dac) return;
  // Per-thread credentials: raw syscalls, not glibc's process-wide wrappers.
  std::optional<proc::Credentials> cr;
  if ((mode & S_ISGID) || !dac) {
    // Whether the bit survives depends on the caller's groups (/proc, read only here; a root
    // caller's capabilities come from the same read).
    cr = proc::credentials(c->pid, c->uid == 0 && !dac);
    if (cr && syscall(SYS_setgroups, cr->groups.size(), cr->groups.data()) == 0) groups_ = true;
    // Checked natively: never with the daemon's own groups, when the caller's are unknown.
    if (!dac && !groups_ && syscall(SYS_setgroups, 0, nullptr) == 0) groups_ = true;
    if (!dac && !groups_) failed_ = true;
  }
  syscall(SYS_setfsgid, c->gid);
  syscall(SYS_setfsuid, c->uid);
  switched_ = true;
  // Both return the old value even when refused (a daemon without CAP_SETUID or CAP_SETGID, as a
  // service's bounding set may leave it): read back, or the call would run as root.
  if (static_cast<uid_t>(syscall(SYS_setfsuid, -1)) != c->uid ||
      static_cast<gid_t>(syscall(SYS_setfsgid, -1)) != c->gid) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      log::error(
          "cannot act as uid {} gid {} (does the daemon lack CAP_SETUID or CAP_SETGID?): "
          "what it would create or open as that caller is refused",
          c->uid, c->gid);
    failed_ = true;
    return;
  }
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &hdr, data) != 0) {
    if (c->uid == 0 && !dac) failed_ = true;  // root's capabilities could not be lowered
    return;
  }
  if (c->uid == 0 && !dac) {
    // fsuid 0 kept the daemon's capabilities. A root caller may have shed some (a service's
    // bounding set): lowered to what /proc shows the caller holding, which can only be less
    // than the daemon's; never raised from it (see proc::Credentials).
    saved_[0] = data[0].effective;
    saved_[1] = data[1].effective;
    uint64_t caps = !cr ? 0 : file ? cr->caps_over(file->st_uid, file->st_gid) : cr->caps;
    data[0].effective &= static_cast<uint32_t>(caps);
    data[1].effective &= static_cast<uint32_t>(caps >> 32);
    if (data[0].effective == saved_[0] && data[1].effective == saved_[1]) return;  // holds them all
    caps_ = syscall(SYS_capset, &hdr, data) == 0;
    if (!caps_) failed_ = true;
    return;
  }
  // setfsuid to non-zero cleared the filesystem capabilities. The caller's own cannot be known:
  // /proc shows a thread's standing credentials, not those a request runs with (an io_uring
  // worker's date from its creation), so with dac=false none is raised.
  if (dac) {
    uint32_t raise = (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH);
    data[0].effective |= raise & data[0].permitted;
    syscall(SYS_capset, &hdr, data);
  }
}

AsCaller::~AsCaller() {
  if (!switched_) return;
  if (caps_) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2];
    bool ok = false;
    if (syscall(SYS_capget, &hdr, data) == 0) {
      data[0].effective = saved_[0];
      data[1].effective = saved_[1];
      if (syscall(SYS_capset, &hdr, data) == 0) ok = true;
    }
    // A worker left with a caller's capabilities (and, lacking CAP_SETGID, its groups) would
    // serve every later request with them: not to be continued.
    if (!ok) {
      log::error("cannot restore a worker's capabilities: {}", common::errstr(errno));
      std::abort();
    }
  }
  syscall(SYS_setfsuid, 0);  // back to 0 restores the effective capabilities
  syscall(SYS_setfsgid, 0);
  if (groups_) syscall(SYS_setgroups, 0, nullptr);
}

}  // namespace fencefs::fs

namespace fencefs::fs {

ChargedTo::ChargedTo(uid_t uid, bool keep_caps, bool fowner) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2];
  if (uid == 0) {
    // A root caller without CAP_FOWNER: fsuid 0 keeps the daemon's, so it is dropped for the call.
    if (!keep_caps || fowner || syscall(SYS_capget, &hdr, data) != 0) return;
    data[CAP_FOWNER / 32].effective &= ~(1u << (CAP_FOWNER % 32));
    lowered_ = syscall(SYS_capset, &hdr, data) == 0;
    return;
  }
  if (keep_caps && syscall(SYS_capget, &hdr, data) != 0) return;  // stays root: as before
  if (keep_caps && !fowner) data[CAP_FOWNER / 32].effective &= ~(1u << (CAP_FOWNER % 32));
  syscall(SYS_setfsuid, uid);
  // Refused without CAP_SETUID: the call runs as root, with all of the daemon's capabilities, as
  // before (a dropped CAP_FOWNER at fsuid 0 would refuse owners their own files).
  if (static_cast<uid_t>(syscall(SYS_setfsuid, -1)) != uid) return;
  switched_ = true;
  // Back to fsuid 0 (the destructor) makes them effective again in any case.
  if (keep_caps && syscall(SYS_capset, &hdr, data) != 0) {
    syscall(SYS_setfsuid, 0);
    switched_ = false;
  }
}

ChargedTo::~ChargedTo() {
  if (switched_) syscall(SYS_setfsuid, 0);
  if (lowered_) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) == 0) {
      data[CAP_FOWNER / 32].effective |=
          data[CAP_FOWNER / 32].permitted & (1u << (CAP_FOWNER % 32));
      syscall(SYS_capset, &hdr, data);
    }
  }
}

void caller_umask(fuse_req_t req, mode_t* mode) {
  mode_t um = fuse_req_ctx(req)->umask & 0777;
  // Left set on the worker: the daemon's own files put 0 back first.
  if (!common::set_thread_umask(um)) *mode &= ~um;
}

void drop_resource_override() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &hdr, data) != 0) return;
  data[CAP_SYS_RESOURCE / 32].effective &= ~(1u << (CAP_SYS_RESOURCE % 32));
  if (syscall(SYS_capset, &hdr, data) != 0)
    log::warn("cannot drop CAP_SYS_RESOURCE: {}", common::errstr(errno));
}

}  // namespace fencefs::fs
