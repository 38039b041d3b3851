#include "fence/domain.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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
  common::ReaderLock lk(mu_);
  for (auto& d : domains_)
    if (d->path == path) return d.get();
  return nullptr;
}

Domain* DomainTable::by_id(uint32_t id) const {
  common::ReaderLock lk(mu_);
  for (auto& d : domains_)
    if (d->id == id) return d.get();
  return nullptr;
}

Domain* DomainTable::by_root_inode(dev_t dev, ino_t ino) const {
  common::ReaderLock lk(mu_);
  for (auto& d : domains_)
    if (d->ino == ino && d->dev == dev && d->id != 0) return d.get();
  return nullptr;
}

std::vector<Domain*> DomainTable::follow(dev_t pdev, ino_t pino, std::string_view name, dev_t dev,
                                         ino_t ino) {
  // Identity of the directory a step hangs below: BACKING's root for the first step.
  auto parent_is = [&](const Domain& d, size_t k, const Domain& root) {
    return k == 0 ? root.dev == pdev && root.ino == pino
                  : d.place[k - 1].dev == pdev && d.place[k - 1].ino == pino;
  };
  auto scan = [&](bool apply) REQUIRES_SHARED(mu_) {
    std::vector<Domain*> moved;
    bool changed = false;
    const Domain* root = nullptr;
    for (auto& d : domains_)
      if (d->id == 0) root = d.get();
    if (!root) return std::make_pair(changed, moved);
    for (auto& d : domains_) {
      for (size_t k = 0; k < d->place.size(); k++) {
        PlaceStep& s = d->place[k];
        if (s.name != name || !parent_is(*d, k, *root) || (s.dev == dev && s.ino == ino)) continue;
        changed = true;
        if (!apply) continue;
        s.dev = dev;
        s.ino = ino;
        if (k + 1 == d->place.size()) {
          d->dev = dev;
          d->ino = ino;
          moved.push_back(d.get());
        }
      }
    }
    return std::make_pair(changed, moved);
  };
  {
    common::ReaderLock lk(mu_);
    if (!scan(false).first) return {};
  }
  std::vector<Domain*> moved;
  {
    common::WriterLock lk(mu_);
    moved = scan(true).second;
  }
  bump_generation();
  return moved;
}

bool DomainTable::on_place(dev_t pdev, ino_t pino, std::string_view name, dev_t dev,
                           ino_t ino) const {
  common::ReaderLock lk(mu_);
  const Domain* root = nullptr;
  for (auto& d : domains_)
    if (d->id == 0) root = d.get();
  for (auto& d : domains_) {
    for (size_t k = 0; k < d->place.size(); k++) {
      const PlaceStep& s = d->place[k];
      if ((ino != 0 || dev != 0) && s.dev == dev && s.ino == ino) return true;
      const dev_t qd = k == 0 ? (root ? root->dev : 0) : d->place[k - 1].dev;
      const ino_t qi = k == 0 ? (root ? root->ino : 0) : d->place[k - 1].ino;
      if (s.name == name && qd == pdev && qi == pino) return true;
    }
  }
  return false;
}

void DomainTable::rebind(Domain& d, std::vector<PlaceStep> place) {
  {
    common::WriterLock lk(mu_);
    d.dev = place.empty() ? 0 : place.back().dev;
    d.ino = place.empty() ? 0 : place.back().ino;
    d.place = std::move(place);
  }
  bump_generation();
}

Domain* DomainTable::deepest(std::string_view rel) const {
  common::ReaderLock lk(mu_);
  Domain* best = nullptr;
  for (auto& d : domains_) {
    const std::string& p = d->path;
    bool contains = p == "/" || rel == p ||
                    (rel.size() > p.size() && rel.substr(0, p.size()) == p && rel[p.size()] == '/');
    if (contains && (!best || p.size() > best->path.size())) best = d.get();
  }
  return best;
}

Domain* DomainTable::add(uint32_t id, std::string path, Epoch epoch, dev_t dev, ino_t ino,
                         Epoch max_stamp) {
  auto d = std::make_unique<Domain>();
  d->id = id;
  d->path = std::move(path);
  d->epoch = epoch;
  d->max_stamp = max_stamp;
  d->dev = dev;
  d->ino = ino;
  Domain* raw = d.get();
  {
    common::WriterLock lk(mu_);
    domains_.push_back(std::move(d));
  }
  bump_generation();
  return raw;
}

Domain* DomainTable::add(uint32_t id, std::string path, Epoch epoch, std::vector<PlaceStep> place,
                         Epoch max_stamp) {
  dev_t dev = place.empty() ? 0 : place.back().dev;
  ino_t ino = place.empty() ? 0 : place.back().ino;
  Domain* d = add(id, std::move(path), epoch, dev, ino, max_stamp);
  {
    common::WriterLock lk(mu_);
    d->place = std::move(place);
  }
  bump_generation();
  return d;
}

std::pair<dev_t, ino_t> DomainTable::root_of(const Domain& d) const {
  common::ReaderLock lk(mu_);
  return {d.dev, d.ino};
}

std::vector<Domain*> DomainTable::all() const {
  common::ReaderLock lk(mu_);
  std::vector<Domain*> out;
  for (auto& d : domains_) out.push_back(d.get());
  return out;
}

uint32_t DomainTable::next_id() const {
  common::ReaderLock lk(mu_);
  uint32_t next = 0;
  for (auto& d : domains_) next = std::max(next, d->id + 1);
  return next;
}

size_t DomainTable::size() const {
  common::ReaderLock lk(mu_);
  return domains_.size();
}

int resolve_place(int root_fd, std::string_view rel, std::vector<PlaceStep>* place) {
  place->clear();
  if (rel.empty() || rel[0] != '/') return -EINVAL;
  int fd = fcntl(root_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int err = 0;
  size_t pos = 1;
  while (pos <= rel.size()) {
    size_t end = rel.find('/', pos);
    if (end == std::string_view::npos) end = rel.size();
    std::string_view name = rel.substr(pos, end - pos);
    pos = end + 1;
    if (name.empty() && pos > rel.size() && !place->empty()) break;  // trailing slash
    if (name.empty() || name == "." || name == "..") {
      err = EINVAL;
      break;
    }
    PlaceStep s;
    s.name = std::string(name);
    if (fd >= 0) {
      int next = openat(fd, s.name.c_str(), O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
      struct stat st;
      if (next >= 0 && fstat(next, &st) == 0) {
        s.dev = st.st_dev;
        s.ino = st.st_ino;
      } else if (!err) {
        err = errno == ENOTDIR || errno == ELOOP ? ENOTDIR : errno;
      }
      ::close(fd);
      fd = next;
    }
    place->push_back(std::move(s));
  }
  if (place->empty() && !err) err = EINVAL;
  if (err) {
    if (fd >= 0) ::close(fd);
    return -err;
  }
  return fd;
}

}  // namespace fencefs::fence
