// fencectl subcommands. Each takes the arguments after its name and returns the exit status.
#pragma once
#include <string>
#include <vector>

namespace fencefs::cli {

using Args = std::vector<std::string>;

int cmd_run(const Args& args);
int cmd_advance(const Args& args);
int cmd_status(const Args& args);
int cmd_domain(const Args& args);
int cmd_sign(const Args& args);
int cmd_recover(const Args& args);
int cmd_verify(const Args& args);
int cmd_audit(const Args& args);
int cmd_lease(const Args& args);
int cmd_whoami(const Args& args);

// Shared helpers.
[[noreturn]] void usage_error(const std::string& msg);  // prints, exits kUsage
void fail(const std::string& msg);                      // prints "fencectl: msg"
// A token argument as given, or read from FILE when given as @FILE (@- : standard input): the
// first line, without surrounding whitespace. A signed token on the command line is in the
// process list for everyone to read until fencectl execs the job. Exits kUsage when unreadable.
std::string token_arg(const std::string& arg);

}  // namespace fencefs::cli
