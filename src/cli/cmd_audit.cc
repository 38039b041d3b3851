// fencectl audit: reads, filters, sums up and follows the audit trail (docs/audit.md).
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
#include "common/path.h"
#include "common/proc.h"
#include "fence/stamp.h"
#include "journal/file_layer.h"
#include "journal/journal.h"

namespace fencefs::cli {
namespace {

// --summary: matching records counted by decision and reason, by process and by command.
template <typename Rows>
void print_audit_summary(const Rows& rows, bool as_json) {
  std::map<std::string, uint64_t> by_reason, by_process, by_comm;
  for (const auto& r : rows) {
    by_reason[r.cols[1] + "/" + r.cols[2]]++;
    by_process[r.cols[8] + " " + r.cols[9]]++;
    by_comm[r.cols[9]]++;
  }
  if (as_json) {
    auto obj = [](const std::map<std::string, uint64_t>& m) {
      std::string o = "{";
      for (const auto& [k, n] : m) o += (o.size() > 1 ? "," : "") + q(k) + ":" + std::to_string(n);
      return o + "}";
    };
    std::cout << "{\"records\":" << rows.size() << ",\"by_reason\":" << obj(by_reason)
              << ",\"by_process\":" << obj(by_process) << ",\"by_command\":" << obj(by_comm)
              << "}\n";
    return;
  }
  std::cout << "records: " << rows.size() << "\n";
  auto section = [](const char* title, const std::map<std::string, uint64_t>& m) {
    std::vector<std::pair<uint64_t, std::string>> v;
    v.reserve(m.size());
    for (const auto& [k, n] : m) v.push_back({n, k});
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::cout << "\n" << title << "\n";
    for (const auto& [n, k] : v) std::cout << fmt::format("  {:>8}  {}\n", n, k);
  };
  section("by decision/reason:", by_reason);
  section("by process (pid command):", by_process);
  section("by command:", by_comm);
}

struct Row {
  std::string cols[10];
  std::string message;
};

struct Filter {
  std::vector<std::string> decisions;  // empty: any
  std::string domain;                  // empty: any
  std::optional<int64_t> since;

  // The row of a record that passes the filters; nullopt for one that does not.
  std::optional<Row> match(const json::Value& v) const {
    auto str = [&](const char* k) {
      const json::Value* x = v.get(k);
      return x ? x->as_string() : std::string();
    };
    if (!decisions.empty() &&
        std::find(decisions.begin(), decisions.end(), str("decision")) == decisions.end())
      return std::nullopt;
    if (!domain.empty() && str("domain") != domain) return std::nullopt;
    if (since) {
      auto t = audit::parse_iso_time(str("time"));
      if (!t || *t < *since) return std::nullopt;
    }
    Row r;
    std::string t = str("time");
    if (t.size() > 23 && t.back() == 'Z') t = t.substr(0, 23) + "Z";  // milliseconds
    std::string before = str("epoch_before"), after = str("epoch_after");
    std::string path = str("path");
    if (!str("path2").empty()) path += " -> " + str("path2");
    auto dash = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
    r.cols[0] = t;
    r.cols[1] = dash(str("decision"));
    r.cols[2] = dash(str("reason"));
    r.cols[3] = dash(str("op"));
    r.cols[4] = dash(str("domain"));
    r.cols[5] = dash(path);
    r.cols[6] = dash(str("token"));
    r.cols[7] = before == after ? dash(after) : before + "->" + after;
    r.cols[8] = dash(str("pid"));
    r.cols[9] = dash(str("comm"));
    r.message = str("message");
    if (!str("error").empty()) r.message = str("error") + ": " + r.message;
    // Every field as the terminal will show it: a name cannot forge a row or send escapes.
    for (auto& col : r.cols) col = audit::display_escape(col);
    r.message = audit::display_escape(r.message);
    return r;
  }
};

// --decision a,b: each one a decision a record can carry (docs/audit.md); "accepted" is
// counted, never logged.
std::vector<std::string> parse_decisions(const std::string& decisions_arg) {
  static const char* const kDecisions[] = {"refused",  "advanced", "bound",     "unbound",
                                           "declared", "info",     "recovered", "failed",
                                           "detected", "accepted"};
  std::vector<std::string> decisions;
  for (size_t pos = 0; !decisions_arg.empty() && pos <= decisions_arg.size();) {
    size_t c = decisions_arg.find(',', pos);
    std::string d = decisions_arg.substr(pos, c == std::string::npos ? c : c - pos);
    if (!d.empty()) {
      if (std::find_if(std::begin(kDecisions), std::end(kDecisions),
                       [&](const char* k) { return d == k; }) == std::end(kDecisions))
        usage_error("audit: unknown decision '" + d +
                    "' (refused, advanced, bound, unbound, declared, info, recovered, failed, "
                    "detected, accepted)");
      decisions.push_back(d);
    }
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return decisions;
}

// The rows in aligned columns under a header.
class Table {
 public:
  explicit Table(const std::vector<Row>& rows) {
    for (int c = 0; c < 10; c++) {
      w_[c] = strlen(kHead[c]);
      for (const auto& r : rows) w_[c] = std::max(w_[c], r.cols[c].size());
    }
  }
  void print_head() const {
    std::string head[10];
    for (int c = 0; c < 10; c++) head[c] = kHead[c];
    print(head);
  }
  void print(const std::string* cols) const {
    std::string l;
    for (int c = 0; c < 10; c++) {
      l += cols[c];
      if (c < 9) l += std::string(w_[c] > cols[c].size() ? w_[c] - cols[c].size() + 2 : 2, ' ');
    }
    std::cout << l << "\n";
  }

 private:
  static constexpr const char* kHead[10] = {"TIME", "DECISION", "REASON", "OP",  "DOMAIN",
                                            "PATH", "TOKEN",    "EPOCH",  "PID", "COMM"};
  size_t w_[10];
};

// Where the reading stopped in the current file (audit.log), for --follow.
struct ReadPoint {
  std::string current;
  ino_t ino = 0;
  off_t off = 0;
};

// Hands every complete line of *pending to emit, keeping the incomplete rest.
void drain_lines(std::string* pending, const std::function<void(const std::string&)>& emit) {
  for (size_t nl; (nl = pending->find('\n')) != std::string::npos;) {
    emit(pending->substr(0, nl));
    pending->erase(0, nl + 1);
  }
}

// The "time" of a log file's first record (records are appended in time order), "" if none.
std::string first_time(int fd) {
  char buf[4096];
  ssize_t n = pread(fd, buf, sizeof buf, 0);
  std::string_view head(buf, n > 0 ? static_cast<size_t>(n) : 0);
  size_t at = head.find("\"time\":\"");
  if (at == std::string_view::npos || at > head.find('\n')) return "";
  head.remove_prefix(at + 8);
  return std::string(head.substr(0, head.find('"')));
}

// Emits the complete lines of every rotated file whose inode is not in *done, oldest first, and
// adds it there. Each file is opened before its inode is taken, so a rename in between cannot
// make one file count for another. Names shift at every rotation, also while this looks: the
// files are gathered until a look finds no new one, then ordered by their first record's time,
// not by the names they had when seen.
void read_rotated(const std::string& state, const std::string& current, std::set<ino_t>* done,
                  const std::function<void(const std::string&)>& emit) {
  struct Unread {
    std::string first;
    int fd;
  };
  std::vector<Unread> found;
  std::set<ino_t> seen;
  for (bool more = true; more;) {
    more = false;
    for (const std::string& f : audit::log_files(state)) {
      if (f == current) continue;
      struct stat rst;
      int rfd = audit::open_regular(f, O_RDONLY, 0, &rst);
      if (rfd < 0) continue;
      if (done->count(rst.st_ino) || !seen.insert(rst.st_ino).second) {
        close(rfd);
        continue;
      }
      found.push_back({first_time(rfd), rfd});
      done->insert(rst.st_ino);
      more = true;
    }
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const Unread& x, const Unread& y) { return x.first < y.first; });
  for (const Unread& u : found) {
    std::string text;
    char buf[65536];
    for (ssize_t m; (m = read(u.fd, buf, sizeof buf)) > 0;) {
      text.append(buf, static_cast<size_t>(m));
      drain_lines(&text, emit);  // a rotated file is complete: a cut last line stays unprinted
    }
    close(u.fd);
  }
}

// Whether a rotated file other than inode `except` has not been read yet. Only regular files
// count: read_rotated never reads anything else, so nothing else could ever be read.
bool unread_rotated(const std::string& state, const std::string& current,
                    const std::set<ino_t>& done, ino_t except) {
  for (const std::string& f : audit::log_files(state)) {
    struct stat rst;
    if (f != current && lstat(f.c_str(), &rst) == 0 && S_ISREG(rst.st_mode) &&
        rst.st_ino != except && !done.count(rst.st_ino))
      return true;
  }
  return false;
}

// --follow: new records of audit.log as they come, across rotation. A rotation renames
// audit.log to audit.log.1 (and so on) and starts a new one, maybe several times between two
// looks: the file followed is read to its end, then every rotated file not read yet, oldest
// first, then the new audit.log; if it rotated again meanwhile, the round is repeated.
[[noreturn]] void follow_log(const std::string& state, const ReadPoint& at,
                             const std::function<void(const std::string&)>& emit) {
  const std::string& current = at.current;
  off_t current_off = at.off;
  std::set<ino_t> done;  // files read to their end
  for (const std::string& f : audit::log_files(state)) {
    struct stat fst;
    if (f != current && stat(f.c_str(), &fst) == 0) done.insert(fst.st_ino);
  }
  struct stat fst;
  int fd = audit::open_regular(current, O_RDONLY, 0, &fst);
  if (fd >= 0 && fst.st_ino != at.ino) current_off = 0;
  std::string pending;
  for (;;) {
    char buf[65536];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf, current_off) : 0;
    if (n > 0) {
      current_off += n;
      pending.append(buf, static_cast<size_t>(n));
      drain_lines(&pending, emit);
      std::cout << std::flush;
      continue;
    }
    struct stat now;
    if (stat(current.c_str(), &now) == 0 && (fd < 0 || now.st_ino != fst.st_ino)) {
      if (fd >= 0) {
        // What was appended to the old file after the last look, before the rotation.
        for (ssize_t m; (m = pread(fd, buf, sizeof buf, current_off)) > 0;) {
          current_off += m;
          pending.append(buf, static_cast<size_t>(m));
        }
        drain_lines(&pending, emit);
        done.insert(fst.st_ino);
        close(fd);
      }
      for (;;) {
        read_rotated(state, current, &done, emit);
        fd = audit::open_regular(current, O_RDONLY, 0, &fst);
        if (fd < 0 || !unread_rotated(state, current, done, fst.st_ino)) break;
        close(fd);  // rotated again before it was opened: the older file first
      }
      current_off = 0;
      pending.clear();
      std::cout << std::flush;
      if (fd < 0) usleep(100 * 1000);  // not a regular file (or gone): look again later
      continue;
    }
    usleep(100 * 1000);
  }
}

// Reads the whole trail, in order: matching records printed as they are (print_lines) or kept as
// rows. False when a file of it could not be read.
bool read_trail(const std::string& state, const Filter& filter, bool print_lines,
                std::vector<Row>* rows, ReadPoint* at) {
  bool unreadable = false;
  uint64_t bad = 0;
  std::string first_bad;
  const std::string& current = at->current;
  // Epoch changes rotated out of the logs come from the epochs trail, then the logs.
  for (const std::string& u : audit::for_each_record(
           state, [&](const std::string&line, const std::string&where, bool complete) {
             bool in_current = where.compare(0, current.size() + 1, current + ":") == 0;
             if (in_current && complete) at->off += static_cast<off_t>(line.size() + 1);
             auto v = json::parse(line);
             if (!v || v->type != json::Value::Type::Object) {
               if (complete && bad++ == 0) first_bad = where;
               return;
             }
             auto r = filter.match(*v);
             if (!r) return;
             if (print_lines)
               std::cout << line << "\n";
             else
               rows->push_back(std::move(*r));
           })) {
    fail("audit: cannot read " + u);
    unreadable = true;
  }
  if (struct stat fst; stat(current.c_str(), &fst) == 0) at->ino = fst.st_ino;
  if (bad)
    fail(fmt::format("audit: {} unreadable line(s) skipped (the first at {})", bad, first_bad));
  return !unreadable;
}

// The state directory of the daemon serving `mount`, from its status; "" (said) when unreadable.
std::string state_of_mount(const std::string& mount) {
  std::string root = mount_or_exit(mount, "audit");
  auto st = mount_status(root);
  const json::Value* s = st ? st->get("state") : nullptr;
  if (!s || s->type != json::Value::Type::String) {
    fail("audit: cannot read the state directory from " + root + "/.fencefs/status");
    return "";
  }
  return s->str;
}

// Checks the state directory; false (said) when it is not one or cannot be read.
bool state_readable(const std::string& state) {
  struct stat sst;
  errno = 0;
  if (stat(state.c_str(), &sst) != 0 || !S_ISDIR(sst.st_mode)) {
    fail("audit: state directory " + state + ": " +
         (errno ? common::errstr(errno) : "not a directory"));
    return false;
  }
  return true;
}

}  // namespace

int cmd_audit(const Args& args) {
  Parsed p = parse_command(*find_command("audit"), args);
  std::string mount = p.value("mount"), state = p.value("state"), since_arg = p.value("since");
  bool as_json = p.flag("json"), verbose = p.flag("verbose");
  bool follow = p.flag("follow"), summary = p.flag("summary");
  Filter filter;
  filter.domain = p.value("domain");
  if (follow && summary) usage_error("audit: --follow and --summary do not go together");
  if (!p.positional.empty()) usage_error("audit: unexpected argument " + p.positional[0]);
  if (mount.empty() == state.empty()) usage_error("audit: give --mount M or --state DIR");
  if (!mount.empty() && (state = state_of_mount(mount)).empty()) return exit_code::kFailed;
  if (!state_readable(state)) return exit_code::kFailed;
  if (!since_arg.empty()) {
    filter.since = audit::parse_since(since_arg, audit::now_unix_ns());
    if (!filter.since)
      usage_error(
          "audit: --since takes an ISO 8601 time (2026-12-02T10:00:00Z) or a duration "
          "(90s, 10m, 2h, 1d, 1w)");
  }
  filter.decisions = parse_decisions(p.value("decision"));
  // An unreadable trail is an error, not an empty one.
  if (access(state.c_str(), R_OK | X_OK) != 0) {
    fail("audit: cannot read the audit trail in " + state + ": " + common::errstr(errno) +
         " (the state directory is readable by root only)");
    return exit_code::kFailed;
  }
  bool unreadable = false;
  std::string& domain = filter.domain;
  if (!domain.empty()) {
    while (domain.size() > 1 && domain.back() == '/') domain.pop_back();
    if (domain[0] != '/') usage_error("audit: --domain takes a domain path such as / or /jobs/a");
  }

  std::vector<Row> rows;
  ReadPoint at{state + "/audit.log"};
  if (!read_trail(state, filter, as_json && !summary, &rows, &at)) unreadable = true;
  int status = unreadable ? exit_code::kFailed : 0;
  if (summary) {
    print_audit_summary(rows, as_json);
    return status;
  }
  Table table(rows);
  if (!as_json) {
    table.print_head();
    for (auto& r : rows) {
      table.print(r.cols);
      if (verbose && !r.message.empty()) std::cout << "    " << r.message << "\n";
    }
    if (rows.empty() && !unreadable && !follow)
      std::cerr << "fencectl: audit: no matching records in " << state << "\n";
  }
  if (!follow) return status;
  std::cout << std::flush;
  follow_log(state, at, [&](const std::string& line) {
    auto v = json::parse(line);
    if (!v || v->type != json::Value::Type::Object) return;
    auto r = filter.match(*v);
    if (!r) return;
    if (as_json) {
      std::cout << line << "\n";
    } else {
      table.print(r->cols);
      if (verbose && !r->message.empty()) std::cout << "    " << r->message << "\n";
    }
  });
}

}  // namespace fencefs::cli
