#include "fence/highwater.h"

#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "common/log.h"

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
  std::string v = encode(cur_);
  if (fsetxattr(fd_, kXattr, v.data(), v.size(), 0) != 0)
    log::warn("cannot record high-water mark in BACKING: {}", common::errstr(errno));
  dirty_ = false;
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

std::map<std::string, Epoch> HighWater::load() {
  common::MutexLock lk(mu_);
  load_locked();
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
