#include "fence/bindings.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/proc.h"

namespace fencefs::fence {
namespace {

constexpr size_t kMaxCache = 4096;
constexpr int kMaxDepth = 128;
#ifndef PIDFD_THREAD
#define PIDFD_THREAD 0x80  // O_EXCL; Linux 6.9+
#endif

int open_pidfd(pid_t tid) {
  int fd = static_cast<int>(syscall(SYS_pidfd_open, tid, PIDFD_THREAD));
  if (fd < 0) fd = static_cast<int>(syscall(SYS_pidfd_open, tid, 0));  // leaders, older kernels
  return fd;
}

bool exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;  // readable (or error): the thread is gone
}

bool alive(pid_t pid, uint64_t start_time) {
  auto st = proc::read_stat(pid);
  return st && st->start_time == start_time;
}

}  // namespace

Bindings::Bindings() = default;

Bindings::~Bindings() {
  std::lock_guard lk(cache_mu_);
  clear_cache_locked();
}

void Bindings::clear_cache_locked() {
  for (auto& [tid, r] : cache_)
    if (r.pidfd >= 0) ::close(r.pidfd);
  cache_.clear();
}

void Bindings::sweep_dead_locked() {
  for (auto it = bindings_.begin(); it != bindings_.end();) {
    if (!alive(it->first, it->second.start_time))
      it = bindings_.erase(it);
    else
      ++it;
  }
}

int Bindings::bind(pid_t tid, uint32_t domain, Epoch token) {
  auto tgid = proc::tgid_of(tid);
  if (!tgid) return ESRCH;
  auto st = proc::read_stat(*tgid);
  if (!st) return ESRCH;
  std::unique_lock lk(mu_);
  // Amortised: dropping dead binders costs a /proc read each.
  if (bindings_.size() >= swept_size_ * 2 + 64) {
    sweep_dead_locked();
    swept_size_ = bindings_.size();
  }
  Entry& e = bindings_[*tgid];
  if (e.start_time != st->start_time) e = Entry{};  // a recycled pid starts afresh
  e.pid = *tgid;
  e.start_time = st->start_time;
  e.comm = st->comm;
  e.tokens[domain] = token;
  empty_ = false;
  gen_.fetch_add(1);
  lk.unlock();
  if (on_change) on_change(*tgid, domain, token, true);
  return 0;
}

int Bindings::unbind(pid_t tid, uint32_t domain) {
  auto tgid = proc::tgid_of(tid);
  if (!tgid) return ESRCH;
  std::unique_lock lk(mu_);
  auto it = bindings_.find(*tgid);
  if (it != bindings_.end()) {
    it->second.tokens.erase(domain);
    if (it->second.tokens.empty()) bindings_.erase(it);
  }
  empty_ = bindings_.empty();
  gen_.fetch_add(1);
  lk.unlock();
  if (on_change) on_change(*tgid, domain, 0, false);
  return 0;
}

std::map<uint32_t, Epoch> Bindings::walk(pid_t tid) {
  std::map<uint32_t, Epoch> tokens;
  auto tgid = proc::tgid_of(tid);
  if (!tgid) return tokens;
  pid_t pid = *tgid;
  for (int depth = 0; depth < kMaxDepth && pid > 0; ++depth) {
    auto st = proc::read_stat(pid);
    if (!st) break;
    {
      std::shared_lock lk(mu_);
      auto it = bindings_.find(pid);
      if (it != bindings_.end() && it->second.start_time == st->start_time) {
        for (auto& [d, t] : it->second.tokens) tokens.emplace(d, t);  // nearest wins
      }
    }
    if (pid == 1) break;
    pid = st->ppid;
  }
  return tokens;
}

Epoch Bindings::resolve(pid_t tid, uint32_t domain) {
  if (empty_.load(std::memory_order_acquire) || tid <= 0) return 0;
  uint64_t gen = gen_.load(std::memory_order_acquire);
  {
    std::lock_guard lk(cache_mu_);
    auto it = cache_.find(tid);
    if (it != cache_.end()) {
      Resolved& r = it->second;
      if (r.gen == gen && !exited(r.pidfd)) {
        auto t = r.tokens.find(domain);
        return t == r.tokens.end() ? 0 : t->second;
      }
      ::close(r.pidfd);
      cache_.erase(it);
    }
  }
  // Open the pidfd before reading /proc: if the thread dies in between, the pidfd says so.
  int pidfd = open_pidfd(tid);
  auto tokens = walk(tid);
  auto t = tokens.find(domain);
  Epoch result = t == tokens.end() ? 0 : t->second;
  if (pidfd >= 0) {
    std::lock_guard lk(cache_mu_);
    if (cache_.size() >= kMaxCache) clear_cache_locked();
    auto [it, inserted] = cache_.try_emplace(tid);
    if (!inserted) ::close(it->second.pidfd);
    it->second = Resolved{pidfd, gen, std::move(tokens)};
  }
  return result;
}

std::vector<Bindings::Entry> Bindings::list() {
  std::unique_lock lk(mu_);
  sweep_dead_locked();
  empty_ = bindings_.empty();
  std::vector<Entry> out;
  for (auto& [pid, e] : bindings_) out.push_back(e);
  return out;
}

}  // namespace fencefs::fence
