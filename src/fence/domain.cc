#include "fence/domain.h"

#include <mutex>

#include "fence/rule.h"

namespace fencefs::fence {

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::Stale:
      return "stale";
    case Reason::Missing:
      return "missing";
    case Reason::Malformed:
      return "malformed";
    case Reason::Unauthorised:
      return "unauthorised";
    case Reason::TooFar:
      return "too_far";
    case Reason::Rollback:
      return "rollback";
    case Reason::Io:
      return "io";
    case Reason::kCount:
      break;
  }
  return "?";
}

Domain* DomainTable::root() const { return by_id(0); }

Domain* DomainTable::by_path(std::string_view path) const {
  std::shared_lock lk(mu_);
  for (auto& d : domains_)
    if (d->path == path) return d.get();
  return nullptr;
}

Domain* DomainTable::by_id(uint32_t id) const {
  std::shared_lock lk(mu_);
  for (auto& d : domains_)
    if (d->id == id) return d.get();
  return nullptr;
}

Domain* DomainTable::by_root_inode(dev_t dev, ino_t ino) const {
  std::shared_lock lk(mu_);
  for (auto& d : domains_)
    if (d->ino == ino && d->dev == dev && d->id != 0) return d.get();
  return nullptr;
}

Domain* DomainTable::deepest(std::string_view rel) const {
  std::shared_lock lk(mu_);
  Domain* best = nullptr;
  for (auto& d : domains_) {
    const std::string& p = d->path;
    bool contains = p == "/" || rel == p ||
                    (rel.size() > p.size() && rel.substr(0, p.size()) == p && rel[p.size()] == '/');
    if (contains && (!best || p.size() > best->path.size())) best = d.get();
  }
  return best;
}

Domain* DomainTable::add(uint32_t id, std::string path, Epoch epoch, dev_t dev, ino_t ino) {
  auto d = std::make_unique<Domain>();
  d->id = id;
  d->path = std::move(path);
  d->epoch = epoch;
  d->dev = dev;
  d->ino = ino;
  Domain* raw = d.get();
  {
    std::unique_lock lk(mu_);
    domains_.push_back(std::move(d));
  }
  bump_generation();
  return raw;
}

std::vector<Domain*> DomainTable::all() const {
  std::shared_lock lk(mu_);
  std::vector<Domain*> out;
  for (auto& d : domains_) out.push_back(d.get());
  return out;
}

uint32_t DomainTable::next_id() const {
  std::shared_lock lk(mu_);
  uint32_t next = 0;
  for (auto& d : domains_) next = std::max(next, d->id + 1);
  return next;
}

size_t DomainTable::size() const {
  std::shared_lock lk(mu_);
  return domains_.size();
}

}  // namespace fencefs::fence
