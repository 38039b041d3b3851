#include "daemon/claim.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>

#include "common/error.h"
#include "common/log.h"
#include "common/proc.h"
#include "daemon/lock_file.h"
#include "daemon/marker_file.h"
#include "daemon/mounts.h"
#include "daemon/nesting.h"
#include "journal/state_files.h"

namespace fencefs::daemon {
namespace {

constexpr std::chrono::seconds kHolderWait{10};  // for a state lock's holder no longer mounted

std::string slurp_fd(int fd) {
  std::string out;
  char buf[4096];
  off_t off = 0;
  ssize_t n;
  while ((n = pread(fd, buf, sizeof buf, off)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return out;
}

std::string first_line(const char* path) {
  std::string s;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return s;
  s = slurp_fd(fd);
  close(fd);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string hostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// Values are one line each: backslash and newline escaped.
std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string unescape(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '\\' && i + 1 < v.size()) {
      out += v[i + 1] == 'n' ? '\n' : v[i + 1];
      ++i;
    } else {
      out += v[i];
    }
  }
  return out;
}

std::string not_a_directory(const std::string& dir) {
  return fmt::format(
      "{} is not a directory (a symbolic link?): fencefs keeps its owner marker, and by default "
      "its state, there and follows no link to it; remove it",
      dir);
}

// BACKING/.fencefs, opened without following a link (what is then created in it is created
// through this fd). -1 with the reason in *error.
int open_marker_dir(const std::string& dir, std::string* error) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    *error = errno == ELOOP || errno == ENOTDIR ? not_a_directory(dir)
                                                : fmt::format("{}: {}", dir, common::errstr(errno));
  return fd;
}

std::string who(int fd) {
  auto o = Owner::decode(slurp_fd(fd));
  return o ? o->describe() : "an unknown process";
}

}  // namespace

std::string served_by(const std::string& backing, bool ours_only) {
  std::string ignored;
  int dfd = open_marker_dir(backing + "/.fencefs", &ignored);
  if (dfd < 0) return "";
  // Whoever may write BACKING's root may have put a FIFO or a device there: opened without
  // waiting, and read only if it is a regular file.
  int fd = openat(dfd, "owner", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  close(dfd);
  if (fd < 0) return "";
  if (struct stat st{}; fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
                        (ours_only && st.st_uid != 0 && st.st_uid != geteuid())) {
    close(fd);
    return "";
  }
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  std::string out;
  if (fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) out = who(fd);
  close(fd);
  return out;
}

std::string Owner::encode() const {
  return (cluster.empty() ? "" : "cluster=" + escape(cluster) + "\n") +
         fmt::format(
             "host={}\nmachine_id={}\nboot_id={}\npid={}\nstart_time={}\nmountpoint={}\n"
             "state={}\nsince={}\n",
             escape(host), escape(machine_id), escape(boot_id), pid, start_time, escape(mountpoint),
             escape(state), escape(since));
}

std::optional<Owner> Owner::decode(const std::string& text) {
  Owner o;
  bool any = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view k = line.substr(0, eq), v = line.substr(eq + 1);
    any = true;
    if (k == "host") o.host = unescape(v);
    if (k == "boot_id") o.boot_id = unescape(v);
    if (k == "machine_id") o.machine_id = unescape(v);
    if (k == "mountpoint") o.mountpoint = unescape(v);
    if (k == "state") o.state = unescape(v);
    if (k == "since") o.since = unescape(v);
    if (k == "cluster") o.cluster = unescape(v);
    if (k == "pid") std::from_chars(v.data(), v.data() + v.size(), o.pid);
    if (k == "start_time") std::from_chars(v.data(), v.data() + v.size(), o.start_time);
  }
  if (!any || o.host.empty()) return std::nullopt;
  return o;
}

std::string Owner::describe() const {
  if (!cluster.empty())
    return fmt::format(
        "cluster {} (marked by its member pid {} on host {}, mounted at {}, since {})", cluster,
        pid, host, mountpoint, since);
  return fmt::format("pid {} on host {}, mounted at {} (state {}) since {}", pid, host, mountpoint,
                     state, since);
}

Owner self_owner(const std::string& mountpoint, const std::string& state) {
  Owner o;
  o.host = hostname();
  o.boot_id = first_line("/proc/sys/kernel/random/boot_id");
  o.machine_id = first_line("/etc/machine-id");
  o.pid = getpid();
  if (auto st = proc::read_stat(o.pid)) o.start_time = st->start_time;
  o.mountpoint = mountpoint;
  o.state = state;
  time_t now = time(nullptr);
  struct tm tm;
  gmtime_r(&now, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  o.since = buf;
  return o;
}

// Host names repeat (cloned machines, containers): a machine id, where both records have one,
// tells another machine of that name from this one's earlier boot.
bool same_host(const Owner& a, const Owner& b) {
  return a.host == b.host &&
         (a.machine_id.empty() || b.machine_id.empty() || a.machine_id == b.machine_id);
}

// A record of this host and boot names a running process: same pid and start time. A zombie has
// exited (its locks and mount are gone; only its parent has not reaped it).
bool still_running(const Owner& o) {
  auto st = o.pid > 0 ? proc::read_stat(o.pid) : std::nullopt;
  return st && st->start_time == o.start_time && st->state != 'Z' && st->state != 'X';
}

// The state lock's holder, named by its record, is still running here but not in its own mount
// table: unmounted and exiting (a member leaves its cluster first), or still starting. An empty
// record: a daemon between taking the lock and writing it.
bool holder_not_mounted(int fd) {
  std::string text = slurp_fd(fd);
  if (text.empty()) return true;
  auto o = Owner::decode(text);
  Owner me = self_owner("", "");
  if (!o || o->mountpoint.empty() || !same_host(*o, me) || o->boot_id != me.boot_id ||
      !still_running(*o))
    return false;
  std::string ignored;
  auto mounted = is_mountpoint(o->mountpoint, &ignored, fmt::format("/proc/{}/mountinfo", o->pid));
  return mounted.has_value() && !*mounted;
}

// The state lock. `umount; mount` of a state: the daemon that unmounted holds it until it
// exits. Waited for, not refused; never a daemon that is mounted, never past a lock held.
Lock lock_state(int dirfd, const std::string& path, int* fd, bool* created, bool* waited,
                std::string* error) {
  auto deadline = std::chrono::steady_clock::now() + kHolderWait;
  Lock l = lock_file(dirfd, "lock", path, fd, created, error);
  *waited = false;
  while (l == Lock::Busy && holder_not_mounted(*fd) &&
         std::chrono::steady_clock::now() < deadline) {
    if (!*waited)
      log::info(
          "state directory {}: held by a daemon that is not mounted ({}); waiting for it "
          "to exit, at most {} s",
          path, who(*fd), kHolderWait.count());
    *waited = true;
    close(*fd);
    *fd = -1;
    usleep(20'000);
    l = lock_file(dirfd, "lock", path, fd, created, error);
  }
  return l;
}

// long: the state lock, the backing lock and the owner record, taken in this order and undone
// together when a later one fails.
std::unique_ptr<Claim> Claim::take(const Request& req, std::string* error) {
  std::unique_ptr<Claim> c(new Claim());
  c->req_ = req;
  bool created = false;
  int fd = -1;

  // BACKING/.fencefs is also the default state directory: refuse a link there before the state
  // lock is created through it.
  std::string dir = req.backing + "/.fencefs";
  if (struct stat st{}; lstat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    *error = not_a_directory(dir);
    return nullptr;
  }

  // Whoever may write its parent (BACKING's root, by default) could rename the state directory
  // away and put a link or a directory of theirs in its place: it is opened once, checked, and
  // used by fd. Its path is canonical (a link there was resolved, or refused, with the options):
  // a link there now was swapped in since.
  c->state_dir_fd_ = journal::open_private_state_dir(req.state, true, error);
  if (c->state_dir_fd_ < 0) return nullptr;
  // The state directory: one daemon appends to a journal.
  std::string state_lock = req.state + "/lock";
  bool waited = false;
  switch (lock_state(c->state_dir_fd_, state_lock, &fd, &created, &waited, error)) {
    case Lock::Error:
      return nullptr;
    case Lock::Busy:
      *error = fmt::format(
          "state directory {} is in use by another fencefs daemon ({}); a state serves one "
          "mount at a time: {}",
          req.state, who(fd),
          waited ? fmt::format("that daemon did not exit within {} s of leaving its mount "
                               "(a member leaving a cluster whose etcd is slow? a lazy unmount "
                               "with files still open?)",
                               kHolderWait.count())
                 : "unmount that mount first");
      close(fd);
      return nullptr;
    case Lock::Taken:
      c->state_fd_ = fd;
      c->created_state_lock_ = created;
  }

  // The backing: its marker directory is BACKING/.fencefs, never visible through a mount.
  if (mkdir(dir.c_str(), 0700) == 0) {
    c->created_marker_dir_ = true;
  } else if (errno != EEXIST) {
    const int err = errno;
    *error =
        fmt::format("cannot create {}, the backing's marker (its lock lives there): {}{}", dir,
                    common::errstr(err),
                    err == EPERM   ? "; is BACKING's root immutable or append-only? see lsattr -d"
                    : err == EROFS ? "; fencefs needs BACKING writable"
                                   : "");
    c->abandon();
    return nullptr;
  }
  // Whoever may write BACKING's root could have put a link here: root would then write (and by
  // default keep the state) wherever it points. Opened without following, checked, used by fd.
  c->marker_dir_fd_ = req.state == dir ? dup(c->state_dir_fd_) : open_marker_dir(dir, error);
  if (c->marker_dir_fd_ < 0) {
    c->abandon();
    return nullptr;
  }
  // Cluster members share the backing by design: each holds a read lock, which excludes a
  // daemon outside cluster mode (a write lock) and is excluded by one.
  const bool shared = !req.cluster.empty();
  switch (lock_file(c->marker_dir_fd_, "owner", dir + "/owner", &fd, &created, error,
                    shared ? F_RDLCK : F_WRLCK)) {
    case Lock::Error:
      c->abandon();
      return nullptr;
    case Lock::Busy:
      if (shared) {
        *error = fmt::format(
            "backing {} is served by a fencefs daemon outside cluster mode ({}); unmount it "
            "before mounting the backing as a cluster member",
            req.backing, who(fd));
      } else if (auto o = Owner::decode(slurp_fd(fd)); o && !o->cluster.empty()) {
        // Members hold read locks: "one daemon" would send the operator after a single mount.
        *error = fmt::format(
            "backing {} is served by members of fencefs {}; a daemon outside cluster mode does "
            "not fence with them: mount it as a member (-o cluster={},etcd=...), or unmount "
            "every member on this host first",
            req.backing, o->describe(), o->cluster);
      } else {
        *error = fmt::format(
            "backing {} is already served by a fencefs daemon ({}); a backing is served by one "
            "daemon: unmount that mount first",
            req.backing, who(fd));
      }
      close(fd);
      c->abandon();
      return nullptr;
    case Lock::Taken:
      (shared ? c->shared_owner_fd_ : c->owner_fd_) = fd;
      c->created_owner_ = created && !shared;  // other members may hold it already
      if (shared) c->created_marker_dir_ = false;
  }
  if (bool busy; (c->root_lock_fd_ =
                      lock_backing_identity(req.backing, shared, &busy, &c->root_lock_name_)) < 0 &&
                 busy) {
    *error = fmt::format(
        "backing {} is locked by another fencefs daemon{}, though its owner file is free: "
        "BACKING/.fencefs was renamed or replaced while that daemon ran; unmount it first",
        req.backing, shared ? " outside cluster mode" : "");
    c->abandon();
    return nullptr;
  }
  // Checked once our own locks are held: of two daemons starting nested at once, the later to
  // look sees the other's.
  if (std::string why = nested_backing(req.backing); !why.empty()) {
    *error = why;
    c->abandon();
    return nullptr;
  }
  // Nobody here holds the lock against us. The marker may still name a mount the lock cannot
  // see: another host (locks on shared storage may not reach across hosts), or a copy of it.
  if (!c->check_marker(slurp_fd(fd), error)) {
    c->abandon();
    return nullptr;
  }
  // A member writes its own marker even over a fellow member's: a member that fails later
  // restores what it found only while its own marker is still there, so it never empties the
  // marker of a member that started meanwhile and serves.
  if (shared && !c->write_shared_marker(error)) {
    c->abandon();
    return nullptr;
  }
  return c;
}

bool Claim::write_shared_marker(std::string* error) {
  Owner me = self_owner(req_.mountpoint, req_.state);
  me.cluster = req_.cluster;
  std::string text = me.encode();
  if (!write_marker(shared_owner_fd_, text)) {
    *error = fmt::format("cannot write the mount marker: {}", common::errstr(errno));
    return false;
  }
  written_text_ = std::move(text);
  return true;
}

// long: one decision per kind of marker (none, unreadable, a cluster's, a single owner's on
// this boot, an earlier boot or another host), each with its own message.
bool Claim::check_marker(const std::string& text, std::string* error) {
  const Request& req = req_;
  previous_text_ = text;
  if (text.empty()) return true;
  auto prev = Owner::decode(text);
  if (!prev) {
    if (req.takeover) return true;
    *error = fmt::format(
        "backing {}: unreadable marker {}/.fencefs/owner; if no other fencefs serves this "
        "backing, mount with -o takeover",
        req.backing, req.backing);
    return false;
  }
  if (!prev->cluster.empty()) {
    if (prev->cluster == req.cluster) return true;  // a fellow member marked it: not gone
    previous_ = prev;
    if (req.takeover) return true;
    *error = fmt::format(
        "backing {} is marked as served by fencefs {}. {} If no member of that cluster serves "
        "it anymore, mount with -o takeover",
        req.backing, prev->describe(),
        req.cluster.empty() ? "A daemon outside that cluster does not fence with its members."
                            : "Members of two clusters do not fence each other.");
    return false;
  }
  previous_ = prev;
  Owner me = self_owner(req.mountpoint, req.state);
  const bool here = same_host(*prev, me);
  if (here && prev->boot_id == me.boot_id) {
    if (prev->pid != me.pid && still_running(*prev)) {
      *error = fmt::format(
          "backing {} is already served by a fencefs daemon ({}), which is still running; a "
          "backing is served by one daemon: unmount that mount first",
          req.backing, prev->describe());
      return false;
    }
    return true;  // that daemon is gone (killed or crashed): its marker is stale
  }
  if (here || req.takeover) return true;  // an earlier boot, or taken over
  *error = fmt::format(
      "backing {} is marked as served by another host's fencefs ({}{}). Two daemons on one "
      "backing do not fence each other. If that mount is gone (host down, daemon killed), "
      "mount with -o takeover",
      req.backing, prev->describe(),
      prev->host == me.host ? "; a machine of this host's name with machine id " + prev->machine_id
                            : std::string());
  return false;
}

// The state lock last: a daemon waiting for it starts once nothing of this one writes any more.
Claim::~Claim() {
  // The backing is free; the blocks kept let a restart write the marker on a full backing.
  if (bool kept; released_ && owner_fd_ >= 0 && empty_marker(owner_fd_, &kept) && !kept)
    log::debug("the backing's marker keeps no block for the next start: {}", common::errstr(errno));
  if (owner_fd_ >= 0) close(owner_fd_);
  if (shared_owner_fd_ >= 0) close(shared_owner_fd_);
  if (root_lock_fd_ >= 0) {
    unlink_backing_identity(root_lock_fd_, root_lock_name_);
    close(root_lock_fd_);
  }
  if (marker_dir_fd_ >= 0) close(marker_dir_fd_);
  if (state_dir_fd_ >= 0) close(state_dir_fd_);
  if (state_fd_ >= 0) close(state_fd_);
}

bool Claim::publish(std::string* error) {
  // A member's marker names the daemon after it detached, unless another member wrote it since.
  auto mine = Owner::decode(written_text_);
  if (mine && mine->pid != getpid() && slurp_fd(shared_owner_fd_) == written_text_ &&
      !write_shared_marker(error))
    return false;
  std::string text = self_owner(req_.mountpoint, req_.state).encode();
  for (int fd : {owner_fd_, state_fd_}) {
    if (fd >= 0 && !write_marker(fd, text)) {
      *error = fmt::format("cannot write the mount marker: {}", common::errstr(errno));
      return false;
    }
  }
  return true;
}

void Claim::release_at_exit() { released_ = true; }

void Claim::abandon() {
  std::string dir = req_.backing + "/.fencefs";
  // Unlinked while still locked, so nobody else locks a file about to disappear unnoticed.
  if (created_owner_ && marker_dir_fd_ >= 0) unlinkat(marker_dir_fd_, "owner", 0);
  if (created_state_lock_ && state_dir_fd_ >= 0) unlinkat(state_dir_fd_, "lock", 0);
  if (created_marker_dir_) rmdir(dir.c_str());
  if (!created_owner_ && owner_fd_ >= 0) write_marker(owner_fd_, previous_text_);
  // Unless a member starting meanwhile wrote it again: that member's marker stays.
  if (!written_text_.empty() && shared_owner_fd_ >= 0 &&
      slurp_fd(shared_owner_fd_) == written_text_)
    write_marker(shared_owner_fd_, previous_text_);
  created_owner_ = created_state_lock_ = created_marker_dir_ = false;
  if (root_lock_fd_ >= 0) unlink_backing_identity(root_lock_fd_, root_lock_name_);
  for (int* fd : {&owner_fd_, &state_fd_, &shared_owner_fd_, &marker_dir_fd_, &state_dir_fd_,
                  &root_lock_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

}  // namespace fencefs::daemon
