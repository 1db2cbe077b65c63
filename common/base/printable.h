// Text from elsewhere (a program's argv, a ledger any process of the user writes, a report file,
// an environment variable) made safe for a terminal: every C0 control (newline and tab included),
// DEL, every C1 control (U+0080 to U+009F, such as U+009B, CSI: an escape sequence without ESC) and
// every byte that is not part of valid UTF-8 becomes '?'. Printable ASCII and other characters of
// valid UTF-8 stay. Every text output of gpuguard goes through here: the shim's lines (log.cpp),
// gpuguard top, doctor and report.
#pragma once
#include <cstddef>
#include <string>

namespace gg {

// In place, without allocating (the shim's log lines): the length never changes.
void make_printable(char *text, size_t length);

std::string printable(const std::string &text);

}  // namespace gg
