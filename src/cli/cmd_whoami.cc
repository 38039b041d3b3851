// whoami: which token this process (and so the shell that started it) presents for a path: the
// daemon answers through the user.fencefs.* attributes of that path.
#include <fmt/format.h>
#include <sys/xattr.h>

#include <cerrno>
#include <iostream>

#include "cli/commands.h"
#include "cli/ctlfile.h"
#include "cli/exit_codes.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/json_writer.h"
#include "common/parse.h"

namespace fencefs::cli {
namespace {

// The attribute's value; "" with *err ENODATA when it has none.
std::string attr(const std::string& path, const char* name, int* err) {
  char buf[4096];
  ssize_t n = getxattr(path.c_str(), name, buf, sizeof buf);
  *err = n < 0 ? errno : 0;
  return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

}  // namespace

int cmd_whoami(const Args& args) {
  Parsed p = parse_command(*find_command("whoami"), args);
  if (p.positional.size() > 1) usage_error("whoami: one PATH at most");
  std::string path = p.positional.empty() ? "." : p.positional[0];
  std::string root = mount_or_exit(path, "whoami");
  int err = 0;
  std::string domain = attr(path, "user.fencefs.domain", &err);
  std::string epoch = err ? "" : attr(path, "user.fencefs.epoch", &err);
  if (err) {
    fail(fmt::format("whoami: {}: {}", path, common::errstr(err)));
    return exit_code::from_errno(err) == exit_code::kUnreachable ? exit_code::kUnreachable
                                                                 : exit_code::kFailed;
  }
  std::string token = attr(path, "user.fencefs.token", &err);
  if (err && err != ENODATA) {
    fail(fmt::format("whoami: {}: {}", path, common::errstr(err)));
    return exit_code::kFailed;
  }
  if (p.flag("json")) {
    // 64-bit values also as strings, as in status --json (jq reads numbers as doubles).
    std::string out;
    common::JsonWriter w(&out);
    w.begin_object()
        .member("mount", root)
        .member("domain", domain)
        .key("epoch")
        .raw(epoch)
        .member("epoch_str", epoch);
    if (token.empty())
      w.key("token").null().key("token_str").null();
    else
      w.key("token").raw(token).member("token_str", token);
    w.end_object();
    std::cout << out << "\n";
    return 0;
  }
  uint64_t e = 0, t = 0;
  common::parse_u64(epoch, &e);
  common::parse_u64(token, &t);
  std::string says = token.empty() ? "no token (writes are refused with EPERM)"
                     : t < e       ? "token " + token + " (stale: writes are refused with ESTALE)"
                                   : "token " + token;
  std::cout << fmt::format("domain {} (epoch {}): {}\n", domain, epoch, says);
  return 0;
}

}  // namespace fencefs::cli
