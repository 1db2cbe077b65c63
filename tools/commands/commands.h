// The table of subcommands. A subcommand is one file, tools/cmd_<name>.cpp, defining
// `int cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand's name); add it to the
// list in tools/commands/commands.cpp.
#pragma once

#define GPUGUARD_VERSION "0.1.0"

#include <vector>

namespace gg::tool {

struct Command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
};

const std::vector<Command> &commands();

}  // namespace gg::tool
