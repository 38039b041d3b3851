// Shared state of the FUSE layer: the inode table (O_PATH fds keyed by (ino, dev), in the manner
// of libfuse's passthrough_hp), open-file handles, and the virtual .fencefs directory.
#pragma once
#define FUSE_USE_VERSION 312
#include <dirent.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "fence/bindings.h"
#include "fence/fence.h"
#include "fence/stamp.h"
#include "fs/fd_budget.h"
#include "fs/node_table.h"
#include "fs/open_handles.h"
#include "fs/pagecache.h"
#include "fs/readcache.h"

namespace fencefs::fs {

using fence::Domain;
using fence::Epoch;

enum class Kind : uint8_t { Real, CtlDir, CtlFile, StatusFile, MetricsFile };

constexpr Epoch kStampUnknown = ~0ULL;

// A file handle (name_to_handle_at) to reopen an inode whose idle fd was reclaimed.
struct FileId {
  int type = 0;
  uint8_t len = 0;  // 0: cannot be reopened, so the fd is never reclaimed
  unsigned char bytes[23] = {};
};

struct Inode {
  // O_PATH fd. The process may hold only so many fds (the hard limit here is 20,000), so the fd of
  // an idle inode may be closed and reopened from `id` later; handlers see it only while pinned.
  std::atomic<int> fd{-1};
  // Pins in flight, plus kDoomed once the kernel forgot the inode while it was pinned: the last
  // unpin then erases it. Handlers unpin after their reply, when a FORGET may already have run.
  std::atomic<uint32_t> users{0};
  static constexpr uint32_t kDoomed = 1u << 31;
  std::atomic<uint32_t> open_handles{0};  // open files: never reclaimed (may be unlinked)
  std::atomic<uint32_t> last_use{0};      // coarse seconds, for choosing idle victims
  FileId id;
  dev_t dev = 0;
  ino_t ino = 0;
  mode_t type = 0;  // S_IFMT bits
  Kind kind = Kind::Real;
  std::atomic<uint64_t> nlookup{0};
  // The directory this inode was last found in or moved to, so that its domain is known from the
  // table alone. A parent stays in the table while it has children there (`kids`); both are
  // guarded by the table's mutex (Fs::table_mu_, which the analysis cannot name from here).
  Inode* parent = nullptr;
  uint32_t kids = 0;
  std::atomic<Domain*> domain{nullptr};  // cache of domain_of, valid for domain_gen
  std::atomic<uint32_t> domain_gen{0};
  // Last-epoch stamp and the domain that issued it, loaded lazily; under inode_mutex.
  std::atomic<uint32_t> stamp_domain{fence::kAnyDomain};
  std::atomic<Epoch> stamp{kStampUnknown};
  uint64_t nodeid = 0;  // FUSE node id (NodeTable), never an address
};

// Every cached inode costs a table node (this, its key, a link) plus a NodeTable slot: a field
// more here is ~16 bytes more per cached inode (bench: RSS growth per cached inode < 200 bytes).
static_assert(sizeof(Inode) <= 128);

// Orders stamp writes, fd reclaim and reopen of an inode: striped, not one mutex per inode, to
// keep cached inodes small.
common::Mutex& inode_mutex(const Inode& i);

// The stamp a file CREATE made still owes, kept by its handle: the create as admitted (its epoch,
// the attributes read then). A handle that wrote stamps the file as it is at release instead.
// One that did not writes this at release, or at the advance past `epoch`, whether or not it
// was superseded or its file moved since (the create happened), unless the file carries a stamp
// by then (XATTR_CREATE): any other stamp, this daemon's or another member's, saw a later file.
struct OwedStamp {
  bool pending = false;
  Epoch epoch = 0;
  off_t size = 0;
  struct timespec mtime {};
};

struct Handle {
  ~Handle();
  int fd = -1;
  Inode* inode = nullptr;
  Domain* domain = nullptr;
  std::atomic<Epoch> token{0};  // captured at open; rebindable by ioctl
  bool writable = false;
  std::atomic<bool> stale{false};  // once refused as stale, refused for good
  // 0 until a mutation through it is admitted (never under token 0), then the epoch its last
  // was admitted under: restamped at release, or at the advance past it, under that epoch even
  // when the handle was rebound to a higher token since.
  std::atomic<Epoch> wrote_at{0};
  OwedStamp owed;         // set under CREATE's admission, then read-only
  uid_t charged_uid = 0;  // whose FdBudget (or, .fencefs files, PageBudget) share holds it
  bool charged = false;
  size_t page_charge = 0;           // .fencefs files: bytes charged to the PageBudget
  bool opened_by_issuer = false;    // .fencefs/ctl: whether an issuer opened it (Fence::authorize)
  bool page_shared_exempt = false;  // its PageBudget charge is outside the shared pool
  PageCache* tracker = nullptr;     // set while it may write through a shared mapping
  // The ReadCache drop of this read-only open, confirmed by the handle's first READ (which comes
  // only after the open(2) that dropped the pages has returned).
  std::atomic<uint64_t> drop{0};
  // Virtual files: the content served, and the reply to the last ctl command.
  std::mutex content_mu;
  std::string content;
  // Where a read(2) finds the reply: the file offset after the command's write, so that
  // `exec 3<>ctl; echo CMD >&3; cat <&3` shows the whole reply (pread at 0 does too).
  off_t content_base = 0;
};

struct DirHandle {
  DIR* dp = nullptr;
  off_t offset = 0;
  dirent* entry = nullptr;
  bool ctl = false;
  bool is_root = false;
  uid_t charged_uid = 0;  // 0 with dp == nullptr: nothing charged
};

struct Options {
  std::string backing;  // canonical
  std::string state_dir;
  std::string mountpoint;  // canonical
  double timeout = 5.0;    // entry and attribute cache, seconds: sound since all changes pass here
  bool stamps = true;      // the backing supports trusted.* xattrs
  bool list_xattrs = false;  // listxattr names the user.fencefs.* attributes (-o list_xattrs)
  int uring = 0;  // threads per CPU serving FUSE over io_uring (-o uring); 0: off, -1: default
};

class Fs {
 public:
  Fs(Options opts, fence::Fence& fence, fence::Bindings& bindings, int root_fd);
  ~Fs();

  const Options& opts() const { return opts_; }
  fence::Fence& fence() { return fence_; }
  fence::Bindings& bindings() { return bindings_; }

  Inode& root() { return root_; }
  FdBudget& budget() { return *budget_; }
  PageBudget& pages() { return pages_; }
  // Charges one open handle to the caller (FdBudget::take): 0, EMFILE or ENFILE. d: the domain
  // whose binding exempts the caller from the ordinary share (nullptr: issuers only).
  int charge_open(fuse_req_t req, Domain* d);
  // Closes fds of inodes not in use, down to below the soft limit.
  void reclaim_fds();
  // Keeps an inode's fd open while a handler uses it (0, or an errno if it cannot be reopened).
  int pin(Inode& i);
  void unpin(Inode& i);
  // The inode of a node id; nullptr for a stale or unknown id (reply ESTALE).
  Inode* inode(fuse_ino_t ino);
  fuse_ino_t ino_of(Inode* i) const;
  // Looks up (or creates) the inode for an entry; fills e. 0 or errno.
  int do_lookup(fuse_ino_t parent, const char* name, fuse_entry_param* e);
  void forget_one(fuse_ino_t ino, uint64_t n);
  int stat_inode(Inode& i, struct stat* st);
  void fill_virtual(fuse_ino_t ino, struct stat* st);

  // The domain holding an inode: a directory that roots a domain (by identity) holds itself,
  // anything else belongs to its parent's domain, found by walking parents in the table when
  // domains changed. Never from a path read back.
  Domain& domain_of(Inode& i);
  // The inode's stamp as evidence in domain `in` (default: its current domain): 0 when none, or
  // when another domain issued it. fd: an open fd of it, or -1.
  Epoch stamp_of(Inode& i, int fd = -1, const Domain* in = nullptr);
  // Records epoch `e` of domain d (and current size/mtime) as the inode's stamp. fd: real or -1.
  void stamp(Inode& i, int fd, Epoch e, const Domain& d);
  // CREATE's stamp, from one fstat under the inode's lock that also checks fd is inode i (the
  // name may have changed in BACKING since the open): EAGAIN when it is not, nothing stamped.
  // fresh: made by this CREATE, so no stamp to load; its stamp is then only recorded as `e` and
  // left *owed, which the handle must hold before the admission ends so that its release, or
  // the advance past `e`, writes it (stamp_owed).
  int stamp_created(Inode& i, int fd, Epoch e, const Domain& d, bool fresh, OwedStamp* owed);
  // Writes the OwedStamp of a handle that did not write, unless the file carries a stamp.
  void stamp_owed(Handle& h);
  // Under d's exclusive lock, before its epoch moves past `old`: stamps the files that handles
  // still open under `old` wrote (their holders, superseded, will not restamp at close).
  void stamp_writers(const Domain& d, Epoch old);

  // Tracks a new handle; from then on close_*() is its one way out (RELEASE, an interrupted
  // open, or the end of the session).
  void opened(Handle* h) { handles.track(h, h->writable && h->inode->kind == Kind::Real); }
  void opened(DirHandle* d) { handles.track(d); }
  // What RELEASE does: restamps what the handle wrote if its token is still the epoch, closes
  // its fd, gives back its share of the fd budget, frees it.
  void close_handle(Handle* h);
  void close_dir(DirHandle* d);
  // Once the session has ended: closes the handles the kernel never released; how many.
  size_t close_all();

  // After renameat2: the moved entry is (np, newname) (with RENAME_EXCHANGE the other one is
  // (p, name)). moved_to: the domain a file moved into, restamped with `token` there.
  void renamed(Inode& p, const char* name, Inode& np, const char* newname, unsigned flags,
               Domain* moved_to, Epoch token);
  // `domain add`: declares directory rel a domain, refusing when hard links cross its boundary.
  int declare_domain(const std::string& rel, std::string* why);

  fence::Caller caller(fuse_req_t req) const;
  // Token the caller presents for a domain (process binding), 0 when none.
  Epoch token_for(fuse_req_t req, Domain& d);

  std::string proc_path(int fd) const;  // "/proc/self/fd/N"
  // close(2) of an fd of this inode in BACKING can report nothing (a local filesystem with no
  // flush operation): a FLUSH request would be a round trip for nothing.
  bool flush_is_noop(const Inode& i) const { return flush_noop_ && i.dev == root_.dev; }
  // The kernel checks POSIX ACLs (FUSE_POSIX_ACL, negotiated at INIT, before any other request).
  bool acls_enforced() const { return acls_enforced_; }
  void set_acls_enforced() { acls_enforced_ = true; }
  bool is_state_name(Inode& parent, const char* name) const;

  // Writable handles that may map their file shared, and the cached pages of refused writes.
  PageCache pagecache;
  // Whether a read-only open may keep the kernel's cached pages of its file.
  ReadCache readcache;
  // Every open handle: writers are stamped by an advance of their domain.
  OpenHandles handles;

  // Virtual inodes (the .fencefs directory).
  Inode ctl_dir, ctl_file, status_file, metrics_file;

  std::atomic<uint64_t> n_inodes{0};
  // When this daemon started serving: status and metrics report uptime from it.
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  const std::chrono::system_clock::time_point started_wall = std::chrono::system_clock::now();

 private:
  Options opts_;
  fence::Fence& fence_;
  fence::Bindings& bindings_;
  Inode root_;
  bool take_file_id(Inode& i, int fd);
  void load_stamp_locked(Inode& i, int fd) REQUIRES(inode_mutex(i));
  // Whether a stamp read on i's filesystem is evidence: not on a FUSE mount a user made.
  bool stamps_count(const Inode& i, int fd);
  common::Mutex untrusted_mu_;
  std::set<dev_t> untrusted_said_ GUARDED_BY(untrusted_mu_);  // logged (at most 16)
  // st: the file now (fd, or i.fd when fd is -1), read under the same lock. first: only if the
  // file carries no stamp yet (another member of a cluster may have stamped it since).
  void stamp_locked(Inode& i, int fd, Epoch e, const Domain& d, const struct stat& st,
                    bool first = false) REQUIRES(inode_mutex(i));
  void set_parent_locked(Inode* i, Inode* p) REQUIRES(table_mu_);
  void drop_locked(Inode* i) REQUIRES(table_mu_);
  Inode* find_locked(const struct stat& st) REQUIRES(table_mu_);
  common::Mutex table_mu_;
  struct KeyHash {
    // noexcept: the map then stores no hash beside each node (16 bytes per cached inode).
    size_t operator()(const std::pair<ino_t, dev_t>& k) const noexcept {
      return std::hash<uint64_t>{}(k.first * 0x9e3779b97f4a7c15ULL ^ k.second);
    }
  };
  std::unordered_map<std::pair<ino_t, dev_t>, Inode, KeyHash> table_
      GUARDED_BY(table_mu_);  // nodes never move
  NodeTable nodes_;
  int mount_fd_ = -1;  // O_RDONLY fd of BACKING, for open_by_handle_at
  std::atomic<size_t> open_fds_{0};
  std::unique_ptr<FdBudget> budget_;
  // Past it, idle inodes' fds are closed.
  size_t fd_soft_limit() const {
    size_t limit = budget_->limit();
    return limit > 8192 ? limit - limit / 4 : limit / 2;
  }
  PageBudget pages_{size_t{64} << 20, size_t{256} << 20};
  std::atomic<bool> reclaiming_{false};
  bool flush_noop_ = false;
  bool acls_enforced_ = false;
};

// Pins the inodes of one request for the handler's duration.
class Pinned {
 public:
  Pinned(Fs& f, Inode* a, Inode* b = nullptr);
  ~Pinned();
  int error() const { return err_; }

 private:
  Fs& f_;
  Inode* a_ = nullptr;
  Inode* b_ = nullptr;
  int err_ = 0;
};

Fs& fs(fuse_req_t req);
const fuse_lowlevel_ops& operations();

// Runs filesystem calls that create objects as the caller (fsuid/fsgid), so ownership and setgid
// inheritance are native; DAC overrides stay raised since the kernel already checked permissions.
class AsCaller {
 public:
  // mode: of the object created; a set-group-ID bit needs the caller's supplementary groups.
  // dac=false: no override either, for objects the kernel has not checked (with all groups; a
  // root caller with no more capabilities than /proc shows it holding, over `file` when given:
  // one in a user namespace below ours holds them over a file it maps the owner and group of).
  AsCaller(fuse_req_t req, mode_t mode, bool dac = true, const struct stat* file = nullptr);
  ~AsCaller();
  AsCaller(const AsCaller&) = delete;
  AsCaller& operator=(const AsCaller&) = delete;
  // False when the caller's credentials could not be taken on: do not proceed.
  bool ok() const { return !failed_; }

 private:
  bool switched_ = false;
  bool groups_ = false;
  bool failed_ = false;
  bool caps_ = false;  // effective capabilities lowered; saved_ restores them
  uint32_t saved_[2] = {0, 0};
};

// A creation under the caller's umask. The kernel leaves it to the daemon (FUSE_CAP_DONT_MASK)
// so that BACKING's filesystem applies it, or a directory's default ACL in its place, as natively.
// On a worker with a umask of its own it is set there (and stays until another caller's,
// common/umask.h); elsewhere *mode is masked here (a default ACL then meets the masked mode, as
// when the kernel masks it).
void caller_umask(fuse_req_t req, mode_t* mode);

// Runs a syscall that allocates blocks (write, fallocate, copy; with keep_caps an xattr, link or
// rename, which the backing filesystem checks again) with the caller's fsuid, so that it allocates
// as for the caller: an unprivileged job never reaches the blocks reserved for root, which the
// journal's advances may need. keep_caps: the daemon's filesystem capabilities, which the switch
// clears, stay effective (the kernel already checked the caller's permission on the mount), but
// CAP_FOWNER only with fowner: without it BACKING judges a sticky directory's rule against the
// caller's fsuid itself, in the same syscall.
class ChargedTo {
 public:
  explicit ChargedTo(fuse_req_t req, bool keep_caps = false, bool fowner = true)
      : ChargedTo(fuse_req_ctx(req)->uid, keep_caps, fowner) {}
  // A writeback's request is the kernel's (uid 0): charged to the opener of its handle instead.
  explicit ChargedTo(uid_t uid, bool keep_caps = false, bool fowner = true);
  ~ChargedTo();
  ChargedTo(const ChargedTo&) = delete;
  ChargedTo& operator=(const ChargedTo&) = delete;

 private:
  bool switched_ = false;
  bool lowered_ = false;  // CAP_FOWNER taken out of the effective set, fsuid 0 kept
};

// Drops CAP_SYS_RESOURCE from the calling thread's effective set (call before any worker thread
// exists): with it, any write of the daemon may use the reserved blocks whatever its fsuid.
void drop_resource_override();

// Clears the set-id bits of the regular file open at fd as a write by the request's caller would.
// True if the mode changed.
bool kill_setid(fuse_req_t req, int fd);

// Handlers, one group per file.
void ctl_lookup(fuse_req_t req, Inode& parent, const char* name);
void ctl_open(fuse_req_t req, Inode& i, fuse_file_info* fi);
void ctl_read(fuse_req_t req, Handle& h, size_t size, off_t off);
void ctl_write(fuse_req_t req, Handle& h, const char* buf, size_t size, off_t off);
void ctl_readdir(fuse_req_t req, size_t size, off_t off, bool plus);
int ctl_ioctl_set_token(fuse_req_t req, Handle& h, const void* in, size_t in_size);
// Replies to req itself, possibly from another thread once the new epoch is durable.
void ctl_ioctl_advance(fuse_req_t req, Domain& d, const void* in, size_t in_size);
int ctl_ioctl_bind(fuse_req_t req, Domain& d, const void* in, size_t in_size);
// On success *out holds the reply (a fencefs_acquire).
int ctl_ioctl_acquire(fuse_req_t req, Domain& d, const void* in, size_t in_size, void* out);

inline Handle* handle_of(fuse_file_info* fi) { return reinterpret_cast<Handle*>(fi->fh); }
inline bool is_virtual(const Inode& i) { return i.kind != Kind::Real; }

}  // namespace fencefs::fs
