#include "common/identity_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace fencefs::proc {

IdentityCache::~IdentityCache() {
  for (auto& [tid, e] : entries_) ::close(e.fd);
}

bool IdentityCache::read_comm(int fd, std::string* comm) {
  char buf[64];
  ssize_t n = pread(fd, buf, sizeof buf, 0);
  if (n <= 0) return false;
  size_t len = static_cast<size_t>(n);
  if (buf[len - 1] == '\n') len--;
  comm->clear();
  for (size_t k = 0; k < len; k++) {
    if (buf[k] == '\n') {
      *comm += "\\n";
    } else if (buf[k] == '\\') {
      *comm += "\\\\";
    } else {
      *comm += buf[k];
    }
  }
  return true;
}

std::optional<Identity> IdentityCache::get(pid_t tid) {
  if (tid <= 0) return std::nullopt;
  std::lock_guard lk(mu_);
  Identity id;
  if (auto it = entries_.find(tid); it != entries_.end()) {
    if (read_comm(it->second.fd, &id.comm)) {
      it->second.used = ++clock_;
      id.tgid = it->second.tgid;
      return id;
    }
    ::close(it->second.fd);  // that thread is gone; the number may be another one's now
    entries_.erase(it);
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/comm", tid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return identity_of(tid);
  auto full = identity_of(tid);
  // Still readable after the status read: the thread the file belongs to is the one that had the
  // number then, so the thread group read belongs to it.
  if (!full || !read_comm(fd, &id.comm)) {
    ::close(fd);
    return full;
  }
  id.tgid = full->tgid;
  if (entries_.size() >= capacity_) {
    auto victim = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.used < victim->second.used) victim = it;
    ::close(victim->second.fd);
    entries_.erase(victim);
  }
  entries_[tid] = Entry{fd, id.tgid, ++clock_};
  return id;
}

size_t IdentityCache::size() {
  std::lock_guard lk(mu_);
  return entries_.size();
}

}  // namespace fencefs::proc
