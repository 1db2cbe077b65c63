// What a request that does not say its size in bytes will take: an array (element bytes, channels,
// width, height, depth) and a pitched allocation (admitted at the pitch the driver most likely
// chooses). Saturating (common/base/saturating.h): a width of SIZE_MAX must not wrap to a request of
// 0 bytes that the quota admits. Shared with the admission's fuzz target (tests/fuzz/fuzz_admission.cpp).
#pragma once
#include <cstdint>

#include "common/base/saturating.h"

namespace gg::sizes {

constexpr uint64_t kPitchAlign = 512;

// The width rounded up to the alignment, times the height: exact below UINT64_MAX, UINT64_MAX above.
inline uint64_t pitch_estimate(uint64_t width, uint64_t height) {
    unsigned __int128 pitch = ((unsigned __int128)width + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
    if (pitch > UINT64_MAX) return height ? UINT64_MAX : 0;
    return sat_mul((uint64_t)pitch, height);
}

// A zero channel count, height or depth means one (a 1D or 2D array).
inline uint64_t array_bytes(uint64_t element, uint64_t channels, uint64_t w, uint64_t h, uint64_t d) {
    return sat_mul(sat_mul(sat_mul(sat_mul(element, channels ? channels : 1), w), h ? h : 1), d ? d : 1);
}

}  // namespace gg::sizes
