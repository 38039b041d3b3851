// Binds, advances and acquisitions through ioctls on a handle of the domain's directory. Unlike
// writes to the shared .fencefs/ctl, an ioctl takes no inode lock, so a user stalling a write to
// the control file cannot hold up a coordinator.
#pragma once
#include <cstdint>
#include <string>

namespace fencefs::cli {

// An open handle of the directory of DOMAIN in the mount at `root`, checked to be that domain's
// root (not a plain directory inside another domain). Closed on destruction.
class DomainHandle {
 public:
  DomainHandle() = default;
  ~DomainHandle();
  DomainHandle(const DomainHandle&) = delete;
  DomainHandle& operator=(const DomainHandle&) = delete;
  // 0, or an exit code (kMalformed: not a domain; kUnreachable: the daemon is gone) with *why.
  int open(const std::string& root, const std::string& domain, std::string* why);
  int fd() const { return fd_; }
  int open_errno() const { return open_errno_; }  // why open() failed, when it did
  const std::string& domain() const { return domain_; }
  // The domain's current epoch (user.fencefs.epoch); false when it cannot be read.
  bool epoch(uint64_t* out) const;

  // Each returns 0 or the errno; the daemon's reason is in the audit trail.
  int bind(const std::string& token) const;     // decimal or EPOCH.SIGNATURE
  int advance(const std::string& token) const;  // decimal or EPOCH.SIGNATURE
  // token 0: the daemon issues epoch + 1. *got: the epoch acquired.
  int acquire(uint64_t token, bool bind, bool resync, uint64_t* got) const;

 private:
  int fd_ = -1;
  int open_errno_ = 0;
  std::string domain_;
};

// Why DOMAIN, as given on the command line, cannot name a domain (the control file's grammar);
// "" when it can. Every command taking a domain checks it, so that they refuse the same texts.
// A domain as typed: trailing slashes (a shell's completion adds one) go, "/" stays.
std::string domain_arg(std::string domain);
std::string domain_arg_error(const std::string& domain);

// A one-line explanation of that errno for fencectl's messages.
std::string explain_errno(int err);

}  // namespace fencefs::cli
