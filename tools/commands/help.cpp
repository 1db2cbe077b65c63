// `gpuguard help [COMMAND | variables [--markdown]]`: the list of commands, one command's --help,
// or every variable gpuguard reads, from the table of settings (common/settings/settings.def). The
// README's table of variables is `gpuguard help variables --markdown` (tests/integration/t_readme.sh).
#include <cstdio>
#include <string>

#include "common/settings/settings.h"
#include "tools/cli/args.h"
#include "tools/cli/text.h"
#include "tools/commands/commands.h"

namespace {

void variables(bool markdown) {
    if (markdown) {
        fputs(gg::settings::markdown_table().c_str(), stdout);
        return;
    }
    printf("Variables gpuguard reads (the shim when a program starts; `gpuguard run` and `doctor` too):\n");
    for (const gg::settings::Row &r : gg::settings::rows()) {
        std::string text = gg::tool::sentence(gg::tool::plain_text(r.help)) +
                           " Default: " + gg::tool::sentence(gg::tool::plain_text(r.default_text));
        if (*r.aliases) text += std::string(" HAMi-core's name: ") + r.aliases + ".";
        printf("\n  %s\n      %s\n", r.name, gg::tool::wrap_hanging(text, 100, 6).c_str());
    }
}

}  // namespace

int cmd_help(int argc, char **argv) {
    gg::tool::Args a("help", argc, argv);
    if (a.done()) {
        gg::tool::print_usage(stdout);
        return 0;
    }
    std::string topic = a.take();
    if (topic == "variables") {
        bool markdown = a.flag("--markdown");
        if (!a.done()) return a.usage_error("unknown argument '" + a.next() + "'");
        variables(markdown);
        return 0;
    }
    if (topic == "-h" || topic == "--help") {
        printf("usage: gpuguard help [COMMAND | variables [--markdown]]\n");
        return 0;
    }
    if (!a.done()) return a.usage_error("unknown argument '" + a.next() + "'");
    for (const gg::tool::Command &c : gg::tool::commands()) {
        if (topic != c.name) continue;
        char name[64], flag[] = "--help";
        snprintf(name, sizeof name, "%s", c.name);
        char *args[] = {name, flag, nullptr};
        return c.run(2, args);
    }
    return a.usage_error("no command or topic '" + topic + "' (commands are listed by 'gpuguard help')");
}
