// run, advance, sign, domain, status.
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/ctlfile.h"
#include "common/json.h"
#include "fence/token.h"

namespace fencefs::cli {
namespace {

std::string errname(int err) {
  const char* n = strerrorname_np(err);
  return n ? n : std::to_string(err);
}

std::string need_mount(const std::string& m) {
  if (m.empty()) usage_error("--mount M is required");
  std::string root = find_mount(m);
  if (root.empty()) {
    fail(m + " is not a fencefs mount (no .fencefs/ctl)");
    exit(1);
  }
  return root;
}

bool resolve_user(const std::string& spec, uid_t* uid, gid_t* gid, std::string* name) {
  std::string u = spec, g;
  size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    u = spec.substr(0, colon);
    g = spec.substr(colon + 1);
  }
  struct passwd* pw = getpwnam(u.c_str());
  if (pw) {
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    *name = pw->pw_name;
  } else {
    uid_t v;
    auto r = std::from_chars(u.data(), u.data() + u.size(), v);
    if (r.ec != std::errc() || r.ptr != u.data() + u.size()) return false;
    *uid = v;
    *gid = v;
    pw = getpwuid(v);
    if (pw) {
      *gid = pw->pw_gid;
      *name = pw->pw_name;
    }
  }
  if (!g.empty()) {
    struct group* gr = getgrnam(g.c_str());
    if (gr) {
      *gid = gr->gr_gid;
    } else {
      gid_t v;
      auto r = std::from_chars(g.data(), g.data() + g.size(), v);
      if (r.ec != std::errc() || r.ptr != g.data() + g.size()) return false;
      *gid = v;
    }
  }
  return true;
}

}  // namespace

int cmd_run(const Args& args) {
  std::string mount, domain, token, user;
  size_t i = 0;
  for (; i < args.size(); i++) {
    if (args[i] == "--") {
      i++;
      break;
    }
    if (take_opt(args, &i, "--mount", &mount) || take_opt(args, &i, "--domain", &domain) ||
        take_opt(args, &i, "--token", &token) || take_opt(args, &i, "--user", &user))
      continue;
    if (args[i] == "--help" || args[i] == "-h") {
      std::cout << "usage: fencectl run --mount M --domain D --token T [--user U[:G]] -- CMD "
                   "[ARGS...]\n";
      return 0;
    }
    if (args[i].rfind("--", 0) == 0) usage_error("run: unknown option " + args[i]);
    break;  // the command starts here
  }
  if (i >= args.size()) usage_error("run: no command given (… -- CMD [ARGS...])");
  if (domain.empty()) usage_error("run: --domain D is required");
  if (token.empty()) usage_error("run: --token T is required");
  if (!fence::parse_token_text(token)) {
    fail("run: malformed token '" + token + "' (a decimal 1..9223372036854775807, or EPOCH.SIG)");
    return 125;
  }
  std::string root = need_mount(mount);
  uid_t uid = 0;
  gid_t gid = 0;
  std::string uname;
  if (!user.empty() && !resolve_user(user, &uid, &gid, &uname)) {
    fail("run: unknown user or group '" + user + "'");
    return 125;
  }
  // Grandchildren orphaned by a double fork are reparented to us, so they stay bound.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::string reply;
  int err = send_command(root, "bind " + domain + " " + token, &reply);
  if (err) {
    fail(fmt::format("run: bind {} {} refused: {} ({})", domain, token, errname(err), reply));
    return 125;
  }
  if (!user.empty()) {
    if ((!uname.empty() ? initgroups(uname.c_str(), gid) : setgroups(0, nullptr)) != 0 ||
        setgid(gid) != 0 || setuid(uid) != 0) {
      fail(fmt::format("run: cannot become {}: {}", user, strerror(errno)));
      return 125;
    }
  }
  std::vector<char*> argv;
  for (size_t k = i; k < args.size(); k++) argv.push_back(const_cast<char*>(args[k].c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  int e = errno;
  fail(fmt::format("run: {}: {}", args[i], strerror(e)));
  return e == ENOENT ? 127 : 126;
}

int cmd_advance(const Args& args) {
  std::string mount;
  bool force = false;
  std::vector<std::string> pos;
  for (size_t i = 0; i < args.size(); i++) {
    if (take_opt(args, &i, "--mount", &mount)) continue;
    if (args[i] == "--force") {
      force = true;
      continue;
    }
    if (args[i].rfind("--", 0) == 0) usage_error("advance: unknown option " + args[i]);
    pos.push_back(args[i]);
  }
  if (pos.size() != 2) usage_error("advance: expected DOMAIN TOKEN");
  std::string root = need_mount(mount);
  std::string reply;
  std::string line = "advance " + pos[0] + " " + pos[1] + (force ? " force" : "");
  int err = send_command(root, line, &reply);
  if (err) {
    fail(fmt::format("advance {} {} refused: {} ({})", pos[0], pos[1], errname(err), reply));
    return 1;
  }
  std::cout << reply << "\n";
  return 0;
}

int cmd_sign(const Args& args) {
  std::string key, domain, epoch;
  for (size_t i = 0; i < args.size(); i++) {
    if (take_opt(args, &i, "--key", &key) || take_opt(args, &i, "--domain", &domain) ||
        take_opt(args, &i, "--epoch", &epoch))
      continue;
    usage_error("sign: unexpected argument " + args[i]);
  }
  if (key.empty() || domain.empty() || epoch.empty())
    usage_error("sign: --key FILE --domain D --epoch N are required");
  auto e = fence::parse_token(epoch);
  if (!e) usage_error("sign: malformed epoch '" + epoch + "'");
  std::ifstream in(key, std::ios::binary);
  if (!in) {
    fail("sign: cannot read key " + key + ": " + strerror(errno));
    return 1;
  }
  std::string k((std::istreambuf_iterator<char>(in)), {});
  while (!k.empty() && (k.back() == '\n' || k.back() == '\r')) k.pop_back();
  std::cout << *e << "." << fence::sign(k, domain, *e) << "\n";
  return 0;
}

int cmd_domain(const Args& args) {
  if (args.size() < 2 || args[0] != "add") usage_error("domain: expected `domain add PATH`");
  std::string mount;
  std::string path;
  for (size_t i = 1; i < args.size(); i++) {
    if (take_opt(args, &i, "--mount", &mount)) continue;
    path = args[i];
  }
  char real[PATH_MAX];
  if (!realpath(path.c_str(), real)) {
    fail("domain add: " + path + ": " + strerror(errno));
    return 1;
  }
  std::string root = find_mount(mount.empty() ? std::string(real) : mount);
  if (root.empty()) {
    fail("domain add: " + path + " is not inside a fencefs mount");
    return 1;
  }
  std::string rel = std::string(real).substr(root == "/" ? 0 : root.size());
  if (rel.empty()) {
    fail("domain add: the mount root is always a domain");
    return 1;
  }
  std::string reply;
  int err = send_command(root, "domain add " + rel, &reply);
  if (err) {
    fail(fmt::format("domain add {} refused: {} ({})", rel, errname(err), reply));
    return 1;
  }
  std::cout << reply << "\n";
  return 0;
}

// Cluster mode: this member's standing, the members with their acknowledged epochs, and the
// cluster's epochs as etcd holds them.
void print_cluster(const json::Value& c) {
  std::cout << fmt::format("\ncluster  {}  member {}  {}{}\n", c.get("name")->str,
                           c.get("member")->str, c.get("standing")->str,
                           c.get("etcd_reachable")->b ? "" : "  (etcd unreachable)");
  if (const json::Value* w = c.get("isolated_why")) std::cout << "         " << w->str << "\n";
  for (const auto& [p, e] : c.get("rolled_back")->obj)
    std::cout << fmt::format("         ROLLBACK: etcd holds domain {} below epoch {}\n", p,
                             e.as_string());
  for (const auto& d : c.get("domains")->arr)
    std::cout << fmt::format(
        "  epoch  {:<24} {:>12}{}\n", d.get("path")->str, d.get("epoch")->as_string(),
        d.get("pending")->b ? "  (pending: not every member acknowledged)" : "");
  std::cout << fmt::format("{:<24} {:<12} {:<16} {:<24} {}\n", "MEMBER", "STANDING", "HOST",
                           "MOUNTPOINT", "ACKNOWLEDGED");
  for (const auto& m : c.get("members")->arr) {
    std::string acked;
    for (const auto& [p, e] : m.get("acked")->obj)
      acked += (acked.empty() ? "" : " ") + p + "=" + e.as_string();
    std::cout << fmt::format("{:<24} {:<12} {:<16} {:<24} {}\n", m.get("id")->str,
                             m.get("standing")->str, m.get("host")->str, m.get("mountpoint")->str,
                             acked.empty() ? "-" : acked);
  }
}

int cmd_status(const Args& args) {
  std::string mount;
  bool as_json = false;
  for (size_t i = 0; i < args.size(); i++) {
    if (take_opt(args, &i, "--mount", &mount)) continue;
    if (args[i] == "--json") {
      as_json = true;
      continue;
    }
    if (mount.empty() && args[i].rfind("--", 0) != 0) {
      mount = args[i];
      continue;
    }
    usage_error("status: unexpected argument " + args[i]);
  }
  std::string root = need_mount(mount);
  std::string text;
  int err = read_ctl_file(root, "status", &text);
  if (err) {
    fail(fmt::format("status: cannot read {}/.fencefs/status: {}", root, strerror(err)));
    return 1;
  }
  if (as_json) {
    std::cout << text;
    return 0;
  }
  std::string perr;
  auto v = json::parse(text, &perr);
  if (!v) {
    fail("status: daemon sent malformed JSON: " + perr);
    return 1;
  }
  const json::Value* j = v->get("journal");
  std::cout << "mount    " << root << "\n";
  std::cout << "backing  " << v->get("backing")->as_string() << "\n";
  std::cout << "state    " << v->get("state")->as_string() << "  (journal "
            << j->get("bytes")->as_string() << " bytes, " << j->get("syncs")->as_string()
            << " syncs" << (j->get("poisoned")->b ? ", POISONED: advances fail until restart" : "")
            << ")\n\n";
  std::cout << fmt::format("{:<24} {:>12} {:>20} {:>10} {:>8} {}\n", "DOMAIN", "EPOCH",
                           "LAST ADVANCE (UTC)", "ACCEPTED", "ADVANCES", "REFUSED");
  for (const auto& d : v->get("domains")->arr) {
    std::string refused;
    for (const auto& [k, n] : d.get("refused")->obj)
      if (n.as_u64()) refused += (refused.empty() ? "" : " ") + k + "=" + n.as_string();
    uint64_t ns = d.get("last_advance_unix_ns")->as_u64();
    std::string when = "-";
    if (ns) {
      time_t s = static_cast<time_t>(ns / 1000000000);
      char buf[32];
      struct tm tm;
      gmtime_r(&s, &tm);
      strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
      when = buf;
    }
    std::cout << fmt::format("{:<24} {:>12} {:>20} {:>10} {:>8} {}\n", d.get("path")->str,
                             d.get("epoch")->as_string(), when, d.get("accepted")->as_string(),
                             d.get("advances")->as_string(), refused.empty() ? "-" : refused);
    for (const auto& b : d.get("bound")->arr)
      std::cout << fmt::format("    bound: pid {} ({}) token {}\n", b.get("pid")->as_string(),
                               b.get("comm")->str, b.get("token")->as_string());
  }
  if (const json::Value* c = v->get("cluster")) print_cluster(*c);
  return 0;
}

}  // namespace fencefs::cli
