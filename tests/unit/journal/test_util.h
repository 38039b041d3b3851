// Helpers shared by the journal tests.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "journal/file_layer.h"
#include "journal/journal.h"

namespace fencefs::journal::testing {

// A fresh directory under $TMPDIR (else /dev/shm when present, else /tmp), removed at the end of
// the test. tmpfs keeps the thousands of small rewrites fast (ext4 flushes on rename-over).
class TempDir {
 public:
  TempDir() {
    const char* env = getenv("TMPDIR");
    std::string base = env != nullptr && *env != 0                 ? env
                       : std::filesystem::is_directory("/dev/shm") ? "/dev/shm"
                                                                   : "/tmp";
    std::string tmpl = base + "/fencefs-journal-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string state() const { return path_ + "/state"; }

 private:
  std::string path_;
};

// The real file layer without fsync: these tests check formats and logic, not the disk, and the
// fault-injection layer simulates durability where it matters.
class NoSyncLayer : public FileLayer {
 public:
  int read_file(const std::string& path, std::string* out) override {
    return posix_file_layer().read_file(path, out);
  }
  std::unique_ptr<File> open_append(const std::string& path, bool truncate, int* err) override {
    auto f = posix_file_layer().open_append(path, truncate, err);
    if (f == nullptr) return nullptr;
    return std::make_unique<NoSyncFile>(std::move(f));
  }
  int rename(const std::string& from, const std::string& to) override {
    return posix_file_layer().rename(from, to);
  }
  int sync_dir(const std::string&) override { return 0; }
  int remove(const std::string& path) override { return posix_file_layer().remove(path); }
  int mkdir(const std::string& path) override { return posix_file_layer().mkdir(path); }
  bool exists(const std::string& path) override { return posix_file_layer().exists(path); }

 private:
  class NoSyncFile : public File {
   public:
    explicit NoSyncFile(std::unique_ptr<File> f) : f_(std::move(f)) {}
    int append(const void* data, size_t len) override { return f_->append(data, len); }
    int sync() override { return 0; }
    int close() override { return f_->close(); }

   private:
    std::unique_ptr<File> f_;
  };
};

// NoSyncLayer whose journal syncs wait while the gate is shut: a test holds a record between
// "queued" and "durable" for as long as it needs. Only files opened after shut() are gated.
class GatedSyncLayer : public NoSyncLayer {
 public:
  std::unique_ptr<File> open_append(const std::string& path, bool truncate, int* err) override {
    auto f = NoSyncLayer::open_append(path, truncate, err);
    if (f == nullptr) return nullptr;
    return std::make_unique<GatedFile>(std::move(f), *this);
  }
  void shut() {
    std::lock_guard lk(mu_);
    shut_ = true;
  }
  void open() {
    {
      std::lock_guard lk(mu_);
      shut_ = false;
    }
    cv_.notify_all();
  }
  // Lets n syncs through the shut gate.
  void pass(int n) {
    {
      std::lock_guard lk(mu_);
      passes_ += n;
    }
    cv_.notify_all();
  }
  // Waits until n syncs in all have reached the gate (passed or waiting).
  void await_syncs(int n) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return entered_ >= n; });
  }
  int syncs_entered() {
    std::lock_guard lk(mu_);
    return entered_;
  }

 private:
  class GatedFile : public File {
   public:
    GatedFile(std::unique_ptr<File> f, GatedSyncLayer& l) : f_(std::move(f)), l_(l) {}
    int append(const void* data, size_t len) override { return f_->append(data, len); }
    int sync() override {
      std::unique_lock lk(l_.mu_);
      l_.entered_++;
      l_.cv_.notify_all();
      l_.cv_.wait(lk, [&] { return !l_.shut_ || l_.passes_ > 0; });
      if (l_.shut_) l_.passes_--;
      return f_->sync();
    }
    int close() override { return f_->close(); }

   private:
    std::unique_ptr<File> f_;
    GatedSyncLayer& l_;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  bool shut_ = false;
  int entered_ = 0;
  int passes_ = 0;
};

inline std::string read_bytes(const std::string& path) {
  std::string out;
  EXPECT_EQ(posix_file_layer().read_file(path, &out), 0) << path;
  return out;
}

inline void write_bytes(const std::string& path, const std::string& data) {
  int err = 0;
  auto f = posix_file_layer().open_append(path, true, &err);
  ASSERT_NE(f, nullptr) << path << ": " << err;
  ASSERT_EQ(f->append(data.data(), data.size()), 0);
  ASSERT_EQ(f->close(), 0);
}

inline std::unique_ptr<StateStore> create_store(const std::string& dir, FileLayer& fs,
                                                uint64_t threshold = 4u << 20) {
  Options o;
  o.create_if_missing = true;
  o.compact_threshold_bytes = threshold;
  std::string err;
  auto s = StateStore::open(dir, o, fs, &err);
  EXPECT_NE(s, nullptr) << err;
  return s;
}

inline std::unique_ptr<StateStore> reopen(const std::string& dir, FileLayer& fs,
                                          std::string* err = nullptr,
                                          uint64_t threshold = 4u << 20) {
  Options o;
  o.compact_threshold_bytes = threshold;
  std::string e;
  auto s = StateStore::open(dir, o, fs, &e);
  if (err != nullptr) *err = e;
  return s;
}

// id -> (path, epoch), for whole-state comparisons.
using StateMap = std::map<uint32_t, std::pair<std::string, uint64_t>>;

inline StateMap state_of(const std::vector<DomainRecord>& domains) {
  StateMap m;
  for (const auto& d : domains) m[d.id] = {d.path, d.epoch};
  return m;
}

inline StateMap state_of(const StateStore& s) { return state_of(s.domains()); }

}  // namespace fencefs::journal::testing
