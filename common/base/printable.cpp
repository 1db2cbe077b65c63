#include "common/base/printable.h"

namespace gg {

void make_printable(char *text, size_t n) {
    unsigned char *s = reinterpret_cast<unsigned char *>(text);
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f) s[i] = '?';
            i++;
            continue;
        }
        // The length of a well-formed UTF-8 sequence starting here, or 0 (RFC 3629: no overlong
        // forms, no surrogates, nothing past U+10FFFF).
        size_t len = 0;
        unsigned lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) len = 2;
        else if (c >= 0xe0 && c <= 0xef) len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        else if (c >= 0xf0 && c <= 0xf4) len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        bool ok = len && i + len <= n && s[i + 1] >= lo && s[i + 1] <= hi;
        for (size_t k = 2; ok && k < len; k++) ok = s[i + k] >= 0x80 && s[i + k] <= 0xbf;
        if (ok && c == 0xc2 && s[i + 1] <= 0x9f) ok = false;  // U+0080..U+009F: the C1 controls
        if (!ok) {
            s[i++] = '?';
            continue;
        }
        i += len;
    }
}

std::string printable(const std::string &text) {
    std::string out = text;
    make_printable(out.data(), out.size());
    return out;
}

}  // namespace gg
