// The subcommands of `gpuguard`, in the order `gpuguard --help` lists them.
#include "commands.h"

int cmd_report(int argc, char **argv);

namespace gg::tool {

const std::vector<Command> &commands() {
    static const std::vector<Command> table = {
        {"report", "read a report: summary, HTML viewer, flame graph and trace exports, diff", cmd_report},
    };
    return table;
}

}  // namespace gg::tool
