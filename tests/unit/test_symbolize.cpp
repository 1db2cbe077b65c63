// Native frames named at report time (tools/report/symbolize.h): from the module's own debug info when
// its build id is the report's, never from another build, and never by opening what is not an ELF
// file. The frames are made as the shim records them (shim/stacks/symbols.h) for code of this test
// binary, which the Makefile builds with -g.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "shim/stacks/symbols.h"
#include "tools/report/symbolize.h"

using namespace gg::report;

__attribute__((noinline)) uintptr_t symbolize_test_return_address() { return uintptr_t(__builtin_return_address(0)); }

// The return address of a call on a line the test knows.
__attribute__((noinline)) uintptr_t symbolize_test_call_site(int *line) {
    // clang-format off
    uintptr_t ip = symbolize_test_return_address(); *line = __LINE__;  // one line: the call's
    // clang-format on
    asm volatile("" ::: "memory");  // keeps the call from being a tail call
    return ip;
}

namespace {

std::string hex(uintptr_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(v));
    return buf;
}

// A native frame of this binary as the shim writes it into a report.
Frame recorded_frame(uintptr_t ip) {
    gg::stacks::symbols::Native n = gg::stacks::symbols::resolve(ip);
    Frame f;
    f.module = n.module, f.offset = hex(ip - n.base), f.ip = hex(ip), f.build_id = n.build_id, f.symbol = n.symbol;
    return f;
}

Report report_of(std::vector<Frame> frames) {
    Report r;
    r.stacks["1"] = Stack{"1", std::move(frames)};
    return r;
}

Frame frame_in(const std::string &module, const std::string &build_id = "0011223344") {
    Frame f;
    f.module = module, f.offset = "0x1234", f.build_id = build_id;
    return f;
}

std::string joined(const std::vector<std::string> &notes) {
    std::string all;
    for (const std::string &n : notes) all += n + "\n";
    return all;
}

}  // namespace

TEST_CASE("a native frame of a binary built with -g is named: function, file and line") {
    int line = 0;
    Frame f = recorded_frame(symbolize_test_call_site(&line));
    REQUIRE(!f.build_id.empty());
    Report r = report_of({f});
    std::vector<std::string> notes = symbolize(r);
    const Frame &named = r.stacks["1"].frames[0];
    CHECK(short_symbol(named.symbol) == "symbolize_test_call_site");
    CHECK(base_name(named.source_file) == "test_symbolize.cpp");
    CHECK(named.source_line == line);
    CHECK(frame_label(named) == "symbolize_test_call_site (test_symbolize.cpp:" + std::to_string(line) + ")");
    CHECK(notes.empty());
}

TEST_CASE("a binary whose build id is not the report's names nothing, and says so with both ids") {
    int line = 0;
    Frame f = recorded_frame(symbolize_test_call_site(&line));
    f.build_id = "00112233", f.symbol.clear();
    Report r = report_of({f});
    std::string notes = joined(symbolize(r));
    const Frame &kept = r.stacks["1"].frames[0];
    CHECK(kept.symbol.empty());
    CHECK(kept.source_file.empty());
    CHECK(notes.find("is not the binary that wrote the report") != std::string::npos);
    CHECK(notes.find("the report's 00112233") != std::string::npos);
}

TEST_CASE("a report's build id of any length is said in a short line") {
    int line = 0;
    Frame f = recorded_frame(symbolize_test_call_site(&line));
    f.build_id = std::string(100000, 'a'), f.symbol.clear();
    Report r = report_of({f});
    std::vector<std::string> notes = symbolize(r);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].size() < f.module.size() + 300);
    CHECK(notes[0].find("the report's " + std::string(64, 'a') + "...)") != std::string::npos);
}

TEST_CASE("a module the report gives no build id for is not opened: nothing could check it") {
    int line = 0;
    Frame f = recorded_frame(symbolize_test_call_site(&line));
    f.build_id.clear(), f.symbol.clear();
    Report r = report_of({f});
    std::string notes = joined(symbolize(r));
    CHECK(r.stacks["1"].frames[0].source_file.empty());
    CHECK(notes.find("no build id for") != std::string::npos);
}

TEST_CASE("module paths that are not ELF files are refused unread, and the report still renders") {
    char dir[] = "/tmp/gg-symbolize-XXXXXX";
    REQUIRE(mkdtemp(dir));
    std::string fifo = std::string(dir) + "/fifo", text = std::string(dir) + "/text";
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);  // opening it for reading would block without a writer
    FILE *t = fopen(text.c_str(), "w");
    REQUIRE(t);
    fputs("#!/bin/sh\nexit 0\n", t);
    fclose(t);
    Report r = report_of({frame_in("/dev/zero"), frame_in(fifo), frame_in(text), frame_in(dir), frame_in("/etc/shadow"),
                          frame_in("relative/lib.so"), frame_in("/proc/self/mem")});
    std::string notes = joined(symbolize(r));
    for (const Frame &f : r.stacks["1"].frames) {
        CHECK(f.symbol.empty());
        CHECK(f.source_file.empty());
        CHECK(frame_label(f) == base_name(f.module) + "+0x1234");
    }
    CHECK(notes.find("cannot read /dev/zero (not a regular file)") != std::string::npos);
    CHECK(notes.find("not an ELF executable or library") != std::string::npos);
    unlink(fifo.c_str()), unlink(text.c_str()), rmdir(dir);
}

TEST_CASE("modules not on this machine make one line, and past 256 modules none is opened") {
    std::vector<Frame> frames;
    for (int i = 0; i < 300; i++) frames.push_back(frame_in("/nonexistent/lib" + std::to_string(i) + ".so"));
    Report r = report_of(frames);
    std::vector<std::string> notes = symbolize(r);
    REQUIRE(notes.size() == 2);
    CHECK(notes[0].find("not on this machine: /nonexistent/lib0.so, ") == 0);
    CHECK(notes[0].find(" and 252 more: their frames stay as module+offset") != std::string::npos);
    CHECK(notes[1].find("over 256 modules") != std::string::npos);
}

TEST_CASE("without libdw the frames stay as module+offset and one line says how to get names") {
    int line = 0;
    Frame f = recorded_frame(symbolize_test_call_site(&line));
    f.symbol.clear();
    Report r = report_of({f});
    SymbolizeOptions opt;
    opt.library = "libdw-not-installed.so.1";
    std::vector<std::string> notes = symbolize(r, opt);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find("libdw-not-installed.so.1 is not installed") == 0);
    CHECK(notes[0].find("apt-get install libdw1") != std::string::npos);
    CHECK(r.stacks["1"].frames[0].source_file.empty());
}

TEST_CASE("a report without native frames does not look for libdw") {
    Frame py;
    py.python = true, py.file = "train.py", py.function = "step", py.line = 3;
    Frame shim = frame_in("/opt/gpuguard/libgpuguard.so");
    Report r = report_of({py, shim});
    SymbolizeOptions opt;
    opt.library = "libdw-not-installed.so.1";
    CHECK(symbolize(r, opt).empty());
}
