// A real etcd (Debian's etcd-server) on free localhost ports in a temp dir: one member or a
// cluster of several. Always stopped (and its dir removed) when the object goes away; members
// also die with the thread that started them (PR_SET_PDEATHSIG), so start them from the test's
// thread, not from a short-lived helper thread.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace fencefs::testing {

class Etcd {
 public:
  // Starts `members` members and waits until the cluster has a leader (fails the test if not).
  // With tls, clients must speak TLS and present a certificate signed by cacert().
  explicit Etcd(int members = 1, bool tls = false);
  ~Etcd();
  Etcd(const Etcd&) = delete;
  Etcd& operator=(const Etcd&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // "http://127.0.0.1:P1,http://127.0.0.1:P2,…" for --etcd / --endpoints.
  std::string endpoints() const;
  std::string endpoint(int i) const;
  const std::string& dir() const { return dir_; }
  bool tls() const { return tls_; }
  // TLS material (empty without tls): the CA, and a client certificate and key it signed.
  std::string cacert() const { return tls_ ? dir_ + "/ca.crt" : ""; }
  std::string client_cert() const { return tls_ ? dir_ + "/client.crt" : ""; }
  std::string client_key() const { return tls_ ? dir_ + "/client.key" : ""; }
  // "--cacert F --cert F --key F" for fencectl and etcdctl ("" without tls).
  std::string tls_flags() const;

  // Stops one member (SIGKILL, like a crash) or all; starts it again on the same data.
  void kill(int i);
  void stop(int i);  // SIGTERM, waits
  bool start(int i);
  bool running(int i) const;
  // SIGSTOP / SIGCONT one member: it stops answering without closing its connections.
  void pause(int i);
  void resume(int i);
  void stop_all();
  // Waits until some member reports a leader; true when one does within timeout_ms.
  bool wait_healthy(int timeout_ms = 10000) const;
  // Index of the leader member, -1 when unknown.
  int leader() const;

  // Runs etcdctl against the cluster (or one member, i >= 0) and returns its stdout; *status is
  // its exit status.
  std::string etcdctl(const std::string& args, int* status = nullptr, int i = -1) const;
  // `etcdctl snapshot save` of a single-member cluster to path.
  bool snapshot_save(const std::string& path) const;
  // Single member: stops it, replaces its data with `etcdctl snapshot restore` of path, starts it.
  bool snapshot_restore(const std::string& path);

 private:
  struct Member {
    std::string name, data, log;
    int client_port = 0, peer_port = 0;
    pid_t pid = -1;
    bool initial = true;
  };
  std::string initial_cluster() const;
  bool make_certs();
  std::string dir_;
  bool tls_ = false;
  std::vector<Member> members_;
};

// A free TCP port on 127.0.0.1 (bound and released; good enough for tests).
int free_port();

}  // namespace fencefs::testing
