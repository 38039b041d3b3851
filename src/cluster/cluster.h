// Cluster mode: several fencefs daemons (one per host) serve one backing store and enforce one
// epoch per domain. etcd is the authority for the cluster's domains and epochs; each member's
// journal stays its durable view. Protocol and failure cases: docs/cluster.md.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "etcd/client.h"
#include "fence/authority.h"
#include "fence/fence.h"

namespace fencefs::cluster {

struct Options {
  std::string name;        // the cluster; its keys live under /fencefs/clusters/NAME/
  std::string member;      // this member's id (unique in the cluster)
  std::string host;        // for the fence hook and status
  std::string mountpoint;  // idem
  std::string backing;     // idem (a hook may sync or revoke it)
  std::string state_dir;   // where this member records the cluster it joined
  std::string fence_hook;  // program run for a member that does not acknowledge; empty: none
  etcd::Options etcd;
  std::chrono::milliseconds ack_timeout{10000};
  std::chrono::milliseconds lease_ttl{10000};
  // Stop admitting this long after the last keepalive that etcd confirmed was sent (well inside
  // the lease, on the monotonic clock). 0: lease_ttl / 2.
  std::chrono::milliseconds isolation{0};
  std::chrono::milliseconds hook_timeout{60000};
};

// Checks and fills defaults; "" or a message saying what is wrong.
std::string validate(Options* o);

class Cluster final : public fence::EpochAuthority {
 public:
  // backing_fd: BACKING's root (O_RDONLY|O_DIRECTORY), kept; synced before each acknowledgement.
  Cluster(Options opts, fence::Fence& fence, int backing_fd);
  ~Cluster() override;

  // Registers this member, reads every domain and epoch (declaring and raising local views),
  // acknowledges them, and starts the keepalive and watch threads. 0, or an errno and *why.
  int join(std::string* why);
  // Clean exit (after the mount is gone): stop admitting, deregister, revoke the lease.
  void leave();
  // Threads do not survive fork: join() before daemonising, start() after.
  void start();

  int advance(fence::Domain& d, fence::Epoch token, std::string* why,
              fence::Epoch* acquired) override;
  int admissible(std::string* why) override;
  int await_commit(fence::Domain& d, fence::Epoch token, std::string* why) override;
  int declare(const std::string& path, fence::Epoch epoch, std::string* why) override;
  std::string status_json() override;

  // Key layout, for tests and tools.
  std::string prefix() const { return prefix_; }

 private:
  struct Value {
    fence::Epoch epoch = 0;
    bool pending = false;
  };
  static std::string encode(Value v);
  static bool decode(const std::string& s, Value* v);
  std::string epoch_key(const std::string& path) const { return prefix_ + "epoch" + path; }
  std::string ack_prefix(const std::string& path) const { return prefix_ + "ack" + path + "/@"; }

  int check_identity(etcd::Client& c, bool at_start, std::string* why);
  int pin_backing(const std::string& mine, std::string* why);
  // BACKING/.fencefs/cluster's "NAME ID"; 0 or errno (ENOENT: not pinned yet).
  int pinned_cluster(std::string* out);
  // Creates a domain's record unless it exists; *created: whether this did.
  int create_record(const std::string& path, Value v, bool* created, std::string* why);
  int register_member(etcd::Client& c, std::string* why);
  int resync(etcd::Client& c, int64_t* revision, std::string* why);
  // Applies one epoch record to the local view and acknowledges it. resync: the record is the
  // key's current value (a lower value than the local view is then a rollback of etcd).
  void apply(etcd::Client& c, const std::string& path, Value v, bool resync);
  // Still a member (not fenced)? etcd's revision not gone back (restored)? Once per keepalive.
  void check_standing();
  fence::Domain* declare_local(const std::string& path);
  void ack(etcd::Client& c, fence::Domain& d);
  void retry_acks();
  void clear_uncommitted(fence::Domain& d, fence::Epoch committed);
  int run_hook(const std::string& member, const std::string& info, const fence::Domain& d,
               fence::Epoch token, std::string* why);
  void audit(const char* op, const char* decision, const char* reason, const std::string& domain,
             fence::Epoch before, fence::Epoch after, const std::string& message);
  void set_isolated(const std::string& why);
  // Back in contact after an isolation whose first cause was said: whether another member's
  // fence removed this member meanwhile, said too (check_standing says it in contact).
  void note_if_fenced();
  void keepalive_loop();
  void watch_loop();
  void stop_threads();

  Options o_;
  fence::Fence& fence_;
  int backing_fd_;
  std::string prefix_;
  std::unique_ptr<etcd::Client> ops_, ka_, watch_;

  // Admissions are allowed while the monotonic clock is below this (ns); 0: never.
  std::atomic<int64_t> admit_until_ns_{0};
  std::atomic<bool> isolated_{true};
  std::atomic<bool> fenced_{false};
  std::atomic<bool> founded_{false};  // this join created the cluster in etcd (until its resync)
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> lease_{0};
  std::atomic<int64_t> watch_from_{0};

  std::mutex follow_mu_;                             // serialises local raises and acknowledgements
  std::map<std::string, fence::Epoch> acked_;        // last acknowledgement put, by domain
  std::map<std::string, fence::Epoch> committed_;    // highest committed epoch seen, by domain
  std::atomic<int64_t> max_revision_{0};             // highest etcd revision seen
  std::atomic<bool> resync_due_{false};              // the watch thread reads every record
  std::map<std::string, fence::Epoch> rolled_back_;  // domain -> local view above etcd's
  std::mutex state_mu_;
  std::string isolated_why_;

  std::mutex commit_mu_;
  std::condition_variable commit_cv_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::thread keepalive_, watcher_;
};

}  // namespace fencefs::cluster
