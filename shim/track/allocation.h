// What the tracker records for one live allocation, and what kind of key it is filed under: shared
// by the tracker (shim/track/tracker.h) and its live table (shim/track/live_table.h).
#pragma once
#include <cstdint>

#include "shim/api/api.h"
#include "shim/stacks/stacks.h"

namespace gg {

// What a tracked key is: the same number can be a pointer and a cuMemCreate handle.
enum class KeyKind : uint8_t { kPointer, kHandle, kArray, kMipmap };

struct Allocation {
    uint64_t bytes = 0;
    uint64_t t_ns = 0;  // mono_ns() at commit
    stacks::StackId stack = 0;
    int32_t thread = 0;
    int16_t ordinal = -1;
    int16_t ledger_dev = -1;
    Api api = Api::kNone;         // what the program called (cudaMalloc when it came through cudart)
    Api driver_api = Api::kNone;  // the driver entry point
    bool workspace = false;       // made during a cuDNN call
};

}  // namespace gg
