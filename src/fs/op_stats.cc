#include "fs/op_stats.h"

#include <atomic>
#include <type_traits>

namespace fencefs::fs::op_stats {
namespace {

// One counter per handler of fuse_lowlevel_ops, each on its own cache line: threads serving
// different opcodes do not contend.
// clang-format off
#define FENCEFS_OPS(X)                                                                        \
  X(init) X(destroy) X(lookup) X(forget) X(getattr) X(setattr) X(readlink) X(mknod) X(mkdir)  \
  X(unlink) X(rmdir) X(symlink) X(rename) X(link) X(open) X(read) X(write) X(flush)           \
  X(release) X(fsync) X(opendir) X(readdir) X(releasedir) X(fsyncdir) X(statfs) X(setxattr)   \
  X(getxattr) X(listxattr) X(removexattr) X(access) X(create) X(getlk) X(setlk) X(bmap)       \
  X(ioctl) X(poll) X(write_buf) X(retrieve_reply) X(forget_multi) X(flock) X(fallocate)       \
  X(readdirplus) X(copy_file_range) X(lseek)
// clang-format on

enum Op : int {
#define X(name) k_##name,
  FENCEFS_OPS(X)
#undef X
      kCount
};

// Label values: the handler's name, but the FUSE opcode's where they differ.
constexpr const char* kNames[kCount] = {
#define X(name) #name,
    FENCEFS_OPS(X)
#undef X
};
constexpr const char* label(int op) {
  if (op == k_forget_multi) return "batch_forget";
  if (op == k_retrieve_reply) return "notify_reply";
  return kNames[op];
}

struct alignas(64) Counter {
  std::atomic<uint64_t> n{0};
};
Counter counters[kCount];
fuse_lowlevel_ops base_ops{};
bool served[kCount] = {};

template <typename F>
struct Wrap;
template <typename... A>
struct Wrap<void (*)(A...)> {
  template <auto Member, Op O>
  static void call(A... a) {
    counters[O].n.fetch_add(1, std::memory_order_relaxed);
    (base_ops.*Member)(a...);
  }
};

template <auto Member, Op O>
void wrap(fuse_lowlevel_ops& o) {
  if (!(o.*Member)) return;
  served[O] = true;
  o.*Member = &Wrap<std::remove_reference_t<decltype(o.*Member)>>::template call<Member, O>;
}

}  // namespace

fuse_lowlevel_ops counted(const fuse_lowlevel_ops& base) {
  base_ops = base;
  fuse_lowlevel_ops o = base;
#define X(name) wrap<&fuse_lowlevel_ops::name, k_##name>(o);
  FENCEFS_OPS(X)
#undef X
  return o;
}

uint64_t count(const std::string& op) {
  for (int i = 0; i < kCount; i++)
    if (op == label(i)) return counters[i].n.load(std::memory_order_relaxed);
  return 0;
}

std::string render() {
  std::string out =
      "# HELP fencefs_fuse_requests_total FUSE requests the daemon served, by opcode.\n"
      "# TYPE fencefs_fuse_requests_total counter\n";
  for (int i = 0; i < kCount; i++) {
    if (!served[i]) continue;
    out += "fencefs_fuse_requests_total{op=\"";
    out += label(i);
    out += "\"} ";
    out += std::to_string(counters[i].n.load(std::memory_order_relaxed));
    out += '\n';
  }
  return out;
}

}  // namespace fencefs::fs::op_stats
