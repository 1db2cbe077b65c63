// gpuguard: the command. Each subcommand lives in its own file (tools/commands/<name>.cpp) and is
// listed in tools/commands/commands.cpp.
#include "common/base/log.h"
#include "common/base/version.h"
#include "tools/commands/commands.h"

#include <cstdio>
#include <cstring>
#include <new>

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
    for (const gg::tool::Command &c : gg::tool::commands()) {
        if (strcmp(argv[1], c.name) != 0) continue;
        // A renderer or the reader out of host memory is one line and exit 2, never std::terminate.
        try {
            return c.run(argc - 1, argv + 1);
        } catch (const std::bad_alloc &) {
            fprintf(stderr, "gpuguard: out of memory\n");
            return 2;
        }
    }
    gg::log_error("unknown command '%s' (try 'gpuguard --help')", argv[1]);
    return 2;
}
