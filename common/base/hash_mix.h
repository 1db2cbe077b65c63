// Mixes one word into a running 64-bit hash (a multiply-xorshift; collisions are as rare as in any
// 64-bit hash). Used for call-site keys (shim/stacks/reuse.h, shim/python/frames.cpp), where a key
// is folded from a stack's words one at a time.
#pragma once
#include <cstdint>

namespace gg {

inline uint64_t hash_mix(uint64_t h, uint64_t word) {
    h ^= word + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

}  // namespace gg
