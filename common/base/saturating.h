// Byte counts that cannot wrap: a request of SIZE_MAX (a negative size cast to size_t), a forged
// count in the ledger, a width times a height. Each stops at UINT64_MAX, which no device holds and no
// limit admits, instead of wrapping around to a small number that one would.
#pragma once
#include <cstdint>

namespace gg {

inline uint64_t sat_add(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

inline uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

// a - b, or 0 when b is larger.
inline uint64_t sat_sub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

}  // namespace gg
