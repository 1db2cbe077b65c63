// gpuguard: the command. Each subcommand lives in its own file (tools/cmd_<name>.cpp) and registers
// itself here through the table below.
#include "tools/commands/commands.h"

#include <cstdio>
#include <cstring>

namespace {

void usage(FILE *out) {
    fprintf(out,
            "usage: gpuguard <command> [options]\n"
            "\n"
            "commands:\n");
    for (const gg::tool::Command &c : gg::tool::commands())
        fprintf(out, "  %-10s %s\n", c.name, c.summary);
    fprintf(out, "\nRun 'gpuguard <command> --help' for a command's options.\n");
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("gpuguard %s\n", GPUGUARD_VERSION);
        return 0;
    }
    for (const gg::tool::Command &c : gg::tool::commands())
        if (!strcmp(argv[1], c.name)) return c.run(argc - 1, argv + 1);
    fprintf(stderr, "gpuguard: unknown command '%s' (try 'gpuguard --help')\n", argv[1]);
    return 2;
}
