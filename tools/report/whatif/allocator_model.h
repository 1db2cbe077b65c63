// A model of PyTorch's CUDA caching allocator (c10::cuda::CUDACachingAllocator's
// DeviceCachingAllocator, PyTorch 2.x), block by block, for one device and one stream: the replay of
// `gpuguard report --what-if` runs a report's recorded events through it under other settings, and the
// test double of libc10_cuda.so (tests/fake/fake_c10_cuda.cpp) hands out its blocks, so that the
// double and the replay agree by construction and the double's numbers check the model's rules.
//
// The rules, as c10 has them (our own code, written from them):
//   round_size: below 512 B, 512 B; else up to a multiple of 512 B (roundup_power2_divisions off).
//   pools: a rounded request of at most 1 MiB uses the small pool, larger ones the large pool.
//   segment size (a new segment for a request): <= 1 MiB: 2 MiB; < 10 MiB: 20 MiB; else up to a
//     multiple of 2 MiB.
//   malloc: best fit among the pool's free blocks (smallest size, then lowest address). With
//     max_split_size M: a request below M never takes a free block of M or more, a request of M or
//     more takes one only below request + 20 MiB. None: a new segment; refused -> (M set) release the
//     smallest unsplit free block of at least max(request, M), else the largest unsplit ones of M or
//     more until that much is freed, and retry -> release every free block that is a whole segment
//     and retry -> out of memory.
//   split: the block is split (front part handed out, the rest stays free) when what remains is at
//     least 512 B in the small pool or with expandable segments, and in the large pool when the
//     request is below M and more than 1 MiB remains.
//   free: the block merges with free neighbours of its segment.
//   expandable_segments: one address range per pool (more when it fills), mapped in pages of 2 MiB
//     (small pool) or 20 MiB (large pool) as needed: best fit among mapped free blocks first (c10's
//     walk: from the best fit on, a later free block is preferred while its size plus the unmapped
//     space right after it is smaller), else map pages at the lowest address with enough free and
//     unmapped space; on a refusal every page lying entirely inside a free block is unmapped, then
//     the mapping is retried. A page holding any live block stays mapped.
//   reserved: segment bytes (mapped bytes with expandable segments); allocated: live block bytes.
#pragma once
#include "tools/report/whatif/room_index.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gg::whatif {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kMinBlockSize = 512;       // every block is a multiple of this
constexpr uint64_t kSmallSize = 1 * kMiB;     // the largest request of the small pool
constexpr uint64_t kSmallBuffer = 2 * kMiB;   // a small-pool segment; a small expandable page
constexpr uint64_t kLargeBuffer = 20 * kMiB;  // segment of a 1-10 MiB request; a large expandable page
constexpr uint64_t kMinLargeAlloc = 10 * kMiB;
constexpr uint64_t kRoundLarge = 2 * kMiB;
constexpr uint64_t kNoMaxSplit = UINT64_MAX;
constexpr uint64_t kNoLimit = UINT64_MAX;
// A request above this is refused at once: no device has a PiB, and sums of sizes and addresses
// below then never overflow 64 bits (reports are files anyone can edit).
constexpr uint64_t kMaxRequest = 1ull << 50;

uint64_t round_size(uint64_t request);  // never wraps: UINT64_MAX rounds down to the last multiple
// The size of the segment a new request of `size` (rounded) gets.
uint64_t allocation_size(uint64_t size);

// Where segments come from: the driver for the test double, invented addresses for the replay.
class Device {
public:
    virtual ~Device() = default;
    // A segment of `bytes`: its address, or 0 when refused.
    virtual uint64_t alloc_segment(uint64_t bytes) = 0;
    virtual void free_segment(uint64_t address, uint64_t bytes) = 0;
    // Expandable segments: an address range without memory (0: refused), released whole; the pages of
    // `page` bytes over [address, address + bytes) of it mapped (all, or none and false) and unmapped.
    // Whole runs at a time, so that a device that need not visit each page does not (a request of a
    // PiB in an edited report is 50 million pages).
    virtual uint64_t reserve_range(uint64_t bytes) = 0;
    virtual void release_range(uint64_t address, uint64_t bytes) = 0;
    virtual bool map_pages(uint64_t address, uint64_t bytes, uint64_t page) = 0;
    virtual void unmap_pages(uint64_t address, uint64_t bytes, uint64_t page) = 0;
};

// Addresses handed out in order, never reused, nothing refused (the model's own limit is the budget).
class AddressSpace : public Device {
public:
    uint64_t alloc_segment(uint64_t bytes) override { return take(bytes); }
    void free_segment(uint64_t, uint64_t) override {}
    uint64_t reserve_range(uint64_t bytes) override { return take(bytes); }
    void release_range(uint64_t, uint64_t) override {}
    bool map_pages(uint64_t, uint64_t, uint64_t) override { return true; }
    void unmap_pages(uint64_t, uint64_t, uint64_t) override {}

private:
    uint64_t take(uint64_t bytes);
    uint64_t next_ = 1ull << 44;  // an address no small number is confused with
};

struct Options {
    bool expandable = false;                // expandable_segments:True
    uint64_t max_split_size = kNoMaxSplit;  // max_split_size_mb, in bytes
    uint64_t limit = kNoLimit;              // reserved never passes it: a segment or page past it is refused
    uint64_t range_bytes = 1ull << 40;      // expandable: the address range reserved per segment
};

struct SegmentInfo {
    uint64_t address = 0;
    uint64_t bytes = 0;      // reserved: the segment, or its mapped pages
    uint64_t range = 0;      // the address range (== bytes without expandable segments)
    uint64_t allocated = 0;  // live blocks in it
    uint64_t largest_free = 0;
    bool small = false, expandable = false;
};

class CachingAllocatorModel {
public:
    explicit CachingAllocatorModel(const Options &options, Device *device = nullptr);
    ~CachingAllocatorModel();
    CachingAllocatorModel(const CachingAllocatorModel &) = delete;
    CachingAllocatorModel &operator=(const CachingAllocatorModel &) = delete;

    // A block for a request of `request` bytes: its address (which names it until it is freed), or 0
    // when out of memory. `block_bytes`: the block's size (what allocated() counts).
    uint64_t malloc(uint64_t request, uint64_t *block_bytes = nullptr);
    // Takes back the live block at `address`; false when there is none.
    bool free(uint64_t address, uint64_t *block_bytes = nullptr);
    // torch.cuda.empty_cache(): every free whole segment released, every free page unmapped.
    void empty_cache();

    // The state PyTorch was in before the events a replay starts from (a report whose ring wrapped),
    // without expandable segments: a segment of `bytes` it held (the pool its size says: 2 MiB is the
    // small pool's, every large-pool segment is 10 MiB or more) with the blocks `live` at their
    // offsets (offset, bytes; by offset), the space between them free. Its address, or 0 when the
    // limit refuses it or `bytes` is no segment c10 makes; `placed` says which blocks it holds (one
    // overlapping the block before it, or not inside the segment, is left out).
    uint64_t adopt_segment(uint64_t bytes, const std::vector<std::pair<uint64_t, uint64_t>> &live,
                           std::vector<bool> *placed = nullptr);

    // The same with expandable segments: a range of one pool (`small`: the 2 MiB pages' pool) with
    // the pages `mapped` (offset, bytes; by offset, whole pages) mapped and the blocks `live` at their
    // offsets in them, the rest free. Its address, or 0 when no range is got; a run of pages the limit
    // refuses stays unmapped, and a block not lying wholly in mapped space is left out (`placed`).
    uint64_t adopt_range(bool small, const std::vector<std::pair<uint64_t, uint64_t>> &mapped,
                         const std::vector<std::pair<uint64_t, uint64_t>> &live, std::vector<bool> *placed = nullptr);

    uint64_t allocated() const { return allocated_; }
    uint64_t reserved() const { return reserved_; }
    uint64_t peak_allocated() const { return peak_allocated_; }
    uint64_t peak_reserved() const { return peak_reserved_; }
    uint64_t out_of_memory_count() const { return ooms_; }
    size_t live_blocks() const { return live_.size(); }
    // Free blocks the refusals looked at to give memory back: what a refusal costs, for tests (each
    // block given back is counted once; a cache that gives nothing back costs nothing to ask).
    uint64_t blocks_visited_on_refusal() const { return visited_on_refusal_; }
    // The smallest reserved-plus-growth the limit refused (UINT64_MAX: none). Under any limit from
    // peak_reserved() up to below this, the model makes exactly the same choices: what the replay's
    // limit search uses to skip limits.
    uint64_t smallest_refused_by_limit() const { return smallest_refused_; }
    uint64_t block_bytes(uint64_t address) const;  // 0: no live block there
    uint64_t largest_free() const;                 // the largest mapped free block of either pool
    std::vector<SegmentInfo> segments() const;     // by address
    const Options &options() const { return options_; }

    // Every invariant of the structure (blocks tile their segments, neighbours merged, the free sets
    // and totals agree, the limit holds); `why` says the first broken one. For tests and fuzzing.
    bool consistent(std::string *why) const;

private:
    struct Segment;
    struct Block {
        uint64_t address = 0, size = 0;
        bool allocated = false;
        bool mapped = true;  // false: an expandable segment's unmapped space
        // Listed free blocks with expandable segments (Pool::run_ends): c10's walk passes it; it ends a
        // run of passed blocks.
        bool passed = false, run_end = false;
        Segment *segment = nullptr;
        Block *prev = nullptr, *next = nullptr;
    };
    struct Segment {
        uint64_t address = 0, size = 0;  // the range (its bytes, without expandable segments)
        bool small = false, expandable = false;
        // The block at the segment's start. Every split and merge keeps the lower block's object, so it
        // never changes.
        Block *head = nullptr;
    };
    struct BySize {
        bool operator()(const Block *a, const Block *b) const {
            return a->size != b->size ? a->size < b->size : a->address < b->address;
        }
    };
    struct ByAddress {
        bool operator()(const Block *a, const Block *b) const { return a->address < b->address; }
    };
    struct Pool {
        bool small = false;
        std::set<Block *, BySize> free;         // mapped free blocks
        std::set<Block *, ByAddress> unmapped;  // expandable segments' unmapped space
        // The free blocks a refusal gives back, so that it visits no other: whole segments, or free
        // blocks holding at least one whole page of an expandable segment. A subset of `free`.
        std::set<Block *, BySize> releasable;
        // Expandable segments: c10's walk from the best fit (get_free_block) passes a free block whose
        // successor in `free` can grow to less (growable(), Block::passed), and stops at the first that
        // it does not pass. The blocks where a run of passed blocks ends (Block::run_end), so that the
        // walk is one search, not a visit of every block it passes (as many as the free blocks on a
        // crafted history: O(E^2) over a replay). Few or none on a real run: kept as flags in the
        // blocks, the set changes only where a run begins or ends.
        std::set<Block *, BySize> run_ends;
        std::set<Block *, ByAddress> empty_ranges;  // unmapped blocks that are a whole range
        // Expandable segments: every run of free space between live blocks of a range (mapped or not),
        // its start -> its end; and the runs holding unmapped space, by start, with their length, where a
        // request that no mapped block serves finds room (find_expandable_block).
        std::map<uint64_t, uint64_t> runs;
        RoomIndex room;
    };

    Pool &pool_of(const Segment *s) { return s->small ? small_ : large_; }
    uint64_t page_of(const Pool &p) const { return p.small ? kSmallBuffer : kLargeBuffer; }
    bool fits(uint64_t bytes);
    bool fits_quietly(uint64_t bytes) const;  // the same, without noting the smallest refusal
    void grew(uint64_t bytes);

    Block *get_free_block(Pool &pool, uint64_t size);
    // What c10 takes a free block's size to be with expandable segments: with the unmapped space after it.
    static uint64_t growable(const Block *b) { return b->size + (b->next && !b->next->mapped ? b->next->size : 0); }
    // Whether c10's walk from the best fit goes on past the free block at `b`: its successor can grow to less.
    static bool walk_passes(const Pool &pool, std::set<Block *, BySize>::const_iterator b) {
        auto next = std::next(b);
        return next != pool.free.end() && growable(*next) < growable(*b);
    }
    // After `at`'s growable size or neighbours in `free` changed: whether the walk passes it and the
    // block before it, and where runs of passed blocks end around it.
    void rewalk(Pool &pool, std::set<Block *, BySize>::iterator at);
    void set_run_end(Pool &pool, Block *b, bool end);
    Block *alloc_block(Pool &pool, uint64_t size);
    Block *new_segment(Pool &pool, uint64_t bytes);  // a segment of one free block, not yet listed
    Block *alloc_expandable(Pool &pool, uint64_t size);
    Block *find_expandable_block(Pool &pool, uint64_t size);
    Block *new_range(Pool &pool, uint64_t bytes);               // a range of one unmapped block, listed
    Block *block_at(const Segment *s, uint64_t address) const;  // the block holding `address`
    // Maps `bytes` (whole pages) at `at`, a page of `unmapped`; the free block they join, null if refused.
    Block *map_block(Pool &pool, Block *unmapped, uint64_t at, uint64_t bytes);
    void map_adopted_pages(Pool &pool, Segment *s, const std::vector<std::pair<uint64_t, uint64_t>> &mapped);
    bool should_split(const Pool &pool, const Block *b, uint64_t size) const;
    Block *split_at(Block *b, uint64_t at);  // the part of free `b` from `at` on, a block of its own (unlisted)
    bool release_available_cached_blocks(Pool &pool, uint64_t size);
    void release_cached_blocks();
    void release_segment(Pool &pool, Block *whole);
    void unmap_block(Pool &pool, Block *b);
    void release_empty_ranges(Pool &pool);
    // Joins `b` with its free neighbours of the same mapping state; returns the block that remains.
    Block *merge_free(Pool &pool, Block *b);
    // The free and unmapped sets are changed only through these, which keep the subsets in step. A
    // block's place in them depends on its address, size and neighbours: it is unlisted before they
    // change.
    bool releasable(const Pool &pool, const Block *b) const;
    void list_free(Pool &pool, Block *b);
    void unlist_free(Pool &pool, Block *b);
    void list_unmapped(Pool &pool, Block *b);
    void unlist_unmapped(Pool &pool, Block *b);
    // The runs of free space of expandable ranges change only through these.
    void take_run(Pool &pool, uint64_t address, uint64_t bytes);                    // a block handed out
    void give_run(Pool &pool, const Segment *s, uint64_t address, uint64_t bytes);  // freed, or a new range
    void drop_run(Pool &pool, uint64_t address);                                    // a range released
    void index_room(Pool &pool, uint64_t start, uint64_t end);  // listed in `room` if it holds unmapped space
    void index_room_at(Pool &pool, uint64_t address);           // the run holding `address`
    bool walk_consistent(const Pool &pool, std::string *why) const;
    bool runs_consistent(const Pool &pool, const Segment *s, std::string *why) const;

    Options options_;
    AddressSpace own_device_;
    Device *device_;
    Pool small_, large_;
    std::map<uint64_t, Segment *> segments_;  // by address
    std::unordered_map<uint64_t, Block *> live_;
    uint64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0, ooms_ = 0;
    uint64_t visited_on_refusal_ = 0;
    uint64_t smallest_refused_ = UINT64_MAX;
};

}  // namespace gg::whatif
