// advance, sign, domain, status.
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
#include "cli/exit_codes.h"
#include "cli/fence_ioctl.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/json.h"
#include "ctl/protocol.h"
#include "fence/token.h"

namespace fencefs::cli {
namespace {

using common::errname;

std::string need_mount(const std::string& m) {
  if (m.empty()) usage_error("--mount M is required");
  return mount_or_exit(m, "");
}

}  // namespace

int cmd_advance(const Args& args) {
  Parsed p = parse_command(*find_command("advance"), args);
  std::string mount = p.value("mount");
  bool force = p.flag("force");
  std::vector<std::string> pos = p.positional;
  if (pos.size() != 2) usage_error("advance: expected DOMAIN TOKEN");
  pos[0] = domain_arg(pos[0]);
  pos[1] = token_arg(pos[1]);
  std::string root = need_mount(mount);
  auto token = fence::parse_token_text(pos[1]);
  if (!token) {
    fail("advance: malformed token '" + pos[1] + "'");
    return exit_code::kMalformed;
  }
  int err;
  std::string reply;
  if (force) {
    // Rare and issuer-only: through the control file, which carries the force flag.
    err = send_command(root, "advance " + ctl::quote_domain(pos[0]) + " " + pos[1] + " force",
                       &reply);
  } else {
    // An ioctl on the domain's directory: no lock shared with other writers of the control file.
    DomainHandle dh;
    if (int code = dh.open(root, pos[0], &reply)) {
      fail("advance: " + reply);
      return code;
    }
    // The ioctl's reply cannot tell "already there" from "advanced": the epoch read before can.
    uint64_t before = 0;
    bool known = dh.epoch(&before);
    err = dh.advance(pos[1]);
    if (!err)
      reply =
          fmt::format("domain {} {} epoch {}", pos[0],
                      known && before == token->epoch ? "already at" : "advanced to", token->epoch);
  }
  if (err) {
    fail(fmt::format("advance {} {} refused: {}{}", pos[0], pos[1], explain_errno(err),
                     reply.empty() ? "" : " (" + reply + ")"));
    return exit_code::from_errno(err);
  }
  std::cout << reply << "\n";
  return 0;
}

int cmd_sign(const Args& args) {
  Parsed p = parse_command(*find_command("sign"), args);
  std::string key = p.value("key"), domain = domain_arg(p.value("domain")),
              epoch = p.value("epoch");
  if (!p.positional.empty()) usage_error("sign: unexpected argument " + p.positional[0]);
  if (key.empty() || domain.empty() || epoch.empty())
    usage_error("sign: --key FILE --domain D --epoch N are required");
  auto e = fence::parse_token(epoch);
  if (!e) usage_error("sign: malformed epoch '" + epoch + "'");
  // As advance and run refuse it: a token for a text no domain has could never be bound.
  if (std::string why = domain_arg_error(domain); !why.empty()) {
    fail("sign: " + why);
    return exit_code::kMalformed;
  }
  std::ifstream in(key, std::ios::binary);
  if (!in) {
    fail("sign: cannot read key " + key + ": " + common::errstr(errno));
    return exit_code::kFailed;
  }
  std::string k((std::istreambuf_iterator<char>(in)), {});
  while (!k.empty() && (k.back() == '\n' || k.back() == '\r')) k.pop_back();
  std::cout << *e << "." << fence::sign(k, domain, *e) << "\n";
  return 0;
}

int cmd_domain(const Args& args) {
  Parsed p = parse_command(*find_command("domain"), args);
  if (p.positional.size() != 2 || p.positional[0] != "add")
    usage_error("domain: expected `domain add PATH`");
  std::string mount = p.value("mount"), path = p.positional[1];
  char real[PATH_MAX];
  if (!realpath(path.c_str(), real)) {
    if (errno == ENOTCONN) mount_or_exit(path, "domain add");
    int err = errno;
    fail("domain add: " + path + ": " + common::errstr(err));
    return err == ENOENT || err == ENOTDIR ? exit_code::kUsage : exit_code::kFailed;
  }
  std::string root = mount_or_exit(mount.empty() ? std::string(real) : mount, "domain add");
  std::string rel = std::string(real).substr(root == "/" ? 0 : root.size());
  if (rel.empty()) {
    fail("domain add: the mount root is always a domain");
    return exit_code::kFailed;
  }
  std::string reply;
  int err = send_command(root, "domain add " + ctl::quote_domain(rel), &reply);
  if (err) {
    fail(fmt::format("domain add {} refused: {} ({})", rel, errname(err), reply));
    return exit_code::from_errno(err);
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
  Parsed p = parse_command(*find_command("status"), args);
  std::string mount = p.value("mount");
  bool as_json = p.flag("json");
  if (mount.empty() && p.positional.size() == 1)
    mount = p.positional[0];  // status MOUNT
  else if (!p.positional.empty())
    usage_error("status: unexpected argument " + p.positional[0]);
  std::string root = need_mount(mount);
  std::string text;
  int err = read_ctl_file(root, "status", &text);
  if (err) {
    fail(fmt::format("status: cannot read {}/.fencefs/status: {}", root, common::errstr(err)));
    return exit_code::kFailed;
  }
  if (as_json) {
    std::cout << text;
    return 0;
  }
  std::string perr;
  auto v = json::parse(text, &perr);
  if (!v) {
    fail("status: daemon sent malformed JSON: " + perr);
    return exit_code::kFailed;
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
