// The daemon's life under a service manager: signals, readiness, pid file.
#pragma once
#include <sys/types.h>

#include <string>

namespace fencefs::daemon {

// Opens /dev/null on whichever of stdin, stdout and stderr is closed, first thing: a file the
// daemon opens later must not take their place, which detaching points at /dev/null (the state
// lock would be dropped with it). Also takes SIGCHLD back to its default.
void keep_standard_fds_open();

// Signals. SIGTERM and SIGINT end the session: a handler records the first and calls `stop`,
// whichever thread it reaches (stop_on_signals); the same signal again has the default action. The
// others are taken by a thread instead, so none of them can end the daemon: SIGHUP reopens the log
// file, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGXCPU and SIGXFSZ are logged and
// ignored. Both run first thing, before any other thread starts: threads inherit the mask, set
// to exactly those (a SIGTERM blocked and pending from the parent is taken then, by the handler).
void block_handled_signals();
// From now on SIGTERM and SIGINT (unless inherited ignored) call `stop`, async-signal-safe, and
// SIGPIPE is ignored.
void stop_on_signals(void (*stop)());
// The stop signal received (0: none) and its sender.
int stop_signal(pid_t* from);
void start_signal_thread();

// sd_notify(3): no-ops unless started by a service manager (NOTIFY_SOCKET set).
void notify_ready(const std::string& status);
void notify_stopping();

// Checks that a pid file could be written at PATH (its directory exists) without creating it.
bool pidfile_ok(const std::string& path, std::string* error);
// Writes the pid atomically (a temporary file renamed over PATH); remove_pidfile() at exit.
bool write_pidfile(const std::string& path, std::string* error);
void remove_pidfile(const std::string& path);

}  // namespace fencefs::daemon
