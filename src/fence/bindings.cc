#include "fence/bindings.h"

#include <set>

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

void Bindings::supersede(Entry& e, uint32_t domain, uint64_t floor) {
  auto cur = e.tokens.find(domain);
  auto& earlier = e.earlier[domain];
  earlier.push_back(cur == e.tokens.end() ? Superseded{floor, 0, true}
                                          : Superseded{floor, cur->second, false});
  fold(earlier);
}

void Bindings::fold(std::vector<Superseded>& earlier) {
  // The two oldest fold into one that presents nothing: never a later token to an older job.
  while (earlier.size() > kMaxSuperseded) {
    earlier[1] = Superseded{earlier[1].before, 0, false};
    earlier.erase(earlier.begin());
  }
}

int Bindings::bind(pid_t tid, uint32_t domain, Epoch token) {
  auto who = procs_.identity(tid);
  if (!who) return ESRCH;
  // The caller is inside its write(2), so its thread group cannot be recycled meanwhile.
  uint64_t id = process_id(who->tgid);
  if (id == 0) return ESRCH;
  {
    // The same token again changes nothing: no floor, no new generation, no record.
    common::ReaderLock lk(mu_);
    auto it = bindings_.find(who->tgid);
    if (it != bindings_.end() && it->second.id == id) {
      auto cur = it->second.tokens.find(domain);
      if (cur != it->second.tokens.end() && cur->second == token) return 0;
    }
  }
  // Every process made before this point has a lower id: the children the caller has already.
  uint64_t floor = procs_.id_floor();
  if (floor == 0) return EAGAIN;
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
    auto cur = e.tokens.find(domain);
    if (cur == e.tokens.end() || cur->second != token) supersede(e, domain, floor);
    e.tokens[domain] = token;
    empty_ = false;
    gen_.fetch_add(1);
  }
  if (on_change) on_change(who->tgid, domain);
  return 0;
}

int Bindings::unbind(pid_t tid, uint32_t domain) {
  auto who = procs_.identity(tid);
  if (!who) return ESRCH;
  uint64_t id = process_id(who->tgid);
  if (id == 0) return ESRCH;
  // Only this very process's binding: never a dead one's that had its pid.
  auto bound = [&]() REQUIRES_SHARED(mu_) {
    auto it = bindings_.find(who->tgid);
    return it != bindings_.end() && it->second.id == id && it->second.tokens.count(domain);
  };
  {
    common::ReaderLock lk(mu_);
    if (!bound()) return ENOENT;  // any user may write unbind: a no-op costs no thread
  }
  uint64_t floor = procs_.id_floor();
  if (floor == 0) return EAGAIN;
  {
    common::WriterLock lk(mu_);
    if (!bound()) return ENOENT;
    // The entry stays while its process lives: its children made until now keep the token.
    Entry& e = bindings_[who->tgid];
    supersede(e, domain, floor);
    e.tokens.erase(domain);
    gen_.fetch_add(1);
  }
  if (on_change) on_change(who->tgid, domain);
  return 0;
}

uint64_t Bindings::process_id(pid_t tgid) {
  int h = procs_.open(tgid, false);
  uint64_t id = procs_.id(h);
  procs_.close(h);
  return h < 0 ? 0 : id;
}

int Bindings::restore(pid_t pid, uint32_t domain, std::optional<Epoch> token,
                      std::vector<Superseded> earlier, const std::function<bool()>& same) {
  // `same` judged while a handle holds the process: alive after it, it was the one judged.
  int h = procs_.open(pid, false);
  if (h < 0) return ESRCH;
  bool ok = (!same || same()) && !procs_.any_exited(&h, 1);
  uint64_t id = procs_.id(h);
  procs_.close(h);
  if (!ok || id == 0) return ESRCH;
  auto who = procs_.identity(pid);
  if (!who || who->tgid != pid) return ESRCH;
  common::WriterLock lk(mu_);
  Entry& e = bindings_[pid];
  if (e.id != id) e = Entry{};
  e.pid = pid;
  e.id = id;
  e.comm = who->comm;
  if (token)
    e.tokens[domain] = *token;
  else
    e.tokens.erase(domain);
  fold(earlier);
  e.earlier[domain] = std::move(earlier);
  empty_ = false;
  gen_.fetch_add(1);
  return 0;
}

std::optional<Bindings::Entry> Bindings::find(pid_t tid) {
  auto who = procs_.identity(tid);
  if (!who) return std::nullopt;
  uint64_t id = process_id(who->tgid);
  common::ReaderLock lk(mu_);
  auto it = bindings_.find(who->tgid);
  if (it == bindings_.end() || id == 0 || it->second.id != id) return std::nullopt;
  return it->second;
}

bool Bindings::walk(pid_t tid, std::map<uint32_t, Epoch>* tokens, std::vector<int>* watch,
                    bool* cacheable) {
  *cacheable = true;
  auto who = procs_.identity(tid);
  if (!who) return false;
  pid_t pid = who->tgid;
  uint64_t self_id = 0;
  auto self = [&] {  // the caller's own process, alive while it calls
    if (self_id == 0) self_id = process_id(who->tgid);
    return self_id;
  };
  uint64_t evicted = 0;        // a too long chain's last dropped handle's process
  std::set<uint32_t> decided;  // domains a bound ancestor's history settled (inherit: none)
  std::vector<int> chain;      // handles of the ancestors of the caller's process, nearest first
  size_t keep = 0;             // chain[0, keep) reaches the farthest ancestor that gave a token
  size_t visited = 0;
  int retries = 0;
  for (;;) {
    Entry bound;
    {
      common::ReaderLock lk(mu_);
      auto it = bindings_.find(pid);
      if (it != bindings_.end()) bound = it->second;
    }
    if (bound.id != 0) {
      // Only the exact process that bound counts, never a later one with its pid.
      uint64_t id = chain.empty() ? self() : procs_.id(chain.back());
      if (id != 0 && id == bound.id) {
        // Its child on the caller's chain: made before a rebinding, it keeps what it had.
        uint64_t child = chain.empty()       ? 0
                         : chain.size() == 1 ? self()
                         : !*cacheable       ? evicted
                                             : procs_.id(chain.end()[-2]);
        for (auto& [d, earlier] : bound.earlier)
          if (!chain.empty() && !tokens->count(d))
            for (const Superseded& s : earlier)
              if (child < s.before) {
                if (!s.inherit) tokens->emplace(d, s.token);
                decided.insert(d);
                break;
              }
        for (auto& [d, t] : bound.tokens)
          if (!decided.count(d)) tokens->emplace(d, t);  // nearest wins
        decided.clear();
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
      evicted = procs_.id(chain.back());  // the parent's child on the chain
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

std::vector<Bindings::Entry> Bindings::list(bool with_history) {
  common::WriterLock lk(mu_);
  sweep_dead_locked();
  empty_ = bindings_.empty();
  std::vector<Entry> out;
  for (auto& [pid, e] : bindings_)
    if (with_history || !e.tokens.empty()) out.push_back(e);
  return out;
}

}  // namespace fencefs::fence
