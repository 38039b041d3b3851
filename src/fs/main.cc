// fencefs BACKING MOUNTPOINT: mount a fenced view of BACKING.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "audit/audit.h"
#include "cluster/cluster.h"
#include "common/error.h"
#include "common/log.h"
#include "common/path.h"
#include "daemon/binding_store.h"
#include "daemon/claim.h"
#include "daemon/lifecycle.h"
#include "daemon/mounts.h"
#include "daemon/options.h"
#include "fence/backing_scan.h"
#include "fence/bindings.h"
#include "fence/fence.h"
#include "fs/fs.h"

using namespace fencefs;

namespace {

using common::under;
using daemon::die;

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    closedir(d);
  }
  return names;
}

// Removes the entries of DIR that were not there before: what a failed mount created.
void remove_new_entries(const std::string& dir, const std::vector<std::string>& before) {
  for (const std::string& n : entries(dir))
    if (std::find(before.begin(), before.end(), n) == before.end()) unlink((dir + "/" + n).c_str());
}

}  // namespace

int main(int argc, char* argv[]) {
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  struct FreeArgs {
    fuse_args* a;
    ~FreeArgs() { fuse_opt_free_args(a); }
  } free_args{&args};
  daemon::Args a;
  if (daemon::parse_args(&args, &a) != 0) return 1;
  if (a.help) {
    std::cout << daemon::kUsage;
    return 0;
  }
  if (a.version) {
    std::cout << "fencefs 0.1 (libfuse " << fuse_pkgversion() << ")\n";
    return 0;
  }
  fuse_cmdline_opts copts;
  if (fuse_parse_cmdline(&args, &copts) != 0) return 1;
  if (a.backing.empty() || !copts.mountpoint) {
    std::cerr << daemon::kUsage;
    return 1;
  }

  daemon::Settings o = daemon::check_options(a, copts);
  std::string error;
  const std::string &backing = o.backing, &mnt = o.mnt, &state = o.state;
  const bool cluster_mode = o.cluster_mode;
  auto& fopts = o.fopts;

  // Lost state over stamped files would silently reopen old epochs: refuse unless told.
  journal::FileLayer& files = journal::posix_file_layer();
  bool maybe_fresh = !files.exists(state + "/snapshot") && !files.exists(state + "/journal");
  uint64_t init_floor = 0;
  if (maybe_fresh) {
    fence::StampScan scan = fence::scan_stamps(backing);
    uint64_t highest = scan.highest, stamped = scan.stamped_files + scan.highwater_marks;
    // In cluster mode the epochs come from etcd at join; stamps above them are then a rollback.
    if (stamped > 0 && !a.init && !cluster_mode)
      die(fmt::format(
          "no state in {}, but {} file(s) in {} carry fencefs stamps (epochs up to {}): "
          "the state was lost, moved or not restored. Restore it, point state= at "
          "it, or pass --init to start anew with every domain at epoch {}",
          state, stamped, backing, highest, highest));
    if (!cluster_mode) init_floor = highest;
  }

  // libfuse's own options, checked on a session that is thrown away.
  // Last, so it wins over `dev,suid` from mount(8) or fstab `defaults`: a device node or set-id
  // file in the tree would be a way around the fence.
  std::string mopts =
      "allow_other,default_permissions,nodev,nosuid,fsname=" + backing + ",subtype=fencefs";
  fuse_opt_add_arg(&args, "-o");
  fuse_opt_add_arg(&args, mopts.c_str());
  {
    fuse_args probe = FUSE_ARGS_INIT(0, nullptr);
    for (int i = 0; i < args.argc; i++) fuse_opt_add_arg(&probe, args.argv[i]);
    fuse_lowlevel_ops none{};
    fuse_session* se = fuse_session_new(&probe, &none, sizeof none, nullptr);
    fuse_opt_free_args(&probe);
    if (!se) die("cannot create the FUSE session (an unknown or malformed -o option?)");
    fuse_session_destroy(se);
  }

  // From here on, everything created is undone if the mount fails.
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

  auto claim = daemon::Claim::take({backing, state, mnt, a.takeover != 0, cluster_mode}, &error);
  if (!claim) die(error);
  daemon::on_failure([&claim] { claim->abandon(); });
  // The state is ours now: what this mount creates in it from here is removed if it fails.
  std::vector<std::string> state_before = entries(state);
  daemon::on_failure([=] { remove_new_entries(state, state_before); });
  if (!claim->publish(&error)) die(error);
  if (auto& prev = claim->previous())
    log::warn("backing {} was last served by {}, which is gone{}", backing, prev->describe(),
              a.takeover ? " (takeover)" : "");

  // The lock makes the state ours: only now is "no state yet" settled.
  bool fresh = !files.exists(state + "/snapshot") && !files.exists(state + "/journal");
  if (fresh && !maybe_fresh) die(fmt::format("the state in {} disappeared while mounting", state));

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

  fence::DomainTable domains;
  for (auto& d : store->domains()) {
    if (d.path == "/") {
      struct stat dst {};
      stat(backing.c_str(), &dst);
      domains.add(d.id, d.path, d.epoch, dst.st_dev, dst.st_ino);
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
    domains.add(d.id, d.path, d.epoch, std::move(place));
  }
  if (!domains.root()) die("state has no root domain");

  audit::Log audit_log(o.aopts);
  fence::HighWater highwater(open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  fence::Fence fence(o.cfg, domains, *store, &audit_log, &highwater);
  std::unique_ptr<cluster::Cluster> cluster;
  if (cluster_mode) {
    // etcd is the authority: join (register, read every domain and epoch, raise the local view)
    // before anything is compared with the local view.
    cluster = std::make_unique<cluster::Cluster>(
        *o.cluster_opts, fence, open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    std::string why;
    if (cluster->join(&why) != 0) die(why);
    fence.set_authority(cluster.get());
    // A failed start must not leave a registered member behind: advances would wait for it.
    daemon::on_failure([&cluster] { cluster->leave(); });
  }

  // Many cached inodes each hold an O_PATH fd.
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  umask(0);  // modes arrive already masked by the caller's umask

  int root_fd = open(backing.c_str(), O_PATH | O_CLOEXEC);
  if (root_fd < 0) die(fmt::format("open {}: {}", backing, common::errstr(errno)));
  {
    // Stamps live in trusted.* xattrs; without them rollback detection is off (said loudly).
    std::string probe = state + "/.xattr-probe";
    int pfd = open(probe.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (pfd >= 0) {
      if (fsetxattr(pfd, "trusted.fencefs.probe", "1", 1, 0) != 0) {
        fopts.stamps = false;
        log::warn(
            "BACKING does not support trusted.* xattrs ({}): files get no last-epoch "
            "stamps, so a rolled-back state cannot be detected from them",
            common::errstr(errno));
      }
      close(pfd);
      unlink(probe.c_str());
    }
  }
  // Jobs bound before a restart keep their tokens if they are still exactly the same processes.
  fence::Bindings bindings;
  daemon::BindingStore binding_store(state);
  {
    auto r =
        binding_store.restore(bindings, [&](uint32_t id) { return domains.by_id(id) != nullptr; });
    if (r.restored || r.dropped)
      log::info("bindings: {} process(es) rebound, {} gone or changed", r.restored, r.dropped);
    bindings.on_change = [&](pid_t pid, uint32_t domain, fence::Epoch token, bool bound) {
      binding_store.record(bindings, pid, domain, token, bound);
    };
  }
  fs::Fs filesystem(fopts, fence, bindings, root_fd);

  fuse_session* se =
      fuse_session_new(&args, &fs::operations(), sizeof(fuse_lowlevel_ops), &filesystem);
  if (!se) die("cannot create the FUSE session (bad option?)");
  if (fuse_set_signal_handlers(se) != 0) die("cannot set signal handlers");
  // SIGHUP would end the session (libfuse's handler), others would kill the daemon: a thread
  // takes them instead (started once the daemon runs in its final process).
  daemon::block_handled_signals();
  if (fuse_session_mount(se, mnt.c_str()) != 0)
    die(fmt::format("cannot mount at {} (is /dev/fuse available, and are you root?)", mnt));
  daemon::on_failure([se] { fuse_session_unmount(se); });

  // Mounted, not yet serving: requests wait for the session loop, so the floor and the
  // records below precede every operation.
  for (const std::string& msg : fence.check_rollback()) {
    log::error("{}", msg);
    audit::Event e;
    e.op = "mount";
    e.decision = "detected";
    e.reason = "rollback";
    e.message = msg;
    fence.audit(e, fence::Caller{getpid(), getuid(), getgid()});
  }
  uint64_t floor = std::max(o.floor_opt, init_floor);
  if (floor > 0) {
    std::string why;
    if (fence.apply_floor(floor, &why) != 0) die(why);
    audit::Event e;
    e.op = "floor";
    e.decision = "info";
    e.epoch_after = floor;
    e.message = why;
    fence.audit(e, fence::Caller{getpid(), getuid(), getgid()});
  }
  {
    audit::Event e;
    e.op = "mount";
    e.decision = "info";
    e.message = fmt::format("mounted {} at {}; state {}", backing, mnt, state);
    for (auto& m : store->report().messages) e.message += "; " + m;
    fence.audit(e, fence::Caller{getpid(), getuid(), getgid()});
  }
  log::info("mounted {} at {} (state {})", backing, mnt, state);
  daemon::startup_done();

  if (!copts.foreground) log::keep_stderr();  // the stderr fallback outlives the detach
  fuse_daemonize(copts.foreground);
  if (!claim->publish(&error)) log::error("{}", error);  // the pid changed when it detached
  std::string pidfile = a.pidfile ? a.pidfile : "";
  if (!pidfile.empty() && !daemon::write_pidfile(pidfile, &error)) {
    log::error("{}", error);
    pidfile.clear();
  }
  daemon::start_signal_thread();
  highwater.start();
  if (cluster) cluster->start();
  fs::drop_resource_override();  // before the workers start: they inherit it
  filesystem.pagecache.start(se);
  daemon::notify_ready(fmt::format("serving {} at {}", backing, mnt));

  int ret;
  if (copts.singlethread) {
    ret = fuse_session_loop(se);
  } else {
    fuse_loop_config* lc = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(lc, 1);  // a /dev/fuse fd per worker: measured less daemon CPU
    fuse_loop_cfg_set_max_threads(lc, 16);
    ret = fuse_session_loop_mt(se, lc);
    fuse_loop_cfg_destroy(lc);
  }
  filesystem.pagecache.stop();
  daemon::notify_stopping();
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  if (cluster) cluster->leave();  // nothing can be admitted any more
  free(copts.mountpoint);
  daemon::remove_pidfile(pidfile);
  claim->release();
  log::info("unmounted {}", mnt);
  // libfuse reports the signal that ended the loop; a requested stop is a clean exit.
  bool clean = ret == 0 || ret == SIGTERM || ret == SIGINT;
  if (!clean) log::error("session ended with error {}", ret);
  return clean ? 0 : 1;
}
