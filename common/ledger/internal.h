// Shared by the ledger's own files (common/ledger/*.cpp), not part of its interface.
#pragma once
#include <sys/types.h>
#include <atomic>
#include <cstring>
#include <ctime>
#include <string>

#include "common/base/printable.h"
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
// The inode of this process's PID namespace, 0 when unknown.
uint64_t pid_namespace();

// The byte ranges of the file whose OFD locks say who owns what (common/ledger/processes.cpp).
struct Range {
    off_t start, length;
};
Range slot_range(int i);
Range device_range(int i);
Range all_slots_range();
Range replace_range();    // the magic's bytes: held by a process while it replaces an idle ledger
Range cost_range(int i);  // device i's context cost record: held by the process measuring it
// F_OFD_SETLK of a write lock: true when this open file description holds it now (it may have
// held it already: the kernel checks other descriptions only, so callers serialise their threads).
bool try_lock(int fd, Range r);
void unlock(int fd, Range r);
enum class Held { kNo, kYes, kUnknown };
// A new open file description of the file `fd` names (close-on-exec, read-write), or -1 with errno
// set: through /proc/self/fd, else by `path` when it still names the same file.
int reopen(int fd, const std::string &path);
// Whether another open file description holds a lock on part of the range (F_OFD_GETLK); works on
// a read-only descriptor.
Held held_by_another(int fd, Range r);
void init_header(Header *h, const std::string &spec);

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

// A text field of the shared file as a string for display: any process of the user may write those
// bytes, so the string stops at the field's end even without a NUL, and control characters, C0 and
// C1 (a terminal escape sequence in a forged command line), become '?' before `gpuguard top` prints
// them (common/base/printable.h).
template <size_t N>
std::string field_text(const char (&field)[N]) {
    return printable(std::string(field, strnlen(field, N)));
}

}  // namespace gg::ledger::internal
