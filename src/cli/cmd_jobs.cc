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
#include "common/error.h"
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
    exit(exit_code::kUnreachable);
  }
  return root;
}

}  // namespace

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
  if (!fence::parse_token_text(pos[1])) {
    fail("advance: malformed token '" + pos[1] + "'");
    return exit_code::kMalformed;
  }
  int err;
  std::string reply;
  if (force) {
    // Rare and issuer-only: through the control file, which carries the force flag.
    err = send_command(root, "advance " + pos[0] + " " + pos[1] + " force", &reply);
  } else {
    // An ioctl on the domain's directory: no lock shared with other writers of the control file.
    DomainHandle dh;
    if (int code = dh.open(root, pos[0], &reply)) {
      fail("advance: " + reply);
      return code;
    }
    err = dh.advance(pos[1]);
    if (!err) reply = fmt::format("domain {} advanced to epoch {}", pos[0], pos[1]);
  }
  if (err) {
    fail(fmt::format("advance {} {} refused: {}{}", pos[0], pos[1], explain_errno(err),
                     reply.empty() ? "" : " (" + reply + ")"));
    return exit_for_errno(err);
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
    fail("sign: cannot read key " + key + ": " + common::errstr(errno));
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
    fail("domain add: " + path + ": " + common::errstr(errno));
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
    fail(fmt::format("status: cannot read {}/.fencefs/status: {}", root, common::errstr(err)));
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
  return 0;
}

}  // namespace fencefs::cli
