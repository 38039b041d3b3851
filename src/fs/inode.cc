// The inode table, and the domains of inodes (their stamps: stamps.cc).
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "fence/stamp.h"
#include "fs/fs.h"
#include "fs/ring.h"

namespace fencefs::fs {
namespace {

using fence::kStampXattr;

common::Mutex g_inode_mutexes[256];

uint32_t coarse_now() {
  return static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

common::Mutex& inode_mutex(const Inode& i) {
  return g_inode_mutexes[(reinterpret_cast<uintptr_t>(&i) >> 6) % std::size(g_inode_mutexes)];
}

Fs::Fs(Options opts, fence::Fence& fence, fence::Bindings& bindings, int root_fd)
    : opts_(std::move(opts)), fence_(fence), bindings_(bindings) {
  struct stat st;
  if (fstat(root_fd, &st) != 0) throw std::runtime_error("stat of backing failed");
  mount_fd_ = open(opts_.backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  // Leave room for open files, directories, pidfds and the journal.
  size_t limit = rl.rlim_cur == RLIM_INFINITY ? 1u << 20 : static_cast<size_t>(rl.rlim_cur);
  // The rings' fds, once the kernel took them (none if they fell back to /dev/fuse).
  budget_ = std::make_unique<FdBudget>(limit, ring::fds_held);
  fence_.set_before_advance([this](Domain& d, Epoch old) { stamp_writers(d, old); });
  fence_.set_after_advance([this](Domain&, Epoch) { pagecache.advanced(); });
  // Filesystems whose regular files have no flush operation: close(2) reports nothing there
  // (NFS, CIFS, FUSE and the like report write-back errors at close, so they keep FLUSH).
  struct statfs sfs;
  if (fstatfs(root_fd, &sfs) == 0) {
    switch (static_cast<unsigned long>(sfs.f_type)) {
      case TMPFS_MAGIC:
      case EXT4_SUPER_MAGIC:
      case XFS_SUPER_MAGIC:
      case BTRFS_SUPER_MAGIC:
        flush_noop_ = true;
        break;
      default:
        break;
    }
  }
  root_.fd = root_fd;
  root_.dev = st.st_dev;
  root_.ino = st.st_ino;
  root_.type = S_IFDIR;
  root_.nlookup = 2;
  root_.domain = fence.domains().root();
  root_.domain_gen = ~0u;  // the root always belongs to the root domain
  ctl_dir.kind = Kind::CtlDir;
  ctl_dir.type = S_IFDIR;
  ctl_file.kind = Kind::CtlFile;
  status_file.kind = Kind::StatusFile;
  metrics_file.kind = Kind::MetricsFile;
  for (Inode* v : {&ctl_file, &status_file, &metrics_file}) v->type = S_IFREG;
  uint64_t id = FUSE_ROOT_ID;
  for (Inode* v : {&root_, &ctl_dir, &ctl_file, &status_file, &metrics_file}) {
    v->nodeid = id;
    nodes_.set_fixed(id++, v);
  }
}

Fs::~Fs() {
  fence_.set_before_advance({});
  fence_.set_after_advance({});
  for (auto& [k, i] : table_)
    if (i.fd >= 0) ::close(i.fd);
  if (root_.fd >= 0) ::close(root_.fd);
  if (mount_fd_ >= 0) ::close(mount_fd_);
}

int Fs::pin(Inode& i) {
  i.users.fetch_add(1);
  if (i.fd.load() >= 0 || &i == &root_ || is_virtual(i)) return 0;
  common::MutexLock lk(inode_mutex(i));
  if (i.fd.load() >= 0) return 0;
  if (i.id.len == 0) return ESTALE;
  struct {
    file_handle h;
    unsigned char bytes[sizeof(FileId::bytes)];
  } buf;
  buf.h.handle_bytes = i.id.len;
  buf.h.handle_type = i.id.type;
  memcpy(buf.h.f_handle, i.id.bytes, i.id.len);
  int fd = open_by_handle_at(mount_fd_, &buf.h, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? ESTALE : errno;
  i.fd.store(fd);
  i.last_use.store(coarse_now(), std::memory_order_relaxed);
  open_fds_++;
  return 0;
}

// Never touches the inode after a decrement that may let it go: every step to zero pins of an
// inode the kernel forgot is taken under the table lock, where drop_locked decides.
void Fs::unpin(Inode& i) {
  uint32_t u = i.users.load(std::memory_order_relaxed);
  while (u != (Inode::kDoomed | 1))
    if (i.users.compare_exchange_weak(u, u - 1)) return;
  common::MutexLock lk(table_mu_);
  if (i.users.fetch_sub(1) != (Inode::kDoomed | 1)) return;
  i.users.fetch_and(~Inode::kDoomed);
  drop_locked(&i);
}

Pinned::Pinned(Fs& f, Inode* a, Inode* b) : f_(f) {
  if (a && (err_ = f.pin(*a)) == 0)
    a_ = a;
  else if (a)
    f.unpin(*a);
  if (!err_ && b && b != a) {
    if ((err_ = f.pin(*b)) == 0)
      b_ = b;
    else
      f.unpin(*b);
  }
}

Pinned::~Pinned() {
  if (a_) f_.unpin(*a_);
  if (b_) f_.unpin(*b_);
}

// The handle that reopens an inode later; only for BACKING's own filesystem, whose root is the
// mount fd. Taken when the fd is first reclaimed, not at lookup: most inodes never need it.
bool Fs::take_file_id(Inode& i, int fd) {
  if (i.id.len) return true;
  if (i.dev != root_.dev) return false;
  struct {
    file_handle h;
    unsigned char bytes[sizeof(FileId::bytes)];
  } buf;
  buf.h.handle_bytes = sizeof(FileId::bytes);
  int mnt_id;
  if (name_to_handle_at(fd, "", &buf.h, &mnt_id, AT_EMPTY_PATH) != 0) return false;
  i.id.type = buf.h.handle_type;
  i.id.len = static_cast<uint8_t>(buf.h.handle_bytes);
  memcpy(i.id.bytes, buf.h.f_handle, buf.h.handle_bytes);
  return true;
}

// Closes the fds of idle inodes until well under the soft limit. An fd is taken away only under
// the inode's mutex and only when no pin is in flight; a pin that races sees -1 and reopens.
void Fs::reclaim_fds() {
  if (reclaiming_.exchange(true)) return;
  uint32_t now = coarse_now();
  // Open handles hold fds too, and cannot give them back: count them.
  size_t held = budget_->in_use();
  size_t soft = fd_soft_limit();
  size_t target = soft - soft / 4;
  target = target > held ? target - held : 0;
  std::vector<Inode*> victims;
  {
    common::MutexLock lk(table_mu_);
    // Idle for a second first; then, if that was not enough, anything not in use.
    for (uint32_t min_idle : {1u, 0u}) {
      for (auto& [k, node] : table_) {
        Inode* i = &node;
        if (open_fds_.load() - victims.size() <= target) break;
        if (i->open_handles.load() || i->users.load() || i->fd.load() < 0) continue;
        if (now - i->last_use.load(std::memory_order_relaxed) < min_idle) continue;
        if (min_idle == 0 && std::find(victims.begin(), victims.end(), i) != victims.end())
          continue;
        victims.push_back(i);
      }
      if (open_fds_.load() - victims.size() <= target) break;
    }
    for (Inode* i : victims) {
      common::MutexLock ilk(inode_mutex(*i));
      int fd = i->fd.exchange(-1);
      if (fd < 0) continue;
      if (i->users.load() != 0 || i->open_handles.load() != 0 || !take_file_id(*i, fd)) {
        i->fd.store(fd);
        continue;
      }
      ::close(fd);
      open_fds_--;
    }
  }
  reclaiming_ = false;
}

Inode* Fs::inode(fuse_ino_t ino) { return static_cast<Inode*>(nodes_.get(ino)); }

fuse_ino_t Fs::ino_of(Inode* i) const { return i->nodeid; }

std::string Fs::proc_path(int fd) const { return "/proc/self/fd/" + std::to_string(fd); }

bool Fs::is_state_name(Inode& parent, const char* name) const {
  return &parent == &root_ && strcmp(name, ".fencefs") == 0;
}

int Fs::stat_inode(Inode& i, struct stat* st) {
  if (fstatat(i.fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return errno;
  return 0;
}

int Fs::do_lookup(fuse_ino_t parent, const char* name, fuse_entry_param* e) {
  Inode& p = *inode(parent);
  memset(e, 0, sizeof *e);
  e->attr_timeout = opts_.timeout;
  e->entry_timeout = opts_.timeout;
  int fd = openat(p.fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EMFILE) {  // below the soft limit's estimate: give idle fds back
    reclaim_fds();
    fd = openat(p.fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) return errno;
  struct stat st;
  if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    int err = errno;
    ::close(fd);
    return err;
  }
  e->attr = st;
  // A directory found where a domain's place leads, other than the one recorded there, was
  // replaced (or created) in BACKING: the place, and so the domain, now leads through it.
  if (S_ISDIR(st.st_mode) && fence_.domains().size() > 1) {
    for (Domain* d : fence_.domains().follow(p.dev, p.ino, name, st.st_dev, st.st_ino)) {
      audit::Event ev;
      ev.op = "domain_root";
      ev.decision = "info";
      ev.domain = d->path;
      ev.epoch_before = ev.epoch_after = d->epoch.load();
      ev.message =
          "a new directory is at the domain's path (replaced in BACKING?); it is the "
          "domain now";
      log::warn("domain {}: {}", d->path, ev.message);
      fence_.audit(std::move(ev), fence::Caller{});
    }
  }
  common::UniqueLock lk(table_mu_);
  auto [it, inserted] = table_.try_emplace({st.st_ino, st.st_dev});
  Inode* i = &it->second;
  if (!inserted) {
    ::close(fd);
    i->users.fetch_and(~Inode::kDoomed);  // looked up again: no longer the last unpin's to erase
  } else {
    i->fd = fd;
    i->dev = st.st_dev;
    i->ino = st.st_ino;
    i->type = st.st_mode & S_IFMT;
    i->last_use = coarse_now();
    i->nodeid = nodes_.add(i);
    n_inodes++;
    open_fds_++;
  }
  Inode* old_parent = i->parent;
  set_parent_locked(i, &p);
  // Its domain is inherited from the parent it was found in: recomputed on first use.
  if (old_parent != &p) i->domain_gen.store(0, std::memory_order_release);
  i->nlookup++;
  e->ino = ino_of(i);
  bool over = open_fds_.load() + budget_->in_use() > fd_soft_limit();
  lk.unlock();
  if (over) reclaim_fds();
  return 0;
}

void Fs::forget_one(fuse_ino_t ino, uint64_t n) {
  Inode* i = inode(ino);
  if (!i || i == &root_ || is_virtual(*i)) return;
  common::MutexLock lk(table_mu_);
  if (i->nlookup.fetch_sub(n) == n) drop_locked(i);
}

// Erases an inode the kernel forgot once no child names it as parent, then its parent likewise.
void Fs::drop_locked(Inode* i) {
  while (i && i != &root_ && i->nlookup.load() == 0 && i->kids == 0) {
    // Pinned: the last unpin erases it (and goes on up its parents).
    if ((i->users.fetch_or(Inode::kDoomed) & ~Inode::kDoomed) != 0) break;
    int fd = i->fd.exchange(-1);
    if (fd >= 0) {
      ::close(fd);
      open_fds_--;
    }
    Inode* p = i->parent;
    nodes_.remove(i->nodeid);
    readcache.forget(*i);
    table_.erase({i->ino, i->dev});
    n_inodes--;
    if (!p || p == &root_) break;
    p->kids--;
    i = p;
  }
}

void Fs::set_parent_locked(Inode* i, Inode* p) {
  Inode* old = i->parent;
  if (old == p || i == &root_) return;
  if (p != &root_) p->kids++;
  i->parent = p;
  if (old && old != &root_) {
    old->kids--;
    drop_locked(old);
  }
}

Inode* Fs::find_locked(const struct stat& st) {
  if (st.st_ino == root_.ino && st.st_dev == root_.dev) return &root_;
  auto it = table_.find({st.st_ino, st.st_dev});
  return it == table_.end() ? nullptr : &it->second;
}

Domain& Fs::domain_of(Inode& i) {
  fence::DomainTable& table = fence_.domains();
  if (&i == &root_) return *table.root();
  uint32_t gen = static_cast<uint32_t>(table.generation());
  Domain* d = i.domain.load(std::memory_order_acquire);
  if (d && i.domain_gen.load(std::memory_order_acquire) == gen) return *d;
  // Domains changed since this inode was placed: walk up its parents in the table. A directory
  // that roots a domain (by its identity) holds itself; a parent already placed in this
  // generation answers for everything below it.
  Domain* found = nullptr;
  {
    common::MutexLock lk(table_mu_);
    Inode* x = &i;
    for (size_t steps = 0; x && steps <= table_.size() + 1; steps++) {
      if (x == &root_) {
        found = table.root();
        break;
      }
      Domain* xd = x->domain.load(std::memory_order_acquire);
      if (x != &i && xd && x->domain_gen.load(std::memory_order_acquire) == gen) {
        found = xd;
        break;
      }
      if (x->type == S_IFDIR && (found = table.by_root_inode(x->dev, x->ino))) break;
      x = x->parent;
    }
  }
  if (!found) found = d ? d : table.root();  // no parent known: keep what it had
  i.domain.store(found, std::memory_order_release);
  i.domain_gen.store(gen, std::memory_order_release);
  return *found;
}

void Fs::renamed(Inode& p, const char* name, Inode& np, const char* newname, unsigned flags,
                 Domain* moved_to, Epoch token) {
  struct stat st;
  if (flags & RENAME_EXCHANGE) {
    if (fstatat(p.fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      common::MutexLock lk(table_mu_);
      if (Inode* o = find_locked(st)) set_parent_locked(o, &p);
    }
  }
  if (fstatat(np.fd, newname, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  Inode* i = nullptr;
  {
    common::MutexLock lk(table_mu_);
    i = find_locked(st);
    if (i == &root_) return;
    if (i) {
      set_parent_locked(i, &np);
      i->users++;  // keep it while restamping outside the table lock
    }
  }
  if (i && moved_to) {
    i->domain.store(moved_to, std::memory_order_release);
    i->domain_gen.store(static_cast<uint32_t>(fence_.domains().generation()));
    stamp(*i, -1, token, *moved_to);  // the old domain's stamp says nothing here
  } else if (moved_to && opts_.stamps && S_ISREG(st.st_mode)) {
    int fd = openat(np.fd, newname, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      std::string v = fence::encode_stamp(token, static_cast<uint64_t>(st.st_size),
                                          st.st_mtim.tv_sec, st.st_mtim.tv_nsec, moved_to->id);
      setxattr(proc_path(fd).c_str(), kStampXattr, v.data(), v.size(), 0);
      ::close(fd);
    }
  }
  if (i) unpin(*i);
}

}  // namespace fencefs::fs
