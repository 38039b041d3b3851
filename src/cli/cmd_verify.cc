// fencectl verify: checks BACKING's stamps and the state against each other (docs/audit.md).
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "audit/audit.h"
#include "cli/commands.h"
#include "cli/ctlfile.h"
#include "cli/exit_codes.h"
#include "cli/maintenance.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/json.h"
#include "common/json_writer.h"
#include "common/path.h"
#include "common/proc.h"
#include "fence/backing_scan.h"
#include "fence/highwater.h"
#include "fence/stamp.h"
#include "journal/file_layer.h"
#include "journal/journal.h"

namespace fencefs::cli {
namespace {

using common::under;
using fence::entry_xattr;
using fence::kStampXattr;
using fence::ScanEntry;
using fence::Stamp;
using fence::walk_backing;

// A progress bar on stderr, drawn at most every 100 ms; nothing at all when disabled.
class Progress {
 public:
  explicit Progress(bool on) : on_(on), last_(std::chrono::steady_clock::now()) {}
  ~Progress() { clear(); }
  void set_total(uint64_t total) { total_ = total; }
  void counting(uint64_t n) {
    if (!due()) return;
    fprintf(stderr, "\r\033[Kverify: counting files... %llu", static_cast<unsigned long long>(n));
  }
  void tick(uint64_t done) {
    if (!due()) return;
    uint64_t total = std::max(total_, done);
    int pct = total ? static_cast<int>(done * 100 / total) : 100;
    int fill = pct * 30 / 100;
    fprintf(stderr, "\r\033[Kverify: [%s%s] %3d%% %llu/%llu files", std::string(fill, '#').c_str(),
            std::string(30 - fill, '.').c_str(), pct, static_cast<unsigned long long>(done),
            static_cast<unsigned long long>(total));
  }
  void clear() {
    if (on_ && drawn_) fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  bool due() {
    if (!on_) return false;
    auto now = std::chrono::steady_clock::now();
    // Nothing for a quick run; then a redraw every 100 ms.
    if (now - last_ < std::chrono::milliseconds(drawn_ ? 100 : 250)) return false;
    last_ = now;
    drawn_ = true;
    return true;
  }
  bool on_;
  bool drawn_ = false;
  uint64_t total_ = 0;
  std::chrono::steady_clock::time_point last_;
};

struct DomainEpoch {
  std::string path;
  uint64_t epoch = 0;
  uint64_t files = 0;               // stamped files found in it
  uint32_t id = fence::kAnyDomain;  // unknown for a domain only the daemon's status named
};

// The deepest domain containing rel ("/a/b"); domains sorted deepest first.
DomainEpoch* domain_for(std::vector<DomainEpoch>& domains, const std::string& rel) {
  for (auto& d : domains)
    if (d.path == "/" || under(rel, d.path)) return &d;
  return nullptr;
}

void sort_deepest_first(std::vector<DomainEpoch>& domains) {
  std::sort(domains.begin(), domains.end(), [](const DomainEpoch& a, const DomainEpoch& b) {
    return a.path.size() != b.path.size() ? a.path.size() > b.path.size() : a.path < b.path;
  });
}

struct Finding {
  std::string kind;  // "journal", "rolled back", "changed outside fencefs", "malformed stamp"
  std::string path;  // file (or domain for a rolled-back domain), "" for the journal
  std::string domain;
  std::string message;  // printed after "KIND: ", so it does not repeat the kind
  // Members specific to the kind, written after the common ones.
  std::function<void(common::JsonWriter&)> extra;
};

std::string mtime_str(int64_t sec, int64_t nsec) { return fmt::format("{}.{:09d}", sec, nsec); }

struct StampedFile {
  std::string path;
  Stamp s;
  struct stat st;
};

// One run of verify, stage by stage: where things are, the journal, the walk, the epochs the
// daemon and BACKING's high-water copy add, then every stamp judged; then the report.
struct Verify {
  bool quiet = false;
  std::vector<std::string> cannot;  // reasons the check could not be done (exit 2)
  std::vector<std::string> warnings;
  std::vector<Finding> findings;
  std::string backing, state, mnt;
  const FencefsMount* live = nullptr;
  std::vector<FencefsMount> mounts;
  journal::CheckResult jr;
  std::vector<DomainEpoch> domains;
  std::vector<StampedFile> stamped_files;
  std::map<std::string, uint64_t> own_marks;  // domain roots' own high-water copies
  uint64_t scanned = 0, stamped = 0, unstamped = 0, unreadable = 0;
  bool root_failed = false;

  void locate(const std::string& backing_arg, const std::string& state_arg);
  void check_journal();
  void scan();
  void merge_live_epochs();
  void check_highwater();
  void judge(const StampedFile& f);
  int exit_status() const { return !cannot.empty() ? 2 : findings.empty() ? 0 : 1; }
  void print_json() const;
  void print_text() const;
};

void Verify::locate(const std::string& backing_arg, const std::string& state_arg) {
  char real[PATH_MAX];
  backing = backing_arg;
  struct stat bst;
  errno = 0;
  if (!realpath(backing_arg.c_str(), real) || stat(real, &bst) != 0 || !S_ISDIR(bst.st_mode)) {
    cannot.push_back(fmt::format("backing directory {}: {}", backing_arg,
                                 errno ? common::errstr(errno) : "not a directory"));
  } else {
    backing = real;
  }
  mounts = fencefs_mounts();
  live = cannot.empty() ? mount_of_backing(mounts, backing) : nullptr;
  mnt = live ? live->dir : "";
  std::optional<json::Value> status;
  if (live) status = mount_status(mnt);
  state = state_arg.empty() ? "" : canonical(state_arg);
  if (state.empty()) {
    const json::Value* s = status ? status->get("state") : nullptr;
    state = s && s->type == json::Value::Type::String ? s->str : backing + "/.fencefs";
    // Whoever may write BACKING's root may have put a link there: root reads no state through it.
    if (struct stat st{}; lstat(state.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      cannot.push_back(fmt::format(
          "{} is a symbolic link, not followed (fencefs refuses to mount over one too): give "
          "the state directory with --state",
          state));
  }
  if (cannot.empty() && !has_cap_sys_admin())
    cannot.push_back(
        "stamps live in trusted.* xattrs, which only root (CAP_SYS_ADMIN) can read: run as root");
}

// 1. The journal: framing, CRCs, chaining, order. Retried once when mounted, since a record
// being appended right now can look like a torn tail.
void Verify::check_journal() {
  if (cannot.empty()) {
    jr = journal::check(state, journal::posix_file_layer());
    if (live && !jr.findings.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      jr = journal::check(state, journal::posix_file_layer());
    }
    if (!jr.readable) {
      cannot.push_back("cannot read the state in " + state);
      for (auto& f : jr.findings) cannot.push_back(f);
    } else {
      for (auto& f : jr.findings) findings.push_back({"journal", "", "", f, {}});
    }
  }
  for (auto& d : jr.domains) domains.push_back({d.path, d.epoch, 0, d.id});
  sort_deepest_first(domains);
}

void Verify::scan() {
  Progress bar(!quiet && isatty(STDERR_FILENO));
  if (isatty(STDERR_FILENO) && !quiet) {
    uint64_t total = 0;
    walk_backing(
        backing,
        [&](const ScanEntry&) {
          total++;
          bar.counting(total);
        },
        [](const std::string&, int) {});
    bar.set_total(total);
  }
  walk_backing(
      backing,
      [&](const ScanEntry& e) {
        scanned++;
        bar.tick(scanned);
        char buf[256];
        ssize_t n = entry_xattr(e, kStampXattr, buf, sizeof buf);
        if (n < 0) {
          if (errno == ENODATA || errno == ENOTSUP) {
            unstamped++;
          } else {
            unreadable++;
            warnings.push_back(
                fmt::format("{}: cannot read its stamp: {}", e.rel, common::errstr(errno)));
          }
          return;
        }
        std::string_view v(buf, static_cast<size_t>(n));
        auto s = fence::decode_stamp(v);
        if (!s) {
          findings.push_back(
              {"malformed stamp", e.rel, "", fmt::format("{}: '{}'", e.rel, v),
               [v = std::string(v)](common::JsonWriter& w) { w.member("stamp", v); }});
          return;
        }
        stamped++;
        stamped_files.push_back({e.rel, *s, e.st});
      },
      [&](const std::string& rel, int err) {
        if (rel == "/") {
          root_failed = true;
          cannot.push_back(fmt::format("cannot read {}: {}", backing, common::errstr(err)));
        } else {
          unreadable++;
          warnings.push_back(fmt::format("{}: {}", rel, common::errstr(err)));
        }
      },
      [&](const std::string& rel) {
        warnings.push_back(fmt::format(
            "{}: a FUSE filesystem that a user mounted, not checked: its stamps are no evidence",
            rel));
      },
      [&](const ScanEntry& e) {
        if (uint64_t mark = fence::own_mark(e)) own_marks[e.rel] = mark;
      });
  bar.clear();
}

// 2. Mounted: epochs may have advanced while we walked; the daemon's durable epochs count too (a
// stamp is written only after its epoch is durable).
void Verify::merge_live_epochs() {
  if (!live || root_failed) return;
  auto st2 = mount_status(mnt);
  if (!st2) {
    warnings.push_back("mounted at " + mnt + " but its status could not be read");
    return;
  }
  const json::Value* ds = st2->get("domains");
  if (!ds) return;
  for (const auto& d : ds->arr) {
    const json::Value* p = d.get("path");
    const json::Value* ep = d.get("epoch");
    if (!p || !ep) continue;
    auto it = std::find_if(domains.begin(), domains.end(),
                           [&](const DomainEpoch& x) { return x.path == p->str; });
    if (it == domains.end()) {
      domains.push_back({p->str, ep->as_u64(), 0});
    } else {
      it->epoch = std::max(it->epoch, ep->as_u64());
    }
  }
  sort_deepest_first(domains);
}

// 3. BACKING's high-water copy of every domain's epoch.
void Verify::check_highwater() {
  int hwerr = 0;
  std::vector<std::string> paths;
  for (const DomainEpoch& d : domains) paths.push_back(d.path);
  auto marks = fence::read_highwater(backing, paths, &hwerr);
  for (auto& [path, mark] : own_marks) marks[path] = std::max(marks[path], mark);
  for (auto& [path, hw] : marks) {
    auto it = std::find_if(domains.begin(), domains.end(),
                           [&p = path](const DomainEpoch& x) { return x.path == p; });
    if (it == domains.end()) {
      warnings.push_back(fmt::format(
          "BACKING's high-water copy names domain {} (epoch {}), unknown to the state", path, hw));
    } else if (hw > it->epoch) {
      findings.push_back(
          {"rolled back", path, path,
           fmt::format("domain {}: BACKING's high-water copy says epoch {}, the state only {}: "
                       "the state was rolled back (restored from an older copy?)",
                       path, hw, it->epoch),
           [h = hw, e = it->epoch](common::JsonWriter& w) {
             w.member("stamp_epoch", h).member("domain_epoch", e);
           }});
    }
  }
  if (hwerr)
    warnings.push_back(
        fmt::format("cannot read the high-water copy on {}: {}", backing, common::errstr(hwerr)));
}

// 4. A stamp against its domain's epoch, and the file against its stamp.
void Verify::judge(const StampedFile& f) {
  DomainEpoch* d = domain_for(domains, f.path);
  if (!d) {
    warnings.push_back(f.path + ": no domain holds it (the state has no root domain)");
    return;
  }
  d->files++;
  // A stamp is judged against the domain that issued it (older stamps name none: the file's
  // domain); another domain's epoch is no evidence about this one's.
  const DomainEpoch* issuer = d;
  if (f.s.domain != fence::kAnyDomain && f.s.domain != d->id) {
    issuer = nullptr;
    for (const auto& x : domains)
      if (x.id == f.s.domain) issuer = &x;
  }
  if (issuer && f.s.epoch > issuer->epoch) {
    findings.push_back(
        {"rolled back", f.path, issuer->path,
         fmt::format("{}: stamp epoch {} > epoch {} of domain {}: the state was rolled back",
                     f.path, f.s.epoch, issuer->epoch, issuer->path),
         [s = f.s.epoch, e = issuer->epoch](common::JsonWriter& w) {
           w.member("stamp_epoch", s).member("domain_epoch", e);
         }});
  }
  bool size_diff = f.s.has_size && f.s.size != static_cast<uint64_t>(f.st.st_size);
  bool mtime_diff = f.s.has_mtime && (f.s.mtime_sec != f.st.st_mtim.tv_sec ||
                                      f.s.mtime_nsec != f.st.st_mtim.tv_nsec);
  if (!size_diff && !mtime_diff) return;
  std::string what;
  if (size_diff) what += fmt::format("size {} (stamp {})", f.st.st_size, f.s.size);
  if (mtime_diff)
    what += fmt::format("{}mtime {} (stamp {})", what.empty() ? "" : ", ",
                        mtime_str(f.st.st_mtim.tv_sec, f.st.st_mtim.tv_nsec),
                        mtime_str(f.s.mtime_sec, f.s.mtime_nsec));
  findings.push_back(
      {"changed outside fencefs", f.path, d->path,
       fmt::format("{}: {}{}", f.path, what,
                   live ? " (or still open for writing through the mount)" : ""),
       [size = static_cast<int64_t>(f.st.st_size), stamp_size = f.s.size,
        mtime = mtime_str(f.st.st_mtim.tv_sec, f.st.st_mtim.tv_nsec),
        stamp_mtime = mtime_str(f.s.mtime_sec, f.s.mtime_nsec)](common::JsonWriter& w) {
         w.member("size", size).member("stamp_size", stamp_size);
         w.member("mtime", mtime).member("stamp_mtime", stamp_mtime);
       }});
}

void Verify::print_json() const {
  int rc = exit_status();
  std::string out;
  common::JsonWriter w(&out);
  w.begin_object().member("backing", backing).member("state", state);
  w.member("mounted", live != nullptr).member("mountpoint", mnt);
  w.member("status", rc == 0 ? "clean" : rc == 1 ? "findings" : "error");
  w.member("exit", rc).member("clean", rc == 0);
  w.key("errors").begin_array();
  for (const auto& c : cannot) w.value(c);
  w.end_array();
  w.key("journal").begin_object().member("readable", jr.readable).key("findings").begin_array();
  for (const auto& f : jr.findings) w.value(f);
  w.end_array().end_object();
  std::vector<DomainEpoch> by_path = domains;
  std::sort(by_path.begin(), by_path.end(),
            [](const DomainEpoch& a, const DomainEpoch& b) { return a.path < b.path; });
  w.key("domains").begin_array();
  for (const auto& d : by_path) {
    w.begin_object()
        .member("path", d.path)
        .member("epoch", d.epoch)
        .member("epoch_str", std::to_string(d.epoch));
    w.member("stamped_files", d.files).end_object();
  }
  w.end_array();
  w.key("files").begin_object().member("regular", scanned).member("stamped", stamped);
  w.member("unstamped", unstamped).member("unreadable", unreadable).end_object();
  w.key("findings").begin_array();
  for (const Finding& f : findings) {
    w.begin_object().member("kind", f.kind).member("path", f.path).member("domain", f.domain);
    w.member("message", f.message);
    if (f.extra) f.extra(w);
    w.end_object();
  }
  w.end_array().key("warnings").begin_array();
  for (const auto& x : warnings) w.value(x);
  w.end_array().end_object();
  std::cout << out << "\n";
}

void Verify::print_text() const {
  int rc = exit_status();
  for (const auto& c : cannot) fail("verify: " + c);
  for (const auto& f : findings) std::cout << f.kind << ": " << f.message << "\n";
  if (quiet) return;
  for (const auto& w : warnings) std::cerr << "fencectl: verify: warning: " << w << "\n";
  if (rc == 2) return;
  std::cout << fmt::format(
      "verify {}{}: journal {}, {} domain(s), {} regular file(s): {} stamped, {} without a "
      "stamp{}\n",
      backing, live ? " (mounted at " + mnt + ")" : "", jr.findings.empty() ? "ok" : "DAMAGED",
      domains.size(), scanned, stamped, unstamped,
      unreadable ? fmt::format(", {} unreadable", unreadable) : "");
  std::cout << (rc == 0 ? "clean\n" : fmt::format("{} finding(s)\n", findings.size()));
}

}  // namespace

int cmd_verify(const Args& args) {
  Parsed p = parse_command(*find_command("verify"), args);
  std::string state_arg = p.value("state");
  bool as_json = p.flag("json");
  if (p.positional.size() != 1) usage_error("verify: expected one BACKING");
  raise_fd_limit();
  Verify v;
  v.quiet = p.flag("quiet");
  v.locate(p.positional[0], state_arg);
  v.check_journal();
  if (v.cannot.empty()) {
    v.scan();
    v.merge_live_epochs();
    v.check_highwater();
    for (const auto& f : v.stamped_files) v.judge(f);
  }
  if (as_json) {
    v.print_json();
  } else {
    v.print_text();
  }
  return v.exit_status();
}

}  // namespace fencefs::cli
