#include "daemon/lifecycle.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/log.h"

namespace fencefs::daemon {
namespace {

const int kHandled[] = {SIGHUP,  SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM,
                        SIGPROF, SIGIO,   SIGXCPU, SIGXFSZ};

sigset_t handled_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kHandled) sigaddset(&set, s);
  return set;
}

std::atomic<void (*)()> g_stop{nullptr};
std::atomic<int> g_stop_signal{0};
std::atomic<pid_t> g_stop_from{0};

void on_stop_signal(int sig, siginfo_t* info, void*) {
  int none = 0;
  if (g_stop_signal.compare_exchange_strong(none, sig)) g_stop_from.store(info->si_pid);
  g_stop.load()();
}

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

void keep_standard_fds_open() {
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDWR) != fd) _exit(1);
  // An ignored SIGCHLD survives exec, and the kernel would then reap the children the daemon
  // waits for (the dead-mount probe, fence hooks).
  signal(SIGCHLD, SIG_DFL);
}

void stop_on_signals(void (*stop)()) {
  g_stop.store(stop);
  struct sigaction sa = {};
  sa.sa_sigaction = on_stop_signal;
  // SA_RESETHAND: a second one ends the daemon at once (a stop stuck in its cleanup). Without
  // SA_RESTART the other threads' system calls would fail with EINTR.
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction old;
    // One ignored by whoever started the daemon (SIGINT of a background job) stays ignored.
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_IGN)
      sigaction(sig, &sa, nullptr);
  }
  signal(SIGPIPE, SIG_IGN);
}

int stop_signal(pid_t* from) {
  int sig = g_stop_signal.load();  // first: the sender is stored after it, before the stop
  *from = g_stop_from.load();
  return sig;
}

void block_handled_signals() {
  sigset_t set = handled_set();
  pthread_sigmask(SIG_SETMASK, &set, nullptr);  // exactly: a stop blocked by the parent reaches us
}

void start_signal_thread() {
  std::thread([] {
    sigset_t set = handled_set();
    for (;;) {
      siginfo_t info;
      int sig = sigwaitinfo(&set, &info);
      if (sig < 0) continue;
      if (sig == SIGHUP) {
        log::reopen();
        log::info("SIGHUP from pid {}: log reopened", info.si_pid);
      } else {
        const char* abbrev = sigabbrev_np(sig);
        std::string name = abbrev ? std::string("SIG") + abbrev : std::to_string(sig);
        log::info("{} from pid {}: ignored (SIGTERM or fusermount3 -u unmounts)", name,
                  info.si_pid);
      }
    }
  }).detach();
}

void notify_ready(const std::string& status) {
  sd_notifyf(0, "READY=1\nSTATUS=%s\nMAINPID=%d", status.c_str(), static_cast<int>(getpid()));
}

void notify_stopping() { sd_notify(0, "STOPPING=1\nSTATUS=unmounting"); }

bool pidfile_ok(const std::string& path, std::string* error) {
  if (path.empty() || path.front() != '/') {
    *error = "pidfile=" + path + ": needs an absolute path";
    return false;
  }
  struct stat st;
  std::string dir = dir_of(path);
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = "pidfile=" + path + ": directory " + dir + " does not exist";
    return false;
  }
  return true;
}

bool write_pidfile(const std::string& path, std::string* error) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    *error = "pidfile " + tmp + ": " + common::errstr(errno);
    return false;
  }
  std::string text = std::to_string(getpid()) + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "pidfile " + path + ": " + common::errstr(errno);
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

void remove_pidfile(const std::string& path) {
  if (!path.empty()) unlink(path.c_str());
}

}  // namespace fencefs::daemon
