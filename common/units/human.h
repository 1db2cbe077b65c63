// Numbers for people, one way everywhere: sizes in 1024-based units ("1.50 GiB", the units
// parse_size reads back), signed deltas, durations, UTC times and rounded percentages.
#pragma once
#include <cstdint>
#include <string>

namespace gg {

// "812 B", "1.50 KiB", "512.00 MiB", "1.50 GiB", up to EiB.
std::string human_bytes(uint64_t bytes);
// "+1.50 GiB" / "-12.00 MiB" / "0 B".
std::string human_delta(int64_t delta);
// "340 us", "340 ms", "1.2 s", "2 min 3 s", "2 h 5 min".
std::string human_duration_ns(int64_t ns);
// "2025-12-02 13:20:00 UTC"
std::string human_time_unix_ns(int64_t ns);
// part of whole in percent, rounded, saturated at INT_MAX; 0 of nothing.
int percent(uint64_t part, uint64_t whole);

}  // namespace gg
