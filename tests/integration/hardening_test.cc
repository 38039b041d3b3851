// What sits in BACKING, the mount options, the daemon's fds and the disk's free space cannot be
// turned against the fence or against the host: real mounts, hostile placements.
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

// BACKING's root open to everyone, so that `nobody` may create there (permissions still apply).
Mount open_mount(std::vector<std::string> extra = {}) {
  return Mount(std::move(extra), [](const std::string& b) { ::chmod(b.c_str(), 0777); });
}

// In a child: binds `token` for / (0: none), becomes `uid` (0: stays root), runs fn.
int job_as(const Mount& m, uint64_t token, uid_t uid, const std::function<int()>& fn) {
  return in_child([&] {
    if (token && m.ctl("bind / " + std::to_string(token)) != 0) return 200;
    if (uid && (setgroups(0, nullptr) != 0 || setgid(kNogroup) != 0 || setuid(uid) != 0))
      return 201;
    return fn();
  });
}

// In a child: binds token 1 for / when `bind`, becomes nobody holding CAP_FOWNER alone, runs fn.
int nobody_with_fowner(const Mount& m, bool bind, const std::function<int()>& fn) {
  return in_child([&] {
    if (bind && m.ctl("bind / 1") != 0) return 200;
    if (prctl(PR_SET_KEEPCAPS, 1) != 0 || setgroups(0, nullptr) != 0 || setgid(kNogroup) != 0 ||
        setuid(kNobody) != 0)
      return 201;
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    data[0].effective = data[0].permitted = 1u << CAP_FOWNER;
    if (syscall(SYS_capset, &hdr, data) != 0) return 202;
    return fn();
  });
}

// Runs fn in a child; kills it if it has not finished within `seconds` (*hung = true). A child
// killed inside a request the daemon already took waits for the reply: `rescue` then frees the
// daemon, so that the test reports the hang instead of hanging.
int with_deadline(double seconds, bool* hung, const std::function<int()>& fn,
                  const std::function<void()>& rescue = {}) {
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) _exit(fn());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int st = 0;
  *hung = false;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      *hung = true;
      kill(pid, SIGKILL);
      if (rescue) rescue();
      waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A directory outside BACKING with a root-only file and a root-only subdirectory.
struct Outside {
  std::string dir;
  Outside() {
    char tmpl[] = "/tmp/fencefs-outside-XXXXXX";
    dir = mkdtemp(tmpl);
    ::chmod(dir.c_str(), 0755);
    spit(dir + "/secret", "root's data\n");
    ::chmod((dir + "/secret").c_str(), 0600);
    ::mkdir((dir + "/rootonly").c_str(), 0700);
  }
  ~Outside() { sh("rm -rf '" + dir + "'"); }
};

// A mount whose negative entries last 10 minutes: were one dropped (the default timeout is 5 s,
// and a loaded machine can take that between the lookup and the open), the kernel would look the
// name up again and follow a planted symlink itself, as it does natively, and the tests below
// would blame the daemon.
Mount open_mount_caching_absent(std::vector<std::string> extra = {}) {
  extra.insert(extra.end(), {"-o", "timeout=600"});
  return open_mount(std::move(extra));
}

// Makes the kernel cache `rel` as absent (a negative entry), so that the next open with O_CREAT
// is sent as CREATE without a lookup first. Needs open_mount_caching_absent().
void cache_absent(const Mount& m, const std::string& rel) {
  struct stat st;
  ASSERT_EQ(-1, ::lstat(m.path(rel).c_str(), &st));
  ASSERT_EQ(ENOENT, errno);
}

// One io_uring, raw system calls: enough to run requests on an io-wq worker thread.
class Ring {
 public:
  Ring() {
    io_uring_params p{};
    fd_ = static_cast<int>(syscall(__NR_io_uring_setup, 4, &p));
    if (fd_ < 0) return;
    sq_len_ = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    cq_len_ = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) sq_len_ = cq_len_ = std::max(sq_len_, cq_len_);
    sq_ = mmap(nullptr, sq_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_,
               IORING_OFF_SQ_RING);
    cq_ = (p.features & IORING_FEAT_SINGLE_MMAP)
              ? sq_
              : mmap(nullptr, cq_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_,
                     IORING_OFF_CQ_RING);
    sqes_len_ = p.sq_entries * sizeof(io_uring_sqe);
    sqes_ = static_cast<io_uring_sqe*>(mmap(nullptr, sqes_len_, PROT_READ | PROT_WRITE,
                                            MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQES));
    p_ = p;
  }
  bool ok() const {
    return fd_ >= 0 && sq_ != MAP_FAILED && cq_ != MAP_FAILED && sqes_ != MAP_FAILED;
  }
  // Submits one request, forced onto an io-wq worker (IOSQE_ASYNC), and waits: its result.
  int run(const std::function<void(io_uring_sqe&)>& fill) {
    auto* base = static_cast<char*>(sq_);
    auto* tail = reinterpret_cast<std::atomic<unsigned>*>(base + p_.sq_off.tail);
    unsigned mask = *reinterpret_cast<unsigned*>(base + p_.sq_off.ring_mask);
    auto* array = reinterpret_cast<unsigned*>(base + p_.sq_off.array);
    unsigned t = tail->load(std::memory_order_relaxed);
    io_uring_sqe& sqe = sqes_[t & mask];
    sqe = io_uring_sqe{};
    fill(sqe);
    sqe.flags |= IOSQE_ASYNC;
    array[t & mask] = t & mask;
    tail->store(t + 1, std::memory_order_release);
    if (syscall(__NR_io_uring_enter, fd_, 1, 1, IORING_ENTER_GETEVENTS, nullptr, 0) < 0)
      return -errno;
    auto* cbase = static_cast<char*>(cq_);
    auto* head = reinterpret_cast<std::atomic<unsigned>*>(cbase + p_.cq_off.head);
    unsigned cmask = *reinterpret_cast<unsigned*>(cbase + p_.cq_off.ring_mask);
    auto* cqes = reinterpret_cast<io_uring_cqe*>(cbase + p_.cq_off.cqes);
    unsigned h = head->load(std::memory_order_acquire);
    int res = cqes[h & cmask].res;
    head->store(h + 1, std::memory_order_release);
    return res;
  }

 private:
  int fd_ = -1;
  io_uring_params p_{};
  size_t sq_len_ = 0, cq_len_ = 0, sqes_len_ = 0;
  void* sq_ = MAP_FAILED;
  void* cq_ = MAP_FAILED;
  io_uring_sqe* sqes_ = static_cast<io_uring_sqe*>(MAP_FAILED);
};

}  // namespace

TEST(Hardening, CreateNeverFollowsASymlinkPlacedInBacking) {
  Outside out;
  auto m = open_mount_caching_absent();
  struct stat before;
  ASSERT_EQ(0, stat((out.dir + "/secret").c_str(), &before));
  for (uid_t uid : {uid_t{0}, kNobody}) {
    SCOPED_TRACE("uid " + std::to_string(uid));
    std::string trunc = "t" + std::to_string(uid), make = "c" + std::to_string(uid);
    cache_absent(m, trunc);
    cache_absent(m, make);
    // Placed directly in BACKING after the kernel cached the names as absent.
    ASSERT_EQ(0, symlink((out.dir + "/secret").c_str(), m.bpath(trunc).c_str()));
    ASSERT_EQ(0, symlink((out.dir + "/rootonly/planted").c_str(), m.bpath(make).c_str()));
    int err_trunc = job_as(m, 1, uid, [&] {
      int fd = open(m.path(trunc).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) return errno;
      return E(write(fd, "pwned\n", 6)) == 0 ? 0 : 100;
    });
    int err_make = job_as(m, 1, uid, [&] {
      int fd = open(m.path(make).c_str(), O_WRONLY | O_CREAT, 0644);
      return fd < 0 ? errno : 0;
    });
    EXPECT_NE(0, err_trunc);
    EXPECT_NE(0, err_make);
    EXPECT_EQ("root's data\n", slurp(out.dir + "/secret"));
    struct stat after;
    ASSERT_EQ(0, stat((out.dir + "/secret").c_str(), &after));
    EXPECT_EQ(before.st_size, after.st_size);
    EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
    EXPECT_EQ(-1, access((out.dir + "/rootonly/planted").c_str(), F_OK));
    // The symlinks are still what the kernel sees once it looks again.
    struct stat st;
    ASSERT_EQ(0, lstat(m.bpath(trunc).c_str(), &st));
    EXPECT_TRUE(S_ISLNK(st.st_mode));
  }
}

TEST(Hardening, CreateNeverOpensAFifoPlacedInBacking) {
  auto m = open_mount_caching_absent();
  uint64_t epoch = 1;
  for (int flags : {O_WRONLY, O_RDONLY}) {
    SCOPED_TRACE("flags " + std::to_string(flags));
    std::string name = "fifo" + std::to_string(flags);
    cache_absent(m, name);
    ASSERT_EQ(0, mkfifo(m.bpath(name).c_str(), 0666));
    bool hung = false;
    // Should the daemon be stuck in the FIFO's open, the other end frees it.
    int unblock = -1;
    auto rescue = [&] {
      unblock = open(m.bpath(name).c_str(), (flags == O_WRONLY ? O_RDONLY : O_RDWR) | O_NONBLOCK);
    };
    int err = with_deadline(
        10, &hung,
        [&] {
          if (m.ctl("bind / " + std::to_string(epoch)) != 0) return 200;
          int fd = open(m.path(name).c_str(), flags | O_CREAT, 0644);
          return fd < 0 ? errno : 0;
        },
        rescue);
    EXPECT_FALSE(hung) << "the open through the mount blocked";
    EXPECT_NE(0, err) << "the daemon opened the FIFO for the caller";
    // The domain's admission was not held: an advance completes.
    ++epoch;
    int adv = with_deadline(
        10, &hung, [&] { return m.ctl("advance / " + std::to_string(epoch)); },
        [&] {
          if (unblock < 0) rescue();
        });
    EXPECT_FALSE(hung) << "the advance blocked";
    EXPECT_EQ(0, adv);
    if (unblock >= 0) ::close(unblock);
  }
}

// A regular file put at a name the kernel believed absent: the kernel checked only the
// directory, so the open must be checked with the caller's own permissions.
TEST(Hardening, CreateOverAFilePlacedInBackingUsesTheCallersPermissions) {
  // The daemon runs with root's supplementary group, as from a login shell.
  gid_t root_group = 0;
  ASSERT_EQ(0, setgroups(1, &root_group));
  auto m = open_mount_caching_absent();
  ASSERT_EQ(0, setgroups(0, nullptr));
  cache_absent(m, "rootfile");
  cache_absent(m, "mine");
  spit(m.bpath("rootfile"), "root only\n");
  ASSERT_EQ(0, ::chmod(m.bpath("rootfile").c_str(), 0600));
  spit(m.bpath("mine"), "old\n");
  ASSERT_EQ(0, ::chown(m.bpath("mine").c_str(), kNobody, kNogroup));
  EXPECT_EQ(EACCES, job_as(m, 1, kNobody, [&] {
              int fd = open(m.path("rootfile").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
              return fd < 0 ? errno : 0;
            }));
  EXPECT_EQ("root only\n", slurp(m.bpath("rootfile")));
  // Nor with the daemon's own supplementary groups (root's).
  cache_absent(m, "rootgroup");
  spit(m.bpath("rootgroup"), "root group\n");
  ASSERT_EQ(0, ::chmod(m.bpath("rootgroup").c_str(), 0660));
  EXPECT_EQ(EACCES, job_as(m, 1, kNobody, [&] {
              int fd = open(m.path("rootgroup").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
              return fd < 0 ? errno : 0;
            }));
  EXPECT_EQ("root group\n", slurp(m.bpath("rootgroup")));
  // A file the caller may write is opened (and truncated) as usual.
  EXPECT_EQ(0, job_as(m, 1, kNobody, [&] {
              int fd = open(m.path("mine").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
              if (fd < 0) return errno;
              return E(write(fd, "new\n", 4));
            }));
  EXPECT_EQ("new\n", slurp(m.bpath("mine")));
}

// uid 0 is not every capability: a root service that shed CAP_DAC_OVERRIDE and
// CAP_DAC_READ_SEARCH (a systemd unit's bounding set) reads through the mount only what it reads
// natively, also when the kernel leaves the check of a file it did not know of to the daemon.
TEST(Hardening, CreateOverAFilePlacedInBackingUsesARootCallersCapabilities) {
  auto m = open_mount_caching_absent();
  for (const char* name : {"others", "own"}) {
    cache_absent(m, name);
    spit(m.bpath(name), std::string(name) + "\n");
    ASSERT_EQ(0, ::chmod(m.bpath(name).c_str(), 0600));
  }
  ASSERT_EQ(0, ::chown(m.bpath("others").c_str(), kNobody, kNogroup));
  // In a child: uid 0 without any capability opens the file and reads it (0, or the errno).
  auto without_caps = [&](const std::string& path, int flags) {
    return job_as(m, 1, 0, [&] {
      __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
      __user_cap_data_struct data[2] = {};
      if (syscall(SYS_capset, &hdr, data) != 0) return 202;
      int fd = open(path.c_str(), flags, 0644);
      if (fd < 0) return errno;
      char buf[64];
      return read(fd, buf, sizeof buf) > 0 ? 0 : 100;
    });
  };
  // Natively first: what the mount must match.
  ASSERT_EQ(EACCES, without_caps(m.bpath("others"), O_RDONLY));
  ASSERT_EQ(0, without_caps(m.bpath("own"), O_RDONLY));
  EXPECT_EQ(EACCES, without_caps(m.path("others"), O_RDONLY | O_CREAT));
  cache_absent(m, "others2");
  spit(m.bpath("others2"), "nobody's\n");
  ASSERT_EQ(0, ::chmod(m.bpath("others2").c_str(), 0600));
  ASSERT_EQ(0, ::chown(m.bpath("others2").c_str(), kNobody, kNogroup));
  EXPECT_EQ(EACCES, without_caps(m.path("others2"), O_RDWR | O_CREAT | O_TRUNC));
  EXPECT_EQ("nobody's\n", slurp(m.bpath("others2")));
  // Its own file, and anyone's for a root caller that kept its capabilities, as before.
  EXPECT_EQ(0, without_caps(m.path("own"), O_RDONLY | O_CREAT));
  cache_absent(m, "others3");
  spit(m.bpath("others3"), "nobody's\n");
  ASSERT_EQ(0, ::chmod(m.bpath("others3").c_str(), 0600));
  ASSERT_EQ(0, ::chown(m.bpath("others3").c_str(), kNobody, kNogroup));
  EXPECT_EQ(0, job_as(m, 1, 0, [&] {
              int fd = open(m.path("others3").c_str(), O_RDONLY | O_CREAT, 0644);
              return fd < 0 ? errno : 0;
            }));
}

// A root caller in a user namespace below the daemon's (one that maps uid 0 and gid 0 to
// themselves: `unshare -U --map-user=0 --map-group=0` run by root, a unit's PrivateUsers=) holds
// its capabilities there: over files whose owner and group it maps, and no others.
TEST(Hardening, CreateOverAFilePlacedInBackingCountsAUserNamespacesCapabilities) {
  auto m = open_mount_caching_absent();
  auto put = [&](const std::string& name, mode_t mode, uid_t uid, gid_t gid) {
    cache_absent(m, name);
    spit(m.bpath(name), name + "\n");
    ASSERT_EQ(0, ::chmod(m.bpath(name).c_str(), mode));
    ASSERT_EQ(0, ::chown(m.bpath(name).c_str(), uid, gid));
  };
  put("rootonly", 0400, 0, 0);
  put("nobodys", 0600, kNobody, kNogroup);
  // In a child: root of a new user namespace mapping 0 to 0, opens the file read-write.
  auto in_userns = [&](const std::string& path) {
    return job_as(m, 1, 0, [&] {
      if (unshare(CLONE_NEWUSER) != 0) return 203;
      for (auto [file, text] :
           {std::pair{"setgroups", "deny"}, {"uid_map", "0 0 1"}, {"gid_map", "0 0 1"}}) {
        int fd = ::open((std::string("/proc/self/") + file).c_str(), O_WRONLY);
        if (fd < 0 || ::write(fd, text, strlen(text)) < 0) return 204;
        ::close(fd);
      }
      int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
      return fd < 0 ? errno : 0;
    });
  };
  // Natively first: what the mount must match.
  ASSERT_EQ(0, in_userns(m.bpath("rootonly")));
  ASSERT_EQ(EACCES, in_userns(m.bpath("nobodys")));
  EXPECT_EQ(0, in_userns(m.path("rootonly")));
  EXPECT_EQ(EACCES, in_userns(m.path("nobodys")));
  EXPECT_EQ("nobodys\n", slurp(m.bpath("nobodys")));
}

// An O_RDWR|O_CREAT open of path on the ring's worker: 0, or the errno.
static int ring_open(Ring& ring, const std::string& path) {
  int r = ring.run([&](io_uring_sqe& s) {
    s.opcode = IORING_OP_OPENAT;
    s.fd = AT_FDCWD;
    s.addr = reinterpret_cast<uint64_t>(path.c_str());
    s.open_flags = O_RDWR | O_CREAT;
    s.len = 0644;
  });
  return r >= 0 ? 0 : -r;
}

// An io_uring request runs on a kernel worker thread with its submitter's credentials of the
// moment, while /proc shows the worker's own, from when it started. A root caller that dropped
// CAP_DAC_OVERRIDE after its ring's worker started does not get it back through the mount.
TEST(Hardening, AnIoUringWorkersOwnCapabilitiesNeverCount) {
  auto m = open_mount_caching_absent();
  for (const char* name : {"native", "mounted"}) {
    cache_absent(m, name);
    spit(m.bpath(name), "root's\n");
    ASSERT_EQ(0, ::chmod(m.bpath(name).c_str(), 0));
  }
  // In a child: starts a worker with every capability (a NOP), drops them all, then opens the
  // file read-write on that worker.
  auto via_worker = [&](const std::string& path) {
    return job_as(m, 1, 0, [&] {
      Ring ring;
      if (!ring.ok()) return 210;
      if (ring.run([](io_uring_sqe& s) { s.opcode = IORING_OP_NOP; }) != 0) return 211;
      __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
      __user_cap_data_struct data[2] = {};
      if (syscall(SYS_capset, &hdr, data) != 0) return 212;
      // The premise: the ring's worker still shows capabilities in /proc (else nothing is shown).
      bool stale = false;
      for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
        std::string st = slurp(t.path().string() + "/status");
        stale |= st.find("Name:\tiou-wrk-") != std::string::npos &&
                 st.find("CapEff:\t0000000000000000") == std::string::npos;
      }
      if (!stale) return 213;
      return ring_open(ring, path);
    });
  };
  ASSERT_EQ(EACCES, via_worker(m.bpath("native")));
  EXPECT_EQ(EACCES, via_worker(m.path("mounted")));
}

// The same for groups: a caller that left a group after its ring's worker started is not in it
// through the mount, nor an issuer by it.
TEST(Hardening, AnIoUringWorkersOwnGroupsNeverCount) {
  constexpr gid_t kGroup = 4242;
  auto m = open_mount_caching_absent();
  for (const char* name : {"native", "mounted"}) {
    cache_absent(m, name);
    spit(m.bpath(name), "the group's\n");
    ASSERT_EQ(0, ::chown(m.bpath(name).c_str(), 0, kGroup));
    ASSERT_EQ(0, ::chmod(m.bpath(name).c_str(), 0060));
  }
  // In a child: starts a worker while in the group, leaves it and becomes nobody, then opens the
  // file read-write on that worker.
  auto via_worker = [&](const std::string& path) {
    return job_as(m, 1, 0, [&] {
      if (setgroups(1, &kGroup) != 0) return 214;
      Ring ring;
      if (!ring.ok()) return 210;
      if (ring.run([](io_uring_sqe& s) { s.opcode = IORING_OP_NOP; }) != 0) return 211;
      if (setgroups(0, nullptr) != 0 || setgid(kNogroup) != 0 || setuid(kNobody) != 0) return 212;
      bool stale = false;  // the premise: the worker still shows the group in /proc
      for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
        std::string st = slurp(t.path().string() + "/status");
        stale |= st.find("Name:\tiou-wrk-") != std::string::npos &&
                 st.find("Groups:\t" + std::to_string(kGroup)) != std::string::npos;
      }
      if (!stale) return 213;
      return ring_open(ring, path);
    });
  };
  ASSERT_EQ(EACCES, via_worker(m.bpath("native")));
  EXPECT_EQ(EACCES, via_worker(m.path("mounted")));
  EXPECT_EQ("the group's\n", slurp(m.bpath("mounted")));
}

// fallocate(2) and copy_file_range(2) clear set-user-ID and set-group-ID bits of a file unless
// the caller holds CAP_FSETID, as natively: also for a root caller without it (the kernel sends
// no kill flag with them, and the daemon's own CAP_FSETID would keep them).
TEST(Hardening, FallocateAndCopyFileRangeClearSetIdBitsWithoutCapFsetid) {
  auto m = open_mount();
  spit(m.bpath("src"), std::string(4096, 's'));
  // The file's mode after the operation, by a root caller with or without CAP_FSETID.
  auto op_on = [&](bool mounted, bool copy, bool fsetid) {
    spit(m.bpath("f"), std::string(4096, 'a'));
    if (::chmod(m.bpath("f").c_str(), 06777) != 0) return -1;
    auto at = [&](const char* n) { return mounted ? m.path(n) : m.bpath(n); };
    int rc = job_as(m, 1, 0, [&] {
      if (!fsetid) {
        __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
        __user_cap_data_struct data[2] = {};
        if (syscall(SYS_capget, &hdr, data) != 0) return 1;
        data[0].effective &= ~(1u << CAP_FSETID);
        if (syscall(SYS_capset, &hdr, data) != 0) return 2;
      }
      int fd = ::open(at("f").c_str(), O_WRONLY);
      if (fd < 0) return 3;
      if (copy) {
        int in = ::open(at("src").c_str(), O_RDONLY);
        if (in < 0 || copy_file_range(in, nullptr, fd, nullptr, 100, 0) != 100) return 4;
        ::close(in);
      } else if (::fallocate(fd, 0, 0, 8192) != 0) {
        return 5;
      }
      return ::close(fd) == 0 ? 0 : 6;
    });
    struct stat st;
    if (rc != 0) return -100 - rc;
    return ::stat(m.bpath("f").c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -2;
  };
  for (bool copy : {false, true}) {
    SCOPED_TRACE(copy ? "copy_file_range" : "fallocate");
    EXPECT_EQ(0777, op_on(false, copy, false));
    EXPECT_EQ(0777, op_on(true, copy, false));
    EXPECT_EQ(06777, op_on(false, copy, true));
    EXPECT_EQ(06777, op_on(true, copy, true));
  }
}

// setfsuid(2) and setfsgid(2) fail without a word. A daemon run as root without CAP_SETUID or
// CAP_SETGID (a unit's bounding set) cannot take a caller's uid or gid: it says so at start, and
// what it would create or open for another user is refused, never done as root.
TEST(Hardening, WithoutCapSetuidOrSetgidNothingIsDoneAsRootForACaller) {
  for (int cap : {CAP_SETUID, CAP_SETGID}) {
    const std::string name = cap == CAP_SETUID ? "CAP_SETUID" : "CAP_SETGID";
    SCOPED_TRACE("without " + name);
    auto m = open_mount_caching_absent({"--drop-cap=" + std::to_string(cap)});
    ASSERT_TRUE(m.mounted());
    EXPECT_NE(std::string::npos, m.daemon_log().find("running as root without " + name))
        << m.daemon_log();
    EXPECT_EQ(EACCES, job_as(m, 1, kNobody, [&] {
                int fd = ::open(m.path("made").c_str(), O_WRONLY | O_CREAT, 0644);
                return fd < 0 ? errno : 0;
              }));
    EXPECT_EQ(EACCES,
              job_as(m, 1, kNobody, [&] { return E(::mkdir(m.path("dir").c_str(), 0755)); }));
    EXPECT_EQ(-1, ::access(m.bpath("made").c_str(), F_OK));
    EXPECT_EQ(-1, ::access(m.bpath("dir").c_str(), F_OK));
    // A root-only file put in BACKING under a name the kernel cached as absent: the CREATE that
    // meets it opens it for nobody only as nobody.
    cache_absent(m, "secret");
    spit(m.bpath("secret"), "root's\n");
    ASSERT_EQ(0, ::chmod(m.bpath("secret").c_str(), 0600));
    EXPECT_EQ(EACCES, job_as(m, 1, kNobody, [&] {
                int fd = ::open(m.path("secret").c_str(), O_RDWR | O_CREAT, 0644);
                return fd < 0 ? errno : 0;
              }));
    // Root's own calls take no other identity: served as ever.
    EXPECT_EQ(0, job_as(m, 1, 0, [&] { return E(::mkdir(m.path("rootdir").c_str(), 0755)); }));
    // In a sticky directory of nobody's, nobody removes and renames its own files: the call that
    // cannot take nobody's fsuid keeps the daemon's CAP_FOWNER, as before.
    ASSERT_EQ(0, ::mkdir(m.bpath("sticky").c_str(), 01777));
    ASSERT_EQ(0, ::chmod(m.bpath("sticky").c_str(), 01777));
    ASSERT_EQ(0, ::chown(m.bpath("sticky").c_str(), kNobody, kNogroup));
    for (const char* f : {"sticky/a", "sticky/b"}) {
      spit(m.bpath(f), "nobody's\n");
      ASSERT_EQ(0, ::chown(m.bpath(f).c_str(), kNobody, kNogroup));
    }
    EXPECT_EQ(0, job_as(m, 1, kNobody, [&] { return E(::unlink(m.path("sticky/a").c_str())); }));
    EXPECT_EQ(0, job_as(m, 1, kNobody, [&] {
                return E(::rename(m.path("sticky/b").c_str(), m.path("sticky/c").c_str()));
              }));
  }
}

// The kernel judges the sticky rule on the entry it cached. One replaced in BACKING since (the
// caller removed its own file there, and root made one of the same name) is judged again: the
// caller may not remove or rename root's file through the mount, as it may not natively.
TEST(Hardening, AStickyEntryReplacedInBackingIsJudgedAgain) {
  auto m = open_mount();
  ASSERT_EQ(0, ::mkdir(m.bpath("tmp").c_str(), 0777));
  ASSERT_EQ(0, ::chmod(m.bpath("tmp").c_str(), 01777));
  // "known": the replacement is a file the kernel holds under another name (moved over x in
  // BACKING); "exchange": x is an exchange's target, which the kernel does not look up again.
  for (const char* op : {"unlink", "rename", "known", "exchange"}) {
    SCOPED_TRACE(op);
    const std::string x = std::string("tmp/") + op;
    const std::string other = x + ".other";
    ASSERT_EQ(0, job_as(m, 1, kNobody, [&] {
                int fd = ::open(m.path(x).c_str(), O_WRONLY | O_CREAT, 0644);
                if (fd < 0) return errno;
                ::close(fd);
                struct stat st;  // cached: the kernel holds x as nobody's
                return ::stat(m.path(x).c_str(), &st) == 0 ? 0 : errno;
              }));
    ASSERT_EQ(0, job_as(m, 0, kNobody, [&] { return E(::unlink(m.bpath(x).c_str())); }));
    if (std::string(op) == "known") {
      spit(m.bpath(other), "root's\n");
      struct stat st;
      ASSERT_EQ(0, ::stat(m.path(other).c_str(), &st));
      ASSERT_EQ(0, ::rename(m.bpath(other).c_str(), m.bpath(x).c_str()));
    } else {
      spit(m.bpath(x), "root's\n");
    }
    // Natively nobody may not; through the mount neither.
    auto attempt = [&](const std::string& path) {
      return job_as(m, 1, kNobody, [&] {
        std::string mine = path + ".mine";
        if (std::string(op) == "exchange") {
          int fd = ::open(mine.c_str(), O_WRONLY | O_CREAT, 0644);
          if (fd < 0) return 100;
          ::close(fd);
          return E(syscall(SYS_renameat2, AT_FDCWD, mine.c_str(), AT_FDCWD, path.c_str(),
                           RENAME_EXCHANGE));
        }
        if (std::string(op) == "rename")
          return E(::rename(path.c_str(), (path + ".moved").c_str()));
        return E(::unlink(path.c_str()));
      });
    };
    EXPECT_EQ(EPERM, attempt(m.bpath(x)));
    EXPECT_EQ(EPERM, attempt(m.path(x)));
    EXPECT_EQ("root's\n", slurp(m.bpath(x)));
  }
}

// Races renames onto a name in a sticky directory of uid 23456 for 3 s, run by `caller` (in a
// child bound to token 1), while uid 12345 creates that name directly in BACKING: how many of
// 12345's files a rename replaced (at most 250), or -1 when no rename of the caller succeeded.
int sticky_replacements(const Mount& m, const std::function<bool()>& caller) {
  if (::mkdir(m.bpath("tmp").c_str(), 0777) != 0 || ::chmod(m.bpath("tmp").c_str(), 01777) != 0 ||
      ::chown(m.bpath("tmp").c_str(), 23456, 23456) != 0)
    return -2;
  const std::string w = m.bpath("tmp/w");
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  pid_t other = fork();
  if (other == 0) {
    if (setgid(12345) != 0 || setuid(12345) != 0) _exit(255);
    int replaced = 0;
    while (std::chrono::steady_clock::now() < until) {
      int fd = ::open(w.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
      if (fd < 0) continue;
      struct stat mine, now;
      fstat(fd, &mine);
      if (::stat(w.c_str(), &now) == 0 && now.st_ino != mine.st_ino)
        replaced++;  // the caller's file is there now
      else
        ::unlink(w.c_str());
      ::close(fd);
    }
    _exit(std::min(replaced, 250));
  }
  if (other < 0) return -3;
  int renamed = in_child([&] {
    if (m.ctl("bind / 1") != 0) return 200;
    if (!caller()) return 201;
    int renames = 0;
    const std::string x = m.path("tmp/x"), to = m.path("tmp/w");
    while (std::chrono::steady_clock::now() < until) {
      int fd = ::open(x.c_str(), O_WRONLY | O_CREAT, 0644);
      if (fd < 0) return errno;
      ::close(fd);
      if (::rename(x.c_str(), to.c_str()) == 0) {
        ::unlink(to.c_str());
        renames++;
      }
    }
    return std::min(renames, 1);
  });
  int st = 0;
  if (waitpid(other, &st, 0) != other || !WIFEXITED(st)) return -4;
  return renamed == 1 ? WEXITSTATUS(st) : -1;
}

// A rename's target the kernel found absent may be made in BACKING before the daemon renames:
// BACKING judges the sticky rule on it in the rename itself (the caller's fsuid, no CAP_FOWNER of
// the daemon's), so another user's file made there meanwhile is never replaced. Raced for 3 s: a
// user making and removing its file natively, nobody renaming its own onto the name.
TEST(Hardening, AStickyTargetMadeInBackingDuringARenameIsNotReplaced) {
  auto m = open_mount();
  EXPECT_EQ(0, sticky_replacements(m,
                                   [] {
                                     return setgroups(0, nullptr) == 0 && setgid(kNogroup) == 0 &&
                                            setuid(kNobody) == 0;
                                   }))
      << "files of uid 12345 replaced by nobody's renames (-1: none succeeded)";
}

// The same for a root caller without CAP_FOWNER (a unit's CapabilityBoundingSet): at fsuid 0 the
// daemon's own CAP_FOWNER would have passed the sticky rule for it.
TEST(Hardening, AStickyTargetIsNotReplacedByRootWithoutCapFowner) {
  auto m = open_mount();
  EXPECT_EQ(0, sticky_replacements(m,
                                   [] {
                                     if (prctl(PR_CAPBSET_DROP, CAP_FOWNER) != 0) return false;
                                     __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
                                     __user_cap_data_struct data[2];
                                     if (syscall(SYS_capget, &hdr, data) != 0) return false;
                                     for (auto& d : data) {
                                       d.effective &= ~(1u << CAP_FOWNER);
                                       d.permitted &= ~(1u << CAP_FOWNER);
                                       d.inheritable &= ~(1u << CAP_FOWNER);
                                     }
                                     return syscall(SYS_capset, &hdr, data) == 0;
                                   }))
      << "files of uid 12345 replaced by root's renames (-1: none succeeded)";
}

// A noexec filesystem mounted below BACKING: its programs are not run through the mount either
// (the mount is noexec only when BACKING's root is). Elsewhere they run.
TEST(Hardening, AProgramOnANoexecFilesystemBelowBackingDoesNotRun) {
  auto m = open_mount();
  ASSERT_EQ(0, ::mkdir(m.bpath("ne").c_str(), 0755));
  ASSERT_EQ(0, sh("mount -t tmpfs -o noexec,size=8m none '" + m.bpath("ne") + "'"));
  struct Unmount {
    std::string dir;
    ~Unmount() { sh("umount -l '" + dir + "'"); }  // the daemon holds its inodes open
  } unmount{m.bpath("ne")};
  ASSERT_EQ(0, sh("cp /bin/true '" + m.bpath("ne/t") + "' && cp /bin/true '" + m.bpath("t") + "'"));
  auto run = [&](const std::string& path) {
    return in_child([&] {
      execl(path.c_str(), "t", nullptr);
      return errno;
    });
  };
  EXPECT_EQ(EACCES, run(m.bpath("ne/t")));  // natively
  EXPECT_EQ(EACCES, run(m.path("ne/t")));
  EXPECT_EQ(0, run(m.path("t")));
}

// In a sticky directory CAP_FOWNER lets a caller remove and rename entries of other owners; the
// kernel checked it, and the daemon does not take it away.
TEST(Hardening, CapFownerStillPassesTheStickyRule) {
  auto m = open_mount();
  ASSERT_EQ(0, ::mkdir(m.bpath("tmp").c_str(), 0777));
  ASSERT_EQ(0, ::chmod(m.bpath("tmp").c_str(), 01777));
  for (const char* n : {"tmp/a", "tmp/b"}) {
    spit(m.bpath(n), "other's\n");
    ASSERT_EQ(0, ::chown(m.bpath(n).c_str(), 1, 1));
  }
  auto as_fowner = [&](const std::function<int()>& fn) { return nobody_with_fowner(m, true, fn); };
  EXPECT_EQ(0, as_fowner([&] { return ::unlink(m.path("tmp/a").c_str()) == 0 ? 0 : errno; }));
  EXPECT_EQ(0, as_fowner([&] {
              return ::rename(m.path("tmp/b").c_str(), m.path("tmp/c").c_str()) == 0 ? 0 : errno;
            }));
  EXPECT_EQ(-1, ::access(m.bpath("tmp/a").c_str(), F_OK));
  EXPECT_EQ("other's\n", slurp(m.bpath("tmp/c")));
  // Without it, nobody may not (the kernel's check).
  spit(m.bpath("tmp/d"), "other's\n");
  ASSERT_EQ(0, ::chown(m.bpath("tmp/d").c_str(), 1, 1));
  EXPECT_EQ(EPERM, job_as(m, 1, kNobody,
                          [&] { return ::unlink(m.path("tmp/d").c_str()) == 0 ? 0 : errno; }));
}

// Operations that do not follow a symlink reach the daemon with the symlink's inode, which it
// holds as an O_PATH fd; going through /proc/self/fd/N must act on the symlink, never its target.
TEST(Hardening, AttributeChangesOfASymlinkNeverReachItsTarget) {
  Outside out;
  auto m = open_mount();
  ASSERT_EQ(0, symlink((out.dir + "/secret").c_str(), m.bpath("lnk").c_str()));
  struct timespec old_times[2] = {{1000000, 0}, {1000000, 0}};
  ASSERT_EQ(0, utimensat(AT_FDCWD, (out.dir + "/secret").c_str(), old_times, 0));
  struct stat before;
  ASSERT_EQ(0, stat((out.dir + "/secret").c_str(), &before));
  std::string l = m.path("lnk");
  EXPECT_EQ(0, job_as(m, 1, 0, [&] {
              struct timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
              utimensat(AT_FDCWD, l.c_str(), now, AT_SYMLINK_NOFOLLOW);
              lchown(l.c_str(), kNobody, kNogroup);
              lsetxattr(l.c_str(), "user.x", "1", 1, 0);
              lsetxattr(l.c_str(), "trusted.x", "1", 1, 0);
              syscall(452 /* fchmodat2 */, AT_FDCWD, l.c_str(), 0777, AT_SYMLINK_NOFOLLOW);
              return 0;
            }));
  struct stat after;
  ASSERT_EQ(0, stat((out.dir + "/secret").c_str(), &after));
  EXPECT_EQ(before.st_mode, after.st_mode);
  EXPECT_EQ(before.st_uid, after.st_uid);
  EXPECT_EQ(before.st_gid, after.st_gid);
  EXPECT_EQ(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
  EXPECT_EQ(before.st_size, after.st_size);
  char buf[16];
  EXPECT_EQ(-1, getxattr((out.dir + "/secret").c_str(), "user.x", buf, sizeof buf));
  EXPECT_EQ(-1, getxattr((out.dir + "/secret").c_str(), "trusted.x", buf, sizeof buf));
}

// mount(8) and fstab's `defaults` hand the daemon `dev,suid`: the mount is nodev,nosuid anyway,
// so a device node in the tree cannot be used to write around the fence. So does a BACKING whose
// path holds options of its own.
class NodevNosuid : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Hardening, NodevNosuid, ::testing::Values("b", "b,suid,dev"));

TEST_P(NodevNosuid, WhateverTheMountOptionsSay) {
  char tmpl[] = "/tmp/fencefs-nodev-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  ::chmod(dir.c_str(), 0755);
  std::string b = dir + "/" + GetParam(), mnt = dir + "/m";
  ASSERT_EQ(0, sh("mkdir -p '" + b + "' " + mnt));
  std::string bin_dir = std::filesystem::path(FENCEFS_BIN).parent_path();
  ASSERT_EQ(0, sh("PATH='" + bin_dir + "':$PATH mount.fuse3 '" + b + "' " + mnt +
                  " -t fuse.fencefs -o dev,suid,exec 2>/dev/null"));
  std::string line = sh_out("grep ' " + mnt + " ' /proc/mounts");
  EXPECT_EQ(0u, line.find(b + " ")) << "the whole path is the mount's source: " << line;
  EXPECT_NE(std::string::npos, line.find("nodev")) << line;
  EXPECT_NE(std::string::npos, line.find("nosuid")) << line;
  struct statvfs sv;
  ASSERT_EQ(0, statvfs(mnt.c_str(), &sv));
  EXPECT_TRUE(sv.f_flag & ST_NODEV);
  EXPECT_TRUE(sv.f_flag & ST_NOSUID);
  std::string node = mnt + "/null";
  EXPECT_EQ(0, in_child([&] {
              int fd = open((mnt + "/.fencefs/ctl").c_str(), O_WRONLY);
              if (fd < 0 || write(fd, "bind / 1", 8) != 8) return 200;
              return E(mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)));
            }));
  int err = in_child([&] {
    if (setgid(kNogroup) != 0 || setuid(kNobody) != 0) return 201;
    int fd = open(node.c_str(), O_WRONLY);
    if (fd < 0) return errno;
    return write(fd, "x", 1) == 1 ? 0 : 100;
  });
  EXPECT_NE(0, err) << "a token-less user wrote through a device node";
  EXPECT_EQ(EACCES, err);
  EXPECT_EQ(0, sh("fusermount3 -u " + mnt));
  sh("rm -rf " + dir);
}

// Processes that, as nobody with their fd limit raised, open a path read-only until refused (at
// most `max` times each) and hold what they opened until let_go(); each reports {opens, errno}.
class Hogs {
 public:
  Hogs() {
    if (pipe(report_) != 0 || pipe(release_) != 0) ADD_FAILURE() << "pipe: " << strerror(errno);
  }
  ~Hogs() { let_go(); }
  void spawn(const std::string& path, int max) {
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      ::close(report_[0]);
      ::close(release_[1]);
      rlimit rl{};
      getrlimit(RLIMIT_NOFILE, &rl);
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
      if (setgroups(0, nullptr) != 0 || setgid(kNogroup) != 0 || setuid(kNobody) != 0) _exit(2);
      int msg[2] = {0, 0};
      for (; msg[0] < max; msg[0]++) {
        if (open(path.c_str(), O_RDONLY) < 0) {
          msg[1] = errno;
          break;
        }
      }
      if (write(report_[1], msg, sizeof msg) != sizeof msg) _exit(3);
      char c;
      if (read(release_[0], &c, 1) < 0) _exit(4);
      _exit(0);
    }
    pids_.push_back(pid);
  }
  // The next report: {opens, errno of the refusal or 0}; {-1, 0} when none came.
  std::pair<int, int> result() {
    int msg[2] = {-1, 0};
    if (read(report_[0], msg, sizeof msg) != static_cast<ssize_t>(sizeof msg)) return {-1, 0};
    return {msg[0], msg[1]};
  }
  void let_go() {
    for (int* fd : {&release_[1], &report_[0], &release_[0], &report_[1]})
      if (*fd >= 0) ::close(std::exchange(*fd, -1));
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
    pids_.clear();
  }

 private:
  int report_[2] = {-1, -1}, release_[2] = {-1, -1};
  std::vector<pid_t> pids_;
};

// Opens path read-only, waiting up to 10 s while refused with EMFILE: the kernel sends RELEASE
// for a closed file in the background, after close(2) and the closer's exit returned, so a user's
// last handles may still count for a moment. 0 or the errno.
int open_once_released(const std::string& path) {
  for (int t = 0;; t++) {
    if (open(path.c_str(), O_RDONLY) >= 0) return 0;
    if (errno != EMFILE || t == 500) return errno;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// ~20,000 read-only opens by one unprivileged user are refused long before the daemon runs out
// of fds: a bind (a pidfd) and a bound job's write still work while they are held.
TEST(Hardening, UnprivilegedOpensCannotExhaustTheDaemonsFds) {
  auto m = open_mount();
  spit(m.bpath("r"), "readable\n");
  // Several processes (each may hold up to RLIMIT_NOFILE fds, 20,000 here), as nobody, open
  // until refused; they keep their files open until let go.
  constexpr int kHogs = 3;
  Hogs hogs;
  for (int k = 0; k < kHogs; k++) hogs.spawn(m.path("r"), 15000);
  int total = 0, refused = 0;
  for (int k = 0; k < kHogs; k++) {
    auto [opens, err] = hogs.result();
    ASSERT_GE(opens, 0);
    total += opens;
    if (err) {
      EXPECT_TRUE(err == EMFILE || err == ENFILE) << strerror(err);
      refused++;
    }
  }
  EXPECT_EQ(kHogs, refused);
  EXPECT_LT(total, 20000) << "nobody held as many files as the daemon has fds";
  EXPECT_GT(total, 100);  // ordinary use is not refused
  // While the opens are held: a bind, a bound job's write, another user's bound write.
  EXPECT_EQ(0, as_job(m, 1, [&] {
              int fd = open(m.path("w").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
              if (fd < 0) return errno;
              int err = E(write(fd, "still works\n", 12));
              return err ? err : E(close(fd));
            }));
  EXPECT_EQ("still works\n", slurp(m.bpath("w")));
  EXPECT_EQ(0, m.ctl("advance / 2"));
  EXPECT_EQ(0, job_as(m, 2, kNobody, [&] {
              int fd = open(m.path("n").c_str(), O_WRONLY | O_CREAT, 0644);
              if (fd < 0) return errno;
              return E(write(fd, "x", 1));
            }));
  EXPECT_NE(std::string::npos, m.daemon_log().find("open refused"));
  std::string metrics = slurp(m.path(".fencefs/metrics"));
  EXPECT_GT(metric(metrics, "fencefs_open_files_refused_total", "mount=\"" + m.mnt() + "\""), 0)
      << metrics;
  EXPECT_GT(metric(metrics, "fencefs_open_files", "mount=\"" + m.mnt() + "\""), 0) << metrics;
  // The share refused at is the one the metrics give (ring_test checks how it is made).
  long long share =
      metric(metrics, "fencefs_open_files_per_user_limit", "mount=\"" + m.mnt() + "\"");
  ASSERT_GT(share, 0) << metrics;
  EXPECT_NE(std::string::npos,
            m.daemon_log().find("(at most " + std::to_string(share) + " per user"))
      << "expected a share of " << share << ": " << m.daemon_log();
  hogs.let_go();
  // Once they are closed the user may open again.
  EXPECT_EQ(0, job_as(m, 0, kNobody, [&] { return open_once_released(m.path("r")); }));
}

// Each open of .fencefs/status keeps the page it rendered until it is closed. One unprivileged
// user opening it over and over is refused once its opens hold 64 MiB, and the others, root
// included, can still read it.
TEST(Hardening, OpenStatusPagesOfOneUserAreBounded) {
  auto m = open_mount();
  const std::string status = m.path(".fencefs/status");
  Hogs hog;
  hog.spawn(status, 12000);
  auto [opens, err] = hog.result();
  EXPECT_EQ(EMFILE, err) << "opened " << opens << " times: " << strerror(err);
  // 64 MiB at 8 KiB at least per open: a fresh mount's status page is smaller than that.
  EXPECT_EQ(8192, opens);
  EXPECT_NE(std::string::npos, m.daemon_log().find("open of a .fencefs file refused (EMFILE)"));
  // While they are held: root reads the page, another user opens it.
  EXPECT_NE(std::string::npos, slurp(status).find("\"domains\""));
  EXPECT_EQ(0, in_child([&] {
              if (setgroups(0, nullptr) != 0 || setgid(kNogroup) != 0 || setuid(kNobody - 1) != 0)
                return 200;
              return E(open(status.c_str(), O_RDONLY));
            }));
  hog.let_go();
  // Once they are closed the user may open it again.
  EXPECT_EQ(0, job_as(m, 0, kNobody, [&] { return open_once_released(status); }));
}

// A POSIX ACL as the kernel stores it in system.posix_acl_access/default: version 2, then
// (tag, permissions, id) per entry.
constexpr uint16_t kAclUserObj = 1, kAclUser = 2, kAclGroupObj = 4, kAclMask = 0x10,
                   kAclOther = 0x20;
std::string acl_denying(uid_t uid) {
  struct Entry {
    uint16_t tag, perm;
    uint32_t id;
  };
  const Entry entries[] = {{kAclUserObj, 6, ~0u},
                           {kAclUser, 0, uid},
                           {kAclGroupObj, 6, ~0u},
                           {kAclMask, 6, ~0u},
                           {kAclOther, 6, ~0u}};
  std::string v(4, '\0');
  v[0] = 2;
  for (const Entry& e : entries) v.append(reinterpret_cast<const char*>(&e), sizeof e);
  return v;
}

int as_uid(uid_t uid, const std::function<int()>& fn) {
  return in_child([&] {
    if (setgroups(0, nullptr) != 0 || setgid(kNogroup) != 0 || setuid(uid) != 0) return 201;
    return fn();
  });
}

// An ACL that takes a right away from one user holds through the mount as it does on the disk
// below, whether it was there before the mount, set through it by the file's owner, or inherited
// from a directory's default ACL by a file created through the mount.
TEST(Hardening, AclsApplyThroughTheMountAsOnTheDiskBelow) {
  auto m = open_mount();
  constexpr uid_t kOther = 1;  // "daemon" in Debian's passwd
  const std::string deny = acl_denying(kOther);
  const std::string file = m.bpath("acl");
  spit(file, "orig\n");
  ASSERT_EQ(0, ::chown(file.c_str(), kNobody, kNogroup));
  ASSERT_EQ(0, ::chmod(file.c_str(), 0666));
  ASSERT_EQ(0, setxattr(file.c_str(), "system.posix_acl_access", deny.data(), deny.size(), 0))
      << "BACKING must keep POSIX ACLs: " << strerror(errno);
  auto open_as = [&](uid_t uid, const std::string& path, int flags) {
    return job_as(m, 1, uid, [&] { return E(open(path.c_str(), flags)); });
  };
  ASSERT_EQ(EACCES, as_uid(kOther, [&] { return E(open(file.c_str(), O_WRONLY)); }));
  EXPECT_EQ(EACCES, open_as(kOther, m.path("acl"), O_WRONLY | O_APPEND));
  EXPECT_EQ(EACCES, open_as(kOther, m.path("acl"), O_RDONLY));
  EXPECT_EQ(0, open_as(kNobody, m.path("acl"), O_WRONLY | O_APPEND));
  EXPECT_EQ("orig\n", slurp(file));

  // Set through the mount: the owner's right alone, fenced like any mutation, then enforced.
  const std::string mine = m.bpath("mine");
  spit(mine, "mine\n");
  ASSERT_EQ(0, ::chown(mine.c_str(), kNobody, kNogroup));
  ASSERT_EQ(0, ::chmod(mine.c_str(), 0666));
  auto set_acl = [&](const std::string& path, const char* name) {
    return E(setxattr(path.c_str(), name, deny.data(), deny.size(), 0));
  };
  EXPECT_EQ(EPERM, job_as(m, 1, kOther,
                          [&] { return set_acl(m.path("mine"), "system.posix_acl_access"); }));
  EXPECT_EQ(EPERM, job_as(m, 0, kNobody,
                          [&] { return set_acl(m.path("mine"), "system.posix_acl_access"); }));
  EXPECT_EQ(0, open_as(kOther, m.path("mine"), O_WRONLY));
  EXPECT_EQ(
      0, job_as(m, 1, kNobody, [&] { return set_acl(m.path("mine"), "system.posix_acl_access"); }));
  EXPECT_EQ(EACCES, open_as(kOther, m.path("mine"), O_WRONLY));
  EXPECT_EQ(EACCES, as_uid(kOther, [&] { return E(open(mine.c_str(), O_WRONLY)); }));

  // Inherited from a directory's default ACL.
  ASSERT_EQ(0, ::mkdir(m.bpath("shared").c_str(), 0777));
  ASSERT_EQ(0, ::chown(m.bpath("shared").c_str(), kNobody, kNogroup));
  EXPECT_EQ(0, job_as(m, 1, kNobody,
                      [&] { return set_acl(m.path("shared"), "system.posix_acl_default"); }));
  EXPECT_EQ(0, job_as(m, 1, kNobody, [&] {
              umask(0);  // mode bits that let everyone write: only the ACL keeps kOther out
              int fd = open(m.path("shared/new").c_str(), O_WRONLY | O_CREAT, 0666);
              return fd < 0 ? errno : E(close(fd));
            }));
  EXPECT_EQ(EACCES, open_as(kOther, m.path("shared/new"), O_WRONLY));
  EXPECT_EQ(0, open_as(kNobody, m.path("shared/new"), O_WRONLY));

  // A caller with CAP_FOWNER sets an ACL on a file it does not own, as natively.
  spit(m.bpath("roots"), "root's\n");
  auto as_fowner = [&](const std::string& path) {
    return nobody_with_fowner(m, !path.empty() && path.rfind(m.mnt(), 0) == 0,
                              [&] { return set_acl(path, "system.posix_acl_access"); });
  };
  ASSERT_EQ(0, as_fowner(m.bpath("roots")));
  EXPECT_EQ(0, as_fowner(m.path("roots")));
}

// BACKING on a filesystem mounted noexec, without ACLs (ramfs keeps no xattrs): nothing it may not
// run runs through the mount, and no ACL is set through it, as natively.
TEST(Hardening, WhatBackingsMountForbidsStaysForbidden) {
  struct Cleanup {
    std::string backing, root;
    ~Cleanup() {
      if (!backing.empty()) sh("umount '" + backing + "' 2>/dev/null");
      if (!root.empty()) sh("rm -rf '" + root + "'");
    }
  } cleanup;
  bool mounted = true;
  Mount m({}, [&](const std::string& b) {
    cleanup.backing = b;
    mounted = sh("mount -t ramfs -o noexec ramfs '" + b + "'") == 0;
    ::chmod(b.c_str(), 0777);
    sh("cp /bin/true '" + b + "/true' && chmod 755 '" + b + "/true'");
    spit(b + "/f", "f\n");
  });
  cleanup.root = m.root();
  ASSERT_TRUE(mounted);
  ASSERT_TRUE(m.mounted());
  auto run_as_nobody = [&](const std::string& prog) {
    return as_uid(kNobody, [&] {
      execl(prog.c_str(), prog.c_str(), nullptr);
      return errno;
    });
  };
  ASSERT_EQ(EACCES, run_as_nobody(m.bpath("true")));
  EXPECT_EQ(EACCES, run_as_nobody(m.path("true")));
  EXPECT_NE(std::string::npos, sh_out("findmnt -no OPTIONS '" + m.mnt() + "'").find("noexec"));
  const std::string acl = acl_denying(1);
  EXPECT_EQ(EOPNOTSUPP, job_as(m, 1, 0, [&] {
              return E(setxattr(m.path("f").c_str(), "system.posix_acl_access", acl.data(),
                                acl.size(), 0));
            }));
}

// Filesystems mounted in and below a test's BACKING, each with a file "f" of nobody's: readable
// by all (0644) on one that keeps no ACLs, or 0666 with an ACL that denies `denied` everything.
struct Filesystems {
  std::vector<std::string> mounts;  // innermost last
  std::string root;
  ~Filesystems() {
    for (auto it = mounts.rbegin(); it != mounts.rend(); ++it) sh("umount '" + *it + "'");
    if (!root.empty()) sh("rm -rf '" + root + "'");
  }
  bool place(const std::string& dir, const char* type, uid_t denied = 0) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
    if (sh(std::string("mount -t ") + type + " fencefs-test '" + dir + "'") != 0) return false;
    mounts.push_back(dir);
    const std::string f = dir + "/f", acl = acl_denying(denied);
    spit(f, "f\n");
    if (::chmod(dir.c_str(), 0755) != 0 || ::chown(f.c_str(), kNobody, kNogroup) != 0) return false;
    if (::chmod(f.c_str(), denied ? 0666 : 0644) != 0) return false;
    return !denied ||
           setxattr(f.c_str(), "system.posix_acl_access", acl.data(), acl.size(), 0) == 0;
  }
};

int open_as(uid_t uid, const std::string& path, int flags) {
  return as_uid(uid, [&] { return E(open(path.c_str(), flags)); });
}

// ACLs are a property of each filesystem, not of BACKING's root: an ACL on a filesystem mounted
// below a root that keeps none denies through the mount what it denies natively.
TEST(Hardening, AnAclBelowARootWithoutAclsHoldsThroughTheMount) {
  constexpr uid_t kOther = 1;
  Filesystems fs;
  bool placed = false;
  Mount m({}, [&](const std::string& b) {
    placed = fs.place(b, "ramfs") && fs.place(b + "/below", "tmpfs", kOther);
  });
  fs.root = m.root();
  ASSERT_TRUE(placed);
  ASSERT_TRUE(m.mounted());
  ASSERT_EQ(EACCES, open_as(kOther, m.bpath("below/f"), O_RDONLY));
  EXPECT_EQ(EACCES, open_as(kOther, m.path("below/f"), O_RDONLY));
  EXPECT_EQ(0, open_as(kNobody, m.path("below/f"), O_RDONLY));
  EXPECT_EQ(0, open_as(kOther, m.path("f"), O_RDONLY));
}

// A filesystem that keeps no ACLs, below a root that keeps them: its mode bits decide, as
// natively (the kernel asks for an ACL first, and failed the access with EOPNOTSUPP).
TEST(Hardening, AFilesystemWithoutAclsBelowARootWithThemIsServedByItsModeBits) {
  constexpr uid_t kOther = 1;
  Filesystems fs;
  bool placed = false;
  Mount m({}, [&](const std::string& b) { placed = fs.place(b + "/plain", "ramfs"); });
  fs.root = m.root();
  ASSERT_TRUE(placed);
  ASSERT_TRUE(m.mounted());
  ASSERT_EQ(0, open_as(kOther, m.bpath("plain/f"), O_RDONLY));
  EXPECT_EQ(0, open_as(kOther, m.path("plain/f"), O_RDONLY));
  EXPECT_EQ(EACCES, open_as(kOther, m.path("plain/f"), O_WRONLY));
  EXPECT_EQ(ENODATA, E(getxattr(m.path("plain/f").c_str(), "system.posix_acl_access", nullptr, 0)));
  // Setting one is refused as natively, before any fencing: without a token too.
  const std::string acl = acl_denying(kOther);
  auto set_acl = [&] {
    return E(
        setxattr(m.path("plain/f").c_str(), "system.posix_acl_access", acl.data(), acl.size(), 0));
  };
  EXPECT_EQ(EOPNOTSUPP, as_uid(kNobody, set_acl));
  EXPECT_EQ(EOPNOTSUPP, job_as(m, 1, kNobody, set_acl));
}

// A user who may mount FUSE for others (user_allow_other) mounts a filesystem of their own inside
// BACKING whose daemon claims any trusted.fencefs stamp, say epoch 999999. The stamp is no
// evidence: it neither locks the domain as a rollback, nor raises a new state made with --init.
TEST(Hardening, AStampOnAFuseMountAUserMadeIsNoEvidence) {
  struct Cleanup {
    std::string at, root;
    ~Cleanup() {
      if (!at.empty()) sh("umount '" + at + "'");
      if (!root.empty()) sh("rm -rf '" + root + "'");
    }
  } cleanup;
  Mount m;
  cleanup.root = m.root();
  ASSERT_TRUE(m.mounted());
  const std::string src = m.root() + "/forged", at = m.bpath("theirs");
  ASSERT_EQ(0, ::mkdir(src.c_str(), 0755));
  spit(src + "/f", "f\n");
  ASSERT_EQ(0, ::chmod((src + "/f").c_str(), 0666));
  const std::string forged = "999999 2 0.0";
  ASSERT_EQ(0, setxattr((src + "/f").c_str(), "trusted.fencefs", forged.data(), forged.size(), 0));
  ASSERT_EQ(0, ::mkdir(at.c_str(), 0755));
  ASSERT_EQ(0, ::chown(at.c_str(), kNobody, kNogroup));
  // Their daemon runs as nobody; the capabilities only let it open /dev/fuse, mount, and read
  // the trusted.* name it hands on (bindfs passes xattrs through).
  ASSERT_EQ(0, sh("setpriv --reuid=65534 --regid=65534 --clear-groups "
                  "--inh-caps=+sys_admin,+dac_override --ambient-caps=+sys_admin,+dac_override "
                  "bindfs -o allow_other '" +
                  src + "' '" + at + "'"));
  cleanup.at = at;
  ASSERT_NE(std::string::npos, sh_out("findmnt -no OPTIONS '" + at + "'").find("user_id=65534"));
  char buf[64];
  ssize_t n = getxattr((at + "/f").c_str(), "trusted.fencefs", buf, sizeof buf);
  ASSERT_EQ(forged, std::string(buf, n > 0 ? static_cast<size_t>(n) : 0));
  auto append = [&](const std::string& path) {
    return job_as(m, 1, 0, [&] {
      int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
      if (fd < 0) return errno;
      int err = ::write(fd, "x\n", 2) == 2 ? 0 : errno;
      return close(fd) == 0 ? err : errno;
    });
  };
  EXPECT_EQ(0, append(m.path("theirs/f")));
  EXPECT_EQ(0, append(m.path("mine")));
  EXPECT_EQ(0, sh(std::string(FENCECTL_BIN) + " advance --mount '" + m.mnt() + "' / 2 >/dev/null"));
  EXPECT_EQ(std::string::npos, m.daemon_log().find("rollback detected")) << m.daemon_log();
  EXPECT_NE(std::string::npos, m.daemon_log().find("are not evidence")) << m.daemon_log();

  // A new state over this tree starts at the highest epoch that is evidence: 2, the advance's
  // (BACKING's high-water copy), not the forged one.
  ASSERT_EQ(0, m.unmount());
  // fencectl verify does not take it either, and says what it did not check.
  std::string verify = sh_out(std::string(FENCECTL_BIN) + " verify '" + m.backing() + "' 2>&1");
  EXPECT_NE(std::string::npos, verify.find("/theirs: a FUSE filesystem that a user mounted, not "
                                           "checked"))
      << verify;
  EXPECT_EQ(std::string::npos, verify.find("999999")) << verify;
  ASSERT_EQ(0, sh("rm -rf '" + m.bpath(".fencefs") + "'"));
  ASSERT_EQ(-1000, m.try_mount({"--init"})) << m.daemon_log();
  n = getxattr(m.mnt().c_str(), "user.fencefs.epoch", buf, sizeof buf);
  EXPECT_EQ("2", std::string(buf, n > 0 ? static_cast<size_t>(n) : 0));
}

// A lease taken on a file directly in BACKING (by its owner, who may) makes opens that conflict
// with it wait up to lease-break-time (45 s) natively. Through the mount they fail at once with
// EWOULDBLOCK instead: they would hold a daemon worker, and a writer its domain's lock, meanwhile.
TEST(Hardening, ALeaseInBackingDoesNotHoldTheDaemon) {
  // The kernel's default, set for the test: its bounds below tell a wait for the break from none.
  Setting break_time("/proc/sys/fs/lease-break-time", "45\n");
  ASSERT_TRUE(break_time.ok());
  auto m = open_mount();
  const std::string file = m.bpath("leased");
  spit(file, "leased\n");
  ASSERT_EQ(0, ::chown(file.c_str(), kNobody, kNogroup));
  int ready[2];
  ASSERT_EQ(0, pipe(ready));
  fflush(nullptr);
  pid_t holder = fork();
  if (holder == 0) {
    signal(SIGIO, SIG_IGN);  // told of the break, and ignoring it
    if (setgroups(0, nullptr) != 0 || setgid(kNogroup) != 0 || setuid(kNobody) != 0) _exit(2);
    int fd = open(file.c_str(), O_RDONLY);
    int ok = fd >= 0 && fcntl(fd, F_SETLEASE, F_WRLCK) == 0 ? 1 : 0;
    if (write(ready[1], &ok, sizeof ok) != sizeof ok) _exit(3);
    pause();
    _exit(0);
  }
  int ok = 0;
  ASSERT_EQ(static_cast<ssize_t>(sizeof ok), read(ready[0], &ok, sizeof ok));
  struct Holder {
    pid_t pid;
    ~Holder() {
      if (pid <= 0) return;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } cleanup{holder};
  ASSERT_EQ(1, ok) << "no lease could be taken on a file in BACKING";
  std::vector<pid_t> stuck;
  auto within = [&](const std::string& cmd) {
    pid_t left = -1;
    // Far below the 45 s a native open would wait, and far above what the daemon takes (each
    // conflicting open is retried for about 0.1 s), so that a slow machine does not fail it.
    int st = finishes_within(cmd, 15000, &left);
    if (left > 0) stuck.push_back(left);
    return st;
  };
  std::string c_ = FENCECTL_BIN;
  EXPECT_NE(-1, within("cat '" + m.path("leased") + "' >/dev/null 2>&1"));
  EXPECT_NE(-1,
            within(c_ + " run --mount '" + m.mnt() + "' --domain / --token 1 -- sh -c 'echo x >> " +
                   m.path("leased") + "' 2>/dev/null"));
  EXPECT_NE(-1,
            within(c_ + " run --mount '" + m.mnt() + "' --domain / --token 1 -- truncate -s 0 " +
                   m.path("leased") + " 2>/dev/null"));
  EXPECT_EQ(0, within(c_ + " advance --mount '" + m.mnt() + "' / 2 >/dev/null"));
  EXPECT_EQ(EWOULDBLOCK,
            job_as(m, 2, 0, [&] { return E(open(m.path("leased").c_str(), O_WRONLY)); }));
  EXPECT_EQ(EWOULDBLOCK,
            job_as(m, 2, 0, [&] { return E(::truncate(m.path("leased").c_str(), 0)); }));
  // Once the holder lets go, the file opens as usual (a native read too would have waited).
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  cleanup.pid = 0;
  EXPECT_EQ("leased\n", slurp(file));
  EXPECT_EQ(0, job_as(m, 2, 0, [&] {
              int fd = open(m.path("leased").c_str(), O_WRONLY | O_APPEND);
              return fd < 0 ? errno : E(write(fd, "more\n", 5));
            }));
  EXPECT_EQ("leased\nmore\n", slurp(file));
  for (pid_t p : stuck) waitpid(p, nullptr, 0);
}

// The confused deputy: a user opens .fencefs/ctl and hands the descriptor to a set-uid program as
// its output. What that program writes carries an issuer's identity but not the opener's
// authority: refused, as `sudo echo … > FILE` is refused by the file's own permissions.
TEST(Hardening, AnIssuersWriteCountsOnlyInAControlFileAnIssuerOpened) {
  auto m = open_mount();
  int to_parent[2], release[2];
  ASSERT_EQ(0, pipe(to_parent));
  ASSERT_EQ(0, pipe(release));
  fflush(nullptr);
  pid_t opener = fork();
  if (opener == 0) {
    ::close(release[1]);
    if (setgroups(0, nullptr) != 0 || setgid(kNogroup) != 0 || setuid(kNobody) != 0) _exit(2);
    int fd = open(m.ctl_path().c_str(), O_WRONLY);
    if (write(to_parent[1], &fd, sizeof fd) != sizeof fd) _exit(3);
    char c;
    (void)!read(release[0], &c, 1);
    _exit(0);
  }
  int remote = -1;
  ASSERT_EQ(static_cast<ssize_t>(sizeof remote), read(to_parent[0], &remote, sizeof remote));
  ASSERT_GE(remote, 0) << "nobody could not open the control file";
  // The same open file description, now in a root process (as a set-uid program's stdout).
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, opener, 0));
  ASSERT_GE(pidfd, 0);
  int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, remote, 0));
  ASSERT_GE(fd, 0) << strerror(errno);
  for (const char* cmd : {"advance / 9223372036854775807 force", "bind / 5", "domain add /d"})
    EXPECT_EQ(EACCES, E(write(fd, cmd, strlen(cmd)))) << cmd;
  ::close(fd);
  ::close(pidfd);
  ::close(release[1]);
  waitpid(opener, nullptr, 0);
  EXPECT_EQ("0", xattr(m.mnt(), "user.fencefs.epoch"));
  EXPECT_EQ(0, m.ctl("advance / 1"));  // opened and written by root
  EXPECT_EQ("1", xattr(m.mnt(), "user.fencefs.epoch"));
}

// BACKING on a small ext4 with a root reserve: a non-root job filling the disk through the mount
// cannot take the reserved blocks, and an advance succeeds on the full disk, even after a root job
// took the reserve too (the journal keeps room allocated ahead).
TEST(Hardening, FullDiskCannotStopAnAdvance) {
  Ext4Image disk("48M", "-m 10");
  ASSERT_TRUE(disk.made());
  bool loop_ok = true;
  Mount m({}, [&](const std::string& b) {
    loop_ok = disk.mount_at(b);
    ::chmod(b.c_str(), 0777);
  });
  disk.remove_after(m.root());
  ASSERT_TRUE(loop_ok) << "loop devices are needed for this test";
  ASSERT_TRUE(m.mounted());
  struct statvfs sv;
  ASSERT_EQ(0, statvfs(m.backing().c_str(), &sv));
  const uint64_t reserved = (sv.f_bfree - sv.f_bavail) * sv.f_frsize;
  ASSERT_GT(reserved, 3u << 20);

  auto fill = [&](uid_t uid, uint64_t token, const std::string& name) {
    return job_as(m, token, uid, [&] {
      int fd = open(m.path(name).c_str(), O_WRONLY | O_CREAT, 0644);
      if (fd < 0) return errno;
      std::string chunk(1 << 20, 'x');
      for (int i = 0; i < 200; i++) {
        ssize_t n = write(fd, chunk.data(), chunk.size());
        if (n < 0) return errno;
        if (n == 0) return 100;
      }
      return 101;  // never full
    });
  };
  // Files for xattrs, made first: each xattr too large for the inode takes a block of its own
  // (1 KiB on a disk this small: 4 MiB in all).
  const int kXattrFiles = 4000;
  ASSERT_EQ(0, job_as(m, 1, kNobody, [&] {
              for (int i = 0; i < kXattrFiles; i++) {
                int fd = creat(m.path("x" + std::to_string(i)).c_str(), 0644);
                if (fd < 0) return errno;
                ::close(fd);
              }
              return 0;
            }));
  EXPECT_EQ(ENOSPC, fill(kNobody, 1, "by-nobody"));
  ASSERT_EQ(0, statvfs(m.backing().c_str(), &sv));
  EXPECT_GE(sv.f_bfree * sv.f_frsize, reserved / 2) << "the non-root writer used the root reserve";
  // Nor through xattrs (blocks the daemon allocates with its own fsuid unless charged).
  EXPECT_EQ(ENOSPC, job_as(m, 1, kNobody, [&] {
              for (int i = 0; i < kXattrFiles; i++) {
                std::string v = std::to_string(i) + std::string(800, 'v');  // not shared
                if (setxattr(m.path("x" + std::to_string(i)).c_str(), "user.big", v.data(),
                             v.size(), 0) != 0)
                  return errno;
              }
              return 0;
            }));
  ASSERT_EQ(0, statvfs(m.backing().c_str(), &sv));
  EXPECT_GE(sv.f_bfree * sv.f_frsize, reserved / 2) << "nobody's xattrs used the root reserve";
  // Nor through a shared mapping, whose pages the kernel writes back as uid 0.
  EXPECT_NE(0, job_as(m, 1, kNobody, [&] {
              int fd = open(m.path("mapped").c_str(), O_RDWR | O_CREAT, 0644);
              const size_t len = 4 << 20;
              if (fd < 0 || ftruncate(fd, len) != 0) return 100;
              void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
              if (p == MAP_FAILED) return 101;
              memset(p, 'm', len);
              return msync(p, len, MS_SYNC) == 0 ? 0 : errno;
            }));
  ASSERT_EQ(0, statvfs(m.backing().c_str(), &sv));
  EXPECT_GE(sv.f_bfree * sv.f_frsize, reserved / 2) << "nobody's mapped pages used the reserve";
  EXPECT_EQ(0, m.ctl("advance / 2"));
  // Root (which may use the reserve, as natively) fills the rest.
  EXPECT_EQ(ENOSPC, fill(0, 2, "by-root"));
  ASSERT_EQ(0, statvfs(m.backing().c_str(), &sv));
  EXPECT_LT(sv.f_bfree * sv.f_frsize, reserved / 2);
  // Enough records to cross several blocks of the journal.
  for (int e = 3; e < 400; e++) ASSERT_EQ(0, m.ctl("advance / " + std::to_string(e))) << e;
  // Not poisoned: the epoch is durable across a restart. The daemon empties its mount marker as
  // it exits (the backing is free) and writes it again as it starts: the block the marker keeps
  // past its end lets it do so on a disk full to the last block, so that the operator can mount
  // the full backing and make room through the mount.
  EXPECT_EQ(0, m.unmount());
  struct stat marker;
  ASSERT_EQ(0, stat(m.bpath(".fencefs/owner").c_str(), &marker));
  EXPECT_EQ(0, marker.st_size);
  EXPECT_GT(marker.st_blocks, 0) << "the emptied marker keeps no block";
  ASSERT_NE(0, sh("dd if=/dev/zero of='" + m.bpath("after-unmount") +
                  "' bs=" + std::to_string(sv.f_frsize) + " 2>/dev/null"));
  ASSERT_TRUE(m.remount()) << m.daemon_log();
  // No room to rewrite the journal it replayed: it was synced where it is.
  EXPECT_NE(m.daemon_log().find("synced in place, not rewritten (No space left on device)"),
            std::string::npos)
      << m.daemon_log();
  EXPECT_EQ("399", xattr(m.path(""), "user.fencefs.epoch"));
  EXPECT_EQ(ESTALE, in_child([&] { return m.ctl("bind / 398"); }));
  EXPECT_EQ(0, job_as(m, 399, 0, [&] { return E(unlink(m.path("by-root").c_str())); }));
  EXPECT_NE(0, access(m.bpath("by-root").c_str(), F_OK));
}

// Node ids are table indices: stat still gives BACKING's inode numbers, and the node ids a user
// can read (in the mount's file handles) are small numbers, not daemon addresses.
TEST(Hardening, NodeIdsRevealNoAddresses) {
  auto m = open_mount();
  const int kFiles = 3000;
  ASSERT_EQ(0, ::mkdir(m.bpath("d").c_str(), 0755));
  for (int i = 0; i < kFiles; i++) spit(m.bpath("d/f" + std::to_string(i)), "");
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < kFiles; i++) {
      std::string rel = "d/f" + std::to_string(i);
      struct stat via, direct;
      ASSERT_EQ(0, stat(m.path(rel).c_str(), &via)) << rel;
      ASSERT_EQ(0, stat(m.bpath(rel).c_str(), &direct));
      ASSERT_EQ(direct.st_ino, via.st_ino) << rel;
      struct {
        file_handle h;
        unsigned char bytes[64];
      } fh;
      fh.h.handle_bytes = sizeof fh.bytes;
      int mount_id;
      ASSERT_EQ(0, name_to_handle_at(AT_FDCWD, m.path(rel).c_str(), &fh.h, &mount_id, 0))
          << strerror(errno);
      ASSERT_GE(fh.h.handle_bytes, 8u);
      uint32_t words[2];
      memcpy(words, fh.h.f_handle, sizeof words);
      uint64_t nodeid = (static_cast<uint64_t>(words[0]) << 32) | words[1];
      // (generation << 32) | slot: few generations and slots in a fresh mount.
      EXPECT_LT(nodeid >> 32, 100u) << std::hex << nodeid;
      EXPECT_LT(nodeid & 0xffffffffu, 1u << 20) << std::hex << nodeid;
      if (HasFailure()) return;
    }
  }
}

// The daemon lists xattrs as root; trusted.* names show natively only to CAP_SYS_ADMIN in the
// initial user namespace. Through the mount, each caller sees what BACKING shows it.
TEST(Hardening, TrustedXattrNamesShowOnlyToWhomTheyShowNatively) {
  Mount m = open_mount();
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  ASSERT_EQ(0, job_as(m, 1, 0, [&] {
              int fd = ::open(m.path("f").c_str(), O_WRONLY | O_CREAT, 0644);
              return fd < 0 ? 1 : E(::close(fd));
            }));
  ASSERT_EQ(0, setxattr(m.bpath("f").c_str(), "trusted.secret", "v", 1, 0));
  ASSERT_EQ(0, setxattr(m.bpath("f").c_str(), "user.plain", "v", 1, 0));
  // 1: trusted.secret listed, 2: not, plus 4 when user.plain is missing; 9: error.
  auto lists = [](const std::string& path) {
    char buf[4096];
    ssize_t n = listxattr(path.c_str(), buf, sizeof buf);
    if (n < 0) return 9;
    bool trusted = false, user = false;
    for (ssize_t p = 0; p < n; p += static_cast<ssize_t>(strlen(buf + p)) + 1) {
      trusted |= !strcmp(buf + p, "trusted.secret");
      user |= !strcmp(buf + p, "user.plain");
    }
    return (trusted ? 1 : 2) + (user ? 0 : 4);
  };
  const std::string native = m.bpath("f"), through = m.path("f");
  EXPECT_EQ(1, job_as(m, 0, 0, [&] { return lists(native); }));
  EXPECT_EQ(1, job_as(m, 0, 0, [&] { return lists(through); }));
  EXPECT_EQ(2, job_as(m, 0, kNobody, [&] { return lists(native); }));
  EXPECT_EQ(2, job_as(m, 0, kNobody, [&] { return lists(through); }));
  // Root in many groups: /proc/TID/status puts CapEff past its first 4 KiB.
  EXPECT_EQ(1, job_as(m, 0, 0, [&] {
              std::vector<gid_t> many;
              for (gid_t g = 0; g < 600; g++) many.push_back(1000000000 + g);
              if (setgroups(many.size(), many.data()) != 0) return 10;
              return lists(through);
            }));
  // Root in a user namespace of its own: every capability there, none in the initial one.
  for (const std::string& path : {native, through})
    EXPECT_EQ(2, job_as(m, 0, 0,
                        [&] {
                          if (unshare(CLONE_NEWUSER) != 0) return 10;
                          return lists(path);
                        }))
        << path;
}
