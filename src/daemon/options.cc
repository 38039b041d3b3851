// The daemon's options: parsing (libfuse's fuse_opt) and checking.
#include "daemon/options.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/path.h"
#include "daemon/claim.h"
#include "daemon/lifecycle.h"
#include "daemon/mounts.h"
#include "journal/state_files.h"

namespace fencefs::daemon {

const char* const kUsage = R"(usage: fencefs [options] BACKING MOUNTPOINT
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
                       must be the daemon user's, unreadable by group or others
    floor=N            raise every domain to at least epoch N at start (recovery, audited)
    timeout=SECS       kernel entry/attribute/listing cache (default 5; sound: changes pass here);
                       with 0 every open also drops the file's cached pages
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
                       or another cluster (only when that host is down or its daemon is gone,
                       or no member of that cluster serves the backing anymore)
    list_xattrs        list the user.fencefs.* attributes in listxattr (getfattr -d); off by
                       default: rsync -X would try to remove them on every file it copies
    uring, uring=N     take requests through io_uring (FUSE over io_uring, Linux 6.14+) with
                       N threads per CPU (default 16 up to 4 CPUs, 64 in all up to 32): a reply and
                       the next request are one system call. Needs `echo Y > /sys/module/fuse/parameters/enable_uring`;
                       without it (logged) requests come through /dev/fuse as by default
    readahead=KIB      read ahead up to KIB KiB of a file read in sequence (a page to 1024,
                       default 1024: one READ per MiB); 0 leaves the kernel's 128 KiB

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

namespace {

using common::under;

// What a failing mount must take back, newest first: a failed mount leaves nothing behind.
std::vector<std::function<void()>>& undo_stack() {
  static std::vector<std::function<void()>> s;
  return s;
}
bool g_logging_elsewhere = false;  // log= points somewhere besides stderr

}  // namespace

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

void on_failure(std::function<void()> undo) { undo_stack().push_back(std::move(undo)); }
void startup_done() { undo_stack().clear(); }
void log_failures_too() { g_logging_elsewhere = true; }

namespace {

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
                           {"uring=%s", offsetof(Args, uring), 0},
                           {"uring", offsetof(Args, uring_flag), 1},
                           {"readahead=%s", offsetof(Args, readahead), 0},
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
  errno = 0;
  auto out = common::with_canonical_parent(path);
  if (!out)
    die(fmt::format("{} {}: {}", what, path,
                    errno ? common::errstr(errno) : std::string("not a directory name")));
  return *out;
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
  if (std::string why = etcd::check_options(o.etcd); !why.empty()) die(why);
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
  // Its owner could sign any token, and chmod it back after reading.
  if (st.st_uid != geteuid())
    die(fmt::format("token_key {} is owned by uid {}, not by the daemon's (uid {}); chown it", file,
                    st.st_uid, geteuid()));
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

int parse_args(fuse_args* args, Args* a) { return fuse_opt_parse(args, a, kSpecs, opt_proc); }

namespace {

// The mountpoint holds no files the mount would hide, unless NONEMPTY allows it.
void check_empty(const std::string& mnt, bool nonempty) {
  std::string error;
  auto full = daemon::dir_has_entries(mnt, &error);
  if (!full) die(error);
  if (*full && !nonempty)
    die(fmt::format(
        "mountpoint {} is not empty: the mount would hide its files; use an empty directory "
        "or -o nonempty",
        mnt));
}

// BACKING, MOUNTPOINT and state=: canonical, of the right kind, none inside another where that
// would expose or hide something.
void check_paths(const Args& a, const fuse_cmdline_opts& copts, Settings* out) {
  Settings& o = *out;
  const bool cluster_mode = o.cluster_mode;
  std::string error;
  char real[PATH_MAX];
  if (!realpath(a.backing.c_str(), real))
    die(fmt::format("backing directory {}: {}", a.backing, common::errstr(errno)));
  std::string& backing = o.backing = real;
  struct stat st;
  if (stat(backing.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    die(fmt::format("backing {} is not a directory", backing));
  if (!realpath(copts.mountpoint, real))
    die(fmt::format("mountpoint {}: {}", copts.mountpoint, common::errstr(errno)));
  std::string& mnt = o.mnt = real;
  auto busy = daemon::is_mountpoint(mnt, &error);
  if (!busy) die(error);
  // A killed daemon of this backing leaves its mount there, dead (ENOTCONN): replaced at the
  // mount (replace_dead_mount), so that a restart needs no unmount first and the bare directory
  // shows only between the two. While a daemon holds the backing, nothing is probed.
  o.dead_mount = *busy && (cluster_mode || served_by(backing).empty()) &&
                 daemon::dead_mount_at(mnt, backing, &error);
  if (*busy && !o.dead_mount)
    die(fmt::format("mountpoint {} is busy: something is mounted there{}", mnt,
                    error.empty() ? "" : " (" + error + ")"));
  if (under(mnt, backing) || under(backing, mnt))
    die(fmt::format("mountpoint {} and backing {} must not contain each other", mnt, backing));
  o.nonempty = a.nonempty != 0;
  if (!o.dead_mount) check_empty(mnt, o.nonempty);

  std::string& state = o.state = backing + "/.fencefs";
  if (a.state) {
    state = canonical_maybe_missing(a.state, "state directory");
    std::string why;
    if (!journal::state_link_acceptable(common::with_canonical_parent(a.state).value_or(state),
                                        state, backing, &why))
      die(why);
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
}

}  // namespace

Settings check_options(const Args& a, const fuse_cmdline_opts& copts) {
  Settings o;
  auto& log_target = o.log_target;
  auto& cfg = o.cfg;
  auto& aopts = o.aopts;
  auto& fopts = o.fopts;
  auto& cluster_opts = o.cluster_opts;
  std::string error;
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
  const bool cluster_mode = o.cluster_mode = a.cluster != nullptr;
  if (!cluster_mode && (a.etcd || a.member || a.fence_hook || a.ack_timeout || a.lease_ttl ||
                        a.isolation || a.etcd_cacert || a.etcd_cert || a.etcd_key))
    die("etcd=, member=, fence_hook=, ack_timeout=, lease_ttl=, isolation=, etcd_cacert=, "
        "etcd_cert= and etcd_key= need cluster=NAME");
  // Members share BACKING: the default BACKING/.fencefs would be one journal for all of them.
  if (cluster_mode && !a.state)
    die("cluster= needs state=DIR outside BACKING: each member keeps its own journal");

  if (a.max_jump) cfg.max_jump = parse_u64(a.max_jump, "max_jump", 1, INT64_MAX);
  if (a.issuers) parse_issuers(a.issuers, &cfg);
  if (!a.issuers && getuid() != 0) cfg.issuer_uids.push_back(getuid());  // the mount's owner
  if (a.token_key) cfg.token_key = read_key(a.token_key);
  o.floor_opt = a.floor ? parse_u64(a.floor, "floor", 0, INT64_MAX) : 0;
  if (a.audit_max_bytes)
    aopts.max_bytes = parse_u64(a.audit_max_bytes, "audit_max_bytes", 1, UINT64_MAX);
  if (a.audit_keep) aopts.keep = static_cast<int>(parse_u64(a.audit_keep, "audit_keep", 0, 1000));
  if (a.timeout) fopts.timeout = parse_seconds(a.timeout, "timeout");
  if (a.pidfile && !daemon::pidfile_ok(a.pidfile, &error)) die(error);

  check_paths(a, copts, &o);
  const std::string &backing = o.backing, &mnt = o.mnt, &state = o.state;
  cfg.backing = backing;
  aopts.dir = state;
  fopts.backing = backing;
  fopts.state_dir = state;
  fopts.mountpoint = mnt;
  fopts.list_xattrs = a.list_xattrs != 0;
  if (a.uring_flag) fopts.uring = -1;  // ring.h: the default per CPU
  if (a.uring) fopts.uring = static_cast<int>(parse_u64(a.uring, "uring", 1, 64));
  if (fopts.uring && copts.singlethread)
    die("uring serves requests on threads of its own: not with -s");
  if (a.readahead) {
    // Above the INIT reply's max_readahead (1 MiB) the kernel would clamp it anyway.
    unsigned kib = static_cast<unsigned>(parse_u64(a.readahead, "readahead", 0, 1024));
    // The kernel keeps whole pages: less than one would turn read-ahead off.
    unsigned page_kib = static_cast<unsigned>(sysconf(_SC_PAGESIZE) / 1024);
    if (kib > 0 && kib < page_kib)
      die(fmt::format("readahead=: 0, or {} (a page) to 1024 KiB", page_kib));
    o.readahead_kib = kib;
  }
  if (cluster_mode) {
    cluster_opts = cluster_options(a, backing, mnt, state);
    // Other members change BACKING behind this kernel's caches: none by default.
    if (!a.timeout) fopts.timeout = 0;
  }

  return o;
}

void replace_dead_mount(const Settings& o) {
  std::string error;
  if (!daemon::remove_dead_mount(o.mnt, o.backing, &error))
    die(
        fmt::format("mountpoint {} holds the dead mount of a fencefs daemon of {} that is gone, "
                    "and it was not removed ({}): fusermount3 -u -z {}",
                    o.mnt, o.backing, error, o.mnt));
  log::warn("removed the dead mount at {} that a fencefs daemon of {} left", o.mnt, o.backing);
  auto busy = daemon::is_mountpoint(o.mnt, &error);
  if (!busy) die(error);
  if (*busy) die(fmt::format("mountpoint {} is busy: something is mounted there", o.mnt));
  check_empty(o.mnt, o.nonempty);
}

}  // namespace fencefs::daemon
