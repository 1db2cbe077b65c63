#include "tools/cli/text.h"

#include <cctype>
#include <cstring>
#include <sstream>
#include <vector>

namespace gg::tool {

size_t display_width(const std::string &s) {
    size_t n = 0;
    for (unsigned char c : s)
        if ((c & 0xC0) != 0x80) ++n;  // count code points, not bytes
    return n;
}

std::string pad_right(const std::string &s, size_t width) {
    size_t w = display_width(s);
    return w >= width ? s : s + std::string(width - w, ' ');
}

std::string pad_left(const std::string &s, size_t width) {
    size_t w = display_width(s);
    return w >= width ? s : std::string(width - w, ' ') + s;
}

std::string clip(const std::string &s, size_t width) {
    if (display_width(s) <= width) return s;
    std::string out;
    size_t n = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if ((c & 0xC0) != 0x80 && ++n > width - 1) break;
        out += s[i];
    }
    return out + "…";
}

std::string wrap(const std::string &text, size_t width, const std::string &indent) {
    // Words, with a size's unit kept on the number's line ("4.50 GiB" never splits).
    std::vector<std::string> tokens;
    {
        std::istringstream in(text);
        std::string w;
        while (in >> w) {
            bool unit = false;
            for (const char *u : {"B", "KiB", "MiB", "GiB", "TiB", "PiB"})
                if (w.rfind(u, 0) == 0 && (w.size() == strlen(u) || !isalnum(static_cast<unsigned char>(w[strlen(u)]))))
                    unit = true;
            if (unit && !tokens.empty() && !tokens.back().empty() &&
                isdigit(static_cast<unsigned char>(tokens.back().back())))
                tokens.back() += " " + w;
            else tokens.push_back(w);
        }
    }
    std::string out, line;
    size_t indent_w = display_width(indent);
    bool first = true;
    for (const std::string &word : tokens) {
        size_t limit = first ? width : width - indent_w;
        if (!line.empty() && display_width(line) + 1 + display_width(word) > limit) {
            out += (first ? "" : indent) + line + "\n";
            first = false;
            line.clear();
        }
        line += (line.empty() ? "" : " ") + word;
    }
    if (!line.empty()) out += (first ? "" : indent) + line;
    return out;
}

std::string wrap_hanging(const std::string &text, size_t width, size_t indent) {
    std::string lines = wrap(text, width > indent + 20 ? width - indent : 20, ""), out;
    for (char c : lines) out += c == '\n' ? "\n" + std::string(indent, ' ') : std::string(1, c);
    return out;
}

std::string sentence(const std::string &text) { return text.empty() || text.back() == '.' ? text : text + "."; }

std::string plain_text(const std::string &md) {
    std::string out;
    for (size_t i = 0; i < md.size(); ++i) {
        if (md[i] == '`') continue;
        if (md[i] == '[') {  // [text](link) -> text
            size_t close = md.find("](", i);
            size_t end = close == std::string::npos ? close : md.find(')', close);
            if (end != std::string::npos) {
                out += md.substr(i + 1, close - i - 1);
                i = end;
                continue;
            }
        }
        out += md[i];
    }
    return out;
}

}  // namespace gg::tool
