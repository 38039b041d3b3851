// fencectl run: CMD bound to a given token, an acquired one, or one from a lock service.
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include "cli/commands.h"
#include "cli/ctlfile.h"
#include "cli/exit_codes.h"
#include "cli/fence_ioctl.h"
#include "cli/lockrun.h"
#include "cli/options.h"
#include "common/error.h"
#include "ctl/protocol.h"
#include "etcd/lock_service.h"
#include "fence/token.h"

namespace fencefs::cli {
namespace {

namespace ec = exit_code;
using namespace lockrun;  // NOLINT(google-build-using-namespace): the shared half of this file
bool resolve_user(const std::string& spec, uid_t* uid, gid_t* gid, std::string* name) {
  std::string u = spec, g;
  size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    u = spec.substr(0, colon);
    g = spec.substr(colon + 1);
  }
  struct passwd* pw = getpwnam(u.c_str());
  if (pw) {
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    *name = pw->pw_name;
  } else {
    uid_t v;
    auto r = std::from_chars(u.data(), u.data() + u.size(), v);
    if (r.ec != std::errc() || r.ptr != u.data() + u.size()) return false;
    *uid = v;
    *gid = v;
    pw = getpwuid(v);
    if (pw) {
      *gid = pw->pw_gid;
      *name = pw->pw_name;
    }
  }
  if (!g.empty()) {
    struct group* gr = getgrnam(g.c_str());
    if (gr) {
      *gid = gr->gr_gid;
    } else {
      gid_t v;
      auto r = std::from_chars(g.data(), g.data() + g.size(), v);
      if (r.ec != std::errc() || r.ptr != g.data() + g.size()) return false;
      *gid = v;
    }
  }
  return true;
}

struct User {
  bool set = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;
  // 0 or errno.
  int become() const {
    if (!set) return 0;
    if ((!name.empty() ? initgroups(name.c_str(), gid) : setgroups(0, nullptr)) != 0 ||
        setgid(gid) != 0 || setuid(uid) != 0)
      return errno;
    return 0;
  }
};

std::vector<char*> argv_of(const Args& args, size_t from) {
  std::vector<char*> argv;
  for (size_t k = from; k < args.size(); k++) argv.push_back(const_cast<char*>(args[k].c_str()));
  argv.push_back(nullptr);
  return argv;
}

void export_token(const std::string& domain, uint64_t token) {
  setenv("FENCEFS_TOKEN", std::to_string(token).c_str(), 1);
  setenv("FENCEFS_DOMAIN", domain.c_str(), 1);
}

int status_of(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

// Waits for the child (pidfd) to exit within ms; true when it did.
bool wait_exit(int pidfd, pid_t pid, int ms, int* st) {
  pollfd p{pidfd, POLLIN, 0};
  if (poll(&p, 1, ms) <= 0) return false;
  return waitpid(pid, st, 0) == pid;
}

// Runs CMD in its own process group while the lease is alive.
// long: the child, the keepalive callback and the signal loop share the lease's lost state.
int run_under_lease(const Opts& o, etcd::LockService& svc, const etcd::Grant& g, const User& user,
                    const Args& args, size_t cmd) {
  // Blocked before the keepalive thread starts, which inherits the mask: a thread of ours with
  // them unblocked would take one, and its default action would end us with CMD left running
  // unsupervised and the lease held until it expires.
  sigset_t sigs, old;
  sigemptyset(&sigs);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&sigs, s);
  sigprocmask(SIG_BLOCK, &sigs, &old);
  int lost_fd = eventfd(0, EFD_CLOEXEC);
  std::string lost_why;
  std::mutex lost_mu;
  etcd::KeepAlive ka(svc, g.lease, static_cast<int64_t>(o.ttl), [&](std::string why) {
    {
      std::lock_guard lk(lost_mu);
      lost_why = std::move(why);
    }
    uint64_t one = 1;
    (void)!write(lost_fd, &one, sizeof one);
  });
  int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) return ec::kFailed;
  // CMD gets its own process group (so the whole job can be stopped on lease loss); when we own
  // the terminal, CMD gets it, so an interactive CMD can read it.
  bool foreground = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
  auto give_terminal = [&](pid_t to) {
    if (!foreground) return;
    sighandler_t prev = signal(SIGTTOU, SIG_IGN);
    tcsetpgrp(STDIN_FILENO, to);
    signal(SIGTTOU, prev);
  };
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    give_terminal(getpid());
    sigprocmask(SIG_SETMASK, &old, nullptr);
    int err = user.become();
    if (!err) {
      auto argv = argv_of(args, cmd);
      execvp(argv[0], argv.data());
      err = errno;
    }
    (void)!write(errpipe[1], &err, sizeof err);
    _exit(127);
  }
  close(errpipe[1]);
  if (pid < 0) {
    fail(fmt::format("run: fork: {}", common::errstr(errno)));
    svc.release(g);
    return ec::kExecFailed;
  }
  setpgid(pid, pid);
  int child_err = 0;
  bool exec_failed = read(errpipe[0], &child_err, sizeof child_err) == sizeof child_err;
  close(errpipe[0]);
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  int st = 0;
  bool lost = false;
  for (bool done = false; !done;) {
    pollfd p[3] = {{pidfd, POLLIN, 0}, {lost_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(p, 3, -1) < 0) continue;
    if (p[0].revents) {
      waitpid(pid, &st, 0);
      done = true;
    } else if (p[1].revents) {
      lost = true;
      {
        std::lock_guard lk(lost_mu);
        fail(fmt::format("lease lost: {}; stopping the job (process group {})", lost_why, pid));
      }
      kill(-pid, SIGTERM);
      if (!wait_exit(pidfd, pid, static_cast<int>(o.grace * 1000), &st)) {
        kill(-pid, SIGKILL);
        waitpid(pid, &st, 0);
      }
      done = true;
    } else if (p[2].revents) {
      signalfd_siginfo si;
      if (read(sfd, &si, sizeof si) == sizeof si) kill(-pid, static_cast<int>(si.ssi_signo));
    }
  }
  kill(-pid, SIGKILL);  // stragglers of the group never outlive the lease
  give_terminal(getpgrp());
  ka.stop();
  svc.release(g);
  close(pidfd);
  close(sfd);
  close(lost_fd);
  if (exec_failed) {
    fail(fmt::format("run: {}: {}", args[cmd], common::errstr(child_err)));
    return ec::kExecFailed;
  }
  return lost ? ec::kLeaseLost : status_of(st);
}

}  // namespace

int cmd_run(const Args& args) {
  Opts o;
  const Args command = parse(args, &o, "run");
  const size_t cmd = 0;  // command[cmd] is CMD
  if (command.empty()) bad_usage("run: no command given (… -- CMD [ARGS...])");
  if (o.domain.empty()) bad_usage("run: --domain D is required");
  o.token = token_arg(o.token);
  int modes = !o.token.empty() + o.acquire + !o.etcd.empty();
  if (modes != 1) bad_usage("run: give exactly one of --token T, --acquire, --etcd E --lock N");
  if (!o.etcd.empty() && o.lock.empty()) bad_usage("run: --etcd needs --lock NAME");
  if (!o.token.empty() && !fence::parse_token_text(o.token)) {
    fail("run: malformed token '" + o.token + "' (a decimal 1..9223372036854775807, or EPOCH.SIG)");
    return ec::kMalformed;
  }
  User user;
  if (!o.user.empty()) {
    if (!resolve_user(o.user, &user.uid, &user.gid, &user.name)) {
      fail("run: unknown user or group '" + o.user + "'");
      return ec::kUsage;
    }
    user.set = true;
  }
  std::string root;
  if (int code = need_root(o, &root)) return code;
  DomainHandle dh;
  std::string why;
  // A holder of a signed token may lack read permission on the domain's directory: it binds
  // through the control file instead (the shells' path).
  bool via_ctl = false;
  if (int code = dh.open(root, o.domain, &why)) {
    via_ctl = !o.token.empty() && dh.open_errno() == EACCES;
    if (!via_ctl) {
      fail("run: " + why);
      return code;
    }
  }
  // Grandchildren orphaned by a double fork are reparented to us, so they stay bound.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (!o.etcd.empty()) {
    etcd::EtcdLockService svc(etcd_options(o));
    etcd::Grant g;
    if (int code = etcd_acquire(o, svc, &dh, true, &g)) return code;
    export_token(o.domain, g.token);
    return run_under_lease(o, svc, g, user, command, cmd);
  }
  uint64_t token = 0;
  if (o.acquire) {
    if (int err = dh.acquire(0, true, false, &token)) {
      fail(fmt::format("run: acquire of domain {} refused: {}", o.domain, explain_errno(err)));
      return ec::from_errno(err);
    }
  } else {
    std::string reply;
    int err =
        via_ctl ? send_command(root, "bind " + ctl::quote_domain(o.domain) + " " + o.token, &reply)
                : dh.bind(o.token);
    if (err) {
      fail(fmt::format("run: bind {} {} refused: {}{}", o.domain, o.token, explain_errno(err),
                       reply.empty() ? "" : " (" + reply + ")"));
      return ec::from_errno(err);
    }
    token = fence::parse_token_text(o.token)->epoch;
  }
  export_token(o.domain, token);
  if (int err = user.become()) {
    fail(fmt::format("run: cannot become {}: {}", o.user, common::errstr(err)));
    return ec::kExecFailed;
  }
  auto argv = argv_of(command, cmd);
  execvp(argv[0], argv.data());
  fail(fmt::format("run: {}: {}", command[cmd], common::errstr(errno)));
  return ec::kExecFailed;
}

}  // namespace fencefs::cli
