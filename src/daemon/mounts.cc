#include "daemon/mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <libmount/libmount.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>

#include "common/error.h"
#include "common/log.h"
#include "common/mount_table.h"

namespace fencefs::daemon {

using common::any_mount;

namespace {

// Whether FS is the fencefs mount of BACKING at DIR made by this process' user.
bool ours(libmnt_fs* fs, const std::string& dir, const std::string& backing) {
  const char* target = mnt_fs_get_target(fs);
  const char* type = mnt_fs_get_fstype(fs);
  const char* source = mnt_fs_get_source(fs);
  char* uid = nullptr;
  size_t len = 0;
  if (!target || !type || !source || dir != target || strcmp(type, "fuse.fencefs") != 0 ||
      backing != source || mnt_fs_get_option(fs, "user_id", &uid, &len) != 0 || !uid)
    return false;
  return std::string_view(uid, len) == std::to_string(geteuid());
}

}  // namespace

std::vector<std::string> fencefs_backings() {
  std::vector<std::string> out;
  std::string ignored;
  any_mount(
      "/proc/self/mountinfo",
      [&](libmnt_fs* fs) {
        const char* type = mnt_fs_get_fstype(fs);
        const char* source = mnt_fs_get_source(fs);
        if (type && source && strcmp(type, "fuse.fencefs") == 0) out.emplace_back(source);
        return false;
      },
      &ignored);
  return out;
}

std::optional<bool> is_mountpoint(const std::string& dir, std::string* error,
                                  const std::string& table) {
  return any_mount(
      table,
      [&](libmnt_fs* fs) {
        const char* target = mnt_fs_get_target(fs);
        return target && dir == target;
      },
      error);
}

namespace {

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x00004000U  // Linux 6.8; glibc's headers may predate it
#endif

// An O_PATH descriptor of DIR, reached through no symbolic link (a directory on the way swapped
// for one would lead elsewhere); -1 with *error. O_PATH sends no request.
int open_mountpoint(const std::string& dir, std::string* error) {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_NO_SYMLINKS;
  int fd = static_cast<int>(syscall(SYS_openat2, AT_FDCWD, dir.c_str(), &how, sizeof how));
  if (fd < 0) *error = fmt::format("{}: {}", dir, common::errstr(errno));
  return fd;
}

// The id of the mount FD is on: MASK STATX_MNT_ID (the table's) or STATX_MNT_ID_UNIQUE; nullopt
// when the kernel does not give it. AT_STATX_DONT_SYNC: answered from the kernel's cache.
std::optional<uint64_t> mount_id_of(int fd, unsigned mask, dev_t* dev = nullptr) {
  struct statx sx {};
  if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, mask, &sx) != 0 || !(sx.stx_mask & mask))
    return std::nullopt;
  if (dev) *dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  return sx.stx_mnt_id;
}

// Whether the mount DIR leads to has ID's device but another unique id: this daemon's mount
// freed the device number and a newer mount took it, so this daemon's is gone.
bool device_taken_over(const std::string& dir, const MountId& id) {
  std::string ignored;
  int fd = id.unique ? open_mountpoint(dir, &ignored) : -1;
  if (fd < 0) return false;
  dev_t dev = 0;
  std::optional<uint64_t> unique = mount_id_of(fd, STATX_MNT_ID_UNIQUE, &dev);
  close(fd);
  return unique && dev == id.dev && *unique != id.unique;
}

// Whether this daemon's mount (as for our_mount, and ID) is in the table.
std::optional<bool> still_mounted(const std::string& dir, const std::string& backing,
                                  const MountId& id, std::string* error) {
  auto found = any_mount(
      "/proc/self/mountinfo",
      [&](libmnt_fs* fs) { return ours(fs, dir, backing) && mnt_fs_get_devno(fs) == id.dev; },
      error);
  if (found.value_or(false) && device_taken_over(dir, id)) return false;
  return found;
}

}  // namespace

std::optional<MountId> our_mount(const std::string& dir, const std::string& backing,
                                 std::string* error) {
  MountId id;
  auto found = any_mount(
      "/proc/self/mountinfo",
      [&](libmnt_fs* fs) {
        if (!ours(fs, dir, backing)) return false;
        id.dev = mnt_fs_get_devno(fs);  // the newest only: an older one is not this process'
        return true;
      },
      error);
  if (!found) return std::nullopt;
  if (!*found || !id.dev) {
    *error = fmt::format("no fencefs mount of {} at {} in the mount table", backing, dir);
    return std::nullopt;
  }
  // Known only if the path leads to that mount now; else the device alone identifies it.
  std::string ignored;
  if (int fd = open_mountpoint(dir, &ignored); fd >= 0) {
    dev_t dev = 0;
    if (auto unique = mount_id_of(fd, STATX_MNT_ID_UNIQUE, &dev); unique && dev == id.dev)
      id.unique = *unique;
    close(fd);
  }
  return id;
}

namespace {

// Whether the mount the canonical path DIR leads to is a fencefs mount of BACKING made by this
// user (ours) that `also` accepts by its descriptor and table entry (else *error says it is not
// WHOSE), and then, if DETACH, detaches it. Root detaches through a descriptor of the mount,
// never by the path again: the descriptor holds the mount, so its id cannot pass to another
// before it is checked.
bool detach_if(const std::string& dir, const std::string& backing, const char* whose,
               const std::function<bool(int fd, libmnt_fs*)>& also, std::string* error,
               bool detach = true) {
  int fd = open_mountpoint(dir, error);
  if (fd < 0) return false;
  std::optional<uint64_t> table_id = mount_id_of(fd, STATX_MNT_ID);
  if (!table_id) {
    *error = fmt::format("statx {}: {}", dir, common::errstr(errno));
    close(fd);
    return false;
  }
  bool mine = false;
  auto found = any_mount(
      "/proc/self/mountinfo",
      [&](libmnt_fs* fs) {
        if (static_cast<uint64_t>(mnt_fs_get_id(fs)) != *table_id) return false;
        mine = ours(fs, dir, backing) && also(fd, fs);
        return true;
      },
      error);
  bool ok = found.has_value() && mine;
  if (found.has_value() && !ok) *error = fmt::format("the mount at {} is not {}", dir, whose);
  if (ok && detach && umount2(fmt::format("/proc/self/fd/{}", fd).c_str(), MNT_DETACH) != 0) {
    ok = false;
    *error = fmt::format("umount {}: {}", dir, common::errstr(errno));
  }
  close(fd);
  return ok;
}

}  // namespace

bool detach_dead_mount(const std::string& dir, const std::string& backing, const MountId& id,
                       std::string* error) {
  return detach_if(
      dir, backing, "this daemon's",
      [&](int fd, libmnt_fs* fs) {
        // A device number freed by this daemon's mount may already be another's.
        return mnt_fs_get_devno(fs) == id.dev &&
               (!id.unique || mount_id_of(fd, STATX_MNT_ID_UNIQUE) == id.unique);
      },
      error);
}

namespace {

// Whether the connection of the fencefs mount FD is on has ended: a request to it fails with
// ENOTCONN. fencefs answers its .fencefs directory from memory, and never passes on a connection
// error of BACKING's (kernel_io), so only the kernel gives it. Asked by a child given 10 s: a live
// daemon that does not answer would hold the request forever. While a killed daemon's rings are
// torn down its requests fail with ECANCELED or ECONNABORTED, or wait, for a moment.
bool connection_ended(int fd, std::string* why) {
  pid_t pid = fork();
  if (pid < 0) {
    *why = fmt::format("fork: {}", common::errstr(errno));
    return false;
  }
  if (pid == 0) {  // only system calls here: the parent may have other threads
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Nothing of the parent's (its claim's locked file, the journal) outlives it through this.
    if (fd > 3) syscall(SYS_close_range, 3U, static_cast<unsigned>(fd) - 1, 0U);
    syscall(SYS_close_range, static_cast<unsigned>(fd) + 1, ~0U, 0U);
    struct statx sx {};
    for (int tries = 0; tries < 250; tries++) {
      if (statx(fd, ".fencefs", AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_TYPE, &sx) == 0)
        _exit(1);
      if (errno == ENOTCONN) _exit(0);
      if (errno != ECANCELED && errno != ECONNABORTED) _exit(1);
      usleep(20000);
    }
    _exit(1);
  }
  int st = 0;
  auto start = std::chrono::steady_clock::now();
  bool killed = false;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      *why = fmt::format("waitpid: {}", common::errstr(errno));
      return false;
    }
    auto waited = std::chrono::steady_clock::now() - start;
    if (!killed && waited >= std::chrono::seconds(10)) {
      kill(pid, SIGKILL);  // ends a FUSE request's wait, unless the daemon already took it
      killed = true;
    }
    if (waited >= std::chrono::seconds(12)) break;  // left behind: it dies with its request
    usleep(10000);
  }
  if (!killed && WIFEXITED(st) && WEXITSTATUS(st) == 0) return true;
  *why = killed ? "its daemon did not answer within 10 s" : "it answered";
  return false;
}

bool dead_ours(const std::string& dir, const std::string& backing, bool detach,
               std::string* error) {
  std::string why;
  bool ok = detach_if(
      dir, backing, "a fencefs mount of this backing made by this user",
      [&](int fd, libmnt_fs*) { return connection_ended(fd, &why); }, error, detach);
  if (!why.empty()) *error = fmt::format("the fencefs mount of {} at {}: {}", backing, dir, why);
  return ok;
}

}  // namespace

bool dead_mount_at(const std::string& dir, const std::string& backing, std::string* error) {
  return dead_ours(dir, backing, false, error);
}

bool remove_dead_mount(const std::string& dir, const std::string& backing, std::string* error) {
  return dead_ours(dir, backing, true, error);
}

bool left_dead_mount(const std::string& dir, const std::string& backing,
                     const std::optional<MountId>& id, const std::string& no_id, bool aborted) {
  if (aborted) {
    log::error(
        "the kernel aborted the FUSE connection of {} while it was mounted "
        "(/sys/fs/fuse/connections/{}/abort): exiting with status 1",
        dir, id ? std::to_string(minor(id->dev)) : "N");
  } else {
    // An unmount takes the mount out of the table before the kernel ends the connection;
    // `umount -f` ends it first and takes it out a moment later unless it is busy. The wait
    // decides only the exit status and whether a mount nothing can use any more is removed.
    std::string error = no_id;
    std::optional<bool> there;
    if (id) {
      int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while ((there = still_mounted(dir, backing, *id, &error)).value_or(false)) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        pollfd p{fd, POLLPRI, 0};  // POLLPRI once the table changes
        (void)poll(&p, 1, static_cast<int>(left.count()));
      }
      if (fd >= 0) close(fd);
    }
    if (!there) {
      log::warn(
          "the FUSE connection of {} ended, and whether its mount is still in place is unknown "
          "({}): if it is, fusermount3 -u -z {}",
          dir, error, dir);
      return false;
    }
    if (!*there) return false;
    log::error(
        "the FUSE connection of {} ended while it was still mounted (`umount -f` of a busy mount, "
        "or the kernel's request timeout, fs.fuse.default_request_timeout): exiting with status 1",
        dir);
  }
  std::string why = no_id;
  if (!id || !detach_dead_mount(dir, backing, *id, &why))
    log::warn("cannot remove the dead mount ({}): fusermount3 -u -z {}", why, dir);
  return true;
}

bool set_readahead(dev_t dev, unsigned kib, std::string* error) {
  std::string knob = fmt::format("/sys/class/bdi/{}:{}/read_ahead_kb", major(dev), minor(dev));
  std::string value = fmt::format("{}\n", kib);
  int fd = open(knob.c_str(), O_WRONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? write(fd, value.data(), value.size()) : -1;
  if (n >= 0 && n != static_cast<ssize_t>(value.size())) errno = EIO;
  bool ok = n == static_cast<ssize_t>(value.size());
  if (!ok) *error = fmt::format("{}: {}", knob, common::errstr(errno));
  if (fd >= 0) close(fd);
  return ok;
}

void apply_readahead(const std::optional<MountId>& id, const std::string& no_id,
                     std::optional<unsigned> asked) {
  unsigned kib = asked.value_or(kDefaultReadaheadKib);
  std::string why = no_id;
  if (kib == 0 || (id && set_readahead(id->dev, kib, &why))) return;
  auto level = asked ? log::Level::Warn : log::Level::Info;
  if (log::enabled(level))
    log::write(level, fmt::format("cannot set the mount's read-ahead to {} KiB ({}): the "
                                  "kernel's 128 KiB applies",
                                  kib, why));
}

std::optional<bool> dir_has_entries(const std::string& dir, std::string* error) {
  DIR* d = opendir(dir.c_str());
  if (!d) {
    *error = fmt::format("{}: {}", dir, common::errstr(errno));
    return std::nullopt;
  }
  bool any = false;
  while (dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      any = true;
      break;
    }
  }
  closedir(d);
  return any;
}

}  // namespace fencefs::daemon
