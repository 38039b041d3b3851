// A cluster's changes of epochs: declaring a domain, the coordinated advance (propose, every
// member's acknowledgement, the fence hook for one that does not answer, commit) and the wait for
// a commit. The membership side is in cluster.cc.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "cluster/cluster.h"
#include "common/error.h"
#include "common/log.h"
#include "common/umask.h"

extern char** environ;

namespace fencefs::cluster {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

}  // namespace

using fence::Domain;
using fence::Epoch;

int Cluster::create_record(const std::string& path, Value v, bool* created, std::string* why) {
  etcd::TxnResult r;
  etcd::Compare cmp{epoch_key(path), etcd::Compare::Target::kCreate, etcd::Compare::Result::kEqual};
  etcd::Status s = ops_->txn({cmp}, {etcd::Op::Put(epoch_key(path), encode(v))}, {}, &r);
  if (!s.ok()) {
    *why =
        fmt::format("cluster {}: cannot declare domain {} in etcd: {}", o_.name, path, s.message);
    return EIO;
  }
  *created = r.succeeded;
  return 0;
}

int Cluster::declare(const std::string& path, Epoch epoch, std::string* why) {
  bool created = false;
  if (int err = create_record(path, {epoch, false}, &created, why)) return err;
  if (created) *why += "; declared for every member of cluster " + o_.name;
  return 0;
}

// The fence hook's environment: ours without FENCEFS_* variables, then the member to fence
// (from its registration, `m`) and the advance that waits for it.
static std::vector<std::string> hook_environment(const Options& o, const std::string& member,
                                                 const json& m, const Domain& d, Epoch token) {
  std::string host = m.is_object() ? m.value("host", "") : "";
  std::string mnt = m.is_object() ? m.value("mountpoint", "") : "";
  std::string member_pid = m.is_object() && m.contains("pid") ? m["pid"].dump() : "";
  std::vector<std::string> env;
  for (char** e = environ; *e; e++)
    if (strncmp(*e, "FENCEFS_", 8) != 0) env.emplace_back(*e);
  env.push_back("FENCEFS_CLUSTER=" + o.name);
  env.push_back("FENCEFS_MEMBER=" + member);
  env.push_back("FENCEFS_HOST=" + host);
  env.push_back("FENCEFS_MOUNTPOINT=" + mnt);
  env.push_back("FENCEFS_MEMBER_PID=" + member_pid);
  env.push_back("FENCEFS_BACKING=" + (m.is_object() ? m.value("backing", "") : std::string()));
  env.push_back("FENCEFS_DOMAIN=" + d.path);
  env.push_back("FENCEFS_EPOCH=" + std::to_string(token));
  env.push_back("FENCEFS_FENCER=" + o.member);
  return env;
}

// Starts the hook in its own process group with stdin from /dev/null and stdout and stderr into
// a pipe (read end left in pfd[0]). 0 or EIO with *why.
static int spawn_hook(const std::string& program, std::vector<char*>& argv,
                      std::vector<char*>& envp, pid_t* pid, int pfd[2], std::string* why) {
  if (pipe2(pfd, O_CLOEXEC) != 0) {
    *why = fmt::format("fence hook: pipe: {}", common::errstr(errno));
    return EIO;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, all;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  // An ignored signal stays so across exec: SIGPIPE (the daemon's), any the daemon inherited.
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  common::own_files_umask();  // the hook starts with the daemon's umask, not a caller's left here
  int err = posix_spawn(pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(pfd[1]);
  if (err) {
    ::close(pfd[0]);
    *why = fmt::format("fence hook {} could not be started: {}", program, common::errstr(err));
    return EIO;
  }
  return 0;
}

int Cluster::run_hook(const std::string& member, const std::string& info, const Domain& d,
                      Epoch token, std::string* why) {
  json m = json::parse(info, nullptr, false);
  std::string host = m.is_object() ? m.value("host", "") : "";
  std::string mnt = m.is_object() ? m.value("mountpoint", "") : "";
  std::vector<std::string> args{o_.fence_hook, member, host, mnt};
  std::vector<std::string> env = hook_environment(o_, member, m, d, token);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int pfd[2];
  pid_t pid = -1;
  if (int err = spawn_hook(o_.fence_hook, argv, envp, &pid, pfd, why)) return err;
  std::string out;
  auto deadline = Clock::now() + o_.hook_timeout;
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{pfd[0], POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r > 0) {
      char buf[4096];
      ssize_t n = ::read(pfd[0], buf, sizeof buf);
      if (n <= 0) break;  // every writer closed: the hook (and its children) are done with it
      if (out.size() < 16384) out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(pfd[0]);
  int st = 0;
  if (timed_out) {
    kill(-pid, SIGKILL);
    waitpid(pid, &st, 0);
  } else {
    // Output closed; the hook still gets the rest of its time to exit.
    while (waitpid(pid, &st, WNOHANG) == 0) {
      if (Clock::now() >= deadline) {
        timed_out = true;
        kill(-pid, SIGKILL);
        waitpid(pid, &st, 0);
        break;
      }
      std::this_thread::sleep_for(Millis(10));
    }
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (!out.empty()) log::info("cluster {}: fence hook for {}: {}", o_.name, member, out);
  if (timed_out) {
    *why = fmt::format("fence hook {} for member {} did not finish within {} s", o_.fence_hook,
                       member, o_.hook_timeout.count() / 1000);
    return EIO;
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    *why = fmt::format("fence hook {} for member {} failed ({}{})", o_.fence_hook, member,
                       WIFEXITED(st) ? fmt::format("exit {}", WEXITSTATUS(st))
                                     : fmt::format("signal {}", WTERMSIG(st)),
                       out.empty() ? "" : ": " + out.substr(out.rfind('\n') + 1));
    return EIO;
  }
  return 0;
}

// long: one attempt's steps (propose, gather acknowledgements, fence the silent, commit or roll
// back) share its revision, deadline and outcome; each step is commented where it starts.
int Cluster::advance(Domain& d, Epoch token, std::string* why, Epoch* acquired) {
  const bool acquire = token == 0;
  if (int err = admissible(why)) return err;
  {
    std::lock_guard lk(follow_mu_);
    auto it = rolled_back_.find(d.path);
    if (it != rolled_back_.end() && token <= it->second) {
      *why = fmt::format(
          "cluster {}: etcd's epoch of domain {} went back below {} (restored from an older "
          "snapshot?); only an advance above {} heals it",
          o_.name, d.path, it->second, it->second);
      return EUCLEAN;  // as a local rollback refusal: a coordinator tells it from an I/O error
    }
  }
  etcd::Client& c = *ops_;
  const std::string key = epoch_key(d.path);
  auto unreachable = [&](const etcd::Status& s) {
    *why = fmt::format("cluster {}: advance of {} to {}: etcd: {}; nothing is admitted under {}",
                       o_.name, d.path, token, s.message, token);
    return EIO;
  };

  // The local view must reach `e` once applied; otherwise the caller would re-raise forever.
  auto followed = [&](Epoch e) {
    if (d.epoch.load() >= e) return 0;
    *why = fmt::format(
        "cluster {}: domain {} is at epoch {} in etcd but this member could not make it durable "
        "(see the log); nothing is admitted under it",
        o_.name, d.path, e);
    return EIO;
  };
  // An explicit acquisition must be above the cluster's epoch, pending or committed.
  auto stale = [&](Epoch cluster_epoch) {
    *acquired = std::max(cluster_epoch, d.epoch.load());
    *why = fmt::format("cluster {}: token {} is not above epoch {} of domain {}", o_.name, token,
                       *acquired, d.path);
    return ESTALE;
  };

  // 1. The compare-and-set: the cluster's epoch only rises.
  for (;;) {
    std::optional<etcd::KeyValue> kv;
    etcd::Status s = c.get(key, &kv);
    if (!s.ok()) return unreachable(s);
    etcd::TxnResult r;
    if (kv) {
      Value cur;
      if (!decode(kv->value, &cur)) {
        *why = fmt::format("cluster {}: malformed epoch record {}='{}'", o_.name, key, kv->value);
        return EIO;
      }
      if (acquire && std::max(cur.epoch, d.epoch.load()) >= fence::kMaxToken) return ERANGE;
      if (acquire) token = std::max(cur.epoch, d.epoch.load()) + 1;
      if (acquired && token <= std::max(cur.epoch, d.epoch.load())) return stale(cur.epoch);
      if (cur.epoch > token || (cur.epoch == token && !cur.pending)) {
        apply(c, d.path, cur, false);  // superseded or done: re-judge
        return followed(cur.epoch);
      }
      if (cur.epoch == token) break;  // pending: complete it
      etcd::Compare cmp{key, etcd::Compare::Target::kMod, etcd::Compare::Result::kEqual,
                        kv->mod_revision};
      s = c.txn({cmp}, {etcd::Op::Put(key, encode({token, true}))}, {}, &r);
    } else {
      if (acquire && d.epoch.load() >= fence::kMaxToken) return ERANGE;
      if (acquire) token = d.epoch.load() + 1;
      if (acquired && token <= d.epoch.load()) return stale(0);
      etcd::Compare cmp{key, etcd::Compare::Target::kCreate, etcd::Compare::Result::kEqual};
      s = c.txn({cmp}, {etcd::Op::Put(key, encode({token, true}))}, {}, &r);
    }
    if (!s.ok()) return unreachable(s);
    if (r.succeeded) break;
  }
  const std::string pending = encode({token, true});
  if (acquired) *acquired = token;
  // This member's own part, at once.
  apply(c, d.path, {token, true}, false);
  if (d.epoch.load() < token) {
    *why = fmt::format(
        "cluster {}: advance of {} to {}: this member could not make it durable (see the log); "
        "nothing is admitted under {}",
        o_.name, d.path, token, token);
    return EIO;
  }

  // Once proposed, etcd's epoch is `token` pending, `token` committed or above, unless etcd was
  // restored from an older snapshot or the key rewritten: the older value is no completion.
  // This member already holds `token` (pending): as at a rollback found by a re-read, only an
  // advance above it heals the domain.
  auto went_back = [&](const std::string& held) {
    *why = fmt::format(
        "cluster {}: etcd's epoch of domain {} went back to '{}' while it was advanced to {} "
        "(etcd restored from an older snapshot, or the key rewritten?); the advance did not "
        "complete, nothing is admitted under {}, and an advance above {} heals the domain",
        o_.name, d.path, held, token, token, token);
    log::error("{}", *why);
    audit("cluster_advance", "refused", "io", d.path, 0, token, *why);
    {
      std::lock_guard lk(follow_mu_);
      rolled_back_[d.path] = std::max(rolled_back_[d.path], token);
    }
    return EIO;
  };

  // 2. Every member acknowledges: nothing below `token` runs anywhere, its data is durable.
  auto deadline = Clock::now() + o_.ack_timeout;
  std::map<std::string, etcd::KeyValue> missing;  // member -> its registration
  for (;;) {
    std::optional<etcd::KeyValue> kv;
    etcd::Status s = c.get(key, &kv);
    if (!s.ok()) return unreachable(s);
    Value cur;
    if (!kv || !decode(kv->value, &cur) || cur.epoch < token) return went_back(kv ? kv->value : "");
    if (cur.epoch > token || !cur.pending) {
      apply(c, d.path, cur, false);  // completed elsewhere, or superseded
      return followed(cur.epoch);
    }
    std::vector<etcd::KeyValue> members, acks;
    int64_t rev = 0;
    s = c.get_prefix(prefix_ + "members/", &members);
    if (s.ok()) s = c.get_prefix(ack_prefix(d.path), &acks, &rev);
    if (!s.ok()) return unreachable(s);
    std::map<std::string, Epoch> acked;
    for (auto& a : acks) {
      Epoch e = 0;
      std::from_chars(a.value.data(), a.value.data() + a.value.size(), e);
      acked[a.key.substr(ack_prefix(d.path).size())] = e;
    }
    missing.clear();
    for (auto& m : members) {
      std::string id = m.key.substr(prefix_.size() + 8);
      if (acked[id] < token) missing[id] = m;
    }
    if (missing.empty()) break;
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (left.count() <= 0) break;
    c.watch(ack_prefix(d.path), true, rev + 1, std::min(left, Millis(250)),
            [](const etcd::WatchEvent&) { return false; });
  }

  // 3. A member that did not acknowledge is not assumed dead: the operator's hook must cut it off.
  for (auto& [id, reg] : missing) {
    const std::string& info = reg.value;
    std::string who = fmt::format("member {} ({})", id, info);
    if (o_.fence_hook.empty()) {
      *why = fmt::format(
          "cluster {}: advance of {} to {} failed: {} did not acknowledge within {} ms and no "
          "fence_hook is configured; nothing is admitted under {} until every member "
          "acknowledges or is fenced (then retry the advance)",
          o_.name, d.path, token, who, o_.ack_timeout.count(), token);
      log::error("{}", *why);
      audit("cluster_advance", "refused", "io", d.path, 0, token, *why);
      return EIO;
    }
    std::string hwhy;
    if (run_hook(id, info, d, token, &hwhy) != 0) {
      *why = fmt::format(
          "cluster {}: advance of {} to {} failed: {} did not acknowledge within {} ms and {}; "
          "nothing is admitted under {}",
          o_.name, d.path, token, who, o_.ack_timeout.count(), hwhy, token);
      log::error("{}", *why);
      audit("cluster_fence", "refused", "io", d.path, 0, token, *why);
      return EIO;
    }
    // Only the registration that was fenced: the member may have been restarted meanwhile (its
    // service manager, while the hook ran) and registered again, and read T pending as it joined.
    // Deleted, the next advance would not wait for it.
    etcd::TxnResult r;
    etcd::Compare same{prefix_ + "members/" + id, etcd::Compare::Target::kMod,
                       etcd::Compare::Result::kEqual, reg.mod_revision};
    etcd::Status s = c.txn(
        {same},
        {etcd::Op::Delete(prefix_ + "members/" + id), etcd::Op::Delete(prefix_ + "alive/" + id)},
        {etcd::Op::Range(prefix_ + "members/" + id)}, &r);
    if (!s.ok()) return unreachable(s);
    // Gone instead (the hook removed it): its liveness key goes too.
    bool kept = !r.succeeded && !r.ranges.empty() && !r.ranges[0].empty();
    if (!r.succeeded && !kept) c.txn({}, {etcd::Op::Delete(prefix_ + "alive/" + id)}, {}, &r);
    std::string msg = fmt::format("{} did not acknowledge epoch {} of {}; fence hook succeeded, {}",
                                  who, token, d.path,
                                  kept ? "and the member has registered again since: kept"
                                       : "member removed from the cluster");
    log::warn("cluster {}: {}", o_.name, msg);
    audit("cluster_fence", "fenced", "", d.path, 0, token, msg);
  }

  // 4. Commit: the new epoch may now be used on every member.
  etcd::TxnResult r;
  etcd::Compare cmp{key, etcd::Compare::Target::kValue, etcd::Compare::Result::kEqual, 0, pending};
  etcd::Status s =
      c.txn({cmp}, {etcd::Op::Put(key, encode({token, false}))}, {etcd::Op::Range(key)}, &r);
  if (!s.ok()) return unreachable(s);
  if (r.succeeded) {
    apply(c, d.path, {token, false}, false);
    return followed(token);
  }
  Value cur;
  if (r.ranges.empty() || r.ranges[0].empty() || !decode(r.ranges[0][0].value, &cur) ||
      cur.epoch < token || (cur.epoch == token && cur.pending))
    return went_back(r.ranges.empty() || r.ranges[0].empty() ? "" : r.ranges[0][0].value);
  apply(c, d.path, cur, false);  // completed elsewhere, or superseded
  return followed(cur.epoch);
}

int Cluster::await_commit(Domain& d, Epoch token, std::string* why) {
  auto deadline = Clock::now() + o_.ack_timeout + Millis(2000);
  for (;;) {
    Epoch u = d.uncommitted.load();
    if (u == 0 || token < u) return 0;
    {
      std::unique_lock lk(commit_mu_);
      commit_cv_.wait_for(lk, Millis(200));
    }
    u = d.uncommitted.load();
    if (u == 0 || token < u) return 0;
    std::optional<etcd::KeyValue> kv;
    Value cur;
    if (ops_->get(epoch_key(d.path), &kv).ok() && kv && decode(kv->value, &cur) && !cur.pending &&
        cur.epoch >= u) {
      clear_uncommitted(d, cur.epoch);
      continue;
    }
    if (int err = admissible(why)) return err;
    if (Clock::now() >= deadline) {
      *why = fmt::format(
          "cluster {}: epoch {} of domain {} is not acknowledged by every member yet (an "
          "advance is waiting for them, or failed: see the advancing member's log)",
          o_.name, u, d.path);
      return EIO;
    }
  }
}

}  // namespace fencefs::cluster
