// The cluster's identity: created with it in etcd, recorded by every member's state and by the
// BACKING it serves. The membership and epochs are in cluster.cc.
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <random>

#include "cluster/cluster.h"
#include "common/anchored.h"
#include "common/error.h"
#include "common/log.h"

namespace fencefs::cluster {
namespace {

std::string random_id() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
}

// BACKING/.fencefs, never through a symlink; -1 and errno on failure.
int open_marker_dir(int backing_fd) {
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, backing_fd, ".fencefs", &how, sizeof how));
}

// BACKING/.fencefs/cluster's first line; 0 or errno (ENOENT: none yet). A regular file only:
// whatever else was planted there (a FIFO would block the reader) is refused.
int read_pin(int dir, std::string* out) {
  int fd = openat(dir, "cluster", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return EINVAL;
  }
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf);
  int err = n < 0 ? errno : 0;
  ::close(fd);
  if (err) return err;
  out->assign(buf, static_cast<size_t>(n));
  out->resize(std::min(out->size(), out->find('\n')));
  return 0;
}

}  // namespace

// The cluster's identity: a random id created with the cluster, recorded by every member's
// state and by the BACKING it serves (BACKING/.fencefs/cluster, written once). etcd without it
// (wiped, or restored from a snapshot older than the cluster), or another cluster's, is refused
// before anything is written: a member with a fresh state that reaches another or a wiped etcd
// would otherwise found a cluster of the same name there and enforce its own epochs on the data.
// long: one decision per combination of what etcd, the state and BACKING record.
int Cluster::check_identity(etcd::Client& c, bool at_start, std::string* why) {
  std::string file = o_.state_dir + "/cluster";
  std::string local;
  if (int fd = common::anchored_open(file, O_RDONLY | O_CLOEXEC); fd >= 0) {
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof buf);
    ::close(fd);
    local.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
    local.resize(std::min(local.size(), local.find('\n')));
  }
  std::optional<etcd::KeyValue> kv;
  etcd::Status s = c.get(prefix_ + "meta", &kv);
  if (!s.ok()) {
    *why = fmt::format("cluster {}: etcd: {}", o_.name, s.message);
    return EIO;
  }
  std::string pinned;
  if (int err = pinned_cluster(&pinned); err && err != ENOENT) {
    *why = fmt::format("cluster {}: cannot read BACKING/.fencefs/cluster: {}", o_.name,
                       common::errstr(err));
    return EIO;
  }
  const std::string refound = fmt::format(
      "to found the cluster anew for this data, unmount every member and remove {} (every "
      "member's STATE/cluster) and BACKING/.fencefs/cluster",
      file);
  std::string want = o_.name + " ";
  if (!kv) {
    if (!local.empty() || !pinned.empty()) {
      *why = fmt::format(
          "cluster {}: etcd has no record of this cluster, but {} joined it ({}): etcd was "
          "wiped, restored from a snapshot older than the cluster, or is not the cluster's. "
          "Restore etcd or point etcd= at it; {}",
          o_.name, !local.empty() ? "this member" : "BACKING's members",
          !local.empty() ? local : pinned, refound);
      return EIO;
    }
    etcd::TxnResult r;
    etcd::Compare cmp{prefix_ + "meta", etcd::Compare::Target::kCreate,
                      etcd::Compare::Result::kEqual};
    s = c.txn({cmp}, {etcd::Op::Put(prefix_ + "meta", random_id())}, {}, &r);
    if (s.ok()) s = c.get(prefix_ + "meta", &kv);
    if (!s.ok() || !kv) {
      *why = fmt::format("cluster {}: cannot create it in etcd: {}", o_.name, s.message);
      return EIO;
    }
    log::info("cluster {}: {} the cluster (id {})", o_.name, r.succeeded ? "founded" : "joined",
              kv->value);
    if (r.succeeded && at_start) founded_ = true;  // for this join's resync only
  }
  std::string mine = want + kv->value;
  if (!pinned.empty() && pinned != mine) {
    *why = fmt::format(
        "cluster {}: BACKING is served by cluster '{}' (BACKING/.fencefs/cluster), but etcd "
        "holds '{}' (another etcd, or one wiped since): refusing to serve it with other epochs. "
        "Point etcd= at that cluster's etcd; {}",
        o_.name, pinned, mine, refound);
    return EIO;
  }
  if (local.empty()) {
    std::string tmp = file + ".tmp";
    int fd = common::anchored_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok = fd >= 0 &&
              ::write(fd, (mine + "\n").data(), mine.size() + 1) ==
                  static_cast<ssize_t>(mine.size() + 1) &&
              ::fsync(fd) == 0;
    if (fd >= 0) ::close(fd);
    if (!ok || common::anchored_rename(tmp, file) != 0) {
      *why = fmt::format("cluster {}: cannot record membership in {}: {}", o_.name, file,
                         common::errstr(errno));
      return EIO;
    }
    common::anchored_sync_dir(o_.state_dir);
  } else if (local != mine) {
    *why = fmt::format(
        "cluster {}: this member's state belongs to '{}' but etcd holds '{}' (another cluster "
        "of the same name, or a replaced etcd); refusing to mix them",
        o_.name, local, mine);
    return EIO;
  }
  return pinned.empty() ? pin_backing(mine, why) : 0;
}

int Cluster::pinned_cluster(std::string* out) {
  int dir = open_marker_dir(backing_fd_);
  if (dir < 0) return errno;
  int err = read_pin(dir, out);
  ::close(dir);
  return err;
}

// Records `mine` in BACKING/.fencefs/cluster, once: written aside under a name of its own and
// linked into place, so that of two members pinning at once one wins, whole.
int Cluster::pin_backing(const std::string& mine, std::string* why) {
  int dir = open_marker_dir(backing_fd_);
  int err = dir < 0 ? errno : 0;
  std::string pinned;
  if (!err) {
    std::string tmp = "cluster." + random_id() + ".tmp";
    int fd = openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    std::string text = mine + "\n";
    bool ok = fd >= 0 &&
              ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
              ::fsync(fd) == 0;
    err = ok ? 0 : errno ? errno : EIO;
    if (fd >= 0) ::close(fd);
    if (ok && linkat(dir, tmp.c_str(), dir, "cluster", 0) != 0 && errno != EEXIST) err = errno;
    if (fd >= 0) unlinkat(dir, tmp.c_str(), 0);
    if (!err) {
      fsync(dir);
      err = read_pin(dir, &pinned);
    }
    ::close(dir);
  }
  if (err) {
    *why = fmt::format("cluster {}: cannot record the cluster in BACKING/.fencefs/cluster: {}",
                       o_.name, common::errstr(err));
    return EIO;
  }
  if (pinned != mine) {
    *why = fmt::format(
        "cluster {}: BACKING is served by cluster '{}' (BACKING/.fencefs/cluster), but etcd "
        "holds '{}': another member pinned it meanwhile; refusing to serve it with other epochs",
        o_.name, pinned, mine);
    return EIO;
  }
  return 0;
}

}  // namespace fencefs::cluster
