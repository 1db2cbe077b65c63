// What the driver maps for an allocation beyond its bytes: stream-ordered pools grow, and the graph
// pool maps memory nodes, in chunks of the device's allocation granularity (2 MiB), or more, which
// the pools' own figures then show. Admission charges the rounded size before the driver call, so
// that the truth is never above the ledger while a call is in flight; the reading after the call
// settles the difference.
#pragma once
#include <cstdint>

namespace gg::usage {

constexpr uint64_t kChunk = 2ull << 20;

inline uint64_t chunk_rest(uint64_t bytes) { return bytes % kChunk ? kChunk - bytes % kChunk : 0; }

}  // namespace gg::usage
