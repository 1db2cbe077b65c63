// Line numbers from a CPython 3.11+ code object's location table (co_linetable).
//
// The format is described in CPython's Objects/locations.md and decoded by codeobject.c
// (PyCode_Addr2Line, advance(), get_line_delta()). Each entry starts with a byte whose top bit is set:
// 1cccclll, covering lll+1 code units; cccc says how the line changes:
//   15      no location (the line is -1; the running line number does not change)
//   14      long form: signed varint line delta, then end line, start and end column varints
//   13      no columns: signed varint line delta
//   10..12  one-line form: the line delta is cccc-10, then two column bytes
//   0..9    short form: same line, one column byte
// Varints are 6 bits a byte, least significant first, bit 6 set when another byte follows; a signed
// varint keeps the sign in bit 0. The running line number starts at co_firstlineno.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gg::py {

// The line of the instruction at `lasti` (in code units from the start of the code), or -1 when the
// instruction has no line or lies past the table. Never reads outside table[0, len).
int addr_to_line(const uint8_t *table, size_t len, int firstlineno, int lasti);

}  // namespace gg::py
