#include "fence/highwater.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "common/mount_table.h"

namespace fencefs::fence {

HighWater::HighWater(int dir_fd) : fd_(dir_fd) {}

void HighWater::start() {
  common::MutexLock lk(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { writer(); });
}

HighWater::~HighWater() {
  {
    common::MutexLock lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  flush();
  if (fd_ >= 0) ::close(fd_);
}

void HighWater::writer() {
  common::UniqueLock lk(mu_);
  while (!stop_) {
    cv_.wait(lk.native(), [this]() REQUIRES(mu_) { return dirty_ || stop_; });
    if (stop_) break;
    write_locked();
    lk.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // batch what comes meanwhile
    lk.lock();
  }
}

void HighWater::flush() {
  common::MutexLock lk(mu_);
  if (dirty_) write_locked();
}

void HighWater::write_locked() {
  // Other daemons on this storage (cluster members, one after another) write it too: keep the
  // higher of theirs and ours, so a member that lags never lowers what another recorded.
  loaded_ = false;
  load_locked();
  // Each domain's own copy first: the root's may then leave out what they hold.
  for (auto& [path, e] : cur_) {
    if (path == "/") continue;
    auto it = own_.find(path);
    if (it != own_.end() && it->second >= e) continue;
    Epoch written = e;
    if (write_own(path, &written)) own_[path] = written;
  }
  std::string v = encode(cur_);
  int err = fsetxattr(fd_, kXattr, v.data(), v.size(), 0) == 0 ? 0 : errno;
  if (err == ENOSPC || err == E2BIG || err == ERANGE) {
    std::map<std::string, Epoch> rest;
    for (auto& [path, e] : cur_) {
      auto it = own_.find(path);
      if (path == "/" || it == own_.end() || it->second < e) rest.emplace(path, e);
    }
    v = encode(rest);
    err = fsetxattr(fd_, kXattr, v.data(), v.size(), 0) == 0 ? 0 : errno;
  }
  if (err && err != last_err_)
    log::warn("cannot record high-water mark in BACKING: {}", common::errstr(err));
  last_err_ = err;
  dirty_ = false;
}

namespace {

int open_beneath(int root_fd, const std::string& domain) {
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, root_fd, domain.c_str() + 1, &how, sizeof how));
}

// A domain root's own copy, opened beneath root_fd; -1 when it cannot be, or when what is there
// is a FUSE mount a user made (whose xattrs say what that user likes).
int open_own(int root_fd, const std::string& domain) {
  int fd = open_beneath(root_fd, domain);
  if (fd < 0) return -1;
  struct stat rst, st;
  if (fstat(root_fd, &rst) != 0 || fstat(fd, &st) != 0 ||
      (st.st_dev != rst.st_dev && common::on_user_fuse(fd))) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

Epoch HighWater::own_copy(int dir, const std::string& domain) {
  char buf[4096];
  ssize_t n = fgetxattr(dir, kXattr, buf, sizeof buf);
  if (n <= 0) return 0;
  auto m = decode(std::string_view(buf, static_cast<size_t>(n)));
  auto it = m.find(domain);
  return it == m.end() ? 0 : it->second;
}

bool HighWater::write_own(const std::string& domain, Epoch* epoch) {
  int fd = open_own(fd_, domain);
  if (fd < 0) return false;
  *epoch = std::max(*epoch, own_copy(fd, domain));
  std::string v = encode({{domain, *epoch}});
  bool ok = fsetxattr(fd, kXattr, v.data(), v.size(), 0) == 0;
  ::close(fd);
  return ok;
}

std::map<std::string, Epoch> HighWater::read(int root_fd, const std::vector<std::string>& domains,
                                             int* err) {
  std::map<std::string, Epoch> m;
  char buf[65536];
  ssize_t n = fgetxattr(root_fd, kXattr, buf, sizeof buf);
  *err = n < 0 && errno != ENODATA && errno != ENOTSUP ? errno : 0;
  if (n > 0) m = decode(std::string_view(buf, static_cast<size_t>(n)));
  for (const std::string& d : domains) {
    if (d.size() < 2 || d[0] != '/') continue;
    int fd = open_own(root_fd, d);
    if (fd < 0) continue;
    if (Epoch e = own_copy(fd, d); e > 0) m[d] = std::max(m[d], e);
    ::close(fd);
  }
  return m;
}

std::string HighWater::encode(const std::map<std::string, Epoch>& m) {
  std::string out = "v1\n";
  for (auto& [p, e] : m) out += p + " " + std::to_string(e) + "\n";
  return out;
}

std::map<std::string, Epoch> HighWater::decode(std::string_view text) {
  std::map<std::string, Epoch> m;
  size_t pos = text.find('\n');
  if (pos == std::string_view::npos || text.substr(0, pos) != "v1") return m;
  text.remove_prefix(pos + 1);
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    size_t sp = line.rfind(' ');
    if (sp != std::string_view::npos) {
      Epoch e = 0;
      auto r = std::from_chars(line.data() + sp + 1, line.data() + line.size(), e);
      if (r.ec == std::errc()) m[std::string(line.substr(0, sp))] = e;
    }
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return m;
}

void HighWater::load_locked() {
  if (loaded_) return;
  char buf[65536];
  ssize_t n = fgetxattr(fd_, kXattr, buf, sizeof buf);
  if (n > 0)
    for (auto& [p, e] : decode(std::string_view(buf, static_cast<size_t>(n))))
      cur_[p] = std::max(cur_[p], e);
  loaded_ = true;
}

std::map<std::string, Epoch> HighWater::load(const std::vector<std::string>& domains) {
  common::MutexLock lk(mu_);
  load_locked();
  int err = 0;
  for (auto& [path, e] : read(fd_, domains, &err)) cur_[path] = std::max(cur_[path], e);
  return cur_;
}

void HighWater::record(const std::string& domain, Epoch epoch) {
  common::MutexLock lk(mu_);
  load_locked();
  Epoch& e = cur_[domain];
  if (e >= epoch) return;
  e = epoch;
  if (!thread_.joinable()) {
    dirty_ = true;
    write_locked();
  } else if (!dirty_) {
    // Already dirty: the writer is between writes and takes this epoch with the next one.
    dirty_ = true;
    cv_.notify_one();
  }
}

}  // namespace fencefs::fence
