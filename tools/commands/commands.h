// The table of subcommands. A subcommand is one file (or folder), tools/commands/<name>.cpp, defining
// `int cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand's name); add it to the list in
// tools/commands/commands.cpp.
#pragma once

#include <cstdio>
#include <vector>

namespace gg::tool {

struct Command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
};

const std::vector<Command> &commands();
// The top-level usage: every command with its summary.
void print_usage(FILE *out);

}  // namespace gg::tool
