#include "fence/bindings.h"

namespace fencefs::fence {
namespace {

constexpr size_t kMaxCache = 4096;    // cached threads
constexpr size_t kMaxHandles = 4096;  // fds the cache may hold in all (as many as before)
constexpr size_t kMaxWatched = 256;   // a longer chain is resolved afresh on every call
static_assert(kMaxWatched + 1 <= kMaxHandles / 8, "a watched chain fits in a cache shard");
constexpr int kMaxReparentRetries = 16;
constexpr size_t kPidMaxLimit = 4194304;  // no chain of live processes is longer (PID_MAX_LIMIT)

}  // namespace

Bindings::Bindings(proc::ProcessInfo& procs) : procs_(procs) {}

Bindings::~Bindings() {
  for (Shard& s : shards_) {
    common::MutexLock lk(s.mu);
    s.map.clear();
  }
}

Bindings::Resolved::~Resolved() {
  for (int h : handles) procs.close(h);
  open.fetch_sub(handles.size());
}

size_t Bindings::cached_handles() const { return cache_handles_.load(); }

bool Bindings::alive_locked(pid_t pid, const Entry& e) {
  int h = procs_.open(pid, false);
  bool alive = h >= 0 && procs_.id(h) == e.id;
  procs_.close(h);
  return alive;
}

void Bindings::sweep_dead_locked() {
  for (auto it = bindings_.begin(); it != bindings_.end();) {
    if (!alive_locked(it->first, it->second))
      it = bindings_.erase(it);
    else
      ++it;
  }
}

int Bindings::bind(pid_t tid, uint32_t domain, Epoch token) {
  auto who = procs_.identity(tid);
  if (!who) return ESRCH;
  // The caller is inside its write(2), so its thread group cannot be recycled meanwhile.
  int h = procs_.open(who->tgid, false);
  uint64_t id = procs_.id(h);
  procs_.close(h);
  if (h < 0 || id == 0) return ESRCH;
  {
    common::WriterLock lk(mu_);
    // Amortised: dropping dead binders costs a handle each.
    if (bindings_.size() >= swept_size_ * 2 + 64) {
      sweep_dead_locked();
      swept_size_ = bindings_.size();
    }
    Entry& e = bindings_[who->tgid];
    if (e.id != id) e = Entry{};  // a recycled pid starts afresh
    e.pid = who->tgid;
    e.id = id;
    e.comm = who->comm;
    e.tokens[domain] = token;
    empty_ = false;
    gen_.fetch_add(1);
  }
  if (on_change) on_change(who->tgid, domain, token, true);
  return 0;
}

int Bindings::unbind(pid_t tid, uint32_t domain) {
  auto who = procs_.identity(tid);
  if (!who) return ESRCH;
  {
    common::WriterLock lk(mu_);
    auto it = bindings_.find(who->tgid);
    if (it == bindings_.end() || it->second.tokens.erase(domain) == 0) return ENOENT;
    if (it->second.tokens.empty()) bindings_.erase(it);
    empty_ = bindings_.empty();
    gen_.fetch_add(1);
  }
  if (on_change) on_change(who->tgid, domain, 0, false);
  return 0;
}

bool Bindings::walk(pid_t tid, std::map<uint32_t, Epoch>* tokens, std::vector<int>* watch,
                    bool* cacheable) {
  *cacheable = true;
  auto who = procs_.identity(tid);
  if (!who) return false;
  pid_t pid = who->tgid;
  std::vector<int> chain;  // handles of the ancestors of the caller's process, nearest first
  size_t keep = 0;         // chain[0, keep) reaches the farthest ancestor that gave a token
  size_t visited = 0;
  int retries = 0;
  for (;;) {
    Entry bound;
    {
      common::ReaderLock lk(mu_);
      auto it = bindings_.find(pid);
      if (it != bindings_.end()) bound = it->second;
    }
    if (!bound.tokens.empty()) {
      // Only the exact process that bound counts, never a later one with its pid.
      uint64_t id;
      if (chain.empty()) {
        int h = procs_.open(pid, false);  // the caller's own process, alive while it calls
        id = procs_.id(h);
        procs_.close(h);
      } else {
        id = procs_.id(chain.back());
      }
      if (id != 0 && id == bound.id) {
        for (auto& [d, t] : bound.tokens) tokens->emplace(d, t);  // nearest wins
        keep = chain.size();
      }
    }
    if (pid == 1 || ++visited > kPidMaxLimit) break;
    auto st = procs_.stat(pid);
    if (!st || st->ppid <= 0) break;
    // Take a handle on the parent, then check it still is the parent: a parent that exits
    // reparents its children before its pid can be reused, so the handle is the real parent.
    int hp = procs_.open(st->ppid, false);
    auto again = procs_.stat(pid);
    if (hp < 0 || !again || again->ppid != st->ppid) {
      procs_.close(hp);
      if (!again || ++retries > kMaxReparentRetries) break;
      continue;  // reparented meanwhile: follow the new parent
    }
    if (chain.size() >= kMaxWatched) {
      // Too long to watch: resolved afresh each time, holding one handle at a time.
      *cacheable = false;
      procs_.close(chain.back());
      chain.back() = hp;
    } else {
      chain.push_back(hp);
    }
    pid = st->ppid;
  }
  if (!*cacheable) keep = 0;
  for (size_t k = keep; k < chain.size(); k++) procs_.close(chain[k]);
  chain.resize(keep);
  *watch = std::move(chain);
  return true;
}

Epoch Bindings::resolve(pid_t tid, uint32_t domain) {
  if (empty_.load(std::memory_order_acquire) || tid <= 0) return 0;
  uint64_t gen = gen_.load(std::memory_order_acquire);
  Shard& s = shard(tid);
  std::shared_ptr<const Resolved> hit;
  {
    common::MutexLock lk(s.mu);
    auto it = s.map.find(tid);
    if (it != s.map.end()) hit = it->second;
  }
  if (hit) {
    // Polled outside the lock: `hit` keeps its handles open meanwhile (see the header).
    if (hit->gen == gen && !procs_.any_exited(hit->handles.data(), hit->handles.size())) {
      auto t = hit->tokens.find(domain);
      return t == hit->tokens.end() ? 0 : t->second;
    }
    common::MutexLock lk(s.mu);
    auto it = s.map.find(tid);
    if (it != s.map.end() && it->second == hit) {
      s.handles -= hit->handles.size();
      s.map.erase(it);
    }
  }
  // The thread's handle first: if it dies during the walk, the handle says so.
  int th = procs_.open(tid, true);
  std::map<uint32_t, Epoch> tokens;
  std::vector<int> watch;
  bool cacheable;
  bool ok = walk(tid, &tokens, &watch, &cacheable);
  auto t = tokens.find(domain);
  Epoch result = t == tokens.end() ? 0 : t->second;
  if (th < 0 || !ok || !cacheable) {
    procs_.close(th);
    for (int h : watch) procs_.close(h);
    return result;
  }
  auto r = std::make_shared<Resolved>(procs_, cache_handles_);
  r->handles.reserve(watch.size() + 1);
  r->handles.push_back(th);
  r->handles.insert(r->handles.end(), watch.begin(), watch.end());
  cache_handles_.fetch_add(r->handles.size());
  r->gen = gen;
  r->tokens = std::move(tokens);
  size_t n = r->handles.size();
  common::MutexLock lk(s.mu);
  // Bounded per shard; entries still in use close their handles when their last user is done.
  if (s.map.size() >= kMaxCache / kShards || s.handles + n > kMaxHandles / kShards) {
    s.map.clear();
    s.handles = 0;
  }
  auto [it, inserted] = s.map.try_emplace(tid);
  if (!inserted) s.handles -= it->second->handles.size();
  it->second = std::move(r);
  s.handles += n;
  return result;
}

std::vector<Bindings::Entry> Bindings::list() {
  common::WriterLock lk(mu_);
  sweep_dead_locked();
  empty_ = bindings_.empty();
  std::vector<Entry> out;
  for (auto& [pid, e] : bindings_) out.push_back(e);
  return out;
}

}  // namespace fencefs::fence
