// A FileLayer that simulates power loss, failed fsyncs and process crashes, for tests (in the
// manner of RocksDB's FaultInjectionTestFS). It wraps a real layer and keeps a model of what is
// durable:
//  - file data: the length at the last successful File::sync (appends after it are volatile);
//  - names: a file created or renamed (and a directory made by mkdir) is durable only once its
//    parent directory has been synced with sync_dir; until then a power loss undoes it, and a
//    file replaced by a rename (or removed) comes back with its durable contents.
// drop_unsynced() applies that model to the real files (power loss + reboot). Deterministic: the
// surviving state depends only on the sequence of calls.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "journal/file_layer.h"

namespace fencefs::journal {

class FaultInjectionFileLayer : public FileLayer {
 public:
  // forward_syncs=false does not pass sync/sync_dir to `base` (durability is only simulated, which
  // keeps tests fast); drop_unsynced() behaves the same either way.
  explicit FaultInjectionFileLayer(FileLayer& base, bool forward_syncs = true);
  ~FaultInjectionFileLayer() override;

  int read_file(const std::string& path, std::string* out) override;
  std::unique_ptr<File> open_append(const std::string& path, bool truncate, int* err) override;
  int rename(const std::string& from, const std::string& to) override;
  int sync_dir(const std::string& dir) override;
  int remove(const std::string& path) override;
  int mkdir(const std::string& path) override;
  bool exists(const std::string& path) override;

  // Power loss and reboot: every file goes back to its durable contents, undurable names are
  // undone, files opened before become unusable (EIO), and all injected faults are cleared.
  // Stop the code under test first (destroy the store, join its threads).
  void drop_unsynced();

  // Torn writes: from now on drop_unsynced() keeps a pseudo-random prefix (chosen from `seed`) of
  // each file's unsynced bytes instead of none, and zeroes the kept part one time in three (the
  // size reached the disk, the data blocks did not). Off by default: unsynced bytes are all lost.
  void set_torn_writes(bool on, uint64_t seed = 0);

  // File::sync returns EIO while on; the data it should have synced stays volatile. As on Linux,
  // a failed fsync may drop the dirty data: if a later sync succeeds, drop_unsynced() zeroes the
  // bytes whose sync failed instead of keeping them (so "retry the fsync and trust it" shows).
  void fail_syncs(bool on);
  // The next n File::sync calls fail as above.
  void fail_next_sync(int n);
  // Crash point: after `ops` more mutating operations (open_append, append, sync, rename,
  // sync_dir, remove, mkdir), every mutating operation fails with EIO without any effect, as if the
  // process had died. Negative: never. drop_unsynced() clears it.
  void crash_after(int64_t ops);
  bool crashed() const;
  void clear_faults();

  uint64_t syncs() const;         // successful File::sync calls
  uint64_t mutating_ops() const;  // mutating operations attempted

 private:
  class FaultFile;
  struct Inode {
    uint64_t size = 0;
    uint64_t synced = 0;
    std::vector<std::pair<uint64_t, uint64_t>> lost;  // ranges whose sync failed
    bool stashed = false;  // replaced or removed while durably named: contents kept here
    std::string stash;
  };

  bool tick();  // counts a mutating operation; false when it must fail (crashed)
  void learn(const std::string& path);
  uint64_t new_inode(uint64_t size, uint64_t synced);
  void stash_if_durable(uint64_t id, const std::string& live_path);
  bool under_new_dir(const std::string& path) const;
  void collect_garbage();

  FileLayer& base_;
  const bool forward_syncs_;
  mutable std::mutex mu_;
  std::set<std::string> known_;
  std::map<std::string, uint64_t> live_;     // current names
  std::map<std::string, uint64_t> durable_;  // names that survive a power loss
  std::map<uint64_t, Inode> inodes_;
  std::set<std::string> new_dirs_;  // made by mkdir, parent not yet synced
  uint64_t next_inode_ = 1;
  uint64_t handle_epoch_ = 0;  // bumped by drop_unsynced to kill old handles
  bool torn_writes_ = false;
  uint64_t torn_state_ = 0;  // splitmix64 state
  bool fail_all_syncs_ = false;
  int fail_next_syncs_ = 0;
  int64_t crash_countdown_ = -1;
  bool crashed_ = false;
  uint64_t syncs_ = 0;
  uint64_t ops_ = 0;
};

}  // namespace fencefs::journal
