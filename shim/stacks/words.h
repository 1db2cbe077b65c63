// How a stack is stored in the table (table.h): its native frames' return addresses, innermost first,
// then its Python frames, three words each: file, function (both interned, so pointers identify
// them) and line << 1 | entry. The table's tag is the number of native frames. Written by
// capture.cpp, read by render.cpp.
#pragma once

namespace gg::stacks {

constexpr int kPyWords = 3;

}  // namespace gg::stacks
