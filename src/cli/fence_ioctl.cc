#include "cli/fence_ioctl.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <charconv>
#include <cstring>

#include "cli/exit_codes.h"
#include "common/error.h"
#include "ctl/protocol.h"
#include "fence/token.h"
#include "fencefs/ioctl.h"

namespace fencefs::cli {
namespace {

bool to_ioctl_token(const std::string& text, fencefs_token* t) {
  auto tt = fence::parse_token_text(text);
  if (!tt) return false;
  memset(t, 0, sizeof *t);
  t->epoch = tt->epoch;
  if (!tt->signature.empty()) memcpy(t->signature, tt->signature.data(), sizeof t->signature);
  return true;
}

std::string xattr_of(int fd, const char* name) {
  char buf[4096];
  ssize_t n = fgetxattr(fd, name, buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

}  // namespace

std::string domain_arg(std::string domain) {
  while (domain.size() > 1 && domain.back() == '/') domain.pop_back();
  return domain;
}

std::string domain_arg_error(const std::string& domain) {
  std::string_view e = ctl::domain_path_error(domain);
  if (e.empty()) return "";
  if (domain.empty() || domain[0] != '/')
    return fmt::format("domain '{}' must be a path from the mount root, like / or /jobs", domain);
  return fmt::format("domain '{}': {}", domain, e);
}

DomainHandle::~DomainHandle() {
  if (fd_ >= 0) close(fd_);
}

int DomainHandle::open(const std::string& root, const std::string& typed, std::string* why) {
  const std::string domain = domain_arg(typed);
  domain_ = domain;
  if (std::string e = domain_arg_error(domain); !e.empty()) {
    *why = e;
    return exit_code::kMalformed;
  }
  std::string path = root == "/" ? domain : (domain == "/" ? root : root + domain);
  fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) {
    int err = open_errno_ = errno;
    *why = fmt::format("cannot open domain {} ({}): {}", domain, path, common::errstr(err));
    return err == ENOTCONN || err == EIO ? exit_code::kUnreachable : exit_code::kMalformed;
  }
  std::string found = xattr_of(fd_, "user.fencefs.domain");
  if (found.empty()) {
    *why = fmt::format("{} is not on a fencefs mount (or the daemon is gone)", path);
    return exit_code::kUnreachable;
  }
  if (found != domain) {
    *why = fmt::format(
        "{} is not a domain (it lies in domain {}; declare it with `fencectl "
        "domain add`)",
        domain, found);
    return exit_code::kMalformed;
  }
  return 0;
}

bool DomainHandle::epoch(uint64_t* out) const {
  std::string s = xattr_of(fd_, "user.fencefs.epoch");
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
}

int DomainHandle::bind(const std::string& token) const {
  fencefs_token t;
  if (!to_ioctl_token(token, &t)) return EINVAL;
  return ioctl(fd_, FENCEFS_IOC_BIND, &t) == 0 ? 0 : errno;
}

int DomainHandle::advance(const std::string& token) const {
  fencefs_token t;
  if (!to_ioctl_token(token, &t)) return EINVAL;
  return ioctl(fd_, FENCEFS_IOC_ADVANCE, &t) == 0 ? 0 : errno;
}

int DomainHandle::acquire(uint64_t token, bool bind, bool resync, uint64_t* got) const {
  fencefs_acquire a{};
  a.epoch = token;
  a.flags = (bind ? FENCEFS_ACQUIRE_BIND : 0) | (resync ? FENCEFS_ACQUIRE_RESYNC : 0);
  if (ioctl(fd_, FENCEFS_IOC_ACQUIRE, &a) != 0) return errno;
  *got = a.epoch;
  return 0;
}

std::string explain_errno(int err) {
  std::string n = common::errname(err);
  switch (err) {
    case ESTALE:
      return n + ": lower than the domain's epoch";
    case ERANGE:
      return n + ": more than max_jump above the domain's epoch";
    case EACCES:
    case EPERM:
      return n + ": not an issuer, or a bad signature";
    case EINVAL:
      return n + ": malformed";
    case EIO:
      return n +
             ": the daemon could not make the epoch durable, or detected a rollback "
             "(fencectl audit --decision refused)";
    case EUCLEAN:
      return n +
             ": the resource's state was rolled back (restored from an older copy); see "
             "`fencectl recover` and `fencectl audit --decision refused`";
    case ENOTCONN:
      return n + ": the fencefs daemon is gone";
    default:
      return n + ": " + common::errstr(err);
  }
}

}  // namespace fencefs::cli
