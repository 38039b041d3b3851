// The daemon's command line: fencefs [options] BACKING MOUNTPOINT. Parsed with libfuse's option
// parser, then every option checked before anything is created, locked or mounted.
#pragma once
// fs/fs.h brings <fuse_lowlevel.h> at the project's FUSE_USE_VERSION.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "audit/audit.h"
#include "cluster/cluster.h"
#include "common/log.h"
#include "fence/fence.h"
#include "fs/fs.h"

namespace fencefs::daemon {

extern const char* const kUsage;

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
  char* uring = nullptr;
  char* readahead = nullptr;
  int uring_flag = 0;
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
          etcd_cert,  etcd_key, member,    fence_hook, ack_timeout, lease_ttl, isolation,
          uring,      readahead})
      free(s);
  }
};

// fuse_opt_parse over the daemon's options (the mountpoint stays in args for
// fuse_parse_cmdline). 0, or -1 after libfuse said why.
int parse_args(fuse_args* args, Args* a);

// What the checked options settle.
struct Settings {
  std::string backing, mnt, state;  // canonical
  bool cluster_mode = false;
  log::Target log_target;
  fence::Config cfg;
  audit::Options aopts;
  fs::Options fopts;
  std::optional<cluster::Options> cluster_opts;
  uint64_t floor_opt = 0;
  std::optional<unsigned> readahead_kib;  // readahead=, when given (0: the kernel's default)
  bool nonempty = false;
  bool dead_mount = false;  // MOUNTPOINT holds a dead fencefs mount of BACKING: replace it
};
// Every option checked (dies with the reason on the first that is wrong).
Settings check_options(const Args& a, const fuse_cmdline_opts& copts);
// Removes the dead mount at MOUNTPOINT that check_options found (dead_mount), right before the
// mount, and checks the mountpoint again; dies when it cannot.
void replace_dead_mount(const Settings& o);

// A mount that fails takes back what it made: on_failure() registers an undo step (run newest
// first by die()), startup_done() forgets them once the mount serves.
void on_failure(std::function<void()> undo);
void startup_done();
// From here on die() also logs to the configured log (not only stderr).
void log_failures_too();
[[noreturn]] void die(const std::string& msg);

}  // namespace fencefs::daemon
