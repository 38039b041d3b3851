// Options shared by fencectl run and fencectl lease, and the lock-service steps both take.
#pragma once
#include <string>

#include "cli/commands.h"
#include "cli/fence_ioctl.h"
#include "etcd/lock_service.h"

namespace fencefs::cli::lockrun {

struct Opts {
  std::string mount, domain, token, user;
  bool acquire = false, resync = false, once = false;
  std::string etcd, lock, cacert, cert, key, lease;
  double ttl = 10, wait = -1, grace = 10;
};

// run and lease report a bad command line with the table's usage code (CMD's codes stay CMD's).
[[noreturn]] void bad_usage(const std::string& msg);
// Parses run's or lease's options into *o; returns the arguments left (run: CMD and its own).
Args parse(const Args& args, Opts* o, const char* what);
etcd::Options etcd_options(const Opts& o);
// fencectl's exit code for a lock-service failure.
int lock_service_exit(const etcd::Status& s);
// Takes the lock and draws its next token; with dh, acquires the domain at that token (bind: and
// binds the caller). 0, or the exit code, having said why.
int etcd_acquire(const Opts& o, etcd::LockService& svc, const DomainHandle* dh, bool bind,
                 etcd::Grant* g);
int need_root(const Opts& o, std::string* root);

}  // namespace fencefs::cli::lockrun
