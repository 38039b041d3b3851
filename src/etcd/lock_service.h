// Ownership from a lock service: a lease, a lock held under it, and a fencing token drawn from a
// dense per-lock counter in the same service, incremented only while the lock is provably held.
// LockService is the interface; EtcdLockService implements it on etcd (a ZooKeeper or Consul
// source would sit beside it).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "etcd/client.h"

namespace fencefs::etcd {

struct Grant {
  int64_t lease = 0;   // the lease the lock is held under
  std::string key;     // the lock's ownership key
  uint64_t token = 0;  // the token drawn for this acquisition (0 until next_token)
};

class LockService {
 public:
  virtual ~LockService() = default;
  // Takes a lease of ttl_s seconds (kept alive from here on) and waits up to `wait` for the lock.
  virtual Status acquire(const std::string& name, int64_t ttl_s, Millis wait, Grant* g) = 0;
  // Draws the next token of the lock's counter, in one step that fails unless the lock is still
  // held under g's lease (kNotFound then). Sets g->token.
  virtual Status next_token(const std::string& name, Grant* g) = 0;
  // Moves the counter to `floor` when it is below (the issuer was restored from an older copy),
  // only while the lock is held; g->token becomes the counter's value.
  virtual Status resync(const std::string& name, uint64_t floor, Grant* g) = 0;
  // Releases the lock and revokes the lease; kNotFound when the lease was already gone (expired,
  // revoked, never granted): the lock is free all the same.
  virtual Status release(const Grant& g) = 0;
  // One keepalive; *ttl is the TTL left; kNotFound when the lease is gone.
  virtual Status keepalive(int64_t lease, int64_t* ttl) = 0;
  // The counter's current value (0 when never drawn).
  virtual Status counter(const std::string& name, uint64_t* value) = 0;
};

class EtcdLockService : public LockService {
 public:
  explicit EtcdLockService(Options opts, std::string prefix = "fencefs/");
  Status acquire(const std::string& name, int64_t ttl_s, Millis wait, Grant* g) override;
  Status next_token(const std::string& name, Grant* g) override;
  Status resync(const std::string& name, uint64_t floor, Grant* g) override;
  Status release(const Grant& g) override;
  Status keepalive(int64_t lease, int64_t* ttl) override;
  Status counter(const std::string& name, uint64_t* value) override;

  Client& client() { return client_; }
  std::string lock_name(const std::string& name) const { return prefix_ + "lock/" + name; }
  std::string counter_key(const std::string& name) const { return prefix_ + "token/" + name; }

 private:
  // Sets the counter to a value computed from the current one, if the lock is still ours.
  Status bump(const std::string& name, const Grant& g,
              const std::function<uint64_t(uint64_t)>& next, uint64_t* value);
  Client client_;
  std::string prefix_;
};

// Keeps a lease alive from a thread (every ttl/3) until stopped; calls on_lost once when etcd
// says the lease is gone or no keepalive succeeded for a whole TTL.
class KeepAlive {
 public:
  KeepAlive(LockService& svc, int64_t lease, int64_t ttl_s,
            std::function<void(std::string)> on_lost);
  ~KeepAlive();
  void stop();
  bool lost() const { return lost_.load(); }

 private:
  void run();
  LockService& svc_;
  int64_t lease_, ttl_s_;
  std::function<void(std::string)> on_lost_;
  std::atomic<bool> lost_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fencefs::etcd
