// What .fencefs/status (JSON, docs/status-json.md) and .fencefs/metrics (Prometheus text) show:
// read-only views of the fence, the journal, the bindings and the inode table.
#include "fs/report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "common/json_writer.h"
#include "common/log.h"
#include "common/prometheus.h"
#include "fs/fs.h"
#include "fs/loop.h"
#include "fs/op_stats.h"
#include "fs/ring.h"

namespace fencefs::fs {

std::string render_status_json(Fs& f) {
  auto& store = f.fence().store();
  journal::Stats js = store.stats();
  // Schema: docs/status-json.md. 64-bit values also as strings ("..._str"): jq reads numbers as
  // doubles and would round epochs above 2^53.
  auto uptime =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - f.started)
          .count();
  auto since =
      std::chrono::duration_cast<std::chrono::seconds>(f.started_wall.time_since_epoch()).count();
  std::string out;
  common::JsonWriter w(&out);
  Epoch max_jump = f.fence().config().max_jump;
  w.begin_object()
      .member("schema_version", 1)
      .member("mount", f.opts().mountpoint)
      .member("pid", getpid())
      .member("started_unix", since)
      .member("uptime_seconds", uptime)
      .member("backing", f.opts().backing)
      .member("state", f.opts().state_dir)
      .member("max_jump", max_jump)
      .member("max_jump_str", std::to_string(max_jump))
      .key("journal")
      .begin_object()
      .member("poisoned", store.poisoned())
      .member("bytes", js.journal_bytes)
      .member("snapshot_bytes", js.snapshot_bytes)
      .member("syncs", js.syncs)
      .member("compactions", js.compactions)
      .member("sync_failures", js.sync_failures)
      .end_object()
      .key("domains")
      .begin_array();
  auto bindings = f.bindings().list();
  for (Domain* d : f.fence().domains().all()) {
    Epoch epoch = d->epoch.load();
    auto last_advance = d->last_advance_unix_ns.load();
    int64_t waiting_since = d->advance_waiting_since_unix_ns.load();
    w.begin_object()
        .member("id", d->id)
        .member("path", d->path)
        .member("epoch", epoch)
        .member("epoch_str", std::to_string(epoch))
        .member("last_advance_unix_ns", last_advance)
        .member("last_advance_unix_ns_str", std::to_string(last_advance))
        .member("advance_waiting_since_unix_ns", waiting_since)
        .member("advance_waiting_since_unix_ns_str", std::to_string(waiting_since))
        .member("accepted", d->accepted.load())
        .member("advances", d->advances.load())
        .key("refused")
        .begin_object();
    for (int r = 0; r < static_cast<int>(fence::Reason::kCount); r++)
      w.member(fence::reason_name(fence::Reason(r)), d->refused[r].load());
    w.end_object().key("bound").begin_array();
    for (auto& b : bindings) {
      auto t = b.tokens.find(d->id);
      if (t == b.tokens.end()) continue;
      w.begin_object()
          .member("pid", b.pid)
          .member("comm", b.comm)
          .member("token", t->second)
          .member("token_str", std::to_string(t->second))
          .end_object();
    }
    w.end_array().end_object();
  }
  w.end_array();
  if (auto* a = f.fence().authority()) w.key("cluster").raw(a->status_json());
  w.end_object();
  out += '\n';
  return out;
}

// long: one metric family after another, in the order they are exposed.
std::string render_metrics(Fs& f) {
  std::string out;
  auto domains = f.fence().domains().all();
  auto label = [](const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '\\' || c == '"') o += '\\';
      if (c == '\n') {
        o += "\\n";
        continue;
      }
      o += c;
    }
    return o;
  };
  out += fmt::format(
      "# HELP fencefs_info The daemon serving this mount (value 1).\n# TYPE fencefs_info gauge\n"
      "fencefs_info{{mount=\"{}\",backing=\"{}\",pid=\"{}\"}} 1\n",
      label(f.opts().mountpoint), label(f.opts().backing), getpid());
  out += fmt::format(
      "# HELP fencefs_start_time_seconds When the daemon started serving (Unix time).\n"
      "# TYPE fencefs_start_time_seconds gauge\nfencefs_start_time_seconds {}\n",
      std::chrono::duration_cast<std::chrono::seconds>(f.started_wall.time_since_epoch()).count());
  out += "# HELP fencefs_epoch Durable epoch (high-water mark) of each domain.\n";
  out += "# TYPE fencefs_epoch gauge\n";
  for (Domain* d : domains)
    out += fmt::format("fencefs_epoch{{domain=\"{}\"}} {}\n", label(d->path), d->epoch.load());
  out += "# HELP fencefs_operations_total Fenced operations by domain and result.\n";
  out += "# TYPE fencefs_operations_total counter\n";
  for (Domain* d : domains) {
    out += fmt::format("fencefs_operations_total{{domain=\"{}\",result=\"accepted\"}} {}\n",
                       label(d->path), d->accepted.load());
    for (int r = 0; r < static_cast<int>(fence::Reason::kCount); r++)
      out +=
          fmt::format("fencefs_operations_total{{domain=\"{}\",result=\"{}\"}} {}\n",
                      label(d->path), fence::reason_name(fence::Reason(r)), d->refused[r].load());
  }
  out += "# HELP fencefs_advances_total Epoch advances by domain.\n";
  out += "# TYPE fencefs_advances_total counter\n";
  for (Domain* d : domains)
    out += fmt::format("fencefs_advances_total{{domain=\"{}\"}} {}\n", label(d->path),
                       d->advances.load());
  journal::Stats js = f.fence().store().stats();
  out +=
      "# HELP fencefs_journal_bytes Size of the epoch journal.\n# TYPE fencefs_journal_bytes "
      "gauge\n";
  out += fmt::format("fencefs_journal_bytes {}\n", js.journal_bytes);
  out +=
      "# HELP fencefs_journal_syncs_total fdatasync calls on the journal.\n"
      "# TYPE fencefs_journal_syncs_total counter\n";
  out += fmt::format("fencefs_journal_syncs_total {}\n", js.syncs);
  out +=
      "# HELP fencefs_journal_fsync_seconds Latency of the journal's fdatasync per batch.\n"
      "# TYPE fencefs_journal_fsync_seconds histogram\n";
  uint64_t cum = 0;
  for (size_t b = 0; b < journal::Stats::kNumSyncBuckets; b++) {
    cum += js.sync_le[b];
    out += fmt::format("fencefs_journal_fsync_seconds_bucket{{le=\"{}\"}} {}\n",
                       journal::Stats::kSyncBuckets[b], cum);
  }
  out += fmt::format("fencefs_journal_fsync_seconds_bucket{{le=\"+Inf\"}} {}\n", js.syncs);
  out += fmt::format("fencefs_journal_fsync_seconds_sum {}\n", js.sync_seconds_sum);
  out += fmt::format("fencefs_journal_fsync_seconds_count {}\n", js.syncs);
  out += fmt::format(
      "# HELP fencefs_read_opens_total Read-only opens of files, by whether they kept the "
      "kernel's cached pages.\n# TYPE fencefs_read_opens_total counter\n"
      "fencefs_read_opens_total{{cache=\"kept\"}} {}\n"
      "fencefs_read_opens_total{{cache=\"dropped\"}} {}\n",
      f.readcache.kept(), f.readcache.dropped());
  out +=
      "# HELP fencefs_journal_poisoned 1 when a failed fsync stopped all advances.\n"
      "# TYPE fencefs_journal_poisoned gauge\n";
  out += fmt::format("fencefs_journal_poisoned {}\n", f.fence().store().poisoned() ? 1 : 0);
  if (auto* a = f.fence().audit_log()) {
    out +=
        "# HELP fencefs_audit_bytes Size of the current audit log file.\n"
        "# TYPE fencefs_audit_bytes gauge\n";
    out += fmt::format("fencefs_audit_bytes {}\n", a->bytes());
    out +=
        "# HELP fencefs_audit_write_failures_total Audit records that could not be written.\n"
        "# TYPE fencefs_audit_write_failures_total counter\n";
    out += fmt::format("fencefs_audit_write_failures_total {}\n", a->failures());
    out +=
        "# HELP fencefs_audit_suppressed_total Refusals counted but not recorded one by one "
        "(rate limit per uid).\n# TYPE fencefs_audit_suppressed_total counter\n";
    out += fmt::format("fencefs_audit_suppressed_total {}\n", a->suppressed());
  }
  out += "# HELP fencefs_inodes Inodes in the daemon's table.\n# TYPE fencefs_inodes gauge\n";
  out += fmt::format("fencefs_inodes {}\n", f.n_inodes.load());
  FdBudget& b = f.budget();
  out += fmt::format(
      "# HELP fencefs_open_files Files and directories opened through the mount and not yet "
      "released.\n"
      "# TYPE fencefs_open_files gauge\nfencefs_open_files {}\n"
      "# HELP fencefs_open_files_per_user_limit Open files one user may hold (past it only "
      "issuers and jobs bound in the file's domain open more): a sixteenth of the daemon's fd "
      "limit less the FUSE rings' fds.\n"
      "# TYPE fencefs_open_files_per_user_limit gauge\nfencefs_open_files_per_user_limit {}\n"
      "# HELP fencefs_open_files_refused_total Opens refused (EMFILE, ENFILE) to keep fds for "
      "the daemon.\n"
      "# TYPE fencefs_open_files_refused_total counter\nfencefs_open_files_refused_total {}\n",
      b.in_use(), b.per_uid(), b.refused());
  out += fmt::format(
      "# HELP fencefs_build_info The fencefs build serving this mount (value 1).\n"
      "# TYPE fencefs_build_info gauge\nfencefs_build_info{{version=\"{}\",libfuse=\"{}\"}} 1\n",
      FENCEFS_VERSION, label(fuse_pkgversion()));
  out +=
      "# HELP fencefs_last_advance_timestamp_seconds When each domain's epoch last advanced "
      "(Unix time; domains not advanced since the daemon started are absent).\n"
      "# TYPE fencefs_last_advance_timestamp_seconds gauge\n";
  for (Domain* d : domains)
    if (int64_t ns = d->last_advance_unix_ns.load())
      out += fmt::format("fencefs_last_advance_timestamp_seconds{{domain=\"{}\"}} {:.3f}\n",
                         label(d->path), static_cast<double>(ns) / 1e9);
  out +=
      "# HELP fencefs_advance_waiting_seconds How long the oldest advance of each domain has "
      "waited for operations admitted before it to finish (0: none waits).\n"
      "# TYPE fencefs_advance_waiting_seconds gauge\n";
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (Domain* d : domains) {
    int64_t since = d->advance_waiting_since_unix_ns.load();
    out += fmt::format("fencefs_advance_waiting_seconds{{domain=\"{}\"}} {:.3f}\n", label(d->path),
                       since ? static_cast<double>(std::max<int64_t>(0, now - since)) / 1e9 : 0.0);
  }
  fs::WorkerCounts wc = fs::worker_counts();
  out += fmt::format(
      "# HELP fencefs_fuse_workers Threads of the request loop by state (one worker with -s).\n"
      "# TYPE fencefs_fuse_workers gauge\n"
      "fencefs_fuse_workers{{state=\"reading\"}} {}\n"
      "fencefs_fuse_workers{{state=\"busy\"}} {}\n"
      "fencefs_fuse_workers{{state=\"parked\"}} {}\n"
      "# HELP fencefs_fuse_workers_started Threads the request loop has started and not ended.\n"
      "# TYPE fencefs_fuse_workers_started gauge\nfencefs_fuse_workers_started {}\n",
      wc.reading, wc.busy, wc.parked, wc.started);
  out += fmt::format(
      "# HELP fencefs_fuse_ring_threads Threads serving FUSE over io_uring (0: every request "
      "comes through /dev/fuse).\n"
      "# TYPE fencefs_fuse_ring_threads gauge\nfencefs_fuse_ring_threads {}\n"
      "# HELP fencefs_fuse_ring_requests_total Requests served through io_uring.\n"
      "# TYPE fencefs_fuse_ring_requests_total counter\nfencefs_fuse_ring_requests_total {}\n"
      "# HELP fencefs_fuse_ring_replies_handed_over_total Replies to ring requests made on another "
      "thread (an advance's, by the thread that synced it) and committed by the entry's.\n"
      "# TYPE fencefs_fuse_ring_replies_handed_over_total counter\n"
      "fencefs_fuse_ring_replies_handed_over_total {}\n",
      ring::threads(), ring::served(), ring::handed_over());
  out += op_stats::render();
  // Every series names its mount: the pages of several mounts can be merged into one scrape.
  return common::prom_with_label(out, "mount", f.opts().mountpoint);
}

}  // namespace fencefs::fs
