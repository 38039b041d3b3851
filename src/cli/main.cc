// fencectl: the operator's and the job wrapper's side of fencefs.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/options.h"
#include "common/error.h"

namespace fencefs::cli {

const char* kVersion = FENCEFS_VERSION;  // CMake project(VERSION)

const char* kUsage = R"(usage: fencectl COMMAND [ARGS...]
       fencectl COMMAND --help | --help | --version

Jobs:
  run --mount M --domain D (--token T | --acquire | --etcd E --lock NAME) [--user U[:G]]
      -- CMD [ARGS...]
        run CMD bound to a token for domain D of mount M; it and every descendant present it
        (exported as FENCEFS_TOKEN, FENCEFS_DOMAIN). --token T: a token you hold (or a signed
        EPOCH.SIGNATURE). --acquire: the daemon issues epoch+1, revoking every earlier holder.
        --etcd E --lock NAME [--ttl S] [--wait S] [--grace S] [--resync]: wait for etcd's lock,
        draw the lock's next token, advance D to it, run CMD while the lease lives; on lease
        loss CMD's process group gets SIGTERM, then SIGKILL after --grace. `run --help`.
  lease acquire|keepalive|release --etcd E ...
        the same steps as commands for scripts: `lease --help`.
Coordinators:
  advance --mount M DOMAIN TOKEN [--force]
        raise DOMAIN's epoch to TOKEN now, durably: older tokens are refused from here on.
        --force allows a jump beyond the mount's max_jump (issuers only).
  sign --key FILE --domain D --epoch N
        print a signed token EPOCH.SIGNATURE that anyone may bind (mount option token_key).
  domain add PATH
        declare the existing directory PATH (inside a mount) a domain with its own epoch.
  whoami [PATH] [--json]
        the domain of PATH (default .), its epoch, and the token this shell presents there.
Operators:
  status --mount M [--json]             domains, epochs, counters and bound processes
  audit (--mount M | --state DIR) [--domain D] [--since TIME] [--decision D[,D...]] [-v] [--json]
        the audit trail, oldest first: a table, or the stored JSON lines with --json.
        TIME: 2026-12-02T10:00:00Z, or relative: 90s, 10m, 2h, 1d, 1w.
        -v adds the errno and the reason under each row.
  verify BACKING [--state DIR] [--json] [--quiet]
        check the journal, and every file's last-epoch stamp against its domain's epoch and
        its size and mtime (a write that bypassed fencefs). Works mounted or not.
        Exit status 0 clean, 1 findings, 2 could not check.
  recover --state DIR --floor N [--backing B] [--json]
        offline, when fencefs refuses to mount: salvage the valid prefix of a damaged journal,
        raise every domain to at least epoch N, write a fresh state. Audited.

`fencectl COMMAND --help` describes a command's options; `fencectl --version`.

Exit status: 0 success; `run` passes CMD's status through unchanged (0-199, and 128+signal).
fencectl's own failures use a reserved range: 200 usage, 201 stale (lower than the epoch),
202 too far (beyond max_jump), 203 unauthorised, 204 malformed or not a domain, 205 no daemon
at the mount (not a fencefs mount, or its daemon died: "daemon gone"),
206 journal I/O failure, 207 lock not acquired within --wait, 208 lease lost,
209 issuer behind the resource, 210 rollback detected, 211 lock service unreachable or failed,
212 CMD could not be started, 215 other. `verify` keeps 1 (findings) and 2 (could not check).
Errors print the errno name and the reason, e.g.
  fencectl: advance / 3 refused: ESTALE: lower than the domain's epoch
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "fencectl: " << msg << "\n(see fencectl --help)\n";
  exit(exit_code::kUsage);
}

void fail(const std::string& msg) { std::cerr << "fencectl: " << msg << "\n"; }

std::string token_arg(const std::string& arg) {
  if (arg.empty() || arg[0] != '@') return arg;
  const std::string file = arg.substr(1);
  const std::string from = file == "-" ? std::string("standard input") : file;
  // Byte by byte and unbuffered: from standard input, what follows the line is the job's.
  int fd = file == "-" ? 0 : open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) usage_error("cannot read a token from " + from + ": " + common::errstr(errno));
  constexpr size_t kMaxLine = 4096;
  std::string line;
  char c;
  ssize_t n;
  while ((n = read(fd, &c, 1)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || c == '\n') break;
    if (line.size() == kMaxLine)
      usage_error("the first line of " + from + " is too long for a token");
    line += c;
  }
  const int err = errno;
  if (fd != 0) close(fd);
  if (n < 0) usage_error("cannot read a token from " + from + ": " + common::errstr(err));
  const char* ws = " \t\r";
  size_t b = line.find_first_not_of(ws), e = line.find_last_not_of(ws);
  if (b == std::string::npos) usage_error("no token in " + from);
  return line.substr(b, e - b + 1);
}

}  // namespace fencefs::cli

int main(int argc, char* argv[]) {
  using namespace fencefs::cli;
  if (argc < 2) {  // a usage error like any other: the help on stderr, kUsage
    std::cerr << kUsage;
    return exit_code::kUsage;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
    std::cout << "fencectl " << kVersion << "\n";
    return 0;
  }
  std::string cmd = argv[1];
  Args args(argv + 2, argv + argc);
  const CommandSpec* spec = find_command(cmd);
  if (!spec) usage_error("unknown command '" + cmd + "'");  // even with --help
  // `fencectl CMD --help`: the command's own help; run's arguments after "--" are CMD's.
  if (cmd != "run" && cmd != "lease") {
    for (auto& a : args)
      if (a == "--help" || a == "-h") {
        print_command_help(*spec, std::cout);
        return 0;
      }
  }
  if (cmd == "run") return cmd_run(args);
  if (cmd == "advance") return cmd_advance(args);
  if (cmd == "status") return cmd_status(args);
  if (cmd == "domain") return cmd_domain(args);
  if (cmd == "sign") return cmd_sign(args);
  if (cmd == "recover") return cmd_recover(args);
  if (cmd == "verify") return cmd_verify(args);
  if (cmd == "audit") return cmd_audit(args);
  if (cmd == "lease") return cmd_lease(args);
  if (cmd == "whoami") return cmd_whoami(args);
  usage_error("unknown command '" + cmd + "'");
}
