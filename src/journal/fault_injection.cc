#include "journal/fault_injection.h"

#include <algorithm>
#include <cerrno>

namespace fencefs::journal {
namespace {

std::string strip(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string parent_of(const std::string& path) {
  std::string p = strip(path);
  size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return strip(p.substr(0, slash));
}

uint64_t next_random(uint64_t* state) {  // splitmix64: deterministic, good enough for tests
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

class FaultInjectionFileLayer::FaultFile : public File {
 public:
  FaultFile(FaultInjectionFileLayer* fs, std::unique_ptr<File> base, uint64_t inode, uint64_t epoch)
      : fs_(fs), base_(std::move(base)), inode_(inode), epoch_(epoch) {}

  int append(const void* data, size_t len) override {
    std::lock_guard<std::mutex> lock(fs_->mu_);
    if (epoch_ != fs_->handle_epoch_ || !fs_->tick()) return EIO;
    int rc = base_->append(data, len);
    auto it = fs_->inodes_.find(inode_);
    if (rc == 0 && it != fs_->inodes_.end()) it->second.size += len;
    return rc;
  }

  int reserve(uint64_t end) override { return base_->reserve(end); }

  int sync() override {
    std::lock_guard<std::mutex> lock(fs_->mu_);
    if (epoch_ != fs_->handle_epoch_ || !fs_->tick()) return EIO;
    auto it = fs_->inodes_.find(inode_);
    if (fs_->fail_all_syncs_ || fs_->fail_next_syncs_ > 0) {
      if (fs_->fail_next_syncs_ > 0) fs_->fail_next_syncs_--;
      if (it != fs_->inodes_.end() && it->second.size > it->second.synced) {
        it->second.lost.emplace_back(it->second.synced, it->second.size);
      }
      return EIO;
    }
    if (fs_->forward_syncs_) {
      int rc = base_->sync();
      if (rc != 0) return rc;
    }
    if (it != fs_->inodes_.end()) it->second.synced = it->second.size;
    fs_->syncs_++;
    return 0;
  }

  int close() override { return base_->close(); }

 private:
  FaultInjectionFileLayer* fs_;
  std::unique_ptr<File> base_;
  uint64_t inode_;
  uint64_t epoch_;
};

FaultInjectionFileLayer::FaultInjectionFileLayer(FileLayer& base, bool forward_syncs)
    : base_(base), forward_syncs_(forward_syncs) {}

FaultInjectionFileLayer::~FaultInjectionFileLayer() = default;

bool FaultInjectionFileLayer::tick() {
  if (crashed_) return false;
  ops_++;
  if (crash_countdown_ == 0) {
    crashed_ = true;
    return false;
  }
  if (crash_countdown_ > 0) crash_countdown_--;
  return true;
}

uint64_t FaultInjectionFileLayer::new_inode(uint64_t size, uint64_t synced) {
  uint64_t id = next_inode_++;
  Inode& ino = inodes_[id];
  ino.size = size;
  ino.synced = synced;
  return id;
}

// Files that exist before the layer first sees them count as durable.
void FaultInjectionFileLayer::learn(const std::string& path) {
  if (!known_.insert(path).second) return;
  std::string data;
  if (base_.read_file(path, &data) != 0) return;
  uint64_t id = new_inode(data.size(), data.size());
  live_[path] = id;
  durable_[path] = id;
}

// A durably named file is about to lose its live name: keep its contents for drop_unsynced().
void FaultInjectionFileLayer::stash_if_durable(uint64_t id, const std::string& live_path) {
  Inode& ino = inodes_[id];
  if (ino.stashed) return;
  bool durable = false;
  for (const auto& [p, d] : durable_) durable = durable || d == id;
  if (!durable) return;
  ino.stash.clear();
  base_.read_file(live_path, &ino.stash);
  ino.stashed = true;
}

bool FaultInjectionFileLayer::under_new_dir(const std::string& path) const {
  for (const auto& d : new_dirs_) {
    if (path.size() > d.size() && path.compare(0, d.size(), d) == 0 && path[d.size()] == '/') {
      return true;
    }
  }
  return false;
}

void FaultInjectionFileLayer::collect_garbage() {
  std::set<uint64_t> used;
  for (const auto& [p, id] : live_) used.insert(id);
  for (const auto& [p, id] : durable_) used.insert(id);
  for (auto it = inodes_.begin(); it != inodes_.end();) {
    it = used.count(it->first) ? std::next(it) : inodes_.erase(it);
  }
}

int FaultInjectionFileLayer::read_file(const std::string& path, std::string* out) {
  std::lock_guard<std::mutex> lock(mu_);
  learn(path);
  return base_.read_file(path, out);
}

std::unique_ptr<File> FaultInjectionFileLayer::open_append(const std::string& path, bool truncate,
                                                           int* err) {
  std::lock_guard<std::mutex> lock(mu_);
  learn(path);
  if (!tick()) {
    if (err != nullptr) *err = EIO;
    return nullptr;
  }
  auto live = live_.find(path);
  // O_TRUNC is modelled as replacing the file: the old contents survive a power loss only if the
  // new name has not been made durable (sync_dir) yet.
  if (truncate && live != live_.end()) stash_if_durable(live->second, path);
  std::unique_ptr<File> f = base_.open_append(path, truncate, err);
  if (f == nullptr) return nullptr;
  uint64_t id;
  if (truncate || live == live_.end()) {
    id = new_inode(0, 0);
    live_[path] = id;
  } else {
    id = live->second;
  }
  return std::make_unique<FaultFile>(this, std::move(f), id, handle_epoch_);
}

int FaultInjectionFileLayer::rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  learn(from);
  learn(to);
  if (!tick()) return EIO;
  auto target = live_.find(to);
  if (target != live_.end()) stash_if_durable(target->second, to);
  int rc = base_.rename(from, to);
  if (rc != 0) return rc;
  auto src = live_.find(from);
  if (src != live_.end()) {
    uint64_t id = src->second;
    live_.erase(src);
    live_[to] = id;
  } else {
    live_.erase(to);
  }
  return 0;
}

int FaultInjectionFileLayer::sync_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tick()) return EIO;
  if (forward_syncs_) {
    int rc = base_.sync_dir(dir);
    if (rc != 0) return rc;
  }
  const std::string d = strip(dir);
  for (const auto& p : known_) {
    if (parent_of(p) != d) continue;
    auto it = live_.find(p);
    if (it != live_.end()) {
      durable_[p] = it->second;
    } else {
      durable_.erase(p);
    }
  }
  for (auto it = new_dirs_.begin(); it != new_dirs_.end();) {
    it = parent_of(*it) == d ? new_dirs_.erase(it) : std::next(it);
  }
  collect_garbage();
  return 0;
}

int FaultInjectionFileLayer::remove(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  learn(path);
  if (!tick()) return EIO;
  auto it = live_.find(path);
  if (it != live_.end()) stash_if_durable(it->second, path);
  int rc = base_.remove(path);
  if (rc != 0) return rc;
  live_.erase(path);
  new_dirs_.erase(strip(path));
  return 0;
}

int FaultInjectionFileLayer::mkdir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tick()) return EIO;
  int rc = base_.mkdir(path);
  if (rc == 0) new_dirs_.insert(strip(path));
  return rc;
}

bool FaultInjectionFileLayer::exists(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return base_.exists(path);
}

void FaultInjectionFileLayer::drop_unsynced() {
  std::lock_guard<std::mutex> lock(mu_);
  // 1. What survives: every durable name, with its inode's synced bytes.
  std::map<std::string, std::string> image;
  for (const auto& [path, id] : durable_) {
    if (under_new_dir(path)) continue;  // the directory itself does not survive
    const Inode& ino = inodes_[id];
    std::string data;
    if (ino.stashed) {
      data = ino.stash;
    } else {
      for (const auto& [p, live_id] : live_) {
        if (live_id == id) {
          base_.read_file(p, &data);
          break;
        }
      }
    }
    uint64_t keep = ino.synced;
    bool zero_tail = false;
    if (torn_writes_ && data.size() > ino.synced) {
      keep += next_random(&torn_state_) % (data.size() - ino.synced + 1);
      zero_tail = next_random(&torn_state_) % 3 == 0;
    }
    if (data.size() > keep) data.resize(keep);
    for (uint64_t i = ino.synced; zero_tail && i < data.size(); ++i) data[i] = 0;
    // Pages whose sync failed but that a later successful sync "covered" were dropped.
    for (const auto& [from, to] : ino.lost) {
      for (uint64_t i = from; i < to && i < ino.synced && i < data.size(); ++i) data[i] = 0;
    }
    image[path] = std::move(data);
  }
  // 2. Wipe the current names and the directories that were never made durable.
  for (const auto& [path, id] : live_) base_.remove(path);
  for (auto it = new_dirs_.rbegin(); it != new_dirs_.rend(); ++it) base_.remove(*it);
  // 3. Put the durable image back.
  for (const auto& [path, data] : image) {
    int err = 0;
    std::unique_ptr<File> f = base_.open_append(path, true, &err);
    if (f == nullptr) continue;
    f->append(data.data(), data.size());
    if (forward_syncs_) f->sync();
    f->close();
  }
  // 4. After the reboot everything on disk is durable.
  inodes_.clear();
  live_.clear();
  durable_.clear();
  new_dirs_.clear();
  for (const auto& [path, data] : image) {
    uint64_t id = new_inode(data.size(), data.size());
    live_[path] = id;
    durable_[path] = id;
  }
  handle_epoch_++;
  fail_all_syncs_ = false;
  fail_next_syncs_ = 0;
  crash_countdown_ = -1;
  crashed_ = false;
}

void FaultInjectionFileLayer::set_torn_writes(bool on, uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  torn_writes_ = on;
  torn_state_ = seed;
}

void FaultInjectionFileLayer::fail_syncs(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_all_syncs_ = on;
}

void FaultInjectionFileLayer::fail_next_sync(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_next_syncs_ = n;
}

void FaultInjectionFileLayer::crash_after(int64_t ops) {
  std::lock_guard<std::mutex> lock(mu_);
  crash_countdown_ = ops;
  if (ops < 0) crashed_ = false;
}

bool FaultInjectionFileLayer::crashed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return crashed_;
}

void FaultInjectionFileLayer::clear_faults() {
  std::lock_guard<std::mutex> lock(mu_);
  fail_all_syncs_ = false;
  fail_next_syncs_ = 0;
  crash_countdown_ = -1;
  crashed_ = false;
}

uint64_t FaultInjectionFileLayer::syncs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return syncs_;
}

uint64_t FaultInjectionFileLayer::mutating_ops() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_;
}

}  // namespace fencefs::journal
