// Reading process facts: thread group, parent, command, groups, and exact process identity.
// Everything above this layer asks a ProcessInfo, so it can be tested without real processes.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fencefs::proc {

struct Stat {
  pid_t pid = 0;
  pid_t ppid = 0;
  uint64_t start_time = 0;  // clock ticks since boot (10 ms): not an identity, see ProcessInfo
  std::string comm;
  char state = 0;       // R, S, D, T, Z (exited, not yet reaped), ...
  uint32_t flags = 0;   // the kernel's PF_* flags
  uint64_t minflt = 0;  // minor page faults, of every thread the process has had
};

// Thread group and command of a thread, from one read of /proc/TID/status.
struct Identity {
  pid_t tgid = 0;
  std::string comm;
};

// The process facts the fence needs. A handle is an exact reference to one process or thread
// (a pidfd): it never follows a recycled pid, and says when its process has exited.
class ProcessInfo {
 public:
  virtual ~ProcessInfo() = default;
  // Parent (thread group id) and command of a process; nullopt when gone.
  virtual std::optional<Stat> stat(pid_t pid) = 0;
  virtual std::optional<Identity> identity(pid_t tid) = 0;
  virtual std::vector<gid_t> groups(pid_t pid) = 0;
  // A handle on the live process (thread=false) or thread `pid`, or -1 when it is gone.
  virtual int open(pid_t pid, bool thread) = 0;
  // The identity of a handle's process: equal for every handle of one process, different for
  // any other process ever (pidfs inode number). 0 when unknown.
  virtual uint64_t id(int handle) = 0;
  // An id above every process's made so far and at most any later one's: what tells a process's
  // children made before a point from those made after it. 0 when it cannot be had.
  virtual uint64_t id_floor() = 0;
  // True when the process of any of the handles has exited.
  virtual bool any_exited(const int* handles, size_t n) = 0;
  virtual void close(int handle) = 0;
};

// The real one: /proc and pidfds. A process's identity is its pidfs inode, or before Linux 6.9
// (no pidfs) its pid and start time.
ProcessInfo& system();
// The real one as it is before Linux 6.9, for tests on later kernels.
std::unique_ptr<ProcessInfo> system_without_pidfs();

// /proc/PID/stat. nullopt when the process is gone.
std::optional<Stat> read_stat(pid_t pid);
// Thread group id of a thread id (from /proc/TID/status), nullopt when gone.
std::optional<pid_t> tgid_of(pid_t tid);
// Supplementary groups of a process (from /proc/PID/status); none for an io_uring worker.
std::vector<gid_t> groups_of(pid_t pid);
std::string comm_of(pid_t pid);
std::optional<Identity> identity_of(pid_t tid);
// Thread `tid`'s effective capabilities (bit N: capability N) where the kernel counts them; nullopt
// when gone. A thread's standing credentials, not necessarily those a request of it runs with:
// use them only to lower what the daemon does for a caller, never to raise. Neither groups nor
// capabilities count for an io_uring worker: it runs each request with its submitter's
// credentials of the moment, /proc shows its own from when it started. `caps`: those of a thread in
// our user namespace. A thread in one below ours holds `ns_caps` there, and the kernel lets them
// count for a file only when that namespace maps the file's owner and group
// (capable_wrt_inode_uidgid): caps_over() says what counts for one file. The groups come from the
// same read; with_caps=false leaves the capabilities out (0).
struct Credentials {
  struct IdRange {
    uint32_t first = 0, count = 0;  // ids as our namespace counts them
  };
  std::vector<gid_t> groups;
  uint64_t caps = 0;
  uint64_t ns_caps = 0;
  std::vector<IdRange> uid_map, gid_map;
  uint64_t caps_over(uid_t uid, gid_t gid) const;
};
std::optional<Credentials> credentials(pid_t tid, bool with_caps = true);
// credentials(tid)->caps, or 0.
uint64_t effective_caps(pid_t tid);
// Whether thread `tid` holds CAP_SYS_ADMIN in the initial user namespace (the kernel's capable(),
// which hides trusted.* names from everyone else). False when gone or unknown.
bool sys_admin_capable(pid_t tid);

}  // namespace fencefs::proc
