// fencectl's command table: each command's synopsis and options, its --help, and one
// getopt_long-based parser for all of them.
#pragma once
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace fencefs::cli {

struct OptionSpec {
  const char* name;  // long name without "--"
  char short_name;   // 0: none
  const char* arg;   // metavariable; nullptr: a flag
  const char* help;
};

struct CommandSpec {
  const char* name;
  const char* synopsis;  // after "fencectl NAME "
  const char* summary;
  std::vector<OptionSpec> options;
  const char* notes;  // further lines of --help, or ""
  // The whole --help text when the generated one does not fit (run, lease); nullptr: generated.
  const char* full_help = nullptr;
  // Options end at the first operand (run: what follows is CMD and its own arguments).
  bool operands_end_options = false;
};

// nullptr when NAME has no entry.
const CommandSpec* find_command(const std::string& name);
void print_command_help(const CommandSpec& spec, std::ostream& out);

struct Parsed {
  std::map<std::string, std::string> values;  // options with an argument (last one wins)
  std::map<std::string, bool> flags;
  std::vector<std::string> positional;
  bool flag(const std::string& name) const { return flags.count(name) > 0; }
  std::string value(const std::string& name) const {
    auto it = values.find(name);
    return it == values.end() ? "" : it->second;
  }
};

// Parses ARGS (after the command's name) against SPEC. --help/-h prints the command's help and
// exits 0; an unknown option or a missing value is a usage error (exit kUsage).
Parsed parse_command(const CommandSpec& spec, const Args& args);

}  // namespace fencefs::cli
