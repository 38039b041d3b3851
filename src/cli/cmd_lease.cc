// fencectl lease: the lock service's steps for scripts (acquire, keepalive, release).
#include <fmt/format.h>

#include <charconv>
#include <condition_variable>
#include <iostream>
#include <mutex>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/lockrun.h"
#include "cli/options.h"
#include "common/error.h"

namespace fencefs::cli {

namespace ec = exit_code;
using lockrun::bad_usage;
using lockrun::Opts;

int cmd_lease(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << find_command("lease")->full_help;
    return args.empty() ? ec::kUsage : 0;
  }
  const std::string& verb = args[0];
  if (verb != "acquire" && verb != "keepalive" && verb != "release")
    bad_usage("lease: unknown verb '" + verb + "': expected acquire, keepalive or release");
  Opts o;
  Args rest = lockrun::parse(Args(args.begin() + 1, args.end()), &o, "lease");
  if (!rest.empty()) bad_usage("lease: unexpected argument " + rest[0]);
  if (o.etcd.empty()) bad_usage("lease: --etcd ENDPOINTS is required");
  etcd::EtcdLockService svc(lockrun::etcd_options(o));
  if (verb == "acquire") {
    if (o.lock.empty()) bad_usage("lease acquire: --lock NAME is required");
    DomainHandle dh;
    if (!o.mount.empty()) {
      if (o.domain.empty()) bad_usage("lease acquire: --mount needs --domain D");
      std::string root, why;
      if (int code = lockrun::need_root(o, &root)) return code;
      if (int code = dh.open(root, o.domain, &why)) {
        fail("lease acquire: " + why);
        return code;
      }
    }
    etcd::Grant g;
    if (int code = lockrun::etcd_acquire(o, svc, o.mount.empty() ? nullptr : &dh, false, &g))
      return code;
    std::cout << "FENCEFS_TOKEN=" << g.token << "\nFENCEFS_LEASE=" << g.lease
              << "\nFENCEFS_LOCK_KEY='" << g.key << "'\n";
    return 0;
  }
  int64_t lease = 0;
  auto r = std::from_chars(o.lease.data(), o.lease.data() + o.lease.size(), lease);
  if (o.lease.empty() || r.ec != std::errc() || r.ptr != o.lease.data() + o.lease.size())
    bad_usage("lease " + verb + ": --lease ID (decimal, as printed by lease acquire) is required");
  if (verb == "release") {
    etcd::Grant g;
    g.lease = lease;
    etcd::Status s = svc.release(g);
    if (s.code == etcd::Status::kNotFound) {
      // Idempotent, as run's own release: the lock is free. A note, for a mistyped ID.
      std::cerr << fmt::format(
          "fencectl: lease release: lease {} not found (expired, already released or never "
          "granted): nothing to release\n",
          lease);
      return ec::kOk;
    }
    if (!s.ok()) fail("lease release: " + s.message);
    return lockrun::lock_service_exit(s);
  }
  if (verb == "keepalive") {
    int64_t ttl = 0;
    etcd::Status s = svc.keepalive(lease, &ttl);
    if (!s.ok()) {
      fail(fmt::format("lease keepalive: {}", s.message));
      return s.code == etcd::Status::kNotFound ? ec::kLeaseLost : ec::kLockService;
    }
    if (o.once) {
      std::cout << "ttl " << ttl << "\n";
      return 0;
    }
    // Until etcd says the lease is gone, or no keepalive succeeded for a whole TTL.
    std::mutex mu;
    std::condition_variable cv;
    std::string why;
    etcd::KeepAlive ka(svc, lease, ttl, [&](std::string w) {
      std::lock_guard lk(mu);
      why = std::move(w);
      cv.notify_all();
    });
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return !why.empty(); });
    fail("lease keepalive: lease lost: " + why);
    return ec::kLeaseLost;
  }
  return ec::kFailed;  // unreachable: the verb was checked first
}

}  // namespace fencefs::cli
