#include "cli/options.h"

#include <getopt.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "cli/exit_codes.h"

namespace fencefs::cli {
namespace {

const char* const kRunHelp =
    R"(usage: fencectl run --mount M --domain D (--token T | --acquire | --etcd E --lock NAME) ...
  fencectl run --mount M --domain D --token T [--user U[:G]] -- CMD [ARGS...]
  fencectl run --mount M --domain D --acquire [--user U[:G]] -- CMD [ARGS...]
  fencectl run --mount M --domain D --etcd ENDPOINTS --lock NAME [--ttl S] [--wait S]
               [--grace S] [--resync] [--cacert F --cert F --key F] [--user U[:G]] -- CMD [ARGS...]

Runs CMD bound to a token for domain D: CMD and every descendant present it, and see it in
FENCEFS_TOKEN (and FENCEFS_DOMAIN).
  --token T    a token you hold (decimal, or a signed EPOCH.SIGNATURE). @FILE reads it from
               FILE (@- from standard input): a signed token given on the command line can be
               read by every user in the process list until CMD starts.
  --acquire    the daemon issues epoch+1 and makes it D's epoch in one durable record: every
               earlier holder of D is revoked before CMD starts (issuers only).
  --etcd E --lock NAME
               waits for etcd's lock NAME under a lease of --ttl seconds (default 10), draws the
               next token of the lock's counter in etcd, advances D to it, and runs CMD in its own
               process group while keeping the lease alive. When the lease is lost, CMD's group
               gets SIGTERM, SIGKILL after --grace seconds (default 10), and run exits 208.
               --wait S gives up after S seconds (default: wait forever). --resync moves the
               counter above D's epoch when the issuer is behind (audited).
Exit status: CMD's, unchanged; fencectl's own failures use 200-215 (see fencectl --help).
)";

const char* const kLeaseHelp = R"(usage:
  fencectl lease acquire --etcd E --lock NAME [--ttl S] [--wait S] [--mount M --domain D [--resync]]
        take the lock, draw the next token, advance D to it (when --mount is given) and print
        FENCEFS_TOKEN=, FENCEFS_LEASE= and FENCEFS_LOCK_KEY= lines for `eval`. Keep the lease
        alive with `lease keepalive` for as long as the work runs.
  fencectl lease keepalive --etcd E --lease ID [--once]
        keep the lease alive until it is lost (exit 208), or one round trip with --once.
  fencectl lease release --etcd E --lease ID
        release the lock (revoke the lease). A lease already gone (expired, released, never
        granted) leaves nothing to release: a note on stderr, exit 0.
TLS: --cacert F --cert F --key F, as etcdctl.
)";

// run and lease share one set of options (the lock service's among them).
std::vector<OptionSpec> lock_options() {
  return {{"mount", 0, "M", "the fencefs mount"},
          {"domain", 0, "D", "the domain"},
          {"token", 0, "T", "a token you hold"},
          {"acquire", 0, nullptr, "the daemon issues epoch+1"},
          {"user", 0, "U[:G]", "run CMD as this user (and group)"},
          {"etcd", 0, "E", "etcd endpoints"},
          {"lock", 0, "NAME", "the etcd lock"},
          {"ttl", 0, "S", "lease seconds"},
          {"wait", 0, "S", "give up after S seconds"},
          {"grace", 0, "S", "seconds between SIGTERM and SIGKILL"},
          {"resync", 0, nullptr, "move the counter above the domain's epoch"},
          {"once", 0, nullptr, "one keepalive round trip"},
          {"lease", 0, "ID", "the lease"},
          {"cacert", 0, "F", "TLS CA"},
          {"cert", 0, "F", "TLS certificate"},
          {"key", 0, "F", "TLS key"}};
}

const std::vector<CommandSpec>& commands() {
  static const std::vector<CommandSpec> table = {
      {"advance",
       "--mount M DOMAIN TOKEN [--force]",
       "Raise DOMAIN's epoch to TOKEN now, durably: older tokens are refused from here on.",
       {{"mount", 'm', "M", "the fencefs mount (or any path inside it)"},
        {"force", 0, nullptr, "allow a jump beyond the mount's max_jump (issuers only)"}},
       "TOKEN: a decimal 1..9223372036854775807, or a signed EPOCH.SIGNATURE; @FILE reads it from\n"
       "FILE (@- from standard input), out of the process list.\n"},
      {"sign",
       "--key FILE --domain D --epoch N",
       "Print a signed token EPOCH.SIGNATURE that anyone may bind (mount option token_key).",
       {{"key", 'k', "FILE", "the HMAC-SHA256 key file given to the mount as token_key="},
        {"domain", 'd', "D", "the domain the token is for, e.g. / or /jobs/a"},
        {"epoch", 'e', "N", "the epoch, 1..9223372036854775807"}},
       ""},
      {"domain",
       "add PATH [--mount M]",
       "Declare the existing directory PATH (inside a mount) a domain with its own epoch.",
       {{"mount", 'm', "M", "the mount (default: the one holding PATH)"}},
       "The new domain starts at epoch 0. Issuers only.\n"},
      {"whoami",
       "[PATH] [--json]",
       "The domain of PATH (default: the current directory), its epoch, and the token this\n"
       "process, and so the shell that started it, presents there.",
       {{"json", 0, nullptr, "print one JSON object (epochs and tokens also as strings)"}},
       "Reads the attributes user.fencefs.domain, .epoch and .token of PATH.\n"},
      {"status",
       "--mount M [--json]",
       "Domains, epochs, counters and bound processes of a mount.",
       {{"mount", 'm', "M", "the fencefs mount (or any path inside it)"},
        {"json", 0, nullptr, "print the daemon's JSON (schema: docs/status-json.md)"}},
       ""},
      {"audit",
       "(--mount M | --state DIR) [--domain D] [--since TIME] [--decision D[,D...]] [-v] "
       "[--json] [--follow | --summary]",
       "The audit trail, oldest first: a table, or the stored JSON lines with --json.",
       {{"mount", 'm', "M", "read the trail of this mount's state"},
        {"state", 's', "DIR", "read the trail in this state directory (mounted or not)"},
        {"domain", 'd', "D", "only records of domain D (a path such as / or /jobs/a)"},
        {"since", 0, "TIME", "2026-12-02T10:00:00Z, or relative: 90s, 10m, 2h, 1d, 1w"},
        {"decision", 0, "LIST",
         "only these decisions, comma-separated: accepted, refused, advanced,\n"
         "                          bound, unbound, declared, info, recovered, failed, detected"},
        {"verbose", 'v', nullptr, "add the errno and the reason under each row"},
        {"json", 0, nullptr, "print the stored JSON lines"},
        {"follow", 'f', nullptr, "then print new records as they come, across rotation"},
        {"summary", 0, nullptr, "count the matching records by reason, process and command"}},
       ""},
      {"verify",
       "BACKING [--state DIR] [--json] [--quiet]",
       "Check the journal, and every file's last-epoch stamp against its domain's epoch and "
       "its\nsize and mtime (a write that bypassed fencefs). Works mounted or not.",
       {{"state", 's', "DIR", "the state directory (default BACKING/.fencefs)"},
        {"json", 0, nullptr, "print the findings as JSON"},
        {"quiet", 'q', nullptr, "only the findings, one per line: no summary, warnings or bar"}},
       "Exit status: 0 clean, 1 findings, 2 could not check; 200 for a bad command line.\n"},
      {"recover",
       "--state DIR --floor N [--backing B] [--json]",
       "Offline, when fencefs refuses to mount: salvage the valid prefix of a damaged "
       "journal,\nraise every domain to at least epoch N, write a fresh state. Audited.",
       {{"state", 's', "DIR", "the state directory to recover"},
        {"floor", 'f', "N",
         "every domain ends at epoch N or higher (at least the highest "
         "token any owner may hold)"},
        {"backing", 'b', "B", "BACKING, to raise the floor to its highest file stamp"},
        {"json", 0, nullptr, "print the report as JSON"}},
       "Refused while a daemon uses the state, and when others may write it (root writes "
       "there).\n"},
      {"run", "", "", lock_options(), "", kRunHelp, true},
      {"lease", "", "", lock_options(), "", kLeaseHelp},
  };
  return table;
}

}  // namespace

const CommandSpec* find_command(const std::string& name) {
  for (const auto& c : commands())
    if (name == c.name) return &c;
  return nullptr;
}

void print_command_help(const CommandSpec& spec, std::ostream& out) {
  out << "usage: fencectl " << spec.name << " " << spec.synopsis << "\n\n"
      << spec.summary << "\n\nOptions:\n";
  for (const auto& o : spec.options) {
    std::string left = o.short_name ? std::string("-") + o.short_name + ", " : "    ";
    left += std::string("--") + o.name + (o.arg ? std::string(" ") + o.arg : "");
    out << "  " << left;
    if (left.size() < 24)
      out << std::string(24 - left.size(), ' ');
    else
      out << "\n  " << std::string(24, ' ');
    out << o.help << "\n";
  }
  out << "  -h, --help              this help\n";
  if (*spec.notes) out << "\n" << spec.notes;
  // One paragraph: a command with statuses of its own (verify) gives them in its notes.
  if (!strstr(spec.notes, "Exit status:")) out << "\nExit status: see `fencectl --help`.\n";
}

Parsed parse_command(const CommandSpec& spec, const Args& args) {
  std::vector<option> longs;
  // '+': stop at the first operand; leading ':' reports a missing value as ':'
  std::string shorts = spec.operands_end_options ? "+:h" : ":h";
  for (size_t i = 0; i < spec.options.size(); i++) {
    const auto& o = spec.options[i];
    longs.push_back(
        {o.name, o.arg ? required_argument : no_argument, nullptr, static_cast<int>(256 + i)});
    if (o.short_name) {
      shorts += o.short_name;
      if (o.arg) shorts += ':';
    }
  }
  longs.push_back({"help", no_argument, nullptr, 'h'});
  longs.push_back({nullptr, 0, nullptr, 0});

  std::vector<std::string> store;
  store.push_back(std::string("fencectl ") + spec.name);
  store.insert(store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(store.size() + 1);
  for (auto& s : store) argv.push_back(s.data());
  argv.push_back(nullptr);

  Parsed p;
  auto bad = [&](const std::string& msg) {
    std::cerr << "fencectl " << spec.name << ": " << msg << "\n(see fencectl " << spec.name
              << " --help)\n";
    exit(exit_code::kUsage);
  };
  optind = 0;  // glibc: restart scanning
  opterr = 0;
  int c, index = -1;
  while ((c = getopt_long(static_cast<int>(store.size()), argv.data(), shorts.c_str(), longs.data(),
                          &index)) != -1) {
    if (c == 'h') {
      if (spec.full_help)
        std::cout << spec.full_help;
      else
        print_command_help(spec, std::cout);
      exit(exit_code::kOk);
    }
    const OptionSpec* o = nullptr;
    if (c >= 256) {
      o = &spec.options[c - 256];
    } else if (c == '?' || c == ':') {
      std::string what = optopt >= 256 ? std::string("--") + spec.options[optopt - 256].name
                         : optopt      ? std::string("-") + static_cast<char>(optopt)
                                       : std::string(argv[optind - 1]);
      bad(c == ':' ? what + " needs a value" : "unknown option " + what);
    } else {
      for (const auto& s : spec.options)
        if (s.short_name == c) o = &s;
    }
    if (!o) bad("unknown option");
    if (o->arg)
      p.values[o->name] = optarg;
    else
      p.flags[o->name] = true;
  }
  // getopt_long permutes argv (not store): the operands are at its end.
  for (int i = optind; i < static_cast<int>(store.size()); i++) p.positional.push_back(argv[i]);
  return p;
}

}  // namespace fencefs::cli
