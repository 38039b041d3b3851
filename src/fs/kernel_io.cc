#include "fs/kernel_io.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>

#include "common/error.h"
#include "common/log.h"
#include "fs/ring.h"

namespace fencefs::fs::kernel_io {
namespace {

std::atomic<uint64_t> init_unique{0};  // the INIT request whose reply gets the flag
std::atomic<bool> accepted{false};
std::atomic<uint32_t> offered{0};  // of the INIT flags the reply asks for, those the kernel offered
constexpr uint32_t kOverIoUring = 1u << 9;  // FUSE_OVER_IO_URING (bit 41), in flags2
std::atomic<bool> ring_wanted{false};       // the daemon asks for the rings
std::atomic<bool> ring_offered{false};      // the kernel offered them at INIT

std::atomic<fuse_session*> session{nullptr};
std::atomic<bool> ended{false};  // a read said the connection is gone
thread_local bool kill_flag = false;

template <typename T>
bool arg_of(const char* buf, size_t n, T* out) {
  if (n < sizeof(fuse_in_header) + sizeof(T)) return false;
  std::memcpy(out, buf + sizeof(fuse_in_header), sizeof(T));
  return true;
}

}  // namespace

void note_request(const char* buf, size_t n) {
  kill_flag = false;
  if (n < sizeof(fuse_in_header)) return;
  fuse_in_header h;
  std::memcpy(&h, buf, sizeof h);
  switch (h.opcode) {
    case FUSE_WRITE: {
      fuse_write_in w;
      kill_flag = arg_of(buf, n, &w) && (w.write_flags & FUSE_WRITE_KILL_SUIDGID);
      break;
    }
    case FUSE_SETATTR: {
      fuse_setattr_in s;
      kill_flag = arg_of(buf, n, &s) && (s.valid & FATTR_KILL_SUIDGID);
      break;
    }
    case FUSE_OPEN: {
      fuse_open_in o;
      kill_flag = arg_of(buf, n, &o) && (o.open_flags & FUSE_OPEN_KILL_SUIDGID);
      break;
    }
    case FUSE_CREATE: {
      fuse_create_in c;
      kill_flag = arg_of(buf, n, &c) && (c.open_flags & FUSE_OPEN_KILL_SUIDGID);
      break;
    }
    case FUSE_INIT: {
      fuse_init_in in;
      // The first 16 bytes (major, minor, max_readahead, flags) are in every protocol version.
      if (n < sizeof(fuse_in_header) + offsetof(fuse_init_in, flags) + sizeof in.flags) break;
      std::memcpy(&in, buf + sizeof(fuse_in_header), offsetof(fuse_init_in, flags) + 4);
      if (in.flags & (FUSE_HANDLE_KILLPRIV_V2 | FUSE_ABORT_ERROR)) init_unique = h.unique;
      offered = in.flags & (FUSE_HANDLE_KILLPRIV_V2 | FUSE_ABORT_ERROR);
      if ((in.flags & FUSE_INIT_EXT) &&
          n >= sizeof(fuse_in_header) + offsetof(fuse_init_in, flags2) + sizeof in.flags2) {
        std::memcpy(&in.flags2, buf + sizeof(fuse_in_header) + offsetof(fuse_init_in, flags2),
                    sizeof in.flags2);
        ring_offered = (in.flags2 & kOverIoUring) != 0;
        if (ring_offered && ring_wanted) init_unique = h.unique;
      }
      if (ring_wanted && !ring_offered) {
        log::warn(
            "uring: the kernel does not offer FUSE over io_uring (Linux 6.14+ with "
            "/sys/module/fuse/parameters/enable_uring at Y): requests come through /dev/fuse");
        ring::stop();
      }
      break;
    }
    default:
      break;
  }
}

namespace {

ssize_t io_read(int fd, void* buf, size_t len, void*) {
  ssize_t n = ::read(fd, buf, len);
  if (n > 0) note_request(static_cast<const char*>(buf), static_cast<size_t>(n));
  // ECONNABORTED: the connection was aborted (FUSE_ABORT_ERROR), or torn down by an unmount
  // after handing this reader a request but before queueing it for the reply (fs/fuse/dev.c,
  // fuse_dev_do_read; RELEASEs still queued). Either way the session has ended, as libfuse takes
  // ENODEV to mean; else the daemon would exit with an error. connection_end() tells which.
  if (n < 0 && errno == ECONNABORTED) errno = ENODEV;
  if (n < 0 && errno == ENODEV) ended.store(true, std::memory_order_relaxed);
  return n;
}

ssize_t io_writev(int fd, iovec* iov, int count, void*) {
  // A connection error of BACKING's (a network filesystem that lost its servers) must not read
  // as this mount's own: from the kernel, ENOTCONN says the fencefs daemon is gone (fencectl, and
  // a new daemon's probe of a dead mount, take it so).
  if (count >= 1 && iov[0].iov_len == sizeof(fuse_out_header)) {
    auto* oh = static_cast<fuse_out_header*>(iov[0].iov_base);
    if (oh->unique != 0 &&
        (oh->error == -ENOTCONN || oh->error == -ECONNABORTED || oh->error == -ECANCELED))
      oh->error = -EIO;
    if (ring::active() && oh->unique != 0) {
      ssize_t n = ring::reply(oh->unique, iov, count);
      if (n >= 0) return n;
    }
  }
  uint64_t want = init_unique.load(std::memory_order_relaxed);
  if (want && count >= 2 && iov[0].iov_len == sizeof(fuse_out_header) &&
      iov[1].iov_len >= offsetof(fuse_init_out, flags) + sizeof(uint32_t)) {
    fuse_out_header oh;
    std::memcpy(&oh, iov[0].iov_base, sizeof oh);
    if (oh.unique == want && oh.error == 0) {
      // libfuse keeps no record of the flags: a copy of its reply with the bits added.
      char out[256];
      size_t len = iov[1].iov_len < sizeof out ? iov[1].iov_len : sizeof out;
      std::memcpy(out, iov[1].iov_base, len);
      uint32_t flags;
      std::memcpy(&flags, out + offsetof(fuse_init_out, flags), sizeof flags);
      // FUSE_ABORT_ERROR: once aborted, reads say ECONNABORTED, not ENODEV as after an unmount.
      flags |= offered.load() & (FUSE_HANDLE_KILLPRIV_V2 | FUSE_ABORT_ERROR);
      bool rings =
          ring_wanted && ring_offered && len >= offsetof(fuse_init_out, flags2) + sizeof(uint32_t);
      if (rings) {
        fuse_init_out o{};
        std::memcpy(&o, out, std::min(len, sizeof o));
        std::string why;
        rings = ring::arm(ring::payload_size(o.max_write, o.max_pages), &why);
        if (!rings) log::error("uring: {}: requests come through /dev/fuse", why);
      }
      if (rings) {
        flags |= FUSE_INIT_EXT;
        uint32_t flags2;
        std::memcpy(&flags2, out + offsetof(fuse_init_out, flags2), sizeof flags2);
        flags2 |= kOverIoUring;
        std::memcpy(out + offsetof(fuse_init_out, flags2), &flags2, sizeof flags2);
      }
      std::memcpy(out + offsetof(fuse_init_out, flags), &flags, sizeof flags);
      iovec copy[2] = {iov[0], {out, len}};
      ssize_t n = ::writev(fd, copy, 2);
      if (n >= 0) accepted = true;
      init_unique = 0;
      if (rings) {
        if (n >= 0)
          ring::go(session.load(), fd);
        else
          ring::stop();
      }
      return n;
    }
  }
  return ::writev(fd, iov, count);
}

ssize_t io_splice_send(int fdin, off_t* offin, int fdout, off_t* offout, size_t len,
                       unsigned int flags, void*) {
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

}  // namespace

bool install(fuse_session* se, std::string* error) {
  session = se;
  // No splice_receive: requests are read, so their flags are seen (FUSE_CAP_SPLICE_READ stays off).
  static const fuse_custom_io io = {io_writev, io_read, nullptr, io_splice_send};
  int fd = fuse_session_fd(se);
  if (int err = fuse_session_custom_io(se, &io, fd); err != 0) {
    *error = "cannot take the FUSE session's I/O: " + common::errstr(-err);
    return false;
  }
  return true;
}

bool kill_suidgid() { return kill_flag; }

void want_rings(int per_cpu) {
  std::string why;
  if (!ring::prepare(per_cpu, &why)) {
    log::error("uring: {}: requests come through /dev/fuse", why);
    return;
  }
  ring_wanted = true;
}

bool rings_offered() { return ring_wanted && ring_offered; }

bool killpriv_v2() { return accepted; }

End connection_end() {
  fuse_session* se = session.load();
  if (!ended.load(std::memory_order_relaxed) || !se) return End::Live;  // a read would block
  // Gone for good: the read fails at once, with the cause. (A read that raced the teardown
  // above may have said ECONNABORTED at an unmount too.) The kernel checks the buffer's size
  // first: room for the largest WRITE.
  constexpr size_t kRoom = (size_t{16} << 20) + 65536;  // libfuse's max_write with 64 KiB pages
  std::unique_ptr<char[]> buf(new (std::nothrow) char[kRoom]);  // untouched: nothing is copied
  ssize_t n = buf ? ::read(fuse_session_fd(se), buf.get(), kRoom) : -1;
  return n < 0 && errno == ECONNABORTED ? End::Aborted : End::Ended;
}

// libfuse splices a reply through a pipe that must hold all of it and three pages more, and
// without CAP_SYS_RESOURCE, which the workers drop, a pipe grows no larger than
// fs.pipe-max-size (1 MiB by default); with the rings nothing is spliced. Otherwise it copies
// the reply through a buffer it allocates and frees per reply: 1 MiB mapped, faulted in page by
// page and unmapped for every READ of that size, milliseconds of daemon CPU each.
char* reply_buffer(size_t size) {
  if (char* entry = ring::reply_buffer(size)) return entry;
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  static const size_t pipe_max = [] {
    size_t n = 0;
    return std::ifstream("/proc/sys/fs/pipe-max-size") >> n ? n : size_t{1} << 20;
  }();
  if (!rings_offered() && size + 4 * page <= pipe_max) return nullptr;  // libfuse splices it
  thread_local std::unique_ptr<char, decltype(&free)> buf{nullptr, &free};
  thread_local size_t cap = 0;
  if (cap < size) {
    size_t want = (size + page - 1) / page * page;
    buf.reset(static_cast<char*>(aligned_alloc(page, want)));
    cap = buf ? want : 0;
  }
  return buf.get();
}

void attributes_changed(fuse_ino_t ino) {
  // A negative offset: attributes only, no page is dropped (and no inode lock is taken, so this
  // cannot wait for the request being served).
  if (fuse_session* se = session.load()) (void)fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
}

}  // namespace fencefs::fs::kernel_io
