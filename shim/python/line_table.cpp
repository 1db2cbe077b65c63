#include "shim/python/line_table.h"

namespace gg::py {
namespace {

// A varint starting at table[i]; stops at the end of the table rather than read past it.
unsigned read_varint(const uint8_t *table, size_t len, size_t i) {
    unsigned val = 0;
    for (unsigned shift = 0; i < len && shift < 32; shift += 6) {
        uint8_t b = table[i++];
        val |= unsigned(b & 63) << shift;
        if (!(b & 64)) break;
    }
    return val;
}

int read_signed_varint(const uint8_t *table, size_t len, size_t i) {
    unsigned u = read_varint(table, len, i);
    return (u & 1) ? -int(u >> 1) : int(u >> 1);
}

}  // namespace

int addr_to_line(const uint8_t *table, size_t len, int firstlineno, int lasti) {
    if (!table || lasti < 0) return -1;
    int line = firstlineno;
    long addr = 0;
    size_t i = 0;
    while (i < len) {
        uint8_t head = table[i];
        if (!(head & 0x80)) return -1;  // not an entry start: the table is not what we think
        int code = (head >> 3) & 15;
        int units = (head & 7) + 1;
        bool no_line = false;
        if (code == 15) no_line = true;
        else if (code == 14 || code == 13) line += read_signed_varint(table, len, i + 1);
        else if (code >= 10) line += code - 10;
        if (lasti < addr + units) return no_line ? -1 : line;
        addr += units;
        // The next entry starts at the next byte with the top bit set (locations.md).
        for (++i; i < len && !(table[i] & 0x80); ++i) {}
    }
    return -1;
}

}  // namespace gg::py
