#include "fs/ring.h"

#include <liburing.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/umask.h"
#include "fs/kernel_io.h"

namespace fencefs::fs::ring {
namespace {

// The kernel's ABI (include/uapi/linux/fuse.h, 7.42): Debian 12's headers predate it.
constexpr uint32_t kCmdRegister = 1;
constexpr uint32_t kCmdCommitAndFetch = 2;
struct EntInOut {
  uint64_t flags;
  uint64_t commit_id;
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};
struct ReqHeader {
  char in_out[128];  // fuse_in_header on fetch, fuse_out_header on commit
  char op_in[128];   // the opcode's fixed argument (in_args[0])
  EntInOut ent;
};
struct CmdReq {
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};
static_assert(sizeof(ReqHeader) == 288);

// Room before the payload for the request header and the opcode's argument: libfuse reads a
// request as one buffer, so they are copied in front of the payload the kernel wrote. A page,
// so that the payload starts on one.
constexpr size_t kPrefix = 4096;
constexpr uint64_t kWake = 1;   // user_data of the eventfd read (the entry's is 0)
constexpr uint64_t kEntry = 0;  // user_data of the entry's commands
// By default callers on one CPU get as many requests served at once as the /dev/fuse loop serves
// from anywhere (fs/loop.cc), within kMaxDefaultThreads in all up to 32 CPUs (at least 2 per CPU):
// a request whose reply waits (an advance's fdatasync) keeps its thread's entry until then, so with
// fewer, advances from callers crowded on one CPU wait for an entry instead of joining the next
// sync.
constexpr int kDefaultPerCpu = 16;
constexpr int kMaxDefaultThreads = 64;

// One thread with its own io_uring and one entry of a CPU's queue. A thread serving a request
// has no entry left waiting in the kernel, so the queue's next request goes to another thread
// of the queue: a slow request (an advance's fdatasync, a slow backing) holds up only its own.
struct Server {
  int qid = 0;
  io_uring ring{};
  bool ring_up = false;
  pthread_t thread{};
  bool started = false;
  int efd = -1;
  uint64_t efd_val = 0;
  // The entry: headers and payload buffer registered with the kernel.
  alignas(64) ReqHeader hdr{};
  char* buf = nullptr;  // kPrefix + payload
  iovec iov[2]{};
  std::atomic<uint64_t> unique{0};  // the request a handler is serving from it, 0 for none
  std::mutex mu;
  // A reply made on another thread (an advance's, by the thread that synced its record), copied
  // out: the entry's buffer still holds the request, which its handler may read until it returns.
  std::vector<char> to_commit;  // under mu; empty for none
  ~Server() {
    if (ring_up) io_uring_queue_exit(&ring);
    if (efd >= 0) close(efd);
    free(buf);
  }
  Server() = default;
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
};

fuse_session* g_se = nullptr;
int g_fd = -1;
size_t g_payload = 0;
std::vector<std::unique_ptr<Server>> g_servers;
std::atomic<bool> g_active{false}, g_stopping{false};
// The threads wait for go() (the INIT reply accepted the rings) or stop().
std::mutex g_mu;
std::condition_variable g_cv;
bool g_go = false;  // under g_mu
std::atomic<int> g_threads{0};
int g_per_cpu = 0;
std::atomic<uint64_t> g_served{0}, g_handed{0};
std::atomic<size_t> g_fds{0};             // fds_held()
thread_local Server* t_server = nullptr;  // set on a server's own thread

// The CPU ids of a sysfs list ("0", "0-1", "0-3,5"); empty if unreadable.
std::vector<int> cpu_list(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::vector<int> ids;
  if (!(f >> s)) return ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    std::string part = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
    size_t dash = part.find('-');
    int lo = std::stoi(part),
        hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    for (int c = lo; c <= hi; c++) ids.push_back(c);
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return ids;
}

io_uring_sqe* sqe_of(Server& q) {
  io_uring_sqe* s = io_uring_get_sqe(&q.ring);
  if (!s) {
    io_uring_submit(&q.ring);
    s = io_uring_get_sqe(&q.ring);
  }
  return s;
}

void prep_cmd(Server& q, uint32_t op, uint64_t commit_id) {
  // A 128-byte slot (IORING_SETUP_SQE128): the command's 80 bytes follow the 48 of the header.
  auto* slot = reinterpret_cast<char*>(sqe_of(q));
  asm("" : "+r"(slot));  // the compiler sizes it as a 64-byte io_uring_sqe
  std::memset(slot, 0, 128);
  auto* s = reinterpret_cast<io_uring_sqe*>(slot);
  s->opcode = IORING_OP_URING_CMD;
  s->fd = g_fd;
  s->cmd_op = op;
  s->addr = reinterpret_cast<uint64_t>(q.iov);
  s->len = 2;
  CmdReq c{};
  c.commit_id = commit_id;
  c.qid = static_cast<uint16_t>(q.qid);
  std::memcpy(slot + offsetof(io_uring_sqe, cmd), &c, sizeof c);
  s->user_data = kEntry;
}

void arm_wake(Server& q) {
  io_uring_sqe* s = sqe_of(q);
  io_uring_prep_read(s, q.efd, &q.efd_val, sizeof q.efd_val, 0);
  s->user_data = kWake;
}

// Copies a reply (a fuse_out_header, then its arguments) into the entry, and commits it with
// the fetch of the next request.
void commit(Server& q, const iovec* iov, int count) {
  fuse_out_header oh;
  std::memcpy(&oh, iov[0].iov_base, sizeof oh);
  size_t payload = 0;
  for (int i = 1; i < count; i++) payload += iov[i].iov_len;
  if (payload > g_payload) {
    oh.error = -EIO;
    count = 1;
    payload = 0;
  }
  char* p = q.buf + kPrefix;
  for (int i = 1; i < count; i++) {
    if (iov[i].iov_base != p) std::memcpy(p, iov[i].iov_base, iov[i].iov_len);  // else in place
    p += iov[i].iov_len;
  }
  oh.len = static_cast<uint32_t>(sizeof oh + payload);
  std::memcpy(q.hdr.in_out, &oh, sizeof oh);
  q.hdr.ent.payload_sz = static_cast<uint32_t>(payload);
  prep_cmd(q, kCmdCommitAndFetch, oh.unique);
}

void serve(Server& q) {
  fuse_in_header in;
  std::memcpy(&in, q.hdr.in_out, sizeof in);
  size_t payload = q.hdr.ent.payload_sz;
  if (in.len < sizeof in + payload || in.len - sizeof in - payload > sizeof q.hdr.op_in ||
      payload > g_payload) {
    log::error("a malformed request from the kernel's ring (opcode {}, length {}, payload {})",
               in.opcode, in.len, payload);
    fuse_out_header oh{sizeof(fuse_out_header), -EIO, in.unique};
    iovec iov{&oh, sizeof oh};
    return commit(q, &iov, 1);
  }
  size_t op = in.len - sizeof in - payload;
  char* start = q.buf + kPrefix - op - sizeof in;
  std::memcpy(start, &in, sizeof in);
  std::memcpy(start + sizeof in, q.hdr.op_in, op);
  q.unique.store(in.unique, std::memory_order_release);
  g_served.fetch_add(1, std::memory_order_relaxed);
  kernel_io::note_request(start, in.len);
  fuse_buf b{};
  b.size = in.len;
  b.mem = start;
  fuse_session_process_buf(g_se, &b);
}

void drain(Server& q) {
  std::vector<char> reply;
  {
    std::lock_guard lk(q.mu);
    reply.swap(q.to_commit);
  }
  if (reply.empty()) return;
  iovec iov[2] = {{reply.data(), sizeof(fuse_out_header)},
                  {reply.data() + sizeof(fuse_out_header), reply.size() - sizeof(fuse_out_header)}};
  commit(q, iov, 2);
}

// A server's io_uring, eventfd and entry buffer, made before the INIT reply asks for the rings:
// once it has, the kernel holds every request until each CPU's queue has an entry. "" or why not.
std::string set_up(Server& q) {
  io_uring_params p{};
  p.flags = IORING_SETUP_SQE128;
  if (int r = io_uring_queue_init_params(4, &q.ring, &p); r < 0)
    return "io_uring_setup: " + common::errstr(-r);
  q.ring_up = true;
  g_fds++;
  q.efd = eventfd(0, EFD_CLOEXEC);
  if (q.efd < 0) return "eventfd: " + common::errstr(errno);
  g_fds++;
  // aligned_alloc wants a size that is a multiple of the alignment.
  q.buf = static_cast<char*>(aligned_alloc(kPrefix, kPrefix + ((g_payload + 4095) & ~4095ul)));
  if (!q.buf) return "out of memory for the ring buffers";
  q.iov[0] = {&q.hdr, sizeof q.hdr};
  q.iov[1] = {q.buf + kPrefix, g_payload};
  return "";
}

void tear_down(Server& q) {
  if (q.ring_up) {
    io_uring_queue_exit(&q.ring);
    g_fds--;
  }
  q.ring_up = false;
  if (q.efd >= 0) {
    close(q.efd);
    g_fds--;
  }
  q.efd = -1;
  free(q.buf);
  q.buf = nullptr;
}

void* run(void* arg) {
  auto& q = *static_cast<Server*>(arg);
  t_server = &q;
  {
    std::unique_lock lk(g_mu);
    g_cv.wait(lk, [] { return g_go || g_stopping.load(); });
    if (g_stopping.load()) return nullptr;
  }
  // Started by the daemon's main thread, it shares the process's umask until it has its own.
  common::own_thread_umask();
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(q.qid, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // locality only
  g_threads++;
  prep_cmd(q, kCmdRegister, 0);
  arm_wake(q);
  // Stopping, or the connection gone: the thread ends, but not while its entry's request waits
  // for a reply another thread makes (an advance's, once synced): stop() joining it is then
  // what waits for that reply, and the callback making it still finds its server serving.
  bool live = true, ending = false;
  while (live) {
    int r = io_uring_submit_and_wait(&q.ring, 1);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
      log::error("FUSE ring {}: {}", q.qid, common::errstr(-r));
      break;
    }
    io_uring_cqe* cqe;
    while (live && io_uring_peek_cqe(&q.ring, &cqe) == 0) {
      uint64_t ud = cqe->user_data;
      int res = cqe->res;
      io_uring_cqe_seen(&q.ring, cqe);
      if (ud == kWake) {
        ending |= g_stopping.load();
        drain(q);
        arm_wake(q);
      } else if (res < 0) {
        // ENOTCONN, ECANCELED, ECONNABORTED (aborted, FUSE_ABORT_ERROR): the connection is
        // going away.
        if (res != -ENOTCONN && res != -ECANCELED && res != -ECONNABORTED)
          log::error("FUSE ring {}: {}", q.qid, common::errstr(-res));
        ending = true;
      } else {
        serve(q);
      }
      live = !ending || q.unique.load(std::memory_order_acquire) != 0;
    }
  }
  drain(q);  // a reply handed over after the last wake, whose eventfd write it has not seen
  io_uring_submit(&q.ring);  // replies drained at the end (stop() follows the last completions)
  g_threads--;
  return nullptr;
}

}  // namespace

size_t payload_size(uint32_t max_write, uint32_t max_pages) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return std::max<size_t>({8192, max_write, max_pages * page});
}

namespace {

// The threads prepare(per_cpu) starts, by CPU. The kernel makes a queue for every possible CPU
// and uses the rings once each has an entry; a CPU not online (a hotplug slot) runs no caller:
// one thread there.
std::vector<std::pair<int, int>> plan(int* per_cpu) {
  std::vector<int> possible = cpu_list("/sys/devices/system/cpu/possible");
  std::vector<int> online = cpu_list("/sys/devices/system/cpu/online");
  if (*per_cpu <= 0) {
    int n = std::max<int>(1, static_cast<int>(online.size()));
    *per_cpu = std::clamp(kMaxDefaultThreads / n, 2, kDefaultPerCpu);
  }
  std::vector<std::pair<int, int>> out;
  for (int cpu : possible) {
    bool on = std::find(online.begin(), online.end(), cpu) != online.end() || online.empty();
    out.emplace_back(cpu, on ? *per_cpu : 1);
  }
  return out;
}

}  // namespace

size_t fds_held() { return g_fds.load(std::memory_order_relaxed); }

bool prepare(int per_cpu, std::string* why) {
  auto cpus = plan(&per_cpu);
  if (cpus.empty()) {
    *why = "cannot read /sys/devices/system/cpu/possible";
    return false;
  }
  for (auto [cpu, count] : cpus) {
    for (int k = 0; k < count; k++) {
      g_servers.push_back(std::make_unique<Server>());
      g_servers.back()->qid = cpu;
    }
  }
  g_per_cpu = per_cpu;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  for (auto& q : g_servers) {
    if (int err = pthread_create(&q->thread, nullptr, run, q.get()); err != 0) {
      *why = "cannot start a thread: " + common::errstr(err);
      break;
    }
    q->started = true;
    pthread_setname_np(q->thread, "fencefs-ring");
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!why->empty()) stop();
  return why->empty();
}

bool arm(size_t payload, std::string* why) {
  if (g_servers.empty()) {
    *why = "no ring threads";
    return false;
  }
  g_payload = payload;
  for (auto& q : g_servers) {
    *why = set_up(*q);
    if (!why->empty()) break;
  }
  if (why->empty()) return true;
  for (auto& q : g_servers) tear_down(*q);
  stop();
  return false;
}

void go(fuse_session* se, int fd) {
  if (g_servers.empty() || !g_servers.front()->ring_up) return;
  g_se = se;
  g_fd = fd;
  // Before the first thread registers: from then on a reply may be for a ring's request.
  g_active = true;
  {
    std::lock_guard lk(g_mu);
    g_go = true;
  }
  g_cv.notify_all();
  log::info("serving FUSE through io_uring: {} threads ({} per online CPU)", g_servers.size(),
            g_per_cpu);
}

void stop() {
  {
    std::lock_guard lk(g_mu);
    if (g_stopping.exchange(true)) return;
  }
  g_cv.notify_all();
  for (auto& q : g_servers) {
    uint64_t one = 1;
    if (q->efd >= 0) (void)!write(q->efd, &one, sizeof one);
  }
  for (auto& q : g_servers)
    if (q->started) pthread_join(q->thread, nullptr);
  g_active = false;
  // The servers stay: a late completion (an advance's) may still look for its entry.
}

char* reply_buffer(size_t len) {
  Server* q = t_server;
  if (!q || q->unique.load(std::memory_order_relaxed) == 0 || q->hdr.ent.payload_sz != 0 ||
      len > g_payload)
    return nullptr;
  return q->buf + kPrefix;
}

bool active() { return g_active.load(std::memory_order_acquire); }

int threads() { return g_threads.load(std::memory_order_relaxed); }

uint64_t served() { return g_served.load(std::memory_order_relaxed); }

uint64_t handed_over() { return g_handed.load(std::memory_order_relaxed); }

ssize_t reply(uint64_t unique, const iovec* iov, int count) {
  Server* q = t_server;
  if (!q || q->unique.load(std::memory_order_relaxed) != unique) {
    auto it = std::find_if(g_servers.begin(), g_servers.end(), [&](const auto& s) {
      return s->unique.load(std::memory_order_acquire) == unique;
    });
    if (it == g_servers.end()) return -1;
    q = it->get();
  }
  size_t total = 0;
  bool inside = false;  // an argument points into the entry's buffer (part of the request)
  const char* lo = q->buf;
  const char* hi = q->buf + kPrefix + g_payload;
  for (int i = 0; i < count; i++) {
    total += iov[i].iov_len;
    const char* p = static_cast<const char*>(iov[i].iov_base);
    bool placed = i == 1 && p == q->buf + kPrefix;  // written there through reply_buffer()
    inside |= i > 0 && !placed && iov[i].iov_len > 0 && p < hi && p + iov[i].iov_len > lo;
  }
  // A server's thread replies to its entry's request only from inside its handler.
  if (t_server == q && !inside) {
    q->unique.store(0, std::memory_order_release);
    commit(*q, iov, count);
    return static_cast<ssize_t>(total);
  }
  // Gathered apart first: the arguments point into the entry's buffer, or the handler may still
  // be reading its request there.
  std::vector<char> whole;
  whole.reserve(total);
  for (int i = 0; i < count; i++) {
    const char* p = static_cast<const char*>(iov[i].iov_base);
    whole.insert(whole.end(), p, p + iov[i].iov_len);
  }
  if (t_server == q) {
    q->unique.store(0, std::memory_order_release);
    iovec one[2] = {{whole.data(), sizeof(fuse_out_header)},
                    {whole.data() + sizeof(fuse_out_header), total - sizeof(fuse_out_header)}};
    commit(*q, one, 2);
  } else {
    {
      // Both under mu: an ending thread that sees the request answered finds its reply to
      // drain, and once drained (and its entry given a new request) nothing here clears the
      // new request's id.
      std::lock_guard lk(q->mu);
      q->to_commit = std::move(whole);
      q->unique.store(0, std::memory_order_release);
    }
    g_handed.fetch_add(1, std::memory_order_relaxed);
    uint64_t one = 1;
    (void)!write(q->efd, &one, sizeof one);
  }
  return static_cast<ssize_t>(total);
}

}  // namespace fencefs::fs::ring
