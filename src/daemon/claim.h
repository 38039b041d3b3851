// One daemon per backing and per state directory, unless a cluster coordinates them.
//
// Two records, both taken before the state is opened:
//  - STATE/lock: an exclusive OFD lock held for the daemon's lifetime (same state directory);
//  - BACKING/.fencefs/owner: an OFD lock plus a marker naming host, boot, pid, mountpoint and
//    state, left in place by a crash, so that a mount from another host, whose locks may not
//    reach this one, still finds it. Cluster members mark it with their cluster's name instead
//    (left in place: members on other hosts may still serve it), so that neither a daemon
//    outside the cluster nor another cluster's member mounts it unknowingly.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace fencefs::daemon {

// Who holds (or last held) a backing, as written in the marker.
struct Owner {
  std::string host;
  std::string machine_id;  // /etc/machine-id: tells machines of one host name apart
  std::string boot_id;
  pid_t pid = 0;
  uint64_t start_time = 0;  // /proc/PID/stat field 22: with pid, one process
  std::string mountpoint;
  std::string state;
  std::string since;    // UTC, ISO 8601
  std::string cluster;  // set in a cluster member's marker: the backing is the cluster's

  std::string encode() const;
  static std::optional<Owner> decode(const std::string& text);
  std::string describe() const;  // "pid 12 on host h, mounted at /m (state /s) since T"
};

// This process's identity, as a marker would name it.
Owner self_owner(const std::string& mountpoint, const std::string& state);

// Who serves BACKING now, when a daemon holds its owner file's lock; "" otherwise. Only reads:
// for refusals that come before the claim, which must leave no trace. ours_only: an owner file
// only root or this daemon's user owns counts (in a directory others may write, such as /tmp,
// anyone could make and lock one).
std::string served_by(const std::string& backing, bool ours_only = false);

class Claim {
 public:
  struct Request {
    std::string backing;
    std::string state;
    std::string mountpoint;
    bool takeover = false;  // a marker naming another host is stale (that host is down)
    // Cluster mode: the cluster's name. Members share the backing; only the state is ours.
    std::string cluster;
  };
  // Takes both locks and checks the marker. On refusal returns null with the reason in *error;
  // anything it created is removed again.
  static std::unique_ptr<Claim> take(const Request& req, std::string* error);
  ~Claim();
  Claim(const Claim&) = delete;
  Claim& operator=(const Claim&) = delete;

  // Writes the marker naming this process (call again after a fork changed the pid).
  bool publish(std::string* error);
  // A clean unmount: at destruction the marker is emptied (the backing is free) and the locks
  // drop, the state lock last. Destroy the claim after everything that writes to the state.
  void release_at_exit();
  // The mount failed: removes the files and directory the claim created.
  void abandon();
  // What the marker said before this claim (a crashed or taken-over owner), if anything.
  const std::optional<Owner>& previous() const { return previous_; }
  // The state directory as checked (O_RDONLY): its files are reached through this, not its path.
  int state_dir_fd() const { return state_dir_fd_; }

 private:
  Claim() = default;
  bool check_marker(const std::string& text, std::string* error);
  bool write_shared_marker(std::string* error);  // a cluster member's marker naming this process
  Request req_;
  int state_dir_fd_ = -1;
  int state_fd_ = -1;  // the state lock
  int owner_fd_ = -1;
  int shared_owner_fd_ = -1;    // cluster mode: a read lock on the backing's owner file
  int marker_dir_fd_ = -1;      // BACKING/.fencefs, opened without following a link
  int root_lock_fd_ = -1;       // /run/fencefs/backing-DEV-INO.lock (-1 where it cannot be made)
  std::string root_lock_name_;  // its name in /run/fencefs
  bool created_state_lock_ = false;
  bool released_ = false;
  bool created_owner_ = false;
  bool created_marker_dir_ = false;
  std::optional<Owner> previous_;
  std::string previous_text_;  // the marker as found, restored by abandon()
  std::string written_text_;   // the cluster marker this claim wrote (empty: none)
};

}  // namespace fencefs::daemon
