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
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "audit/audit.h"
#include "cluster/cluster.h"
#include "common/log.h"
#include "fence/bindings.h"
#include "fence/fence.h"
#include "fence/stamp.h"
#include "fs/fs.h"

using namespace fencefs;

namespace {

const char* kUsage = R"(usage: fencefs [options] BACKING MOUNTPOINT
       mount -t fuse.fencefs BACKING MOUNTPOINT -o OPTIONS

Mounts a view of the directory BACKING at MOUNTPOINT in which every mutation must carry a
fence token for its domain, so a job whose ownership was superseded cannot change a byte.
Reads are never fenced. Runs as root with allow_other,default_permissions.

fencefs options (-o NAME=VALUE, comma-separated):
    state=DIR          journaled state (default BACKING/.fencefs, hidden from the mount)
    max_jump=N         refuse tokens more than N above a domain's epoch (default 1000000);
                       `fencectl advance --force` is the only way past it
    issuers=LIST       who may bind and advance: uid:N and gid:NAME|N items joined by ':'
                       pairs, e.g. issuers=uid:0:gid:fencers (default: root and the
                       user who mounted)
    token_key=FILE     accept tokens signed with this HMAC-SHA256 key from anyone; the file
                       must not be readable by group or others
    floor=N            raise every domain to at least epoch N at start (recovery, audited)
    timeout=SECS       kernel entry/attribute cache (default 5; sound: changes pass here;
                       0 in cluster mode, where other members change BACKING too)
    audit_max_bytes=N  rotate the audit log past N bytes (default 16777216)
    audit_keep=N       rotated audit logs kept (default 4)
  cluster mode (several daemons, one per host, over one shared BACKING; docs/cluster.md):
    cluster=NAME       join cluster NAME: etcd holds every domain and epoch, and an advance
                       completes only once every member acknowledged it
    etcd=ENDPOINTS     etcd endpoints joined with '+' (http://host:port or host:port)
    etcd_cacert=FILE, etcd_cert=FILE, etcd_key=FILE   TLS to etcd
    member=ID          this member's id (default HOSTNAME:MOUNTPOINT)
    fence_hook=PROGRAM run for a member that does not acknowledge an advance in time, as
                       PROGRAM MEMBER HOST MOUNTPOINT; exit 0 = it can no longer reach the
                       storage. Without it such an advance fails
    ack_timeout=SECS   how long an advance waits for acknowledgements (default 10)
    lease_ttl=SECS     this member's etcd lease (default 10)
    isolation=SECS     stop admitting mutations this long after etcd last confirmed contact
                       (default lease_ttl/2; must be below lease_ttl)
    --init             create a new state even though BACKING holds files stamped by an
                       earlier state (every domain starts at the highest stamp found)
    --verbose          log every refusal and advance to stderr/syslog

Generic options:
    -f                 stay in the foreground
    -d                 debug output of every FUSE request (implies -f)
    -s                 single-threaded
    -h, --help         this help
    -V, --version      version

Control: MOUNTPOINT/.fencefs/ctl (see `fencectl --help`). Exit status: 0 after a clean unmount,
1 when the mount could not be set up (the message says why).
)";

struct Args {
  char* state = nullptr;
  char* max_jump = nullptr;
  char* issuers = nullptr;
  char* token_key = nullptr;
  char* floor = nullptr;
  char* timeout = nullptr;
  char* audit_max_bytes = nullptr;
  char* audit_keep = nullptr;
  char* cluster = nullptr;
  char* etcd = nullptr;
  char* etcd_cacert = nullptr;
  char* etcd_cert = nullptr;
  char* etcd_key = nullptr;
  char* member = nullptr;
  char* fence_hook = nullptr;
  char* ack_timeout = nullptr;
  char* lease_ttl = nullptr;
  char* isolation = nullptr;
  int init = 0;
  int verbose = 0;
  int help = 0;
  int version = 0;
  std::string backing;
};

enum { KEY_HELP, KEY_VERSION };

const fuse_opt kSpecs[] = {{"state=%s", offsetof(Args, state), 0},
                           {"max_jump=%s", offsetof(Args, max_jump), 0},
                           {"issuers=%s", offsetof(Args, issuers), 0},
                           {"token_key=%s", offsetof(Args, token_key), 0},
                           {"floor=%s", offsetof(Args, floor), 0},
                           {"timeout=%s", offsetof(Args, timeout), 0},
                           {"audit_max_bytes=%s", offsetof(Args, audit_max_bytes), 0},
                           {"audit_keep=%s", offsetof(Args, audit_keep), 0},
                           {"cluster=%s", offsetof(Args, cluster), 0},
                           {"etcd=%s", offsetof(Args, etcd), 0},
                           {"etcd_cacert=%s", offsetof(Args, etcd_cacert), 0},
                           {"etcd_cert=%s", offsetof(Args, etcd_cert), 0},
                           {"etcd_key=%s", offsetof(Args, etcd_key), 0},
                           {"member=%s", offsetof(Args, member), 0},
                           {"fence_hook=%s", offsetof(Args, fence_hook), 0},
                           {"ack_timeout=%s", offsetof(Args, ack_timeout), 0},
                           {"lease_ttl=%s", offsetof(Args, lease_ttl), 0},
                           {"isolation=%s", offsetof(Args, isolation), 0},
                           {"--init", offsetof(Args, init), 1},
                           {"init", offsetof(Args, init), 1},
                           {"--verbose", offsetof(Args, verbose), 1},
                           FUSE_OPT_KEY("-h", KEY_HELP),
                           FUSE_OPT_KEY("--help", KEY_HELP),
                           FUSE_OPT_KEY("-V", KEY_VERSION),
                           FUSE_OPT_KEY("--version", KEY_VERSION),
                           FUSE_OPT_END};

int opt_proc(void* data, const char* arg, int key, fuse_args* outargs) {
  auto* a = static_cast<Args*>(data);
  if (key == KEY_HELP) {
    a->help = 1;
    return 0;
  }
  if (key == KEY_VERSION) {
    a->version = 1;
    return 0;
  }
  if (key == FUSE_OPT_KEY_NONOPT && a->backing.empty()) {
    a->backing = arg;
    return 0;  // consumed: the mountpoint is left for fuse_parse_cmdline
  }
  return 1;
}

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "fencefs: " << msg << "\n";
  exit(1);
}

uint64_t parse_u64(const char* s, const char* what) {
  uint64_t v = 0;
  const char* end = s + strlen(s);
  auto r = std::from_chars(s, end, v);
  if (r.ec != std::errc() || r.ptr != end) die(fmt::format("{}: not a number: '{}'", what, s));
  return v;
}

bool in_proc_mounts(const std::string& dir) {
  std::ifstream in("/proc/mounts");
  std::string dev, mnt, rest;
  while (in >> dev >> mnt) {
    std::getline(in, rest);
    if (mnt == dir) return true;
  }
  return false;
}

bool under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

// Highest last-epoch stamp below dir (0 if none); stops descending into the state dir.
uint64_t max_stamp(int dir_fd, int depth, uint64_t* files) {
  uint64_t best = 0;
  DIR* d = fdopendir(dir_fd);
  if (!d) {
    ::close(dir_fd);
    return 0;
  }
  while (dirent* e = readdir(d)) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (depth == 0 && !strcmp(e->d_name, ".fencefs")) continue;
    if (e->d_type == DT_DIR) {
      int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) best = std::max(best, max_stamp(fd, depth + 1, files));
    } else if (e->d_type == DT_REG) {
      char buf[128];
      int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
      if (fd < 0) continue;
      ssize_t n = fgetxattr(fd, fence::kStampXattr, buf, sizeof buf);
      ::close(fd);
      if (n <= 0) continue;
      auto stamp = fence::decode_stamp(std::string_view(buf, static_cast<size_t>(n)));
      if (!stamp) continue;
      uint64_t ep = stamp->epoch;
      best = std::max(best, ep);
      ++*files;
    }
  }
  closedir(d);
  return best;
}

void parse_issuers(const std::string& spec, fence::Config* cfg) {
  cfg->issuer_uids.clear();
  std::stringstream ss(spec);
  std::string kind, value;
  while (std::getline(ss, kind, ':')) {
    if (!std::getline(ss, value, ':'))
      die(fmt::format("issuers: '{}' needs a value (uid:N or gid:NAME)", kind));
    if (kind == "uid") {
      if (!value.empty() && isdigit(static_cast<unsigned char>(value[0]))) {
        cfg->issuer_uids.push_back(static_cast<uid_t>(parse_u64(value.c_str(), "issuers uid")));
      } else {
        die(fmt::format("issuers: uid must be numeric, got '{}'", value));
      }
    } else if (kind == "gid") {
      if (!value.empty() && isdigit(static_cast<unsigned char>(value[0]))) {
        cfg->issuer_gids.push_back(static_cast<gid_t>(parse_u64(value.c_str(), "issuers gid")));
      } else {
        struct group* g = getgrnam(value.c_str());
        if (!g) die(fmt::format("issuers: no such group '{}'", value));
        cfg->issuer_gids.push_back(g->gr_gid);
      }
    } else {
      die(fmt::format("issuers: unknown kind '{}' (use uid:N or gid:NAME)", kind));
    }
  }
}

std::chrono::milliseconds parse_secs(const char* s, const char* what) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (!*s || *end || !(v >= 0) || v > 86400)
    die(fmt::format("{}: not a number of seconds: '{}'", what, s));
  return std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
}

cluster::Options cluster_options(const Args& a, const std::string& backing, const std::string& mnt,
                                 const std::string& state) {
  cluster::Options o;
  o.backing = backing;
  o.name = a.cluster;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  o.host = host;
  o.mountpoint = mnt;
  o.state_dir = state;
  if (a.member) {
    o.member = a.member;
  } else {
    o.member = o.host + ":" + mnt;
    for (char& c : o.member)
      if (!isalnum(static_cast<unsigned char>(c)) && !strchr("._:-", c)) c = '_';
  }
  if (!a.etcd) die("cluster= needs etcd=ENDPOINTS");
  bool tls = a.etcd_cacert || a.etcd_cert;
  // Commas separate mount options: endpoints are joined with '+' (an escaped '\,' works too).
  std::string eps = a.etcd;
  std::replace(eps.begin(), eps.end(), '+', ',');
  o.etcd.endpoints = etcd::parse_endpoints(eps, tls);
  if (a.etcd_cacert) o.etcd.cacert = a.etcd_cacert;
  if (a.etcd_cert) o.etcd.cert = a.etcd_cert;
  if (a.etcd_key) o.etcd.key = a.etcd_key;
  if (a.fence_hook) {
    char real[PATH_MAX];
    if (!realpath(a.fence_hook, real) || access(real, X_OK) != 0)
      die(fmt::format("fence_hook {}: not an executable file", a.fence_hook));
    o.fence_hook = real;
  }
  if (a.ack_timeout) o.ack_timeout = parse_secs(a.ack_timeout, "ack_timeout");
  if (a.lease_ttl) o.lease_ttl = parse_secs(a.lease_ttl, "lease_ttl");
  if (a.isolation) o.isolation = parse_secs(a.isolation, "isolation");
  std::string err = cluster::validate(&o);
  if (!err.empty()) die(err);
  return o;
}

std::string read_key(const std::string& file) {
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die(fmt::format("token_key {}: {}", file, strerror(errno)));
  struct stat st;
  fstat(fd, &st);
  if (st.st_mode & 077)
    die(fmt::format("token_key {} is accessible by group or others (mode {:o}); chmod 600 it", file,
                    st.st_mode & 0777));
  std::string key;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) key.append(buf, static_cast<size_t>(n));
  close(fd);
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
  if (key.size() < 16) die(fmt::format("token_key {}: key shorter than 16 bytes", file));
  return key;
}

}  // namespace

int main(int argc, char* argv[]) {
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  struct FreeArgs {
    fuse_args* a;
    ~FreeArgs() { fuse_opt_free_args(a); }
  } free_args{&args};
  Args a;
  if (fuse_opt_parse(&args, &a, kSpecs, opt_proc) != 0) return 1;
  if (a.help) {
    std::cout << kUsage;
    return 0;
  }
  if (a.version) {
    std::cout << "fencefs 0.1 (libfuse " << fuse_pkgversion() << ")\n";
    return 0;
  }
  fuse_cmdline_opts copts;
  if (fuse_parse_cmdline(&args, &copts) != 0) return 1;
  if (a.backing.empty() || !copts.mountpoint) {
    std::cerr << kUsage;
    return 1;
  }
  if (a.verbose) log::set_level(log::Level::Debug);
  // Cluster mode: the backing is shared by several daemons by design, each with its own state.
  const bool cluster_mode = a.cluster != nullptr;
  if (!cluster_mode && (a.etcd || a.member || a.fence_hook || a.ack_timeout))
    die("etcd=, member=, fence_hook= and ack_timeout= need cluster=NAME");

  char real[PATH_MAX];
  if (!realpath(a.backing.c_str(), real))
    die(fmt::format("backing directory {}: {}", a.backing, strerror(errno)));
  std::string backing = real;
  struct stat st;
  if (stat(backing.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    die(fmt::format("backing {} is not a directory", backing));
  if (!realpath(copts.mountpoint, real))
    die(fmt::format("mountpoint {}: {}", copts.mountpoint, strerror(errno)));
  std::string mnt = real;
  if (in_proc_mounts(mnt))
    die(fmt::format("mountpoint {} is busy: something is mounted there", mnt));
  if (under(mnt, backing) || under(backing, mnt))
    die(fmt::format("mountpoint {} and backing {} must not contain each other", mnt, backing));

  std::string state = backing + "/.fencefs";
  if (a.state) {
    if (!realpath(a.state, real)) {
      if (mkdir(a.state, 0700) != 0 || !realpath(a.state, real))
        die(fmt::format("state directory {}: {}", a.state, strerror(errno)));
    }
    state = real;
    if (under(state, backing) && state != backing + "/.fencefs")
      die(
          fmt::format("state directory {} is inside BACKING and would be reachable through the "
                      "mount; use BACKING/.fencefs or a directory outside BACKING",
                      state));
    if (under(state, mnt)) die(fmt::format("state directory {} is under the mountpoint", state));
  }

  // Lost state over stamped files would silently reopen old epochs: refuse unless told.
  journal::FileLayer& files = journal::posix_file_layer();
  bool fresh = !files.exists(state + "/snapshot") && !files.exists(state + "/journal");
  uint64_t init_floor = 0;
  if (fresh) {
    uint64_t stamped = 0;
    int rfd = open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    uint64_t highest = rfd >= 0 ? max_stamp(rfd, 0, &stamped) : 0;
    fence::HighWater probe(open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    for (auto& [path, e] : probe.load()) {
      highest = std::max(highest, e);
      stamped++;
    }
    // In cluster mode the epochs come from etcd at join; stamps above them are then a rollback.
    if (stamped > 0 && !a.init && !cluster_mode)
      die(fmt::format(
          "no state in {}, but {} file(s) in {} carry fencefs stamps (epochs up to {}): "
          "the state was lost, moved or not restored. Restore it, point state= at "
          "it, or pass --init to start anew with every domain at epoch {}",
          state, stamped, backing, highest, highest));
    if (!cluster_mode) init_floor = highest;
  }

  journal::Options jopts;
  jopts.create_if_missing = fresh;
  std::string error;
  auto store = journal::StateStore::open(state, jopts, files, &error);
  if (!store)
    die(fmt::format("cannot open state: {}\n(see `fencectl recover --help` for the way out)",
                    error));
  for (auto& m : store->report().messages) {
    if (store->report().created)
      log::info("state: {}", m);
    else
      log::warn("state: {}", m);
  }

  fence::DomainTable domains;
  for (auto& d : store->domains()) {
    struct stat dst {};
    std::string p = d.path == "/" ? backing : backing + d.path;
    if (stat(p.c_str(), &dst) != 0)
      log::warn("domain {}: its directory {} is missing: {}", d.path, p, strerror(errno));
    domains.add(d.id, d.path, d.epoch, dst.st_dev, dst.st_ino);
  }
  if (!domains.root()) die("state has no root domain");

  fence::Config cfg;
  cfg.backing = backing;
  if (a.max_jump) cfg.max_jump = parse_u64(a.max_jump, "max_jump");
  if (cfg.max_jump == 0) die("max_jump must be at least 1");
  if (a.issuers) parse_issuers(a.issuers, &cfg);
  if (!a.issuers && getuid() != 0) cfg.issuer_uids.push_back(getuid());  // the mount's owner
  if (a.token_key) cfg.token_key = read_key(a.token_key);

  audit::Options aopts;
  aopts.dir = state;
  if (a.audit_max_bytes) aopts.max_bytes = parse_u64(a.audit_max_bytes, "audit_max_bytes");
  if (a.audit_keep) aopts.keep = static_cast<int>(parse_u64(a.audit_keep, "audit_keep"));
  audit::Log audit_log(aopts);
  fence::HighWater highwater(open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  fence::Fence fence(cfg, domains, *store, &audit_log, &highwater);
  std::unique_ptr<cluster::Cluster> cluster;
  if (cluster_mode) {
    // etcd is the authority: join (register, read every domain and epoch, raise the local view)
    // before anything is compared with the local view.
    cluster = std::make_unique<cluster::Cluster>(
        cluster_options(a, backing, mnt, state), fence,
        open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    std::string why;
    if (cluster->join(&why) != 0) die(why);
    fence.set_authority(cluster.get());
  }
  // Past this point a failed start must not leave a registered member behind: advances would
  // wait for it (and fence it).
  auto fail = [&](const std::string& msg) {
    if (cluster) cluster->leave();
    die(msg);
  };
  for (const std::string& msg : fence.check_rollback()) {
    log::error("{}", msg);
    audit::Event e;
    e.op = "mount";
    e.decision = "detected";
    e.reason = "rollback";
    e.message = msg;
    fence.audit(e, fence::Caller{getpid(), getuid(), getgid()});
  }

  uint64_t floor = a.floor ? parse_u64(a.floor, "floor") : 0;
  floor = std::max(floor, init_floor);
  if (floor > 0) {
    std::string why;
    if (fence.apply_floor(floor, &why) != 0) fail(why);
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

  // Many cached inodes each hold an O_PATH fd.
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  umask(0);  // modes arrive already masked by the caller's umask

  int root_fd = open(backing.c_str(), O_PATH | O_CLOEXEC);
  if (root_fd < 0) fail(fmt::format("open {}: {}", backing, strerror(errno)));
  fs::Options fopts;
  fopts.backing = backing;
  fopts.state_dir = state;
  // Other members change BACKING behind this kernel's caches: none by default in cluster mode.
  if (cluster_mode) fopts.timeout = 0;
  if (a.timeout) fopts.timeout = strtod(a.timeout, nullptr);
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
            strerror(errno));
      }
      close(pfd);
      unlink(probe.c_str());
    }
  }
  fence::Bindings bindings;
  fs::Fs filesystem(fopts, fence, bindings, root_fd);

  std::string mopts = "allow_other,default_permissions,fsname=" + backing + ",subtype=fencefs";
  fuse_opt_add_arg(&args, "-o");
  fuse_opt_add_arg(&args, mopts.c_str());
  fuse_session* se =
      fuse_session_new(&args, &fs::operations(), sizeof(fuse_lowlevel_ops), &filesystem);
  if (!se) fail("cannot create the FUSE session (bad option?)");
  if (fuse_set_signal_handlers(se) != 0) fail("cannot set signal handlers");
  if (fuse_session_mount(se, mnt.c_str()) != 0)
    fail(fmt::format("cannot mount at {} (is /dev/fuse available, and are you root?)", mnt));
  log::info("mounted {} at {} (state {})", backing, mnt, state);
  if (!copts.foreground) log::use_syslog(true);
  fuse_daemonize(copts.foreground);
  highwater.start();
  if (cluster) cluster->start();

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
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  if (cluster) cluster->leave();  // nothing can be admitted any more
  free(copts.mountpoint);
  log::info("unmounted {}", mnt);
  // libfuse reports the signal that ended the loop; a requested stop is a clean exit.
  bool clean = ret == 0 || ret == SIGTERM || ret == SIGINT || ret == SIGHUP;
  if (!clean) log::error("session ended with error {}", ret);
  return clean ? 0 : 1;
}
