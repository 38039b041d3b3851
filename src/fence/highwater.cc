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

namespace fencefs::fence {

namespace {

// A domain's root below root_fd, on root_fd's filesystem (a copy there is ordered with the
// root's, and no other filesystem's daemon is asked anything), never through a symlink; -1 when
// it cannot be opened.
int open_own(int root_fd, const std::string& domain) {
  if (domain.size() < 2 || domain[0] != '/') return -1;
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  return static_cast<int>(syscall(SYS_openat2, root_fd, domain.c_str() + 1, &how, sizeof how));
}

// The epoch a domain root's own copy gives `domain` (0: none).
Epoch own_copy(int dir, const std::string& domain) {
  char buf[4096];
  ssize_t n = fgetxattr(dir, HighWater::kOwnXattr, buf, sizeof buf);
  if (n <= 0) return 0;
  auto m = HighWater::decode(std::string_view(buf, static_cast<size_t>(n)));
  auto it = m.find(domain);
  return it == m.end() ? 0 : it->second;
}

std::map<std::string, Epoch> root_copy(int fd, int* err) {
  char buf[65536];
  ssize_t n = fgetxattr(fd, HighWater::kXattr, buf, sizeof buf);
  *err = n < 0 && errno != ENODATA && errno != ENOTSUP ? errno : 0;
  if (n <= 0) return {};
  return HighWater::decode(std::string_view(buf, static_cast<size_t>(n)));
}

void raise(std::map<std::string, Epoch>& m, const std::string& path, Epoch e) {
  Epoch& have = m[path];
  have = std::max(have, e);
}

}  // namespace

HighWater::HighWater(int dir_fd) : fd_(dir_fd) {}

void HighWater::start() {
  common::MutexLock lk(mu_);
  started_ = true;
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
  for (;;) {
    {
      common::UniqueLock lk(mu_);
      cv_.wait(lk.native(), [this]() REQUIRES(mu_) { return dirty_ || stop_; });
      if (stop_) return;
    }
    write_pass();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // batch what comes meanwhile
  }
}

void HighWater::flush() {
  bool dirty = false;
  {
    common::MutexLock lk(mu_);
    dirty = dirty_;
  }
  if (dirty) write_pass();
}

// long: one pass over both kinds of copy, with the lock released around every write.
void HighWater::write_pass() {
  common::MutexLock io(io_mu_);
  std::map<std::string, Epoch> cur;
  std::map<std::string, Own> own;
  {
    common::MutexLock lk(mu_);
    cur = cur_;
    own = own_;
    dirty_ = false;
  }
  // Other daemons on this storage (cluster members) write it too: keep the higher of theirs and
  // ours, so a member that lags does not lower what another recorded (two writing at the same
  // moment may lose one update, until either writes again).
  int err = 0;
  for (auto& [path, e] : root_copy(fd_, &err)) raise(cur, path, e);
  for (auto& [path, o] : own) {
    auto it = cur.find(path);
    Epoch e = it == cur.end() ? 0 : it->second;
    if (o.root.ino == 0 || e == 0 || o.written >= e) continue;
    Epoch w = e;
    if (write_own(path, o.root, &w)) {
      o.written = w;
    } else if (int own_err = errno; warned_.insert(path).second) {
      log::warn("cannot record the high-water mark of domain {} on its directory: {}", path,
                common::errstr(own_err));
    }
  }
  // Everything; when that does not fit, what no own copy reads back as high.
  std::string v = encode(cur);
  err = 0;
  if (!root_full_ && fsetxattr(fd_, kXattr, v.data(), v.size(), 0) != 0) err = errno;
  if (root_full_ || err == ENOSPC || err == E2BIG || err == ERANGE) {
    root_full_ = true;
    std::map<std::string, Epoch> rest;
    for (auto& [path, e] : cur) {
      auto it = own.find(path);
      bool held = false;
      if (it != own.end() && it->second.root.ino != 0 && it->second.written >= e) {
        int fd = open_own(fd_, path);
        struct stat st;
        held = fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == it->second.root.dev &&
               st.st_ino == it->second.root.ino && own_copy(fd, path) >= e;
        if (fd >= 0) ::close(fd);
        if (!held) it->second.written = 0;  // written again by the next pass
      }
      if (!held) rest.emplace(path, e);
    }
    v = encode(rest);
    err = fsetxattr(fd_, kXattr, v.data(), v.size(), 0) == 0 ? 0 : errno;
  }
  if (err && err != last_err_)
    log::warn("cannot record high-water mark in BACKING: {}", common::errstr(err));
  last_err_ = err;
  common::MutexLock lk(mu_);
  for (auto& [path, e] : cur) raise(cur_, path, e);
  for (auto& [path, o] : own) {
    auto it = own_.find(path);
    if (it == own_.end() || !(it->second.root == o.root)) continue;  // moved meanwhile
    it->second.written = o.written;
  }
}

bool HighWater::write_own(const std::string& domain, Root root, Epoch* epoch) {
  int fd = open_own(fd_, domain);
  if (fd < 0) return false;
  struct stat st;
  // Only the domain's own directory: not whatever now has its path.
  bool ok = fstat(fd, &st) == 0 && st.st_dev == root.dev && st.st_ino == root.ino;
  if (!ok) errno = ESTALE;
  if (ok) {
    *epoch = std::max(*epoch, own_copy(fd, domain));
    std::string v = encode({{domain, *epoch}});
    ok = fsetxattr(fd, kOwnXattr, v.data(), v.size(), 0) == 0;
  }
  int saved = errno;
  ::close(fd);
  errno = saved;
  return ok;
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

std::map<std::string, Epoch> HighWater::read(int root_fd, const std::vector<std::string>& domains,
                                             int* err) {
  std::map<std::string, Epoch> m = root_copy(root_fd, err);
  for (const std::string& d : domains) {
    int fd = open_own(root_fd, d);
    if (fd < 0) continue;
    if (Epoch e = own_copy(fd, d); e > 0) raise(m, d, e);
    ::close(fd);
  }
  return m;
}

std::map<std::string, Epoch> HighWater::load(const std::vector<std::string>& domains) {
  int err = 0;
  auto marks = read(fd_, domains, &err);
  common::MutexLock lk(mu_);
  for (auto& [path, e] : marks) raise(cur_, path, e);
  return cur_;
}

bool HighWater::note_locked(const std::string& domain, Epoch epoch, Root root) {
  if (root.ino != 0 && domain != "/") {
    Own& o = own_[domain];
    if (!(o.root == root)) o = Own{root, 0};
  }
  Epoch& e = cur_[domain];
  bool behind = root.ino != 0 && domain != "/" && own_[domain].written < std::max(e, epoch);
  if (e >= epoch && !behind) return false;
  e = std::max(e, epoch);
  bool was_dirty = dirty_;
  dirty_ = true;
  return !was_dirty;
}

void HighWater::note(const std::string& domain, Epoch epoch, Root root) {
  common::MutexLock lk(mu_);
  note_locked(domain, epoch, root);
}

void HighWater::record(const std::string& domain, Epoch epoch, Root root) {
  {
    common::MutexLock lk(mu_);
    bool woke = note_locked(domain, epoch, root);
    if (started_) {
      // Already dirty: the writer is between passes and takes this epoch with the next one.
      if (woke) cv_.notify_one();
      return;
    }
    if (!dirty_) return;
  }
  write_pass();  // before start(): at once, on the mounting thread
}

}  // namespace fencefs::fence
