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
#include "fence/bindings.h"
#include "fence/fence.h"
#include "fence/stamp.h"
#include "fs/fs.h"

using namespace fencefs;

namespace {

using common::under;

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
    timeout=SECS       kernel entry/attribute cache (default 5; sound: changes pass here)
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
    init, --init       create a new state even though BACKING holds files stamped by an
                       earlier state (every domain starts at the highest stamp found)
    log=WHERE          syslog, journal, stderr or an absolute FILE (reopened on SIGHUP);
                       default stderr with -f, else syslog; an unreachable syslog or
                       journal falls back to stderr
    log_level=LEVEL    error, warning, info (default) or debug
    verbose, --verbose log_level=debug: every refusal and advance
    pidfile=FILE       write the daemon's pid to FILE (removed at unmount)
    nonempty           allow a mountpoint that holds files (they are hidden while mounted)
    takeover           mount although BACKING/.fencefs/owner names a mount on another host
                       (only when that host is down or its daemon is gone)
    list_xattrs        list the user.fencefs.* attributes in listxattr (getfattr -d); off by
                       default: rsync -X would try to remove them on every file it copies

A backing and a state directory are served by one daemon at a time: a second fencefs on
either refuses to start (see `man fencefs`, "One daemon per backing").

Signals: SIGTERM, SIGINT: unmount and exit 0. SIGHUP: reopen the log file. SIGUSR1,
SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGXCPU, SIGXFSZ: logged and ignored.

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
  char* log = nullptr;
  char* log_level = nullptr;
  char* pidfile = nullptr;
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
  int nonempty = 0;
  int takeover = 0;
  int list_xattrs = 0;
  int help = 0;
  int version = 0;
  std::string backing;

  Args() = default;
  Args(const Args&) = delete;
  Args& operator=(const Args&) = delete;
  // fuse_opt_parse strdup()s every NAME=VALUE option it fills in.
  ~Args() {
    for (char* s :
         {state,      max_jump, issuers,   token_key,  floor,       timeout,   audit_max_bytes,
          audit_keep, log,      log_level, pidfile,    cluster,     etcd,      etcd_cacert,
          etcd_cert,  etcd_key, member,    fence_hook, ack_timeout, lease_ttl, isolation})
      free(s);
  }
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
                           {"--init", offsetof(Args, init), 1},
                           {"init", offsetof(Args, init), 1},
                           {"--verbose", offsetof(Args, verbose), 1},
                           {"verbose", offsetof(Args, verbose), 1},
                           {"log=%s", offsetof(Args, log), 0},
                           {"log_level=%s", offsetof(Args, log_level), 0},
                           {"pidfile=%s", offsetof(Args, pidfile), 0},
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
                           {"nonempty", offsetof(Args, nonempty), 1},
                           {"takeover", offsetof(Args, takeover), 1},
                           {"list_xattrs", offsetof(Args, list_xattrs), 1},
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

// What a failing mount must take back, newest first: a failed mount leaves nothing behind.
std::vector<std::function<void()>>& undo_stack() {
  static std::vector<std::function<void()>> s;
  return s;
}
bool g_logging_elsewhere = false;  // log= points somewhere besides stderr

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "fencefs: " << msg << "\n";
  if (g_logging_elsewhere) log::error("{}", msg);
  auto& undo = undo_stack();
  while (!undo.empty()) {
    auto fn = std::move(undo.back());
    undo.pop_back();
    fn();
  }
  exit(1);  // NOLINT(concurrency-mt-unsafe): only before the FUSE threads start
}

uint64_t parse_u64(const char* s, const char* what, uint64_t min = 0, uint64_t max = UINT64_MAX) {
  uint64_t v = 0;
  const char* end = s + strlen(s);
  auto r = std::from_chars(s, end, v);
  if (r.ec != std::errc() || r.ptr != end || s == end)
    die(fmt::format("{}: not a non-negative integer: '{}'", what, s));
  if (v < min || v > max) die(fmt::format("{}: {} is outside {}..{}", what, v, min, max));
  return v;
}

// Seconds as a plain decimal (e.g. 5, 0.5), 0..86400.
double parse_seconds(const char* s, const char* what) {
  double v = 0;
  const char* end = s + strlen(s);
  auto r = std::from_chars(s, end, v, std::chars_format::fixed);
  if (r.ec != std::errc() || r.ptr != end || s == end || !std::isfinite(v) || v < 0 || v > 86400)
    die(fmt::format("{}: not a number of seconds from 0 to 86400: '{}'", what, s));
  return v;
}

// The canonical form of PATH, which need not exist yet (its parent must).
std::string canonical_maybe_missing(const std::string& path, const char* what) {
  char real[PATH_MAX];
  if (realpath(path.c_str(), real)) return real;
  if (errno != ENOENT) die(fmt::format("{} {}: {}", what, path, common::errstr(errno)));
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
  std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
  if (name.empty() || name == "." || name == "..")
    die(fmt::format("{} {}: not a directory name", what, path));
  if (!realpath(parent.c_str(), real))
    die(fmt::format("{} {}: {}: {}", what, path, parent, common::errstr(errno)));
  std::string out = real;
  return out == "/" ? "/" + name : out + "/" + name;
}

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
        // NOLINTNEXTLINE(concurrency-mt-unsafe): option parsing, before any thread starts
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
  if (fd < 0) die(fmt::format("token_key {}: {}", file, common::errstr(errno)));
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

  // Every option is checked before anything is created, locked or mounted.
  std::string error;
  log::Target log_target;
  if (a.log) {
    auto t = log::parse_target(a.log, &error);
    if (!t) die(error);
    log_target = *t;
  } else if (!copts.foreground) {
    log_target.sink = log::Sink::Syslog;
  }
  if (a.log_level) {
    auto l = log::parse_level(a.log_level);
    if (!l) die(fmt::format("log_level={}: use error, warning, info or debug", a.log_level));
    log::set_level(*l);
  }
  if (a.verbose) log::set_level(log::Level::Debug);
  // Cluster mode: the backing is shared by several daemons by design, each with its own state.
  const bool cluster_mode = a.cluster != nullptr;
  if (!cluster_mode && (a.etcd || a.member || a.fence_hook || a.ack_timeout || a.lease_ttl ||
                        a.isolation || a.etcd_cacert || a.etcd_cert || a.etcd_key))
    die("etcd=, member=, fence_hook=, ack_timeout=, lease_ttl=, isolation=, etcd_cacert=, "
        "etcd_cert= and etcd_key= need cluster=NAME");
  // Members share BACKING: the default BACKING/.fencefs would be one journal for all of them.
  if (cluster_mode && !a.state)
    die("cluster= needs state=DIR outside BACKING: each member keeps its own journal");

  fence::Config cfg;
  if (a.max_jump) cfg.max_jump = parse_u64(a.max_jump, "max_jump", 1, INT64_MAX);
  if (a.issuers) parse_issuers(a.issuers, &cfg);
  if (!a.issuers && getuid() != 0) cfg.issuer_uids.push_back(getuid());  // the mount's owner
  if (a.token_key) cfg.token_key = read_key(a.token_key);
  uint64_t floor_opt = a.floor ? parse_u64(a.floor, "floor", 0, INT64_MAX) : 0;
  audit::Options aopts;
  if (a.audit_max_bytes)
    aopts.max_bytes = parse_u64(a.audit_max_bytes, "audit_max_bytes", 1, UINT64_MAX);
  if (a.audit_keep) aopts.keep = static_cast<int>(parse_u64(a.audit_keep, "audit_keep", 0, 1000));
  fs::Options fopts;
  if (a.timeout) fopts.timeout = parse_seconds(a.timeout, "timeout");
  if (a.pidfile && !daemon::pidfile_ok(a.pidfile, &error)) die(error);

  char real[PATH_MAX];
  if (!realpath(a.backing.c_str(), real))
    die(fmt::format("backing directory {}: {}", a.backing, common::errstr(errno)));
  std::string backing = real;
  struct stat st;
  if (stat(backing.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    die(fmt::format("backing {} is not a directory", backing));
  if (!realpath(copts.mountpoint, real))
    die(fmt::format("mountpoint {}: {}", copts.mountpoint, common::errstr(errno)));
  std::string mnt = real;
  auto busy = daemon::is_mountpoint(mnt, &error);
  if (!busy) die(error);
  if (*busy) die(fmt::format("mountpoint {} is busy: something is mounted there", mnt));
  if (under(mnt, backing) || under(backing, mnt))
    die(fmt::format("mountpoint {} and backing {} must not contain each other", mnt, backing));
  auto full = daemon::dir_has_entries(mnt, &error);
  if (!full) die(error);
  if (*full && !a.nonempty)
    die(fmt::format(
        "mountpoint {} is not empty: the mount would hide its files; use an empty directory "
        "or -o nonempty",
        mnt));

  std::string state = backing + "/.fencefs";
  if (a.state) {
    state = canonical_maybe_missing(a.state, "state directory");
    if (under(state, backing) && state != backing + "/.fencefs")
      die(
          fmt::format("state directory {} is inside BACKING and would be reachable through the "
                      "mount; use BACKING/.fencefs or a directory outside BACKING",
                      state));
    if (under(state, mnt)) die(fmt::format("state directory {} is under the mountpoint", state));
    if (cluster_mode && under(state, backing))
      die(
          fmt::format("state directory {} is inside the shared BACKING; in cluster mode each "
                      "member needs its own, outside BACKING",
                      state));
  }
  if (stat(state.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    die(fmt::format("state directory {} is not a directory", state));
  cfg.backing = backing;
  aopts.dir = state;
  fopts.backing = backing;
  fopts.state_dir = state;
  fopts.mountpoint = mnt;
  fopts.list_xattrs = a.list_xattrs != 0;
  std::optional<cluster::Options> cluster_opts;
  if (cluster_mode) {
    cluster_opts = cluster_options(a, backing, mnt, state);
    // Other members change BACKING behind this kernel's caches: none by default.
    if (!a.timeout) fopts.timeout = 0;
  }

  // Lost state over stamped files would silently reopen old epochs: refuse unless told.
  journal::FileLayer& files = journal::posix_file_layer();
  bool maybe_fresh = !files.exists(state + "/snapshot") && !files.exists(state + "/journal");
  uint64_t init_floor = 0;
  if (maybe_fresh) {
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
  if (log_target.sink != log::Sink::Stderr) {
    if (!log::open(log_target, &error)) die(error);
    g_logging_elsewhere = true;
  }
  if (mkdir(state.c_str(), 0700) == 0) {
    // Until the lock is ours another daemon may be creating files here: only the directory we
    // made, once empty again, is removed.
    undo_stack().push_back([=] { rmdir(state.c_str()); });
  } else if (errno != EEXIST) {
    die(fmt::format("state directory {}: {}", state, common::errstr(errno)));
  }

  auto claim = daemon::Claim::take({backing, state, mnt, a.takeover != 0, cluster_mode}, &error);
  if (!claim) die(error);
  undo_stack().push_back([&claim] { claim->abandon(); });
  // The state is ours now: what this mount creates in it from here is removed if it fails.
  std::vector<std::string> state_before = entries(state);
  undo_stack().push_back([=] { remove_new_entries(state, state_before); });
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

  audit::Log audit_log(aopts);
  fence::HighWater highwater(open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  fence::Fence fence(cfg, domains, *store, &audit_log, &highwater);
  std::unique_ptr<cluster::Cluster> cluster;
  if (cluster_mode) {
    // etcd is the authority: join (register, read every domain and epoch, raise the local view)
    // before anything is compared with the local view.
    cluster = std::make_unique<cluster::Cluster>(
        *cluster_opts, fence, open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    std::string why;
    if (cluster->join(&why) != 0) die(why);
    fence.set_authority(cluster.get());
    // A failed start must not leave a registered member behind: advances would wait for it.
    undo_stack().push_back([&cluster] { cluster->leave(); });
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
  undo_stack().push_back([se] { fuse_session_unmount(se); });

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
  uint64_t floor = std::max(floor_opt, init_floor);
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
  undo_stack().clear();

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
