// Where a cache that answers without looking checks its answer: one hit in each window of hits, at a
// place that moves. Used by the site cache (shim/stacks/reuse.h) and the walk memo's trusted recalls
// (shim/stacks/walk_memo.h). Internal to the stacks module.
#pragma once
#include <cstdint>

namespace gg::stacks {

// Whether hit number `n` is the one checked in its window of `window` hits (a power of two): the place is
// drawn from the window's number (the top bits of MurmurHash3's 32-bit finaliser of it). At a fixed
// place (every 64th hit), callers that take turns in a pattern whose period divides it (A and B
// alternating, A's hits even) kept one of them from every check, and its allocations took the other's
// stack for good; a place moving by a fixed step, or by a multiplicative hash's top bits, still kept
// some phases of some periods from every check. Drawn so, every phase of every period up to 128 is
// checked within 1,000 windows (tests/unit/test_stacks_reuse.cpp), as a random place would be.
inline bool once_a_window(uint32_t n, uint32_t window) {
    uint32_t h = n / window;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return n % window == h >> (32 - __builtin_ctz(window));
}

}  // namespace gg::stacks
