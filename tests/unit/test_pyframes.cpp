// The parts of the Python-frame reader that need no interpreter: the line table, str objects laid
// out by hand as CPython lays them out, the intern table, and a process without Python. Reading a
// live interpreter is proven by tests/integration/t_pyframes.sh.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "shim/python/frames.h"
#include "shim/python/layout.h"
#include "shim/python/line_table.h"
#include "shim/python/strings.h"

using namespace gg::py;

// co_linetable of this function under CPython 3.11.7, and the line co_lines() gives for each code
// unit (generated with the interpreter, pasted here); it has short, one-line, no-column and long
// forms, and negative line deltas (the call's arguments sit below the call).
//   def sample(a, b):             # line 2
//       total = (a +
//                b)
//       if total > 3:
//           return compute(
//               a,
//               b,
//           )
//
//       for i in range(a):
//           total += i
//       return total
static const uint8_t kTable311[] = {
    0x80, 0x00, 0xd8, 0x0d, 0x0e, 0xd8, 0x0d, 0x0e, 0xf1, 0x03, 0x01, 0x0e, 0x0f, 0x80, 0x45, 0xe0, 0x07, 0x0c,
    0x88, 0x71, 0x82, 0x79, 0x80, 0x79, 0xdd, 0x0f, 0x16, 0xd8, 0x0c, 0x0d, 0xd8, 0x0c, 0x0d, 0xf1, 0x05, 0x03,
    0x10, 0x0a, 0xf4, 0x00, 0x03, 0x10, 0x0a, 0xf0, 0x00, 0x03, 0x09, 0x0a, 0xf5, 0x0a, 0x00, 0x0e, 0x13, 0x90,
    0x31, 0x89, 0x58, 0x8c, 0x58, 0xf0, 0x00, 0x01, 0x05, 0x13, 0xf0, 0x00, 0x01, 0x05, 0x13, 0x88, 0x01, 0xd8,
    0x08, 0x0d, 0x90, 0x11, 0x89, 0x0a, 0x88, 0x05, 0x88, 0x05, 0xd8, 0x0b, 0x10, 0x80, 0x4c};
static const int kLines311[] = {2,  3,  4,  3,  3,  3,  5,  5,  5,  5,  5,  5,  6,  6,  6,  6,  6,  6,
                                7,  8,  6,  6,  6,  6,  6,  6,  6,  6,  11, 11, 11, 11, 11, 11, 11, 11,
                                11, 11, 11, 11, 11, 11, 11, 11, 11, 12, 12, 12, 12, 12, 12, 13, 13};

TEST_CASE("the line of every instruction matches what CPython 3.11 itself reports") {
    for (int lasti = 0; lasti < int(sizeof kLines311 / sizeof kLines311[0]); ++lasti)
        CHECK_MESSAGE(addr_to_line(kTable311, sizeof kTable311, 2, lasti) == kLines311[lasti], "lasti ", lasti);
}

TEST_CASE("an instruction past the table, or a table that is not a location table, has no line") {
    CHECK(addr_to_line(kTable311, sizeof kTable311, 2, 53) == -1);
    CHECK(addr_to_line(kTable311, sizeof kTable311, 2, -1) == -1);
    const uint8_t garbage[] = {0x12, 0x34};
    CHECK(addr_to_line(garbage, sizeof garbage, 2, 0) == -1);
    // Cut in the middle of a varint: stops at the end instead of reading on.
    CHECK(addr_to_line(kTable311, 10, 2, 40) == -1);
}

TEST_CASE("an instruction without a location has line -1 and does not move the running line") {
    // short form (line 10), no location, no-columns form with delta +1 (signed varint 2)
    const uint8_t table[] = {0x80, 0x00, 0xf8, 0xe8, 0x02};
    CHECK(addr_to_line(table, sizeof table, 10, 0) == 10);
    CHECK(addr_to_line(table, sizeof table, 10, 1) == -1);
    CHECK(addr_to_line(table, sizeof table, 10, 2) == 11);
}

// A str object as CPython 3.12 lays it out, with the data following the header.
struct FakeStr {
    alignas(8) unsigned char bytes[256] = {};
    FakeStr(uintptr_t type, const Layout &l, unsigned kind, bool ascii, const void *data, size_t units) {
        std::memcpy(bytes + kObType, &type, sizeof type);
        int64_t length = int64_t(units), hash = -1;
        std::memcpy(bytes + kStrLength, &length, 8);
        std::memcpy(bytes + kStrHash, &hash, 8);
        uint32_t state = (kind << 2) | (1u << 5) | (unsigned(ascii) << 6);
        std::memcpy(bytes + kStrState, &state, 4);
        std::memcpy(bytes + (ascii ? l.ascii_size : l.compact_size), data, units * kind);
    }
    uintptr_t addr() const { return reinterpret_cast<uintptr_t>(bytes); }
};

TEST_CASE("str objects of each kind are read as UTF-8, and only objects of the str type are read") {
    const Layout &l = *find_layout(3, 12);
    static const int str_type_marker = 0;
    auto type = reinterpret_cast<uintptr_t>(&str_type_marker);
    char buf[kMaxName * 4];
    auto read = [&](const FakeStr &s) {
        long n = read_str(l, s.addr(), type, buf);
        return n < 0 ? std::string("<fail>") : std::string(buf, size_t(n));
    };
    CHECK(read(FakeStr(type, l, 1, true, "train.py", 8)) == "train.py");
    const uint8_t latin1[] = {'c', 0xe9};  // "cé"
    CHECK(read(FakeStr(type, l, 1, false, latin1, 2)) == "c\xc3\xa9");
    const uint16_t ucs2[] = {0x6a21, 0x578b};  // "模型"
    CHECK(read(FakeStr(type, l, 2, false, ucs2, 2)) == "\xe6\xa8\xa1\xe5\x9e\x8b");
    const uint32_t ucs4[] = {0x1f525};  // an emoji, outside the BMP
    CHECK(read(FakeStr(type, l, 4, false, ucs4, 1)) == "\xf0\x9f\x94\xa5");
    CHECK(read(FakeStr(type + 8, l, 1, true, "x", 1)) == "<fail>");
    CHECK(ascii_equals(l, FakeStr(type, l, 1, true, "train.py", 8).addr(), type, "train.py"));
    CHECK_FALSE(ascii_equals(l, FakeStr(type, l, 1, true, "train.pz", 8).addr(), type, "train.py"));
}

TEST_CASE("interned names are one stable copy per text") {
    Interner names;
    std::string a = "model.forward";
    const char *first = names.intern(a);
    a[0] = 'X';  // the caller's buffer changes; the interned copy must not
    CHECK(std::string(first) == "model.forward");
    CHECK(names.intern("model.forward") == first);
    CHECK(names.intern("model.backward") != first);
}

TEST_CASE("a process without Python has no Python frames") {
    CHECK_FALSE(available());
    CHECK(std::string(version()).empty());
    Frame frames[4];
    CHECK(capture(frames, 4) == 0);
    CHECK_FALSE(is_eval_loop(reinterpret_cast<uintptr_t>(&available)));
}

TEST_CASE("a frame's executable is read with its _PyStackRef tags cleared from 3.14, as stored before") {
    alignas(8) static const uint64_t code_object[4] = {};
    const auto code = reinterpret_cast<uintptr_t>(code_object);
    uintptr_t frame[8] = {};
    const auto at_frame = reinterpret_cast<uintptr_t>(frame);
    for (int minor : {14, 15}) {
        const Layout &l = *find_layout(3, minor);
        frame[l.frame_code / 8] = code | 1;  // Py_TAG_REFCNT: an immortal or deferred reference
        CHECK(frame_executable(l, at_frame) == code);
        frame[l.frame_code / 8] = code;  // a strong reference
        CHECK(frame_executable(l, at_frame) == code);
        frame[l.frame_code / 8] = uintptr_t(12345) << 2 | 3;  // Py_INT_TAG: never an object
        CHECK(frame_executable(l, at_frame) == 0);
    }
    const Layout &l13 = *find_layout(3, 13);  // a PyObject pointer, taken as it is
    frame[l13.frame_code / 8] = code | 1;
    CHECK(frame_executable(l13, at_frame) == (code | 1));
    CHECK(find_layout(3, 16) == nullptr);
}
