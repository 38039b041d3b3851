#include "integration/etcd_fixture.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "etcd/client.h"
#include "integration/mount_fixture.h"

namespace fencefs::testing {
namespace {

std::mutex g_mu;
std::set<pid_t>* g_live = nullptr;  // members to kill if the test binary exits abruptly

void sweep() {
  std::lock_guard lk(g_mu);
  if (!g_live) return;
  for (pid_t p : *g_live) ::kill(p, SIGKILL);
}

void track(pid_t p, bool add) {
  std::lock_guard lk(g_mu);
  if (!g_live) {
    g_live = new std::set<pid_t>;
    atexit(sweep);
  }
  if (add)
    g_live->insert(p);
  else
    g_live->erase(p);
}

bool reap(pid_t pid, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 20) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

int free_port() {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(s);
  return port;
}

Etcd::Etcd(int members, bool tls) : tls_(tls) {
  char tmpl[] = "/tmp/fencefs-etcd-XXXXXX";
  char* d = mkdtemp(tmpl);
  if (!d) {
    ADD_FAILURE() << "mkdtemp: " << strerror(errno);
    return;
  }
  dir_ = d;
  if (tls_ && !make_certs()) {
    ADD_FAILURE() << "could not make TLS certificates with openssl";
    return;
  }
  std::set<int> used;
  for (int i = 0; i < members; i++) {
    Member m;
    m.name = fmt::format("m{}", i);
    m.data = fmt::format("{}/{}.etcd", dir_, m.name);
    m.log = fmt::format("{}/{}.log", dir_, m.name);
    do m.client_port = free_port();
    while (used.count(m.client_port));
    used.insert(m.client_port);
    do m.peer_port = free_port();
    while (used.count(m.peer_port));
    used.insert(m.peer_port);
    members_.push_back(m);
  }
  for (int i = 0; i < members; i++) start(i);
  if (!wait_healthy(15000)) {
    std::string logs;
    for (auto& m : members_) logs += m.name + ":\n" + slurp(m.log).substr(0, 4000) + "\n";
    ADD_FAILURE() << "etcd did not become healthy; logs:\n" << logs;
  }
}

Etcd::~Etcd() {
  stop_all();
  if (!dir_.empty() && !getenv("FENCEFS_KEEP_TMP")) sh("rm -rf '" + dir_ + "'");
}

std::string Etcd::initial_cluster() const {
  std::string out;
  for (const auto& m : members_)
    out += fmt::format("{}{}=http://127.0.0.1:{}", out.empty() ? "" : ",", m.name, m.peer_port);
  return out;
}

std::string Etcd::endpoint(int i) const {
  return fmt::format("{}://127.0.0.1:{}", tls_ ? "https" : "http",
                     members_[static_cast<size_t>(i)].client_port);
}

std::string Etcd::tls_flags() const {
  if (!tls_) return "";
  return "--cacert '" + cacert() + "' --cert '" + client_cert() + "' --key '" + client_key() + "'";
}

bool Etcd::make_certs() {
  // A throwaway CA, a server certificate for 127.0.0.1 and a client certificate (EC P-256).
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::string cmd = fmt::format(
      "cd '{0}' && "
      "openssl req -x509 {1} -keyout ca.key -out ca.crt -days 2 -subj /CN=fencefs-test-ca && "
      "printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > srv.ext "
      "&& printf 'extendedKeyUsage=clientAuth\n' > cli.ext && "
      "openssl req {1} -keyout server.key -out server.csr -subj /CN=127.0.0.1 && "
      "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile srv.ext -out server.crt && "
      "openssl req {1} -keyout client.key -out client.csr -subj /CN=fencectl && "
      "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile cli.ext -out client.crt",
      dir_, key);
  return sh("(" + cmd + ") >/dev/null 2>&1") == 0;
}

std::string Etcd::endpoints() const {
  std::string out;
  for (int i = 0; i < size(); i++) out += (i ? "," : "") + endpoint(i);
  return out;
}

bool Etcd::start(int i) {
  Member& m = members_[static_cast<size_t>(i)];
  if (m.pid > 0) return true;
  std::vector<std::string> args = {
      "etcd",
      "--name",
      m.name,
      "--data-dir",
      m.data,
      "--listen-client-urls",
      endpoint(i),
      "--advertise-client-urls",
      endpoint(i),
      "--listen-peer-urls",
      fmt::format("http://127.0.0.1:{}", m.peer_port),
      "--initial-advertise-peer-urls",
      fmt::format("http://127.0.0.1:{}", m.peer_port),
      "--initial-cluster",
      initial_cluster(),
      "--initial-cluster-state",
      "new",
      "--initial-cluster-token",
      "fencefs-test-" + std::to_string(getpid()),
      // Fast elections keep failover tests short; the minimum lease TTL follows (1 s).
      "--heartbeat-interval",
      "50",
      "--election-timeout",
      "500",
      "--log-level",
      "warn",
  };
  if (tls_) {
    for (const std::string& a :
         {std::string("--cert-file"), dir_ + "/server.crt", std::string("--key-file"),
          dir_ + "/server.key", std::string("--trusted-ca-file"), dir_ + "/ca.crt",
          std::string("--client-cert-auth")})
      args.push_back(a);
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int fd = open(m.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp("etcd", argv.data());
    _exit(127);
  }
  if (pid < 0) return false;
  m.pid = pid;
  track(pid, true);
  return true;
}

bool Etcd::running(int i) const { return members_[static_cast<size_t>(i)].pid > 0; }

void Etcd::kill(int i) {
  Member& m = members_[static_cast<size_t>(i)];
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGKILL);
  reap(m.pid, 5000);
  track(m.pid, false);
  m.pid = -1;
}

void Etcd::pause(int i) {
  if (members_[static_cast<size_t>(i)].pid > 0)
    ::kill(members_[static_cast<size_t>(i)].pid, SIGSTOP);
}

void Etcd::resume(int i) {
  if (members_[static_cast<size_t>(i)].pid > 0)
    ::kill(members_[static_cast<size_t>(i)].pid, SIGCONT);
}

void Etcd::stop(int i) {
  Member& m = members_[static_cast<size_t>(i)];
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGTERM);
  ::kill(m.pid, SIGCONT);
  if (!reap(m.pid, 5000)) {
    ::kill(m.pid, SIGKILL);
    reap(m.pid, 5000);
  }
  track(m.pid, false);
  m.pid = -1;
}

void Etcd::stop_all() {
  for (int i = 0; i < size(); i++) kill(i);
}

bool Etcd::wait_healthy(int timeout_ms) const {
  etcd::Options o;
  o.cacert = cacert();
  o.cert = client_cert();
  o.key = client_key();
  for (int i = 0; i < size(); i++)
    if (members_[static_cast<size_t>(i)].pid > 0) o.endpoints.push_back(endpoint(i));
  if (o.endpoints.empty()) return false;
  o.request_timeout = std::chrono::milliseconds(1000);
  o.connect_timeout = std::chrono::milliseconds(300);
  etcd::Client c(o);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    std::optional<etcd::KeyValue> kv;
    if (c.get("fencefs-test/health", &kv).ok()) return true;  // a linearizable read: quorum
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

int Etcd::leader() const {
  for (int i = 0; i < size(); i++) {
    if (members_[static_cast<size_t>(i)].pid <= 0) continue;
    etcd::Options o;
    o.cacert = cacert();
    o.cert = client_cert();
    o.key = client_key();
    o.endpoints = {endpoint(i)};
    o.request_timeout = std::chrono::milliseconds(1000);
    etcd::Client c(o);
    std::string ep;
    uint64_t me = 0, lead = 0;
    if (!c.status(&ep, &me, &lead).ok() || !lead) continue;
    for (int j = 0; j < size(); j++) {
      etcd::Options oj = o;
      oj.endpoints = {endpoint(j)};
      oj.request_timeout = std::chrono::milliseconds(1000);
      etcd::Client cj(oj);
      uint64_t mj = 0, lj = 0;
      if (members_[static_cast<size_t>(j)].pid > 0 && cj.status(&ep, &mj, &lj).ok() && mj == lead)
        return j;
    }
  }
  return -1;
}

std::string Etcd::etcdctl(const std::string& args, int* status, int i) const {
  std::string eps = i >= 0 ? endpoint(i) : endpoints();
  return sh_out("ETCDCTL_API=3 etcdctl --endpoints=" + eps + " " + tls_flags() + " " + args,
                status);
}

bool Etcd::snapshot_save(const std::string& path) const {
  int st = -1;
  etcdctl("snapshot save '" + path + "' >/dev/null 2>&1", &st, 0);
  return st == 0;
}

bool Etcd::snapshot_restore(const std::string& path) {
  if (size() != 1) return false;
  stop(0);
  Member& m = members_[0];
  std::string fresh = m.data + ".restored";
  int st = sh(fmt::format(
      "rm -rf '{0}' && ETCDCTL_API=3 etcdctl snapshot restore '{1}' --data-dir '{0}' --name {2} "
      "--initial-cluster {3} --initial-advertise-peer-urls http://127.0.0.1:{4} >/dev/null 2>&1 "
      "&& rm -rf '{5}' && mv '{0}' '{5}'",
      fresh, path, m.name, initial_cluster(), m.peer_port, m.data));
  if (st != 0) return false;
  return start(0) && wait_healthy(15000);
}

}  // namespace fencefs::testing
