#include "cli/lockrun.h"

#include <fmt/format.h>

#include <chrono>
#include <iostream>

#include "cli/commands.h"
#include "cli/ctlfile.h"
#include "cli/exit_codes.h"
#include "cli/fence_ioctl.h"
#include "cli/options.h"
#include "common/error.h"
#include "ctl/protocol.h"
#include "etcd/lock_service.h"
#include "fence/token.h"

namespace fencefs::cli::lockrun {

namespace ec = exit_code;

namespace {

bool parse_seconds(const std::string& s, double* out) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used != s.size() || v < 0) return false;
    *out = v;
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

[[noreturn]] void bad_usage(const std::string& msg) {
  std::cerr << "fencectl: " << msg << "\n(see fencectl run --help, fencectl lease --help)\n";
  exit(ec::kUsage);
}

// Parses run's or lease's options (the command table's parser); returns the operands: for run,
// CMD and its arguments.
Args parse(const Args& args, Opts* o, const char* what) {
  Parsed p = parse_command(*find_command(what), args);
  for (auto [name, field] : {std::pair{"mount", &o->mount},
                             {"domain", &o->domain},
                             {"token", &o->token},
                             {"user", &o->user},
                             {"etcd", &o->etcd},
                             {"lock", &o->lock},
                             {"cacert", &o->cacert},
                             {"cert", &o->cert},
                             {"key", &o->key},
                             {"lease", &o->lease}})
    *field = p.value(name);
  o->domain = domain_arg(o->domain);  // exported as FENCEFS_DOMAIN, as the daemon names it
  o->acquire = p.flag("acquire");
  o->resync = p.flag("resync");
  o->once = p.flag("once");
  std::string v;
  if (!(v = p.value("ttl")).empty() && (!parse_seconds(v, &o->ttl) || o->ttl < 1))
    bad_usage(std::string(what) + ": --ttl needs whole seconds >= 1");
  if (!(v = p.value("wait")).empty() && !parse_seconds(v, &o->wait))
    bad_usage(std::string(what) + ": bad --wait " + v);
  if (!(v = p.value("grace")).empty() && !parse_seconds(v, &o->grace))
    bad_usage(std::string(what) + ": bad --grace " + v);
  if (!o->etcd.empty()) etcd_options(*o);  // its usage errors before anything is done
  return p.positional;
}

etcd::Options etcd_options(const Opts& o) {
  etcd::Options e;
  bool tls = !o.cacert.empty() || !o.cert.empty();
  e.endpoints = etcd::parse_endpoints(o.etcd, tls);
  e.cacert = o.cacert;
  e.cert = o.cert;
  e.key = o.key;
  if (std::string why = etcd::check_options(e); !why.empty()) bad_usage(why);
  // A keepalive must be able to give up on one endpoint and try another within the TTL, and a
  // call must outlast a leader election (one to two seconds).
  auto half = std::chrono::milliseconds(static_cast<int64_t>(o.ttl * 1000 / 2));
  e.request_timeout = std::clamp(half, etcd::Millis(3000), etcd::Millis(5000));
  e.connect_timeout = std::min(e.request_timeout / 2, etcd::Millis(1000));
  return e;
}

int lock_service_exit(const etcd::Status& s) {
  switch (s.code) {
    case etcd::Status::kOk:
      return ec::kOk;
    case etcd::Status::kTimeout:
      return ec::kLockTimeout;
    case etcd::Status::kNotFound:
      return ec::kLeaseLost;
    default:
      return ec::kLockService;
  }
}

// Takes the lock, draws the next token and, with a domain handle, acquires D at that token
// (binding this process when bind). On failure the lease is released.
int etcd_acquire(const Opts& o, etcd::LockService& svc, const DomainHandle* dh, bool bind,
                 etcd::Grant* g) {
  etcd::Millis wait = o.wait < 0 ? etcd::Millis(int64_t{1} << 40)
                                 : etcd::Millis(static_cast<int64_t>(o.wait * 1000));
  etcd::Status s = svc.acquire(o.lock, static_cast<int64_t>(o.ttl), wait, g);
  if (s.code == etcd::Status::kTimeout) {
    fail(fmt::format("lock {} not acquired within {} s", o.lock, o.wait));
    return ec::kLockTimeout;
  }
  if (!s.ok()) {
    fail(fmt::format("lock service: {}", s.message));
    return lock_service_exit(s);
  }
  auto give_up = [&](int code) {
    svc.release(*g);
    return code;
  };
  if (!(s = svc.next_token(o.lock, g)).ok()) {
    fail(fmt::format("could not draw a token for lock {}: {}", o.lock, s.message));
    return give_up(lock_service_exit(s));
  }
  if (!dh) return 0;
  uint64_t got = 0;
  int err = dh->acquire(g->token, bind, false, &got);
  if (err == ESTALE) {
    uint64_t epoch = got;
    dh->epoch(&epoch);
    // Either cause looks the same from here; only the operator knows which it is.
    if (!o.resync) {
      fail(fmt::format(
          "issuer behind the resource: lock {} issued token {}, but domain {} is already at "
          "epoch {}. Nothing ran. Either the lock name is new to this domain (its counter starts "
          "at 1, and the epoch came from another lock or issuer), or etcd was restored from an "
          "older backup. Once you know which, --resync moves the counter above the domain's "
          "epoch (audited)",
          o.lock, g->token, o.domain, epoch));
      return give_up(ec::kIssuerBehind);
    }
    uint64_t drawn = g->token;
    if (!(s = svc.resync(o.lock, epoch + 1, g)).ok()) {
      fail(fmt::format("resync of lock {}'s counter failed: {}", o.lock, s.message));
      return give_up(lock_service_exit(s));
    }
    err = dh->acquire(g->token, bind, true, &got);
    if (!err)
      std::cerr << fmt::format(
          "fencectl: resync: counter of lock {} moved from {} to {}, above domain {}'s epoch {}\n",
          o.lock, drawn, g->token, o.domain, epoch);
  }
  if (err) {
    fail(fmt::format("acquire of domain {} at token {} refused: {}", o.domain, g->token,
                     explain_errno(err)));
    return give_up(err == ESTALE ? ec::kIssuerBehind : ec::from_errno(err));
  }
  return 0;
}

int need_root(const Opts& o, std::string* root) {
  if (o.mount.empty()) bad_usage("--mount M is required");
  *root = mount_or_exit(o.mount, "");
  return 0;
}

}  // namespace fencefs::cli::lockrun
