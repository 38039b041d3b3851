// A process table in memory behind proc::ProcessInfo: processes, threads, exits with
// reparenting (to the nearest subreaper ancestor, else init) and pid reuse, for tests of the
// fence without real processes.
#pragma once
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/proc.h"

namespace fencefs::testing {

class FakeProcesses : public proc::ProcessInfo {
 public:
  FakeProcesses() { add(1, 0, 1, "init"); }

  // A new process; pid 0 picks the next free one.
  pid_t spawn(pid_t parent, pid_t pid = 0, std::string comm = "job") {
    std::lock_guard lk(mu_);
    if (pid == 0) {
      do pid = next_pid_++;
      while (tasks_.count(pid));
    }
    add(pid, parent, pid, std::move(comm));
    return pid;
  }
  // A new thread of process tgid.
  pid_t thread(pid_t tgid) {
    std::lock_guard lk(mu_);
    pid_t tid;
    do tid = next_pid_++;
    while (tasks_.count(tid));
    Task& g = tasks_.at(tgid);
    add(tid, g.ppid, tgid, g.comm);
    return tid;
  }
  // The whole thread group exits; its children go to the nearest living subreaper ancestor, else
  // init. Its pid becomes free for reuse.
  void exit(pid_t pid) {
    std::lock_guard lk(mu_);
    pid_t tgid = tasks_.at(pid).tgid;
    pid_t heir = 1;
    for (pid_t a = tasks_.at(tgid).ppid; a > 1 && tasks_.count(a); a = tasks_.at(a).ppid)
      if (tasks_.at(a).subreaper) {
        heir = a;
        break;
      }
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if (it->second.tgid == tgid) {
        it = tasks_.erase(it);
        continue;
      }
      if (it->second.ppid == tgid) it->second.ppid = heir;
      ++it;
    }
  }
  void set_subreaper(pid_t pid) {
    std::lock_guard lk(mu_);
    tasks_.at(pid).subreaper = true;
  }
  void set_groups(pid_t pid, std::vector<gid_t> g) {
    std::lock_guard lk(mu_);
    tasks_.at(pid).groups = std::move(g);
  }
  size_t identity_reads() const {  // identity() calls: /proc reads in the real one
    std::lock_guard lk(mu_);
    return identity_reads_;
  }
  size_t open_handles() const {
    std::lock_guard lk(mu_);
    return handles_.size();
  }

  std::optional<proc::Stat> stat(pid_t pid) override {
    std::lock_guard lk(mu_);
    auto it = tasks_.find(pid);
    if (it == tasks_.end()) return std::nullopt;
    return proc::Stat{pid, it->second.ppid, 0, it->second.comm};
  }
  std::optional<proc::Identity> identity(pid_t tid) override {
    std::lock_guard lk(mu_);
    identity_reads_++;
    auto it = tasks_.find(tid);
    if (it == tasks_.end()) return std::nullopt;
    return proc::Identity{it->second.tgid, it->second.comm};
  }
  std::vector<gid_t> groups(pid_t pid) override {
    std::lock_guard lk(mu_);
    auto it = tasks_.find(pid);
    return it == tasks_.end() ? std::vector<gid_t>{} : it->second.groups;
  }
  int open(pid_t pid, bool thread) override {
    std::lock_guard lk(mu_);
    auto it = tasks_.find(pid);
    if (it == tasks_.end()) return -1;
    if (!thread && it->second.tgid != pid) return -1;  // not a process
    int h = next_handle_++;
    handles_[h] = it->second.id;
    return h;
  }
  uint64_t id(int handle) override {
    std::lock_guard lk(mu_);
    auto it = handles_.find(handle);
    return it == handles_.end() ? 0 : it->second;
  }
  uint64_t id_floor() override {
    std::lock_guard lk(mu_);
    floor_calls_++;
    return floor_fails_ ? 0 : next_id_;
  }
  void fail_floor(bool fail) {  // as when no thread can be made
    std::lock_guard lk(mu_);
    floor_fails_ = fail;
  }
  size_t floor_calls() const {
    std::lock_guard lk(mu_);
    return floor_calls_;
  }
  bool any_exited(const int* handles, size_t n) override {
    std::lock_guard lk(mu_);
    for (size_t k = 0; k < n; k++) {
      auto it = handles_.find(handles[k]);
      if (it == handles_.end()) return true;
      bool live = std::any_of(tasks_.begin(), tasks_.end(),
                              [&](auto& t) { return t.second.id == it->second; });
      if (!live) return true;
    }
    return false;
  }
  void close(int handle) override {
    std::lock_guard lk(mu_);
    handles_.erase(handle);
  }

 private:
  struct Task {
    pid_t ppid = 0;
    pid_t tgid = 0;
    uint64_t id = 0;  // unique forever, like a pidfs inode
    std::string comm;
    std::vector<gid_t> groups;
    bool subreaper = false;
  };
  void add(pid_t pid, pid_t ppid, pid_t tgid, std::string comm) {
    Task t;
    t.ppid = ppid;
    t.tgid = tgid;
    t.id = next_id_++;
    t.comm = std::move(comm);
    tasks_[pid] = std::move(t);
  }
  mutable std::mutex mu_;
  std::map<pid_t, Task> tasks_;
  std::map<int, uint64_t> handles_;
  size_t identity_reads_ = 0;
  size_t floor_calls_ = 0;
  bool floor_fails_ = false;
  pid_t next_pid_ = 100;
  int next_handle_ = 1000;
  uint64_t next_id_ = 1;
};

}  // namespace fencefs::testing
