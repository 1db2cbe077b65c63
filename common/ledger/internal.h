// Shared by the ledger's own files (common/ledger/*.cpp), not part of its interface.
#pragma once
#include <atomic>
#include <cstring>
#include <ctime>
#include <string>

#include "common/ledger/ledger.h"

namespace gg::ledger::internal {

constexpr char kMagic[8] = {'G', 'P', 'U', 'G', 'L', 'E', 'D', 'G'};

// Ledger::rescue_ (see Ledger::rescue_fault()).
enum Rescue : int { kIntact, kRemembering, kRescuing, kRescued, kRecovered, kFailed };

uint64_t now_ns(clockid_t clock);
std::string errno_text(int e);
// This process's pid, cached; forgotten in every child (counters.cpp says how).
int self_pid();
// /proc/self/cmdline with spaces between the arguments, into a slot's command field.
void read_command(char *out, size_t size);
void init_header(Header *h, const std::string &spec);
// Creates a complete ledger at `path`: written under a temporary name, then linked (or, when
// `replace`, renamed) into place, so nobody maps a half-written file.
bool create_file(const std::string &path, const std::string &spec, int group, bool replace, std::string *error);

// Adds `bytes` to a count unless that would wrap it; false (and nothing added) when it would.
inline bool add_without_wrap(std::atomic<uint64_t> &count, uint64_t bytes) {
    uint64_t cur = count.load();
    do {
        if (cur > UINT64_MAX - bytes) return false;
    } while (!count.compare_exchange_weak(cur, cur + bytes));
    return true;
}

// Takes `bytes` off a count, never below zero; returns what was taken.
inline uint64_t take_off(std::atomic<uint64_t> &count, uint64_t bytes) {
    uint64_t cur = count.load(), take;
    do {
        take = cur < bytes ? cur : bytes;
    } while (!count.compare_exchange_weak(cur, cur - take));
    return take;
}

inline bool slot_is_live(const Slot &s) { return s.state.load() == kSlotLive; }

// A text field of the shared file as a string for display: any process of the user may write those
// bytes, so the string stops at the field's end even without a NUL, and control bytes (a terminal
// escape sequence in a forged command line) become '?' before `gpuguard top` prints them.
template <size_t N>
std::string field_text(const char (&field)[N]) {
    std::string s(field, strnlen(field, N));
    for (char &c : s)
        if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
    return s;
}

}  // namespace gg::ledger::internal
