// Python str objects read without the interpreter, and the table that keeps their text alive.
//
// Code objects can be freed after a capture, so the names a capture returns are copies, interned
// here once for the life of the process: reports compare and print them long after.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_set>

#include "shim/python/layout.h"

namespace gg::py {

// Longest name kept; a longer one is cut (at a character boundary) rather than refused.
constexpr size_t kMaxName = 512;

// Copies the text of the compact str object at `obj` into buf as UTF-8 and returns its length, or
// -1 when obj is not a compact str of this layout. `str_type` is &PyUnicode_Type. Reads only the
// object's header and its own data, at most kMaxName characters of it.
long read_str(const Layout &l, uintptr_t obj, uintptr_t str_type, char (&buf)[kMaxName * 4]);

// Whether the str object at `obj` is compact ASCII with exactly this text; false for any other str
// (the caller then reads it afresh). Cheaper than read_str: no copy.
bool ascii_equals(const Layout &l, uintptr_t obj, uintptr_t str_type, std::string_view text);

// Strings that live as long as the process. Not thread-safe: shim/python/frames.cpp holds its lock around it.
class Interner {
public:
    Interner() = default;
    Interner(const Interner &) = delete;
    Interner &operator=(const Interner &) = delete;
    // Frees the copies: only for a table whose names nobody holds any more (a test's). The table
    // behind captures is never destroyed, since reports written at exit still print its names.
    ~Interner();
    // The stored copy of s (NUL-terminated), or a fixed "<?>" once kMaxBytes are used.
    const char *intern(std::string_view s);
    size_t bytes() const { return bytes_; }
    static constexpr size_t kMaxBytes = 16u << 20;

private:
    std::unordered_set<std::string_view> set_;  // views of malloc'd, NUL-terminated copies
    size_t bytes_ = 0;
};

}  // namespace gg::py
