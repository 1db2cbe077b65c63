// The tensor view of a report (its "tensor_view" section: PyTorch's caching allocator seen block by
// block) turned into what explains an out-of-memory in tensors: how much is allocated to tensors and
// how much is reserved but free, in how many holes and how large the largest is, which segments
// cannot be released because a live tensor lies in them, and which tensors (by stack) pin them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tools/report/model.h"

namespace gg::report {

// One segment (device memory PyTorch got from the driver) or, with expandable segments, one mapped
// page, and the live blocks inside it.
struct SegmentUse {
    uint64_t address = 0, bytes = 0;
    std::string creator;     // the stack that made it grow (a segment's), "" for a mapped page
    uint64_t allocated = 0;  // bytes of live blocks inside
    size_t blocks = 0;
    uint64_t largest_hole = 0;  // the largest free range inside
    size_t holes = 0;
    bool small_pool = false;  // a 2 MiB segment of PyTorch's small pool (blocks of 1 MiB at most)
    bool pinned() const { return blocks > 0 && allocated < bytes; }
};

// The live tensors of one stack that keep segments from being released.
struct Pin {
    std::string stack;
    uint64_t bytes = 0;  // of its live blocks in pinned segments
    size_t blocks = 0;
    size_t segments = 0;     // segments it has a block in
    uint64_t free_held = 0;  // free bytes of those segments: what releasing them would have given back
};

struct TensorFacts {
    bool present = false;  // the report has a tensor view from PyTorch's block reports
    // PyTorch's totals at the out-of-memory when there was one, else at the report.
    uint64_t allocated = 0, reserved = 0, unallocated = 0;
    uint64_t request = 0;  // the request c10 refused (rounded as c10 rounds), 0 when none
    bool at_oom = false;
    bool expandable = false;     // the blocks lie in expandable segments (mapped pages)
    bool complete = true;        // every live block was listed (a huge report lists the largest only)
    uint64_t unlisted = 0;       // allocated bytes in no listed block: made while the view was off
    uint64_t largest_free = 0;   // the largest free range in a segment of the request's pool
    size_t holes = 0;            // free ranges inside segments holding live blocks
    uint64_t hole_bytes = 0;     // and their bytes
    uint64_t releasable = 0;     // bytes of segments with no live block: what emptying the cache frees
    size_t pinned_segments = 0;  // segments (pages) holding a live block and free space
    uint64_t pinned_free = 0;    // the free bytes inside those
    // Segments (or pages) and blocks that overlap one before them by address, left out: PyTorch never
    // makes them, so a report that has them was edited, and reading them would cost time in their
    // number times the blocks' (a crafted report of 1.7 MB took 11 s).
    size_t overlapping_segments = 0, overlapping_blocks = 0;
    std::vector<SegmentUse> segments;  // by address
    std::vector<Pin> pins;             // most free bytes held first
    // For each stack of live tensors, the stack that made the segments they lie in grow (the one with
    // the most of its bytes): "who holds" beside "who reserved".
    std::map<std::string, std::string> segment_creator;
};

TensorFacts tensor_facts(const Report &r);

}  // namespace gg::report
