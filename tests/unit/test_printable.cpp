// common/base/printable.h: what may reach a terminal (issue 18, defect 10).
#include <doctest/doctest.h>

#include "common/base/printable.h"

using gg::printable;

TEST_CASE("printable: C0, DEL, C1 and bytes that are not UTF-8 become '?'; the rest stays") {
    CHECK(printable("plain text, 8 GiB") == "plain text, 8 GiB");
    CHECK(printable("\x1b]0;owned\x07") == "?]0;owned?");
    CHECK(printable("a\nb\tc\rd\x7f") == "a?b?c?d?");
    CHECK(printable("\xc2\x9b"
                    "2J") == "??2J");      // U+009B, CSI
    CHECK(printable("\xc2\x85") == "??");  // U+0085, NEL
    CHECK(printable("\x9b"
                    "31m") == "?31m");  // a lone C1 byte (CSI on an 8-bit terminal)
    CHECK(printable("caf\xc3\xa9 \xe2\x9c\x97 \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x9c\x97 \xf0\x9f\x98\x80");
    CHECK(printable("\xc2\xa0") == "\xc2\xa0");      // U+00A0: past the C1 range
    CHECK(printable("\xc0\xaf") == "??");            // an overlong '/'
    CHECK(printable("\xed\xa0\x80") == "???");       // a surrogate
    CHECK(printable("\xf4\x90\x80\x80") == "????");  // past U+10FFFF
    CHECK(printable("\xe2\x9c") == "??");            // cut short
    CHECK(printable(std::string("a\0b", 3)) == "a?b");
}
