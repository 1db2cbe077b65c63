#include "tools/report/tensor.h"

#include <algorithm>
#include <map>

namespace gg::report {
namespace {

constexpr uint64_t kSmallSize = 1ull << 20;    // PyTorch's largest "small" block
constexpr uint64_t kSmallBuffer = 2ull << 20;  // its small pool's segments

// The ranges blocks can lie in: the segments from the driver, or the pages mapped into expandable
// segments (which have no segment of their own in the list: their memory is cuMemCreate'd).
std::vector<SegmentUse> ranges_of(const TensorView &t) {
    std::vector<SegmentUse> out;
    for (const TensorSegment &s : t.segments) {
        SegmentUse u;
        u.address = s.address;
        u.bytes = s.bytes;
        u.creator = s.stack;
        u.small_pool = s.bytes == kSmallBuffer;
        out.push_back(u);
    }
    for (const auto &[address, bytes] : t.mappings) {
        SegmentUse u;
        u.address = address;
        u.bytes = bytes;
        u.small_pool = bytes == kSmallBuffer;  // expandable pages: 2 MiB small pool, 20 MiB large
        out.push_back(u);
    }
    std::sort(out.begin(), out.end(), [](const SegmentUse &a, const SegmentUse &b) { return a.address < b.address; });
    return out;
}

}  // namespace

TensorFacts tensor_facts(const Report &r) {
    TensorFacts f;
    if (!r.tensor || !r.tensor->from_blocks()) return f;
    const TensorView &t = *r.tensor;
    f.present = true;
    f.expandable = !t.mappings.empty() || t.expandable_segments();
    f.complete = t.blocks.size() >= t.block_count && t.coverage_complete;
    f.unlisted = t.coverage_complete ? 0 : t.unlisted_bytes;
    if (t.oom) {
        f.at_oom = true;
        f.request = t.oom->requested;
        f.allocated = t.oom->allocated;
        f.reserved = t.oom->reserved;
    } else {
        f.allocated = t.allocated.value_or(0);
        f.reserved = t.reserved.value_or(0);
    }
    f.unallocated = f.reserved > f.allocated ? f.reserved - f.allocated : 0;

    // Blocks by address, then each range's blocks in one pass.
    std::vector<const TensorBlock *> blocks;
    for (const TensorBlock &b : t.blocks) blocks.push_back(&b);
    std::sort(blocks.begin(), blocks.end(),
              [](const TensorBlock *a, const TensorBlock *b) { return a->address < b->address; });
    f.segments = ranges_of(t);
    std::map<std::string, Pin> pins;
    std::map<std::string, std::map<std::string, uint64_t>> by_creator;  // holder -> creator -> bytes
    size_t bi = 0;
    for (SegmentUse &s : f.segments) {
        uint64_t end = s.address + s.bytes, cursor = s.address;
        while (bi < blocks.size() && blocks[bi]->address + blocks[bi]->bytes <= s.address) bi++;
        std::vector<const TensorBlock *> inside;
        for (size_t j = bi; j < blocks.size() && blocks[j]->address < end; j++) {
            const TensorBlock &b = *blocks[j];
            uint64_t lo = std::max(b.address, s.address), hi = std::min(b.address + b.bytes, end);
            if (lo > cursor) {
                s.holes++;
                s.largest_hole = std::max(s.largest_hole, lo - cursor);
            }
            s.allocated += hi - lo;
            s.blocks++;
            if (!s.creator.empty()) by_creator[b.stack][s.creator] += hi - lo;
            cursor = std::max(cursor, hi);
            inside.push_back(&b);
        }
        if (end > cursor) {
            s.holes++;
            s.largest_hole = std::max(s.largest_hole, end - cursor);
        }
        if (s.blocks == 0) {
            f.releasable += s.bytes;
            s.holes = 0;  // one whole free range: releasable, not a hole between tensors
        } else if (s.pinned()) {
            f.pinned_segments++;
            f.pinned_free += s.bytes - s.allocated;
            f.holes += s.holes;
            f.hole_bytes += s.bytes - s.allocated;
            std::map<std::string, bool> seen;
            for (const TensorBlock *b : inside) {
                Pin &p = pins[b->stack];
                p.stack = b->stack;
                p.bytes += b->bytes;
                p.blocks++;
                if (!seen[b->stack]) {
                    seen[b->stack] = true;
                    p.segments++;
                    p.free_held += s.bytes - s.allocated;
                }
            }
        }
        // The largest free range the request could use: one in a segment of its pool.
        bool request_small = f.request && f.request <= kSmallSize;
        if (!f.request || s.small_pool == request_small) f.largest_free = std::max(f.largest_free, s.largest_hole);
        if (s.blocks == 0 && (!f.request || s.small_pool == request_small))
            f.largest_free = std::max(f.largest_free, s.bytes);
    }
    for (auto &[stack, p] : pins) f.pins.push_back(p);
    for (const auto &[holder, creators] : by_creator) {
        auto top = std::max_element(creators.begin(), creators.end(),
                                    [](const auto &x, const auto &y) { return x.second < y.second; });
        if (top != creators.end()) f.segment_creator[holder] = top->first;
    }
    std::sort(f.pins.begin(), f.pins.end(), [](const Pin &a, const Pin &b) {
        return a.free_held != b.free_held ? a.free_held > b.free_held : a.bytes > b.bytes;
    });
    return f;
}

}  // namespace gg::report
