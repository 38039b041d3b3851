// fencefs BACKING MOUNTPOINT: mount a fenced view of BACKING.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>

#include "audit/audit.h"
#include "cluster/cluster.h"
#include "common/anchored.h"
#include "common/error.h"
#include "common/log.h"
#include "common/path.h"
#include "common/proc.h"
#include "daemon/binding_store.h"
#include "daemon/claim.h"
#include "daemon/lifecycle.h"
#include "daemon/mounts.h"
#include "daemon/options.h"
#include "fence/backing_scan.h"
#include "fence/bindings.h"
#include "fence/fence.h"
#include "fs/fs.h"
#include "fs/kernel_io.h"
#include "fs/loop.h"
#include "fs/ring.h"

using namespace fencefs;

namespace {

using common::under;
using daemon::die;

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = common::anchored_opendir(dir)) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    closedir(d);
  }
  return names;
}

// Removes the entries of DIR that were not there before: what a failed mount created.
void remove_new_entries(const std::string& dir, const std::vector<std::string>& before) {
  for (const std::string& n : entries(dir))
    if (std::find(before.begin(), before.end(), n) == before.end())
      common::anchored_unlink(dir + "/" + n);
}

// A state about to be created: dies when BACKING holds stamps of a lost state (unless init),
// else the floor the new state starts at (the highest stamp found; 0 in cluster mode).
uint64_t floor_for_new_state(const daemon::Settings& o, bool init) {
  const std::string &backing = o.backing, &state = o.state;
  const bool cluster_mode = o.cluster_mode;
  fence::StampScan scan = fence::scan_stamps(backing);
  uint64_t highest = scan.highest, stamped = scan.stamped_files + scan.highwater.size();
  // A backing another daemon serves is refused as such, not as a lost state of this mount's.
  if (std::string who = stamped > 0 && !cluster_mode ? daemon::served_by(backing) : "";
      !who.empty())
    die(
        fmt::format("backing {} is already served by a fencefs daemon ({}); a backing is served "
                    "by one daemon: unmount that mount first",
                    backing, who));
  // In cluster mode the epochs come from etcd at join; stamps above them are then a rollback.
  if (stamped > 0 && !init && !cluster_mode)
    die(
        fmt::format("no state in {}, but {} file(s) in {} carry fencefs stamps (epochs up to {}): "
                    "the state was lost, moved or not restored. Restore it, point state= at "
                    "it, or pass --init to start anew with every domain at epoch {}",
                    state, stamped, backing, highest, highest));
  return cluster_mode ? 0 : highest;
}

// Adds the options every fencefs mount has, then checks libfuse's options on a session that is
// thrown away.
void add_mount_options(fuse_args* args, const std::string& backing) {
  // libfuse's own options, checked on a session that is thrown away.
  // Last, so it wins over `dev,suid` from mount(8) or fstab `defaults`: a device node or set-id
  // file in the tree would be a way around the fence.
  // libfuse splits options at commas: one in BACKING's path, unescaped, would end fsname= and
  // start options of the path's choosing (`/srv/x,suid,dev`).
  std::string fsname;
  for (char c : backing) {
    if (c == ',' || c == '\\') fsname += '\\';
    fsname += c;
  }
  std::string mopts =
      "allow_other,default_permissions,fsname=" + fsname + ",subtype=fencefs,nodev,nosuid";
  // What BACKING's own mount forbids stays forbidden: a program it may not run is not run here.
  struct statvfs sv;
  if (statvfs(backing.c_str(), &sv) == 0 && (sv.f_flag & ST_NOEXEC)) mopts += ",noexec";
  fuse_opt_add_arg(args, "-o");
  fuse_opt_add_arg(args, mopts.c_str());
  {
    fuse_args probe = FUSE_ARGS_INIT(0, nullptr);
    for (int i = 0; i < args->argc; i++) fuse_opt_add_arg(&probe, args->argv[i]);
    fuse_lowlevel_ops none{};
    fuse_session* se = fuse_session_new(&probe, &none, sizeof none, nullptr);
    fuse_opt_free_args(&probe);
    if (!se) die("cannot create the FUSE session (an unknown or malformed -o option?)");
    fuse_session_destroy(se);
  }
}

std::unique_ptr<journal::StateStore> open_state(const std::string& state, bool fresh,
                                                journal::FileLayer& files) {
  std::string error;
  journal::Options jopts;
  jopts.create_if_missing = fresh;
  auto store = journal::StateStore::open(state, jopts, files, &error);
  if (!store)
    die(fmt::format("cannot open state: {}\n(see `fencectl recover --help` for the way out)",
                    error));
  {
    // The summary of a routine open is information; anything repaired on the way is a warning.
    const auto& msgs = store->report().messages;
    for (size_t i = 0; i < msgs.size(); i++) {
      if (store->report().created || i + 1 == msgs.size())
        log::info("state: {}", msgs[i]);
      else
        log::warn("state: {}", msgs[i]);
    }
  }
  return store;
}

// The domains of the state, each found at its place in BACKING.
void load_domains(journal::StateStore& store, const std::string& backing,
                  fence::DomainTable* domains) {
  for (auto& d : store.domains()) {
    if (d.path == "/") {
      struct stat dst {};
      stat(backing.c_str(), &dst);
      domains->add(d.id, d.path, d.epoch, dst.st_dev, dst.st_ino);
      continue;
    }
    // A domain is the directory at its declared place, followed step by step by identity; a
    // missing one becomes the domain again when a directory appears at its place.
    std::vector<fence::PlaceStep> place;
    int bfd = open(backing.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    int fd = bfd >= 0 ? fence::resolve_place(bfd, d.path, &place) : -errno;
    if (fd >= 0) ::close(fd);
    if (bfd >= 0) ::close(bfd);
    if (fd < 0)
      log::warn(
          "domain {}: its directory {}{} is missing ({}); it is the domain again once a "
          "directory is at that path",
          d.path, backing, d.path, common::errstr(-fd));
    domains->add(d.id, d.path, d.epoch, std::move(place));
  }
  if (!domains->root()) die("state has no root domain");
}

// Stamps live in trusted.* xattrs of BACKING's files; without them rollback detection is off
// (said loudly). Probed on BACKING's root: the state directory may be on another filesystem.
bool backing_has_xattrs(const std::string& backing) {
  int fd = open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) die(fmt::format("open {}: {}", backing, common::errstr(errno)));
  constexpr const char* kProbe = "trusted.fencefs.probe";
  bool ok = fsetxattr(fd, kProbe, "1", 1, 0) == 0;
  const int err = errno;
  constexpr const char* kLoss =
      "files get no last-epoch stamps, so a rolled-back state cannot be detected from them";
  if (ok)
    fremovexattr(fd, kProbe);
  else if (err == ENOTSUP)
    log::warn("BACKING does not support trusted.* xattrs ({}): {}", common::errstr(err), kLoss);
  else  // e.g. EPERM: an immutable or append-only root (chattr +i / +a)
    log::warn("cannot set a trusted.* xattr on BACKING's root {} ({}{}): {}", backing,
              common::errstr(err),
              err == EPERM ? "; is it immutable or append-only? see lsattr -d" : "", kLoss);
  close(fd);
  return ok;
}

// As root the daemon creates and opens for a caller with the caller's uid and gid; without
// CAP_SETUID or CAP_SETGID (a unit's CapabilityBoundingSet) it cannot, and refuses those calls.
void warn_without_setid_caps() {
  if (geteuid() != 0) return;
  uint64_t caps = proc::effective_caps(gettid());
  std::string missing;
  for (auto [cap, name] : {std::pair{CAP_SETUID, "CAP_SETUID"}, {CAP_SETGID, "CAP_SETGID"}})
    if (!(caps & (uint64_t{1} << cap)))
      missing += missing.empty() ? name : std::string(" and ") + name;
  if (!missing.empty())
    log::warn(
        "running as root without {}: files other users create or open through the mount "
        "cannot be made theirs, so those calls are refused (EACCES); give the daemon {}",
        missing, missing);
}

// Rebinds the processes of before a restart that are still exactly the same, and records every
// later change of the bindings in the store.
void restore_bindings(daemon::BindingStore& binding_store, fence::Bindings& bindings,
                      fence::DomainTable& domains) {
  auto r =
      binding_store.restore(bindings, [&](uint32_t id) { return domains.by_id(id) != nullptr; });
  if (r.restored || r.dropped)
    log::info("bindings: {} process(es) rebound, {} gone or changed", r.restored, r.dropped);
  bindings.on_change = [&](pid_t pid, uint32_t domain) {
    binding_store.record(bindings, pid, domain);
  };
}

// Before serving: a rollback the stamps show, the floor applied, the mount itself, audited. A
// state made anew (--init) starts at the stamps' highest epoch: its floor comes first, or the
// stamps it was made from would be reported as a rollback.
void record_start(fence::Fence& fence, journal::StateStore& store, uint64_t floor, bool init,
                  const daemon::Settings& o) {
  const std::string &backing = o.backing, &mnt = o.mnt, &state = o.state;
  auto apply_floor = [&] {
    if (floor == 0) return;
    std::string why;
    if (fence.apply_floor(floor, &why) != 0) die(why);
    audit::Event e;
    e.op = "floor";
    e.decision = "info";
    e.epoch_after = floor;
    e.message = why;
    fence.audit(e, fence::Caller{getpid(), getuid(), getgid()});
  };
  if (init) apply_floor();
  for (const std::string& msg : fence.check_rollback()) {
    log::error("{}", msg);
    audit::Event e;
    e.op = "mount";
    e.decision = "detected";
    e.reason = "rollback";
    e.message = msg;
    fence.audit(e, fence::Caller{getpid(), getuid(), getgid()});
  }
  if (!init) apply_floor();
  {
    audit::Event e;
    e.op = "mount";
    e.decision = "info";
    e.message = fmt::format("mounted {} at {}; state {}", backing, mnt, state);
    for (auto& m : store.report().messages) e.message += "; " + m;
    fence.audit(e, fence::Caller{getpid(), getuid(), getgid()});
  }
}

// The command line into a and copts; an exit status when there is nothing to mount (help,
// version, a usage error).
std::optional<int> parse_command_line(fuse_args* args, daemon::Args* a, fuse_cmdline_opts* copts) {
  if (daemon::parse_args(args, a) != 0) return 1;
  if (a->help) {
    std::cout << daemon::kUsage;
    return 0;
  }
  if (a->version) {
    std::cout << "fencefs " FENCEFS_VERSION " (libfuse " << fuse_pkgversion() << ")\n";
    return 0;
  }
  if (fuse_parse_cmdline(args, copts) != 0) return 1;
  if (a->backing.empty() || !copts->mountpoint) {
    // Name what is missing: the whole help alone left it to guess.
    std::string_view usage = daemon::kUsage;
    std::cerr << "fencefs: missing "
              << (a->backing.empty() ? "BACKING and MOUNTPOINT" : "MOUNTPOINT") << "\n"
              << usage.substr(0, usage.find("\n\n") + 1) << "(see fencefs --help)\n";
    return 1;  // the mount could not be set up: fencefs's one failure status
  }
  return std::nullopt;
}

// Opens the log, creates the state directory if need be and takes the backing and the state for
// this daemon (daemon/claim.h).
std::unique_ptr<daemon::Claim> claim_state(const daemon::Settings& o, bool takeover) {
  const std::string &backing = o.backing, &mnt = o.mnt, &state = o.state;
  const bool cluster_mode = o.cluster_mode;
  std::string error;
  if (o.log_target.sink != log::Sink::Stderr) {
    if (!log::open(o.log_target, &error)) die(error);
    daemon::log_failures_too();
  }
  if (mkdir(state.c_str(), 0700) == 0) {
    // Until the lock is ours another daemon may be creating files here: only the directory we
    // made, once empty again, is removed.
    daemon::on_failure([=] { rmdir(state.c_str()); });
  } else if (errno != EEXIST) {
    die(fmt::format("state directory {}: {}", state, common::errstr(errno)));
  }

  auto claim = daemon::Claim::take(
      {backing, state, mnt, takeover, cluster_mode ? o.cluster_opts->name : std::string()}, &error);
  if (!claim) die(error);
  daemon::on_failure([c = claim.get()] { c->abandon(); });
  // Every state file from here on is reached through the directory the claim checked.
  int state_fd = fcntl(claim->state_dir_fd(), F_DUPFD_CLOEXEC, 0);
  if (state_fd < 0) die(fmt::format("state directory {}: {}", state, common::errstr(errno)));
  common::anchor_dir(state, state_fd);
  // The state is ours now: what this mount creates in it from here is removed if it fails.
  std::vector<std::string> state_before = entries(state);
  daemon::on_failure([=] { remove_new_entries(state, state_before); });
  if (!claim->publish(&error)) die(error);
  if (auto& prev = claim->previous())
    log::warn("backing {} was last served by {}, which is gone{}", backing, prev->describe(),
              takeover ? " (takeover)" : "");
  return claim;
}

// etcd is the authority: join (register, read every domain and epoch, raise the local view)
// before anything is compared with the local view.
std::unique_ptr<cluster::Cluster> join_cluster(const daemon::Settings& o, fence::Fence& fence) {
  auto cluster = std::make_unique<cluster::Cluster>(
      *o.cluster_opts, fence, open(o.backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::string why;
  if (cluster->join(&why) != 0) die(why);
  fence.set_authority(cluster.get());
  // A failed start must not leave a registered member behind: advances would wait for it.
  daemon::on_failure([c = cluster.get()] { c->leave(); });
  return cluster;
}

fuse_session* mount_session(fuse_args* args, fs::Fs& filesystem, const daemon::Settings& o) {
  const std::string& mnt = o.mnt;
  fuse_session* se =
      fuse_session_new(args, &fs::operations(), sizeof(fuse_lowlevel_ops), &filesystem);
  if (!se) die("cannot create the FUSE session (bad option?)");
  if (o.dead_mount) daemon::replace_dead_mount(o);
  if (fuse_session_mount(se, mnt.c_str()) != 0)
    die(fmt::format("cannot mount at {} (is /dev/fuse available, and are you root?)", mnt));
  daemon::on_failure([se] { fuse_session_unmount(se); });
  std::string error;
  if (!fs::kernel_io::install(se, &error)) die(error);
  return se;
}

// Detaches from the terminal (unless -f) and writes the pid file; the pid file written ("" for
// none).
std::string detach(bool foreground, daemon::Claim& claim, const char* pidfile_opt) {
  std::string error;
  if (!foreground) log::keep_stderr();  // the stderr fallback outlives the detach
  fuse_daemonize(foreground);
  if (!claim.publish(&error)) log::error("{}", error);  // the pid changed when it detached
  std::string pidfile = pidfile_opt ? pidfile_opt : "";
  if (!pidfile.empty() && !daemon::write_pidfile(pidfile, &error)) {
    log::error("{}", error);
    pidfile.clear();
  }
  return pidfile;
}

void raise_fd_limit() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace

// long: the daemon's wiring in order; each object it makes lives for the whole session.
int main(int argc, char* argv[]) {
  daemon::keep_standard_fds_open();
  // Not libfuse's handlers: they end the session only if the loop's thread takes the signal. A
  // stop while starting (joining a cluster) lets the start finish, then the loop ends at once,
  // and everything is undone in order.
  daemon::stop_on_signals(&fs::stop_serving);
  daemon::block_handled_signals();  // taken by a thread started once the daemon runs detached
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  struct FreeArgs {
    fuse_args* a;
    ~FreeArgs() { fuse_opt_free_args(a); }
  } free_args{&args};
  daemon::Args a;
  fuse_cmdline_opts copts;
  if (auto done = parse_command_line(&args, &a, &copts)) return *done;

  daemon::Settings o = daemon::check_options(a, copts);
  const std::string &backing = o.backing, &mnt = o.mnt, &state = o.state;
  const bool cluster_mode = o.cluster_mode;
  auto& fopts = o.fopts;

  // Lost state over stamped files would silently reopen old epochs: refuse unless told.
  journal::FileLayer& files = journal::posix_file_layer();
  bool maybe_fresh = !files.exists(state + "/snapshot") && !files.exists(state + "/journal");
  uint64_t init_floor = maybe_fresh ? floor_for_new_state(o, a.init != 0) : 0;

  add_mount_options(&args, backing);

  // From here on, everything created is undone if the mount fails.
  auto claim = claim_state(o, a.takeover != 0);

  // The lock makes the state ours: only now is "no state yet" settled.
  bool fresh = !files.exists(state + "/snapshot") && !files.exists(state + "/journal");
  if (fresh && !maybe_fresh) die(fmt::format("the state in {} disappeared while mounting", state));

  auto store = open_state(state, fresh, files);

  fence::DomainTable domains;
  load_domains(*store, backing, &domains);
  for (auto& [path, ns] : audit::last_advances(state))
    if (fence::Domain* d = domains.by_path(path)) d->last_advance_unix_ns = ns;

  audit::Log audit_log(o.aopts);
  fence::HighWater highwater(open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  fence::Fence fence(o.cfg, domains, *store, &audit_log, &highwater);
  std::unique_ptr<cluster::Cluster> cluster = cluster_mode ? join_cluster(o, fence) : nullptr;

  raise_fd_limit();  // many cached inodes each hold an O_PATH fd
  umask(0);          // the daemon's own files as given; callers' creations: caller_umask

  int root_fd = open(backing.c_str(), O_PATH | O_CLOEXEC);
  if (root_fd < 0) die(fmt::format("open {}: {}", backing, common::errstr(errno)));
  fopts.stamps = backing_has_xattrs(backing);
  warn_without_setid_caps();
  // Jobs bound before a restart keep their tokens if they are still exactly the same processes.
  fence::Bindings bindings;
  daemon::BindingStore binding_store(state);
  restore_bindings(binding_store, bindings, domains);
  fs::Fs filesystem(fopts, fence, bindings, root_fd);

  fuse_session* se = mount_session(&args, filesystem, o);
  std::string no_id;
  std::optional<daemon::MountId> mount_id = daemon::our_mount(mnt, backing, &no_id);
  daemon::apply_readahead(mount_id, no_id, o.readahead_kib);

  // Mounted, not yet serving: requests wait for the session loop, so the floor and the
  // records below precede every operation.
  record_start(fence, *store, std::max(o.floor_opt, init_floor), init_floor > 0, o);
  log::info("mounted {} at {} (state {})", backing, mnt, state);
  daemon::startup_done();

  std::string pidfile = detach(copts.foreground != 0, *claim, a.pidfile);
  daemon::start_signal_thread();
  highwater.start();
  if (int err = store->start())  // advances then wait for their sync on their workers
    log::warn("cannot start the journal's committer thread: {}", common::errstr(err));
  if (cluster) cluster->start();
  fs::drop_resource_override();  // before the workers start: they inherit it
  // The ring threads: after the detach (a fork keeps only the forking thread) and the drop, on
  // this thread (a FUSE worker would pass them its umask), before the loop reads INIT.
  if (fopts.uring != 0) fs::kernel_io::want_rings(fopts.uring);
  filesystem.pagecache.start(se);
  daemon::notify_ready(fmt::format("serving {} at {}", backing, mnt));

  int ret = fs::serve_workers(se, copts.singlethread != 0 ? 1 : 16);
  pid_t from = 0;
  if (int sig = daemon::stop_signal(&from))
    log::info("SIG{} from pid {}: unmounting", sigabbrev_np(sig), from);
  // Ended by the kernel, the mount left in place and dead (an abort, `umount -f` of a busy mount,
  // a request timeout): libfuse leaves it; detached before the claim goes, exit 1 (for restarts).
  using End = fs::kernel_io::End;
  End end = fs::kernel_io::connection_end();
  // Advances replied to from the journal's thread need the session, and the rings' their entry's
  // thread: they are waited for while the rings still serve, then each ring thread ends once its
  // entry's reply is made (an advance taken meanwhile), then the last callbacks are waited for.
  fence.quiesce();
  fs::ring::stop();
  fence.quiesce();
  filesystem.pagecache.stop();
  daemon::notify_stopping();
  fuse_session_unmount(se);
  fuse_session_destroy(se);
  // Before leave(): restamps are mutations, made while this member still holds the domains'
  // epochs with the others (an advance elsewhere waits for it, or fences it first).
  if (size_t n = filesystem.close_all())
    log::info("closed {} handle(s) the kernel did not release (no RELEASE received)", n);
  if (cluster) cluster->leave();  // nothing can be admitted any more
  free(copts.mountpoint);
  daemon::remove_pidfile(pidfile);
  bool dead = end != End::Live &&
              daemon::left_dead_mount(mnt, backing, mount_id, no_id, end == End::Aborted);
  claim->release_at_exit();
  log::info("unmounted {}", mnt);
  bool clean = !dead && ret == 0;
  if (!clean && !dead) log::error("session ended with error {}", ret);
  return clean ? 0 : 1;
}
