// fencectl recover: raises every domain of a stopped daemon's state to a floor (docs/audit.md).
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
#include "common/anchored.h"
#include "common/error.h"
#include "common/json.h"
#include "common/json_writer.h"
#include "common/parse.h"
#include "common/path.h"
#include "common/proc.h"
#include "fence/backing_scan.h"
#include "fence/stamp.h"
#include "journal/file_layer.h"
#include "journal/journal.h"
#include "journal/state_files.h"

namespace fencefs::cli {
namespace {

using common::errname;
using common::parse_u64;
using common::under;

// Processes that hold files of the state directory open (the daemon keeps its journal and
// audit log open), except this one.
std::vector<std::string> state_holders(const std::string& dir, bool* incomplete) {
  std::vector<std::string> out;
  DIR* proc = opendir("/proc");
  if (!proc) {
    *incomplete = true;
    return out;
  }
  pid_t self = getpid();
  while (dirent* e = readdir(proc)) {
    std::string_view name(e->d_name);
    uint64_t v = 0;
    if (!parse_u64(name, &v) || v == 0 || v > INT_MAX) continue;
    pid_t pid = static_cast<pid_t>(v);
    if (pid == self) continue;
    std::string fddir = "/proc/" + std::string(name) + "/fd";
    DIR* fds = opendir(fddir.c_str());
    if (!fds) {
      if (errno == EACCES) *incomplete = true;
      continue;
    }
    std::string hit;
    while (dirent* f = readdir(fds)) {
      if (f->d_name[0] == '.') continue;
      char buf[PATH_MAX];
      ssize_t n = readlink((fddir + "/" + f->d_name).c_str(), buf, sizeof buf - 1);
      if (n <= 0) continue;
      std::string target(buf, static_cast<size_t>(n));
      if (under(target, dir)) {
        hit = target;
        break;
      }
    }
    closedir(fds);
    if (!hit.empty())
      out.push_back(fmt::format("pid {} ({}) has {} open", pid, proc::comm_of(pid), hit));
  }
  closedir(proc);
  return out;
}

// What recover --json prints when it did not start.
void print_refusal_json(const std::string& dir, uint64_t floor, bool in_use, int err,
                        const char* name, const std::vector<std::string>& report) {
  std::string out;
  common::JsonWriter w(&out);
  w.begin_object()
      .member("state", dir)
      .member("floor", floor)
      .member("ok", false)
      .member("in_use", in_use)
      .member("errno", err)
      .member("error", name)
      .key("report")
      .begin_array();
  for (auto& r : report) w.value(r);
  w.end_array().key("domains").begin_array().end_array();
  w.key("warnings").begin_array().end_array().end_object();
  std::cout << out << "\n";
}

// Whether a mount or a process uses the state directory; if so, says who (false when free).
bool in_use(const std::string& dir, uint64_t floor, bool as_json, bool* incomplete) {
  std::vector<std::string> users;
  for (const auto& m : fencefs_mounts())
    if (canonical(m.backing + "/.fencefs") == dir)
      users.push_back(
          fmt::format("it is the state of the fencefs mount at {} (backing {})", m.dir, m.backing));
  for (auto& u : state_holders(dir, incomplete)) users.push_back(u);
  if (users.empty()) return false;
  if (as_json) {
    print_refusal_json(dir, floor, true, EBUSY, "EBUSY", users);
  } else {
    fail("recover: " + dir + " is in use; unmount fencefs first:");
    for (auto& u : users) std::cerr << "  " << u << "\n";
  }
  return true;
}

std::vector<std::string> nonempty_lines(const std::string& report) {
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < report.size();) {
    size_t nl = report.find('\n', pos);
    std::string l = report.substr(pos, nl == std::string::npos ? nl : nl - pos);
    if (!l.empty()) lines.push_back(l);
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return lines;
}

// Appends the recovery (done or failed) to the state's audit log; false when that failed.
bool record_recovery(const std::string& dir, uint64_t floor, int rc,
                     const std::vector<std::string>& lines) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return true;
  audit::Options ao;
  ao.dir = dir;
  audit::Log log(ao);
  audit::Event e;
  e.op = "recover";
  e.decision = rc == 0 ? "recovered" : "failed";
  e.epoch_after = floor;
  e.err = rc;
  e.pid = getpid();
  e.uid = getuid();
  e.gid = getgid();
  e.comm = "fencectl";
  e.message = fmt::format("fencectl recover --floor {}: ", floor);
  for (size_t i = 0; i < lines.size(); i++) e.message += (i ? "; " : "") + lines[i];
  log.record(e);
  return log.failures() == 0;
}

// It writes there as root, as the daemon does: through the directory it checked. A link in
// the way (BACKING/.fencefs, the default) that others may have put there is not followed.
int open_checked_state(const std::string& state_arg, const std::string& dir, std::string* why) {
  std::string named = common::with_canonical_parent(state_arg).value_or(dir);
  if (!journal::state_link_acceptable(named, dir, "", why)) return -1;
  return journal::open_private_state_dir(dir, named == dir, why);
}

// What recover --json prints once the state was found free.
std::string result_json(const std::string& dir, uint64_t floor, int rc, uint64_t highest,
                        const std::vector<std::string>& lines,
                        const std::vector<journal::DomainRecord>& after,
                        const std::vector<std::string>& warnings) {
  std::string out;
  common::JsonWriter w(&out);
  w.begin_object()
      .member("state", dir)
      .member("floor", floor)
      .member("ok", rc == 0)
      .member("in_use", false)
      .member("errno", rc)
      .member("error", rc ? errname(rc) : "")
      .member("highest_stamp", highest)
      .key("report")
      .begin_array();
  for (auto& l : lines) w.value(l);
  w.end_array().key("domains").begin_array();
  for (auto& d : after)
    w.begin_object()
        .member("id", d.id)
        .member("path", d.path)
        .member("epoch", d.epoch)
        .end_object();
  w.end_array().key("warnings").begin_array();
  for (auto& warning : warnings) w.value(warning);
  w.end_array().end_object();
  out += '\n';
  return out;
}

// Domains that BACKING's high-water copies name and the recovered state lacks: declared in the
// discarded part of the journal. Their trees now belong to the enclosing domain.
void lost_domains(const std::map<std::string, uint64_t>& highwater,
                  const std::vector<journal::DomainRecord>& after, uint64_t floor,
                  std::vector<std::string>* warnings) {
  std::set<std::string> kept;
  for (auto& d : after) kept.insert(d.path);
  for (auto& [path, epoch] : highwater) {
    if (kept.count(path)) continue;
    warnings->push_back(fmt::format(
        "domain {} (epoch {} in BACKING's high-water copy) is not in the recovered state: it was "
        "declared in the part of the journal that was discarded, and its tree now belongs to "
        "the enclosing domain. Declared again, it starts at epoch 0 and refuses tokens below {} "
        "(the copy may lag the lost journal): mount, declare it (fencectl domain add) and "
        "advance it to {} before any job uses it",
        path, epoch, epoch, std::max<uint64_t>(epoch + 1, floor)));
  }
}

}  // namespace

int cmd_recover(const Args& args) {
  Parsed p = parse_command(*find_command("recover"), args);
  std::string state_arg = p.value("state"), floor_arg = p.value("floor"),
              backing_arg = p.value("backing");
  bool as_json = p.flag("json");
  if (!p.positional.empty()) usage_error("recover: unexpected argument " + p.positional[0]);
  if (state_arg.empty() || floor_arg.empty())
    usage_error("recover: --state DIR and --floor N are required");
  uint64_t floor = 0;
  if (!parse_u64(floor_arg, &floor) || floor > kMaxToken)
    usage_error("recover: --floor must be a decimal epoch from 0 to 9223372036854775807");
  std::string dir = canonical(state_arg);

  // Never under a running daemon: it would overwrite the recovered state with its own.
  bool incomplete = false;
  if (in_use(dir, floor, as_json, &incomplete)) return exit_code::kFailed;
  std::string why;
  int dfd = open_checked_state(state_arg, dir, &why);
  if (dfd < 0) {
    if (as_json)
      print_refusal_json(dir, floor, false, EPERM, "EPERM", {why});
    else
      fail("recover: " + why);
    return exit_code::kFailed;
  }
  common::anchor_dir(dir, dfd);

  std::string report;
  int rc = journal::recover_offline(dir, floor, journal::posix_file_layer(), &report);
  std::vector<std::string> lines = nonempty_lines(report);
  std::vector<std::string> warnings;
  if (incomplete)
    warnings.push_back(
        "could not inspect every process (not root?): make sure no fencefs daemon "
        "uses " +
        dir);

  // The audit trail of the state records every recovery, done or failed.
  if (!record_recovery(dir, floor, rc, lines))
    warnings.push_back("could not append the audit record to " + dir);

  std::vector<journal::DomainRecord> after;
  if (rc == 0) after = journal::check(dir, journal::posix_file_layer()).domains;
  // Stamps above the floor keep their domains refusing lower tokens (EIO, "rollback").
  std::string backing = backing_arg.empty() ? "" : canonical(backing_arg);
  if (backing.empty() && dir.size() > 9 && dir.compare(dir.size() - 9, 9, "/.fencefs") == 0)
    backing = dir.substr(0, dir.size() - 9);
  uint64_t highest = 0;
  if (rc == 0 && !backing.empty() && has_cap_sys_admin()) {
    raise_fd_limit();
    fence::StampScan scan = fence::scan_stamps(backing);
    lost_domains(scan.highwater, after, floor, &warnings);
    highest = scan.highest;
    uint64_t lowest = UINT64_MAX;
    for (auto& d : after) lowest = std::min(lowest, d.epoch);
    if (highest > floor && !after.empty() && highest > lowest)
      warnings.push_back(fmt::format(
          "files in {} carry stamps up to epoch {}, above the floor {}: domains below it refuse "
          "tokens lower than their files' stamps (EIO, reason rollback). Run recover again with "
          "--floor {} to heal them all",
          backing, highest, floor, highest));
  }

  if (as_json) {
    std::cout << result_json(dir, floor, rc, highest, lines, after, warnings);
    return rc == 0 ? 0 : exit_code::kFailed;
  }
  for (auto& l : lines) std::cout << l << "\n";
  for (auto& w : warnings) std::cerr << "fencectl: recover: warning: " << w << "\n";
  if (rc != 0) {
    fail(fmt::format("recover: failed: {} ({})", errname(rc), common::errstr(rc)));
    return exit_code::kFailed;
  }
  std::cout << fmt::format(
      "recovered {}: every domain is at epoch >= {}; recorded in {}/audit.log\n", dir, floor, dir);
  return 0;
}

}  // namespace fencefs::cli
