// Data integrity: a seeded, reproducible random exerciser in the manner of fsx.
//
// One file per seed, driven through three handles (O_RDWR, O_WRONLY|O_APPEND, O_RDONLY) with
// random writes, O_APPEND writes, truncates that grow and shrink (ftruncate and truncate(2)),
// fallocate (default, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE), reads through pread on either handle and
// through read-only MAP_SHARED and MAP_PRIVATE mappings, fsync and reopen. After every operation
// the affected range (with margins) and the size are read back and compared with an in-memory
// model; every 64 operations and at the end the whole file is compared. The same seed also runs on
// a plain directory, which proves the model (and the final bytes must then be identical).
// FsxMapTest: a quarter of the operations also read through a shared mapping of the O_RDWR handle
// (as fsx -W), and in a second run also write through a shared writable one (then msync, or munmap
// alone), 20,000 operations each.
//
// Reproduce one seed: FENCEFS_FSX_SEED=<seed> [FENCEFS_FSX_OPS=<n>] build/fsx_test
//   --gtest_filter='*seed1'   (the env var overrides the seed of whichever case runs)
// FENCEFS_CONF_SELFTEST=1 runs both sides on plain directories (checks the exerciser itself).
// A failure prints the seed, the operation number and the last 25 operations.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "integration/mount_fixture.h"

namespace fencefs::fsx {
namespace {

constexpr const char* kToken = "7";  // the current epoch once the first write lands

bool selftest_mode() {
  const char* v = std::getenv("FENCEFS_CONF_SELFTEST");
  return v && *v && std::string(v) != "0";
}

std::string errname(int err) {
  const char* n = strerrorname_np(err);
  return n ? std::string(n) : "errno" + std::to_string(err);
}

constexpr size_t kMaxLen = 256 * 1024;  // file size ceiling, as fsx's default
constexpr size_t kMaxIo = 64 * 1024;

int ops_per_seed() {
  if (const char* v = std::getenv("FENCEFS_FSX_OPS")) return std::max(1, atoi(v));
#if defined(__SANITIZE_ADDRESS__)
  return 3000;  // the sanitizer pass: about 45 s instead of 2.5 min, same seeds
#else
  return 10000;  // about 35 s for all seeds on this machine
#endif
}

class Fsx {
 public:
  // maps 1: a quarter of the operations read through a shared mapping of the O_RDWR handle (fsx
  // -W); maps 2: they also write through a shared writable one (msync or munmap), as fsx does
  // unless told -R / -W.
  // write through one (msync or munmap), as fsx does unless told -R / -W.
  Fsx(std::string path, uint64_t seed, int nops, int maps = 0)
      : path_(std::move(path)), seed_(seed), nops_(nops), maps_(maps), rng_(seed) {}
  ~Fsx() { close_all(); }

  // "" on success, else a report.
  std::string run() {
    int fd = ::open(path_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644);
    if (fd < 0) return fail("create " + path_ + ": " + errname(errno));
    ::close(fd);
    if (!open_all()) return report_;
    for (op_ = 0; op_ < nops_; op_++) {
      if (!step()) return report_;
      if (op_ % 64 == 63 && !verify_all("periodic full check")) return report_;
    }
    if (!verify_all("final full check (pread)")) return report_;
    if (!verify_mmap_all()) return report_;
    close_all();
    if (!open_all() || !verify_all("final full check after reopen")) return report_;
    return "";
  }
  const std::string& model() const { return model_; }
  std::string stats() const {
    std::ostringstream s;
    s << "ops=" << nops_ << " size=" << model_.size() << " counts:";
    for (auto& [k, v] : counts_) s << " " << k << "=" << v;
    return s.str();
  }

 private:
  uint64_t rnd(uint64_t n) { return n ? rng_() % n : 0; }

  std::string fail(const std::string& what) {
    std::ostringstream s;
    s << "fsx FAILED: seed=" << seed_ << " op=" << op_ << " (of " << nops_ << "): " << what
      << "\nreproduce: FENCEFS_FSX_SEED=" << seed_ << " FENCEFS_FSX_OPS=" << nops_
      << " build/fsx_test --gtest_filter='*seed1'\nlast operations:\n";
    for (auto& l : log_) s << "  " << l << "\n";
    report_ = s.str();
    return report_;
  }

  void logop(const std::string& s) {
    log_.push_back("#" + std::to_string(op_) + " " + s +
                   "  (size before: " + std::to_string(model_.size()) + ")");
    if (log_.size() > 25) log_.pop_front();
    counts_[s.substr(0, s.find(' '))]++;
  }

  bool open_all() {
    rw_ = ::open(path_.c_str(), O_RDWR);
    app_ = ::open(path_.c_str(), O_WRONLY | O_APPEND);
    ro_ = ::open(path_.c_str(), O_RDONLY);
    if (rw_ < 0 || app_ < 0 || ro_ < 0) {
      fail("open handles: " + errname(errno));
      return false;
    }
    return true;
  }
  void close_all() {
    for (int* fd : {&rw_, &app_, &ro_}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  std::string random_bytes(size_t n) {
    std::string s(n, '\0');
    uint64_t v = rng_();
    for (size_t i = 0; i < n; i++) {
      if (i % 8 == 0) v = v * 6364136223846793005ull + 1442695040888963407ull;
      s[i] = static_cast<char>(v >> ((i % 8) * 8));
      if (s[i] == 0) s[i] = 1;  // keep written data distinguishable from holes
    }
    return s;
  }

  bool check_size(const char* after) {
    struct stat st;
    int fd = rnd(2) ? rw_ : ro_;
    if (::fstat(fd, &st) != 0) {
      fail(std::string("fstat after ") + after + ": " + errname(errno));
      return false;
    }
    if (static_cast<size_t>(st.st_size) != model_.size()) {
      fail(std::string("size after ") + after + ": file " + std::to_string(st.st_size) +
           ", model " + std::to_string(model_.size()));
      return false;
    }
    return true;
  }

  bool compare(const std::string& got, size_t off, const std::string& how) {
    size_t want_len = off >= model_.size() ? 0 : std::min(got.size() + 0, model_.size() - off);
    std::string_view want(model_.data() + std::min(off, model_.size()), want_len);
    if (got == want) return true;
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) i++;
    std::ostringstream s;
    s << how << ": mismatch at file offset " << off + i << " (read " << got.size() << " bytes at "
      << off << ", expected " << want.size() << ")";
    auto hexdump = [&](std::string_view v) {
      std::ostringstream h;
      for (size_t k = i; k < v.size() && k < i + 16; k++) {
        char b[4];
        snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(v[k]));
        h << b << ' ';
      }
      return h.str();
    };
    s << "\n    file : " << hexdump(got) << "\n    model: " << hexdump(want);
    fail(s.str());
    return false;
  }

  bool verify_range(size_t off, size_t len, const std::string& how) {
    int fd = rnd(2) ? rw_ : ro_;
    std::string got(len, '\0');
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(fd, got.data() + done, len - done, off + done);
      if (n < 0) {
        fail(how + ": pread: " + errname(errno));
        return false;
      }
      if (n == 0) break;
      done += n;
    }
    got.resize(done);
    return compare(got, off, how + (fd == rw_ ? " via rw handle" : " via ro handle"));
  }

  bool verify_all(const std::string& how) {
    if (!check_size(how.c_str())) return false;
    return verify_range(0, model_.size() + 4096, how);
  }

  bool verify_around(size_t off, size_t len, const std::string& how) {
    if (!check_size(how.c_str())) return false;
    size_t lo = off > 4096 ? off - 4096 : 0;
    size_t hi = off + len + 4096;
    return verify_range(lo, hi - lo, "read-back after " + how);
  }

  bool mmap_check(size_t off, size_t len, bool priv) {
    if (model_.empty()) return true;
    void* m = ::mmap(nullptr, model_.size(), PROT_READ, priv ? MAP_PRIVATE : MAP_SHARED, ro_, 0);
    if (m == MAP_FAILED) {
      fail(std::string("mmap ") + (priv ? "MAP_PRIVATE" : "MAP_SHARED") +
           " PROT_READ: " + errname(errno));
      return false;
    }
    off = std::min(off, model_.size());
    len = std::min(len, model_.size() - off);
    std::string got(static_cast<char*>(m) + off, len);
    ::munmap(m, model_.size());
    return compare(got, off,
                   std::string("mmap read (") + (priv ? "MAP_PRIVATE" : "MAP_SHARED") + ")");
  }

  bool verify_mmap_all() {
    return mmap_check(0, model_.size(), false) && mmap_check(0, model_.size(), true);
  }

  // Reads a range through a shared mapping of the writable handle.
  bool mapread_rw(size_t off, size_t len) {
    logop("mapread_rw off=" + std::to_string(off) + " len=" + std::to_string(len));
    if (model_.empty()) return true;
    void* m = ::mmap(nullptr, model_.size(), PROT_READ, MAP_SHARED, rw_, 0);
    if (m == MAP_FAILED) {
      fail("mmap MAP_SHARED PROT_READ of the O_RDWR handle: " + errname(errno));
      return false;
    }
    off = std::min(off, model_.size());
    len = std::min(len, model_.size() - off);
    std::string got(static_cast<char*>(m) + off, len);
    ::munmap(m, model_.size());
    return compare(got, off, "mmap read through the O_RDWR handle");
  }

  // Writes through a shared writable mapping, extending the file first if needed (as fsx).
  bool mapwrite(size_t off, size_t len, bool sync) {
    std::string data = random_bytes(len);
    logop(std::string(sync ? "mapwrite_msync" : "mapwrite_munmap") + " off=" + std::to_string(off) +
          " len=" + std::to_string(len));
    if (off + len > model_.size()) {
      if (::ftruncate(rw_, off + len) != 0) {
        fail("mapwrite: ftruncate: " + errname(errno));
        return false;
      }
      model_.resize(off + len, '\0');
    }
    size_t pg = off & ~static_cast<size_t>(4095);
    size_t maplen = off - pg + len;
    void* m = ::mmap(nullptr, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, rw_, pg);
    if (m == MAP_FAILED) {
      fail("mmap MAP_SHARED PROT_WRITE: " + errname(errno));
      return false;
    }
    memcpy(static_cast<char*>(m) + (off - pg), data.data(), len);
    if (sync && ::msync(m, maplen, MS_SYNC) != 0) {
      fail("msync: " + errname(errno));
      return false;
    }
    ::munmap(m, maplen);
    model_.replace(off, len, data);
    return verify_around(off, len, "mapwrite");
  }

  bool step() {
    if (maps_ && rnd(4) == 0) {
      size_t off = rnd(kMaxLen);
      size_t len = 1 + rnd(std::min(kMaxIo, kMaxLen - off));
      if (maps_ == 1 || rnd(3) == 0) return mapread_rw(rnd(model_.size() + 1), len);
      return mapwrite(off, len, rnd(2));
    }
    uint64_t r = rnd(100);
    size_t size = model_.size();
    if (r < 26) {  // pwrite
      size_t off = rnd(kMaxLen);
      size_t len = 1 + rnd(std::min(kMaxIo, kMaxLen - off));
      std::string data = random_bytes(len);
      logop("write off=" + std::to_string(off) + " len=" + std::to_string(len));
      ssize_t n = ::pwrite(rw_, data.data(), len, off);
      if (n != static_cast<ssize_t>(len)) {
        fail("pwrite returned " + std::to_string(n) + " " + errname(errno));
        return false;
      }
      if (off + len > size) model_.resize(off + len, '\0');
      model_.replace(off, len, data);
      return verify_around(off, len, "write");
    }
    if (r < 34) {  // O_APPEND write
      size_t len = 1 + rnd(16 * 1024);
      if (size + len > kMaxLen) return truncate_op(rnd(kMaxLen / 2), true);
      std::string data = random_bytes(len);
      logop("append len=" + std::to_string(len));
      ssize_t n = ::write(app_, data.data(), len);
      if (n != static_cast<ssize_t>(len)) {
        fail("append write returned " + std::to_string(n) + " " + errname(errno));
        return false;
      }
      model_ += data;
      off_t pos = ::lseek(app_, 0, SEEK_CUR);
      if (pos != static_cast<off_t>(model_.size())) {
        fail("O_APPEND position " + std::to_string(pos) + " != size " +
             std::to_string(model_.size()));
        return false;
      }
      return verify_around(size, len, "append");
    }
    if (r < 48) {  // pread check of a random range
      size_t off = rnd(size + 1024);
      size_t len = 1 + rnd(kMaxIo);
      logop("read off=" + std::to_string(off) + " len=" + std::to_string(len));
      return verify_range(off, len, "read");
    }
    if (r < 56) {  // mmap read
      size_t off = rnd(size + 1);
      size_t len = 1 + rnd(kMaxIo);
      bool priv = rnd(2);
      logop(std::string(priv ? "mapread_private" : "mapread_shared") +
            " off=" + std::to_string(off) + " len=" + std::to_string(len));
      return mmap_check(off, len, priv);
    }
    if (r < 66) {  // truncate
      size_t target = rnd(3) == 0 ? rnd(kMaxLen) : (size ? rnd(size) : rnd(kMaxLen));
      return truncate_op(target, rnd(4) != 0);
    }
    if (r < 91) {  // fallocate family
      size_t off = rnd(kMaxLen);
      size_t len = 1 + rnd(std::min(kMaxIo, kMaxLen - off));
      uint64_t kind = rnd(6);
      int mode = 0;
      const char* name = "";
      switch (kind) {
        case 0:
          mode = 0;
          name = "falloc";
          break;
        case 1:
          mode = FALLOC_FL_KEEP_SIZE;
          name = "falloc_keep";
          break;
        case 2:
        case 3:
          mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
          name = "punch";
          break;
        case 4:
          mode = FALLOC_FL_ZERO_RANGE;
          name = "zero";
          break;
        case 5:
          mode = FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
          name = "zero_keep";
          break;
      }
      if (kind >= 2 && size > 0 && rnd(2)) {  // aim inside the data more often
        off = rnd(size);
        len = 1 + rnd(std::min(kMaxIo, size - off + 4096));
      }
      logop(std::string(name) + " off=" + std::to_string(off) + " len=" + std::to_string(len));
      if (::fallocate(rw_, mode, off, len) != 0) {
        fail(std::string(name) + ": fallocate: " + errname(errno));
        return false;
      }
      bool keep = mode & FALLOC_FL_KEEP_SIZE;
      if (!keep && off + len > size) model_.resize(off + len, '\0');
      if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
        size_t end = std::min(off + len, model_.size());
        if (off < end) std::fill(model_.begin() + off, model_.begin() + end, '\0');
      }
      return verify_around(off, len, name);
    }
    if (r < 94) {  // fsync / fdatasync
      bool data_only = rnd(2);
      logop(data_only ? "fdatasync" : "fsync");
      int rc = data_only ? ::fdatasync(rw_) : ::fsync(rw_);
      if (rc != 0) {
        fail(std::string("fsync: ") + errname(errno));
        return false;
      }
      return check_size("fsync");
    }
    // reopen every handle
    logop("reopen");
    close_all();
    if (!open_all()) return false;
    return verify_all("reopen");
  }

  bool truncate_op(size_t target, bool via_fd) {
    logop(std::string(via_fd ? "ftruncate" : "truncate") + " to=" + std::to_string(target));
    int rc = via_fd ? ::ftruncate(rw_, target) : ::truncate(path_.c_str(), target);
    if (rc != 0) {
      fail(std::string("truncate: ") + errname(errno));
      return false;
    }
    size_t old = model_.size();
    model_.resize(target, '\0');
    return verify_around(std::min(old, target), old > target ? old - target : target - old,
                         "truncate");
  }

  std::string path_;
  uint64_t seed_;
  int nops_;
  int maps_;
  std::mt19937_64 rng_;
  std::string model_;
  int rw_ = -1, app_ = -1, ro_ = -1;
  int op_ = 0;
  std::deque<std::string> log_;
  std::map<std::string, int> counts_;
  std::string report_;
};

uint64_t fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs one exerciser in a forked child (bound through ctl when given) and returns its report:
// "ok <stats>|<hash>|<ms>" or the failure text.
std::string run_in_child(const std::string& path, const std::string& ctl, uint64_t seed, int nops,
                         int maps) {
  int pfd[2];
  if (pipe(pfd) != 0) return "pipe failed";
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    ::close(pfd[0]);
    std::string out;
    bool bound = true;
    if (!ctl.empty()) {
      std::string line = std::string("bind / ") + kToken;
      int fd = ::open(ctl.c_str(), O_WRONLY | O_TRUNC);
      bound = fd >= 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
      int err = errno;
      if (fd >= 0) ::close(fd);
      if (!bound) out = "bind failed: " + errname(err);
    }
    if (bound) {
      Fsx fsx(path, seed, nops, maps);
      auto t0 = std::chrono::steady_clock::now();
      std::string err = fsx.run();
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
      out = err.empty() ? "ok " + fsx.stats() + "|" + std::to_string(fnv(fsx.model())) + "|" +
                              std::to_string(ms)
                        : err;
    }
    size_t off = 0;
    while (off < out.size()) {
      ssize_t n = ::write(pfd[1], out.data() + off, out.size() - off);
      if (n <= 0) break;
      off += n;
    }
    _exit(0);
  }
  ::close(pfd[1]);
  std::string buf;
  char chunk[4096];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  bool timed_out = false;
  while (true) {
    if (std::chrono::steady_clock::now() > deadline) {
      timed_out = true;
      break;
    }
    pollfd p{pfd[0], POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    ssize_t n = ::read(pfd[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, n);
  }
  ::close(pfd[0]);
  int st = 0;
  if (timed_out) {
    kill(pid, SIGKILL);
    buf += " [timed out after 10 minutes, seed " + std::to_string(seed) + "]";
  }
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) buf += " [child status " + std::to_string(st) + "]";
  return buf;
}

// One fencefs mount and one plain dir (both under /tmp, so both on the same filesystem) for the
// whole suite.
class FsxTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  static void SetUpTestSuite() {
    if (!selftest_mode()) {
      mount_ = new fencefs::testing::Mount();
    }
    plain_ = testing::temp_dir("fsx");
    if (selftest_mode()) {
      other_ = plain_ + "/other";
      ::mkdir(other_.c_str(), 0755);
    }
  }
  static void TearDownTestSuite() {
    delete mount_;
    mount_ = nullptr;
    if (!plain_.empty() && std::getenv("FENCEFS_KEEP_TEST_DIRS") == nullptr) {
      fencefs::testing::sh("rm -rf '" + plain_ + "'");
    }
  }
  void run_seed(uint64_t seed, int nops, int maps);
  static fencefs::testing::Mount* mount_;
  static std::string plain_, other_;
};
fencefs::testing::Mount* FsxTest::mount_ = nullptr;
std::string FsxTest::plain_, FsxTest::other_;

TEST_P(FsxTest, RandomOpsMatchModel) { run_seed(GetParam(), ops_per_seed(), 0); }

void FsxTest::run_seed(uint64_t seed, int nops, int maps) {
  if (const char* v = std::getenv("FENCEFS_FSX_SEED")) seed = strtoull(v, nullptr, 10);
  ASSERT_FALSE(plain_.empty());
  static int counter = 0;
  std::string name = "seed" + std::to_string(seed) + "-" + std::to_string(counter++);
  std::string mnt_file, backing_file, ctl;
  if (mount_) {
    ASSERT_TRUE(mount_->mounted()) << mount_->daemon_log();
    mnt_file = mount_->path(name);
    backing_file = mount_->bpath(name);
    ctl = mount_->ctl_path();
  } else {
    mnt_file = backing_file = other_ + "/" + name;
  }
  std::string plain_file = plain_ + "/" + name;
  std::string native = run_in_child(plain_file, "", seed, nops, maps);
  std::string fenced = run_in_child(mnt_file, ctl, seed, nops, maps);
  ASSERT_EQ(native.rfind("ok ", 0), 0u)
      << "the model itself failed on a plain dir (seed " << seed << "):\n"
      << native;
  ASSERT_EQ(fenced.rfind("ok ", 0), 0u)
      << "fencefs (seed " << seed << "):\n"
      << fenced << (mount_ ? "\ndaemon log: " + mount_->daemon_log() : "");
  auto field = [](const std::string& s, int i) {
    std::stringstream ss(s);
    std::string f;
    for (int k = 0; k <= i; k++) std::getline(ss, f, '|');
    return f;
  };
  EXPECT_EQ(field(native, 1), field(fenced, 1)) << "final model hash differs, seed " << seed;
  // What landed in BACKING is what the mount shows and what the plain dir holds.
  std::string p = slurp(plain_file), m = slurp(mnt_file), b = slurp(backing_file);
  EXPECT_EQ(p.size(), m.size()) << "seed " << seed;
  EXPECT_TRUE(p == m) << "plain file vs mount file differ, seed " << seed;
  EXPECT_TRUE(m == b) << "mount view vs BACKING differ, seed " << seed;
  struct stat sp {
  }, sm{};
  ::stat(plain_file.c_str(), &sp);
  ::stat(mnt_file.c_str(), &sm);
  EXPECT_EQ(sp.st_mode, sm.st_mode);
  std::cout << "[ fsx      ] seed " << seed
            << (maps == 2 ? " (mapped reads, writes) "
                : maps    ? " (mapped reads) "
                          : " ")
            << field(fenced, 0).substr(3) << " | native " << field(native, 2) << " ms, fencefs "
            << field(fenced, 2) << " ms\n";
}

INSTANTIATE_TEST_SUITE_P(Fsx, FsxTest, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8),
                         [](const ::testing::TestParamInfo<uint64_t>& info) {
                           return "seed" + std::to_string(info.param);
                         });

// Mapped reads through the writable handle and mapped writes (msync or munmap) mixed in, 20,000
// operations per seed: what xfstests' fsx does by default.
class FsxMapTest : public FsxTest {
 protected:
  static int ops() {
#if defined(__SANITIZE_ADDRESS__)
    int n = 5000;  // the sanitizer pass
#else
    int n = 20000;
#endif
    const char* v = std::getenv("FENCEFS_FSX_OPS");
    return v ? std::max(1, atoi(v)) : n;
  }
};

TEST_F(FsxMapTest, MappedReadsMatchModel) { run_seed(101, ops(), 1); }
TEST_F(FsxMapTest, MappedReadsAndWritesMatchModel) { run_seed(102, ops(), 2); }

}  // namespace
}  // namespace fencefs::fsx
