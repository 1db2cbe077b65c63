// gpuguard: the command. Each subcommand lives in its own file (tools/commands/<name>.cpp) and is
// listed in tools/commands/commands.cpp.
#include "common/base/version.h"
#include "tools/commands/commands.h"

#include <cstdio>
#include <cstring>

int main(int argc, char **argv) {
    if (argc < 2) {
        gg::tool::print_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        // `gpuguard --help run` is `gpuguard help run`.
        if (argc > 2) {
            argv[1] = const_cast<char *>("help");
            for (const gg::tool::Command &c : gg::tool::commands())
                if (!strcmp(c.name, "help")) return c.run(argc - 1, argv + 1);
        }
        gg::tool::print_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("gpuguard %s\n", GPUGUARD_VERSION_STRING);
        return 0;
    }
    for (const gg::tool::Command &c : gg::tool::commands())
        if (!strcmp(argv[1], c.name)) return c.run(argc - 1, argv + 1);
    fprintf(stderr, "gpuguard: unknown command '%s' (try 'gpuguard --help')\n", argv[1]);
    return 2;
}
