// The subcommands of `gpuguard`, in the order `gpuguard --help` lists them.
#include "tools/commands/commands.h"

#include <cstdio>

int cmd_run(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_exporter(int argc, char **argv);
int cmd_help(int argc, char **argv);

namespace gg::tool {

const std::vector<Command> &commands() {
    static const std::vector<Command> table = {
        {"run", "run a command with the shim preloaded and the quota in force (a container entrypoint)", cmd_run},
        {"report", "read a report: summary, HTML viewer, flame graph and trace exports, diff", cmd_report},
        {"top", "show the container's GPU memory by device and process, live", cmd_top},
        {"doctor", "check the driver, libraries, shim, ledger and settings; whether a command is guarded", cmd_doctor},
        {"exporter", "serve the container's quota and usage as Prometheus metrics (OpenMetrics at /metrics)",
         cmd_exporter},
        {"help", "this list, a command's options (help COMMAND), or every variable (help variables)", cmd_help},
    };
    return table;
}

void print_usage(FILE *out) {
    fprintf(out,
            "usage: gpuguard <command> [options]\n"
            "\n"
            "commands:\n");
    for (const Command &c : commands()) fprintf(out, "  %-10s %s\n", c.name, c.summary);
    fprintf(out,
            "\nRun 'gpuguard <command> --help' for a command's options, 'gpuguard help variables' for every\n"
            "variable it reads.\n");
}

}  // namespace gg::tool
