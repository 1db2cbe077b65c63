#include "tools/report/tensor.h"

#include <algorithm>
#include <map>

namespace gg::report {
namespace {

constexpr uint64_t kSmallSize = 1ull << 20;    // PyTorch's largest "small" block
constexpr uint64_t kSmallBuffer = 2ull << 20;  // its small pool's segments

// Sorted by address, less every item that begins inside one kept before it; how many were left out.
template <class T, class Address, class Bytes>
size_t drop_overlapping(std::vector<T> &items, Address address, Bytes bytes) {
    std::sort(items.begin(), items.end(), [&](const T &a, const T &b) { return address(a) < address(b); });
    size_t kept = 0;
    uint64_t end = 0;
    for (size_t i = 0; i < items.size(); i++) {
        if (kept && address(items[i]) < end) continue;
        end = address(items[i]) + bytes(items[i]);
        items[kept++] = items[i];
    }
    size_t dropped = items.size() - kept;
    items.resize(kept);
    return dropped;
}

// The ranges blocks can lie in: the segments from the driver, or the pages mapped into expandable
// segments (which have no segment of their own in the list: their memory is cuMemCreate'd).
std::vector<SegmentUse> ranges_of(const TensorView &t, size_t *overlapping) {
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
    *overlapping = drop_overlapping(
        out, [](const SegmentUse &u) { return u.address; }, [](const SegmentUse &u) { return u.bytes; });
    return out;
}

// PyTorch's totals: at the out-of-memory when there was one, else at the report.
void read_totals(const TensorView &t, TensorFacts &f) {
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
}

std::vector<const TensorBlock *> blocks_by_address(const TensorView &t, size_t *overlapping) {
    std::vector<const TensorBlock *> blocks;
    for (const TensorBlock &b : t.blocks) blocks.push_back(&b);
    *overlapping = drop_overlapping(
        blocks, [](const TensorBlock *b) { return b->address; }, [](const TensorBlock *b) { return b->bytes; });
    return blocks;
}

using BytesByCreator = std::map<std::string, std::map<std::string, uint64_t>>;  // holder -> creator -> bytes

// The blocks inside one range, found from `bi` on (blocks by address, ranges walked by address): the
// range's allocated bytes, its holes between them, and each holder's bytes by the range's creator.
std::vector<const TensorBlock *> blocks_inside(SegmentUse &s, const std::vector<const TensorBlock *> &blocks,
                                               size_t &bi, BytesByCreator &by_creator) {
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
    return inside;
}

// A range with live blocks and free space: it counts as pinned, and each stack with a block in it
// holds its free bytes.
void count_pinned(const SegmentUse &s, const std::vector<const TensorBlock *> &inside, TensorFacts &f,
                  std::map<std::string, Pin> &pins) {
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
void note_largest_free(const SegmentUse &s, TensorFacts &f) {
    bool request_small = f.request && f.request <= kSmallSize;
    if (!f.request || s.small_pool == request_small) f.largest_free = std::max(f.largest_free, s.largest_hole);
    if (s.blocks == 0 && (!f.request || s.small_pool == request_small))
        f.largest_free = std::max(f.largest_free, s.bytes);
}

// The pins, most free bytes held first, and for each holder the creator of most of its bytes.
void finish(const std::map<std::string, Pin> &pins, const BytesByCreator &by_creator, TensorFacts &f) {
    for (auto &[stack, p] : pins) f.pins.push_back(p);
    for (const auto &[holder, creators] : by_creator) {
        auto top = std::max_element(creators.begin(), creators.end(),
                                    [](const auto &x, const auto &y) { return x.second < y.second; });
        if (top != creators.end()) f.segment_creator[holder] = top->first;
    }
    std::sort(f.pins.begin(), f.pins.end(), [](const Pin &a, const Pin &b) {
        return a.free_held != b.free_held ? a.free_held > b.free_held : a.bytes > b.bytes;
    });
}

}  // namespace

TensorFacts tensor_facts(const Report &r) {
    TensorFacts f;
    if (!r.tensor || !r.tensor->from_blocks()) return f;
    const TensorView &t = *r.tensor;
    read_totals(t, f);
    // Blocks by address, then each range's blocks in one pass: linear, as neither ranges nor blocks
    // overlap among themselves (a block met by two ranges is the one that crosses from one to the next).
    std::vector<const TensorBlock *> blocks = blocks_by_address(t, &f.overlapping_blocks);
    f.segments = ranges_of(t, &f.overlapping_segments);
    std::map<std::string, Pin> pins;
    BytesByCreator by_creator;
    size_t bi = 0;
    for (SegmentUse &s : f.segments) {
        std::vector<const TensorBlock *> inside = blocks_inside(s, blocks, bi, by_creator);
        if (s.blocks == 0) {
            f.releasable += s.bytes;
            s.holes = 0;  // one whole free range: releasable, not a hole between tensors
        } else if (s.pinned()) {
            count_pinned(s, inside, f, pins);
        }
        note_largest_free(s, f);
    }
    finish(pins, by_creator, f);
    return f;
}

}  // namespace gg::report
