// The rows of settings.def as a table, and the README's view of it.
#include <string>

#include "common/settings/settings.h"

namespace gg::settings {
namespace {

constexpr Row kRows[] = {
#define SETTING(id, name, type, min, max, default_value, default_text, aliases, run_option, help, when_bad) \
    {Id::id, name, Type::type, min, max, default_value, default_text, aliases, run_option, help, when_bad},
#include "common/settings/settings.def"
};
static_assert(sizeof kRows / sizeof kRows[0] == static_cast<size_t>(Id::kCount), "one row per setting");

}  // namespace

Rows rows() { return {kRows, sizeof kRows / sizeof kRows[0]}; }

const Row &row(Id id) { return kRows[static_cast<size_t>(id)]; }

const Row *find(const std::string &name) {
    for (const Row &r : rows())
        if (name == r.name) return &r;
    return nullptr;
}

std::string markdown_table() {
    std::string out = "| variable | meaning | default |\n| --- | --- | --- |\n";
    for (const Row &r : rows()) {
        std::string meaning = r.help;
        if (*r.aliases) {  // each name in code quotes: `CUDA_DEVICE_MEMORY_LIMIT_<i>` is no HTML tag
            std::string names, all = r.aliases;
            for (size_t at = 0; at <= all.size();) {
                size_t comma = all.find(", ", at);
                if (comma == std::string::npos) comma = all.size();
                names += (names.empty() ? "`" : ", `") + all.substr(at, comma - at) + "`";
                at = comma + 2;
            }
            meaning += " (HAMi-core's name: " + names + ")";
        }
        out += std::string("| `") + r.name + "` | " + meaning + " | " + r.default_text + " |\n";
    }
    return out;
}

}  // namespace gg::settings
