#include "tools/report/whatif/allocator_model.h"

#include <algorithm>
#include <iterator>

namespace gg::whatif {

namespace {

uint64_t round_up(uint64_t v, uint64_t unit) { return (v + unit - 1) / unit * unit; }

}  // namespace

uint64_t round_size(uint64_t request) {
    if (request < kMinBlockSize) return kMinBlockSize;
    // The largest multiple of 512 B for the last 511 values, which would wrap round to 0.
    if (request > UINT64_MAX - kMinBlockSize) return UINT64_MAX / kMinBlockSize * kMinBlockSize;
    return round_up(request, kMinBlockSize);
}

uint64_t allocation_size(uint64_t size) {
    if (size <= kSmallSize) return kSmallBuffer;
    if (size < kMinLargeAlloc) return kLargeBuffer;
    return round_up(size, kRoundLarge);
}

uint64_t AddressSpace::take(uint64_t bytes) {
    // Aligned as the driver aligns (2 MiB), with a gap so that neighbouring segments never touch.
    uint64_t at = next_;
    if (bytes > (1ull << 62) || at > (1ull << 62)) return 0;
    next_ = round_up(at + bytes, kRoundLarge) + kRoundLarge;
    return at;
}

CachingAllocatorModel::CachingAllocatorModel(const Options &options, Device *device)
    : options_(options), device_(device ? device : &own_device_) {
    small_.small = true;
    // Pages are whole: a range that is not a multiple of the large page would leave a partial page.
    options_.range_bytes = std::max(round_up(std::min(options_.range_bytes, kMaxRequest), kLargeBuffer), kLargeBuffer);
}

CachingAllocatorModel::~CachingAllocatorModel() {
    // The memory of the model only: a device outliving it keeps its own account.
    for (auto &[address, s] : segments_) {
        for (Block *b = s->head; b;) {
            Block *next = b->next;
            delete b;
            b = next;
        }
        delete s;
    }
}

bool CachingAllocatorModel::fits_quietly(uint64_t bytes) const {
    return bytes <= options_.limit && reserved_ <= options_.limit - bytes;
}

bool CachingAllocatorModel::fits(uint64_t bytes) {
    if (fits_quietly(bytes)) return true;
    smallest_refused_ = std::min(smallest_refused_, bytes > UINT64_MAX - reserved_ ? UINT64_MAX : reserved_ + bytes);
    return false;
}

void CachingAllocatorModel::grew(uint64_t bytes) {
    reserved_ += bytes;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
}

uint64_t CachingAllocatorModel::malloc(uint64_t request, uint64_t *block_bytes) {
    if (block_bytes) *block_bytes = 0;
    if (request > kMaxRequest) {
        ooms_++;
        return 0;
    }
    uint64_t size = round_size(request);
    Pool &pool = size <= kSmallSize ? small_ : large_;
    Block *b = get_free_block(pool, size);
    if (!b) {
        b = alloc_block(pool, size);
        if (!b && release_available_cached_blocks(pool, size)) b = alloc_block(pool, size);
        if (!b) {
            release_cached_blocks();
            b = alloc_block(pool, size);
        }
        if (!b) {
            ooms_++;
            return 0;
        }
    }
    // `b` is free, mapped, at least `size`, and in no free set.
    if (should_split(pool, b, size)) list_free(pool, split_at(b, b->address + size));
    b->allocated = true;
    if (b->segment->expandable) take_run(pool, b->address, b->size);
    live_[b->address] = b;
    allocated_ += b->size;
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    if (block_bytes) *block_bytes = b->size;
    return b->address;
}

CachingAllocatorModel::Block *CachingAllocatorModel::split_at(Block *b, uint64_t at) {
    // The lower part keeps the block's object, so that a segment's head never changes.
    Block *rest = new Block(*b);
    rest->passed = rest->run_end = false;  // not listed yet
    rest->address = at;
    rest->size = b->address + b->size - at;
    rest->prev = b;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = at - b->address;
    return rest;
}

bool CachingAllocatorModel::free(uint64_t address, uint64_t *block_bytes) {
    auto it = live_.find(address);
    if (it == live_.end()) return false;
    Block *b = it->second;
    live_.erase(it);
    if (block_bytes) *block_bytes = b->size;
    allocated_ -= b->size;
    b->allocated = false;
    Pool &pool = pool_of(b->segment);
    if (b->segment->expandable) give_run(pool, b->segment, b->address, b->size);
    list_free(pool, merge_free(pool, b));
    return true;
}

void CachingAllocatorModel::empty_cache() { release_cached_blocks(); }

uint64_t CachingAllocatorModel::adopt_segment(uint64_t bytes, const std::vector<std::pair<uint64_t, uint64_t>> &live,
                                              std::vector<bool> *placed) {
    if (placed) placed->assign(live.size(), false);
    if (options_.expandable || bytes == 0 || bytes > kMaxRequest || bytes % kMinBlockSize) return 0;
    const bool small = bytes <= kSmallBuffer;
    if (small ? bytes != kSmallBuffer : bytes < kMinLargeAlloc) return 0;
    Pool &pool = small ? small_ : large_;
    Block *b = new_segment(pool, bytes);  // free, unlisted: the last free block of the segment so far
    if (!b) return 0;
    const uint64_t base = b->address;
    for (size_t i = 0; i < live.size() && b; i++) {
        const auto [offset, size] = live[i];
        if (offset % kMinBlockSize || size == 0 || size % kMinBlockSize || offset < b->address - base ||
            offset >= bytes || size > bytes - offset)
            continue;                      // overlaps the block before it, or is no block of this segment
        if (b->address - base < offset) {  // the free space before it stays free
            Block *before = b;
            b = split_at(before, base + offset);
            list_free(pool, before);
        }
        Block *block = b;
        b = block->size > size ? split_at(block, base + offset + size) : nullptr;
        block->allocated = true;
        live_[block->address] = block;
        allocated_ += block->size;
        if (placed) (*placed)[i] = true;
    }
    if (b) list_free(pool, b);  // and so does the space after the last one
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    return base;
}

bool CachingAllocatorModel::releasable(const Pool &pool, const Block *b) const {
    if (!b->segment->expandable) return !b->prev && !b->next;
    const uint64_t page = page_of(pool), base = b->segment->address;
    return round_up(b->address - base, page) + page <= b->address + b->size - base;
}

void CachingAllocatorModel::list_free(Pool &pool, Block *b) {
    auto at = pool.free.insert(b).first;
    if (releasable(pool, b)) pool.releasable.insert(b);
    if (options_.expandable) rewalk(pool, at);
}

void CachingAllocatorModel::unlist_free(Pool &pool, Block *b) {
    auto at = pool.free.find(b);
    if (at == pool.free.end()) return;
    pool.releasable.erase(b);
    if (!options_.expandable) {
        pool.free.erase(at);
        return;
    }
    set_run_end(pool, b, false);
    b->passed = false;
    auto next = pool.free.erase(at);
    if (next != pool.free.begin()) rewalk(pool, std::prev(next));  // the block before it, now before `next`
    else if (next != pool.free.end()) rewalk(pool, next);          // `next` is the first now
}

void CachingAllocatorModel::set_run_end(Pool &pool, Block *b, bool end) {
    if (b->run_end == end) return;
    b->run_end = end;
    if (end) pool.run_ends.insert(b);
    else pool.run_ends.erase(b);
}

void CachingAllocatorModel::rewalk(Pool &pool, std::set<Block *, BySize>::iterator at) {
    const auto from = at == pool.free.begin() ? at : std::prev(at);
    (*from)->passed = walk_passes(pool, from);
    (*at)->passed = walk_passes(pool, at);
    auto to = std::next(at);
    if (to != pool.free.end()) ++to;  // through the block after `at`, whose run may end or no longer end
    for (auto b = from; b != to; ++b)
        set_run_end(pool, *b, !(*b)->passed && b != pool.free.begin() && (*std::prev(b))->passed);
}

void CachingAllocatorModel::list_unmapped(Pool &pool, Block *b) {
    pool.unmapped.insert(b);
    if (!b->prev && !b->next) pool.empty_ranges.insert(b);
    // The free block before it can now grow into it: whether the walk passes it, or the one before, may change.
    if (b->prev)
        if (auto at = pool.free.find(b->prev); at != pool.free.end()) rewalk(pool, at);
}

void CachingAllocatorModel::unlist_unmapped(Pool &pool, Block *b) {
    pool.unmapped.erase(b);
    pool.empty_ranges.erase(b);
}

CachingAllocatorModel::Block *CachingAllocatorModel::merge_free(Pool &pool, Block *b) {
    // Out of its set before its size changes: the sets are ordered by size and address.
    auto unlist = [this, &pool](Block *x) {
        if (x->mapped) unlist_free(pool, x);
        else unlist_unmapped(pool, x);
    };
    if (Block *p = b->prev; p && !p->allocated && p->mapped == b->mapped) {
        unlist(p);
        p->size += b->size;
        p->next = b->next;
        if (b->next) b->next->prev = p;
        delete b;
        b = p;
    }
    if (Block *n = b->next; n && !n->allocated && n->mapped == b->mapped) {
        unlist(n);
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        delete n;
    }
    return b;
}

CachingAllocatorModel::Block *CachingAllocatorModel::get_free_block(Pool &pool, uint64_t size) {
    Block key;
    key.size = size;
    auto it = pool.free.lower_bound(&key);
    if (it == pool.free.end()) return nullptr;
    // c10 counts a free block followed by unmapped space as the size it can grow to, and walks on from
    // the best fit while the next one's is smaller: to the block that ends its run of passed blocks.
    Block *b = *it;
    if (options_.expandable && b->passed) b = *pool.run_ends.lower_bound(b);  // the end of its run
    const uint64_t m = options_.max_split_size;
    if (size < m && b->size >= m) return nullptr;                     // no oversize block for a small request
    if (size >= m && b->size >= size + kLargeBuffer) return nullptr;  // nor one much larger than asked
    unlist_free(pool, b);
    return b;
}

CachingAllocatorModel::Block *CachingAllocatorModel::alloc_block(Pool &pool, uint64_t size) {
    if (options_.expandable) return alloc_expandable(pool, size);
    return new_segment(pool, allocation_size(size));
}

CachingAllocatorModel::Block *CachingAllocatorModel::new_segment(Pool &pool, uint64_t bytes) {
    if (!fits(bytes)) return nullptr;
    uint64_t address = device_->alloc_segment(bytes);
    if (!address) return nullptr;
    Segment *s = new Segment;
    s->address = address;
    s->size = bytes;
    s->small = pool.small;
    Block *b = new Block;
    b->address = address;
    b->size = bytes;
    b->segment = s;
    s->head = b;
    segments_[address] = s;
    grew(bytes);
    return b;
}

bool CachingAllocatorModel::should_split(const Pool &pool, const Block *b, uint64_t size) const {
    uint64_t remaining = b->size - size;
    if (pool.small || options_.expandable) return remaining >= kMinBlockSize;
    return size < options_.max_split_size && remaining > kSmallSize;
}

// ---- expandable segments ------------------------------------------------------------------------

CachingAllocatorModel::Block *CachingAllocatorModel::alloc_expandable(Pool &pool, uint64_t size) {
    Block *c = find_expandable_block(pool, size);
    if (!c) return nullptr;
    if (!c->mapped) {
        c = map_block(pool, c, c->address, std::min(c->size, size));
        if (!c) return nullptr;
    }
    // Now a mapped free block followed by unmapped space: map what is still missing.
    while (c->size < size) {
        Block *n = c->next;
        if (!n || n->mapped || n->allocated) return nullptr;  // find_expandable_block rules this out
        c = map_block(pool, n, n->address, std::min(size - c->size, n->size));
        if (!c) return nullptr;
    }
    unlist_free(pool, c);
    return c;
}

CachingAllocatorModel::Block *CachingAllocatorModel::find_expandable_block(Pool &pool, uint64_t size) {
    // The lowest unmapped space, together with the free block right before it, that has room: the
    // lowest run of free space holding unmapped space and at least `size` bytes (within a run, the
    // first unmapped block, from the run's start, has the most room after it), from the run's start.
    if (uint64_t start = pool.room.lowest_with(size); start != RoomIndex::kNone) {
        Block key;
        key.address = start;
        Block *u = *pool.unmapped.lower_bound(&key);  // the run's first unmapped block
        return u->prev && !u->prev->allocated ? u->prev : u;
    }
    // None: a new address range, as large as the request if that is larger.
    return new_range(pool, std::max(options_.range_bytes, round_up(size, page_of(pool))));
}

CachingAllocatorModel::Block *CachingAllocatorModel::new_range(Pool &pool, uint64_t range) {
    uint64_t address = device_->reserve_range(range);
    if (!address) return nullptr;
    Segment *s = new Segment;
    s->address = address;
    s->size = range;
    s->small = pool.small;
    s->expandable = true;
    Block *b = new Block;
    b->address = address;
    b->size = range;
    b->mapped = false;
    b->segment = s;
    s->head = b;
    segments_[address] = s;
    list_unmapped(pool, b);
    give_run(pool, s, address, range);
    return b;
}

CachingAllocatorModel::Block *CachingAllocatorModel::block_at(const Segment *s, uint64_t address) const {
    Block *b = s->head;
    while (b && b->address + b->size <= address) b = b->next;
    return b;
}

uint64_t CachingAllocatorModel::adopt_range(bool small, const std::vector<std::pair<uint64_t, uint64_t>> &mapped,
                                            const std::vector<std::pair<uint64_t, uint64_t>> &live,
                                            std::vector<bool> *placed) {
    if (placed) placed->assign(live.size(), false);
    if (!options_.expandable) return 0;
    Pool &pool = small ? small_ : large_;
    Block *range = new_range(pool, options_.range_bytes);
    if (!range) return 0;
    Segment *s = range->segment;
    const uint64_t base = s->address;
    map_adopted_pages(pool, s, mapped);
    for (size_t i = 0; i < live.size(); i++) {
        const auto [offset, size] = live[i];
        if (offset % kMinBlockSize || size == 0 || size % kMinBlockSize || offset >= s->size || size > s->size - offset)
            continue;
        Block *f = block_at(s, base + offset);
        if (f->allocated || !f->mapped || f->address + f->size < base + offset + size) continue;
        unlist_free(pool, f);
        if (f->address < base + offset) {  // the free space before it stays free
            Block *before = f;
            f = split_at(before, base + offset);
            list_free(pool, before);
        }
        if (f->size > size) list_free(pool, split_at(f, base + offset + size));
        f->allocated = true;
        take_run(pool, f->address, f->size);
        live_[f->address] = f;
        allocated_ += f->size;
        if (placed) (*placed)[i] = true;
    }
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    return base;
}

void CachingAllocatorModel::map_adopted_pages(Pool &pool, Segment *s,
                                              const std::vector<std::pair<uint64_t, uint64_t>> &mapped) {
    // Each entry is mapped as if on its own, in order: the limit refuses an entry that does not fit
    // (and a later, smaller one may still fit). But a run of entries that follow one another and all
    // fit is mapped as one: a report's pages come one entry a page, and mapping 2^16 pages one at a
    // time re-lists the growing free block 2^16 times. A device that refuses a run (all or none)
    // makes the rest go one entry at a time, as it would have refused them.
    const uint64_t page = page_of(pool), base = s->address;
    auto usable = [&](size_t i) {
        const auto [offset, bytes] = mapped[i];
        return offset % page == 0 && bytes != 0 && offset < s->size && bytes <= s->size - offset;
    };
    bool runs = true;
    for (size_t i = 0; i < mapped.size();) {
        if (!usable(i)) {
            i++;
            continue;
        }
        const uint64_t offset = mapped[i].first;
        Block *u = block_at(s, base + offset);
        if (u->mapped) {  // listed twice
            i++;
            continue;
        }
        // The unmapped space from the entry's page on; an entry within it rounds up to pages within it.
        const uint64_t at = base + offset, room = u->address + u->size - at;
        uint64_t len = round_up(std::min(mapped[i].second, room), page);
        size_t next = i + 1;
        for (; runs && next < mapped.size() && usable(next) && mapped[next].first == offset + len; next++) {
            if (mapped[next].second > room - len) break;
            const uint64_t more = round_up(mapped[next].second, page);
            if (!fits_quietly(len + more)) break;
            len += more;
        }
        if (next > i + 1 && !map_block(pool, u, at, len)) {
            runs = false;  // the device refused the run: this entry and the rest one at a time
            next = i + 1;
        }
        if (next == i + 1) map_block(pool, u, at, mapped[i].second);  // refused: it stays unmapped
        i = next;
    }
}

CachingAllocatorModel::Block *CachingAllocatorModel::map_block(Pool &pool, Block *u, uint64_t at, uint64_t bytes) {
    // Unmapped space starts on a page and is whole pages long, so `len` never passes it. The block is
    // split around the pages only once the limit and the device have taken them: refused, it is as it was.
    const uint64_t page = page_of(pool);
    uint64_t len = std::min(round_up(bytes, page), u->address + u->size - at);
    if (!fits(len) || !device_->map_pages(at, len, page)) return nullptr;
    grew(len);
    unlist_unmapped(pool, u);
    if (at > u->address) {  // the unmapped space before the pages stays unmapped
        Block *pages = split_at(u, at);
        list_unmapped(pool, u);
        u = pages;
    }
    if (len < u->size) list_unmapped(pool, split_at(u, at + len));
    u->mapped = true;
    Block *b = merge_free(pool, u);
    list_free(pool, b);
    index_room_at(pool, b->address);
    return b;
}

void CachingAllocatorModel::unmap_block(Pool &pool, Block *b) {
    // The pages lying entirely inside the free block.
    const uint64_t page = page_of(pool), base = b->segment->address;
    uint64_t lo = base + round_up(b->address - base, page);
    uint64_t hi = base + (b->address + b->size - base) / page * page;
    if (lo >= hi) return;
    device_->unmap_pages(lo, hi - lo, page);
    reserved_ -= hi - lo;
    unlist_free(pool, b);
    const uint64_t end = b->address + b->size;
    Block *u = b;
    if (lo > b->address) {  // the part before the first page stays mapped and free
        u = new Block;
        u->segment = b->segment;
        u->prev = b;
        u->next = b->next;
        if (b->next) b->next->prev = u;
        b->next = u;
        b->size = lo - b->address;
        list_free(pool, b);
    }
    u->address = lo;
    u->size = hi - lo;
    u->mapped = false;
    if (hi < end) {  // and so does the part after the last page
        Block *after = new Block;
        after->address = hi;
        after->size = end - hi;
        after->segment = b->segment;
        after->prev = u;
        after->next = u->next;
        if (u->next) u->next->prev = after;
        u->next = after;
        list_free(pool, after);
    }
    list_unmapped(pool, merge_free(pool, u));
    index_room_at(pool, lo);
}

void CachingAllocatorModel::release_empty_ranges(Pool &pool) {
    // A range with nothing mapped any more goes back whole, as c10 releases an empty expandable segment.
    while (!pool.empty_ranges.empty()) {
        Block *b = *pool.empty_ranges.begin();
        Segment *s = b->segment;
        unlist_unmapped(pool, b);
        drop_run(pool, s->address);
        device_->release_range(s->address, s->size);
        segments_.erase(s->address);
        delete b;
        delete s;
    }
}

// ---- the runs of free space of expandable ranges -------------------------------------------------

void CachingAllocatorModel::take_run(Pool &pool, uint64_t address, uint64_t bytes) {
    auto run = std::prev(pool.runs.upper_bound(address));
    const uint64_t start = run->first, end = run->second;
    if (address + bytes < end) {
        pool.runs.emplace_hint(std::next(run), address + bytes, end);
        index_room(pool, address + bytes, end);
    }
    if (start < address) {  // the run keeps its start: changed in place
        run->second = address;
        index_room(pool, start, address);
    } else {
        drop_run(pool, start);
    }
}

void CachingAllocatorModel::give_run(Pool &pool, const Segment *s, uint64_t address, uint64_t bytes) {
    // Joined with the runs right before and after it, within its range only: ranges may touch.
    uint64_t start = address, end = address + bytes;
    if (address > s->address) {
        if (auto before = pool.runs.lower_bound(address);
            before != pool.runs.begin() && std::prev(before)->second == address) {
            start = std::prev(before)->first;
            drop_run(pool, start);
        }
    }
    if (end < s->address + s->size) {
        if (auto after = pool.runs.find(end); after != pool.runs.end()) {
            uint64_t after_end = after->second;
            drop_run(pool, end);
            end = after_end;
        }
    }
    pool.runs[start] = end;
    index_room(pool, start, end);
}

void CachingAllocatorModel::drop_run(Pool &pool, uint64_t start) {
    pool.runs.erase(start);
    pool.room.erase(start);
}

void CachingAllocatorModel::index_room(Pool &pool, uint64_t start, uint64_t end) {
    Block key;
    key.address = start;
    auto u = pool.unmapped.lower_bound(&key);
    if (u != pool.unmapped.end() && (*u)->address < end) pool.room.set(start, end - start);
    else pool.room.erase(start);
}

void CachingAllocatorModel::index_room_at(Pool &pool, uint64_t address) {
    auto run = std::prev(pool.runs.upper_bound(address));
    index_room(pool, run->first, run->second);
}

// ---- giving memory back on a refusal ------------------------------------------------------------------

void CachingAllocatorModel::release_segment(Pool &pool, Block *whole) {
    Segment *s = whole->segment;
    unlist_free(pool, whole);
    device_->free_segment(s->address, s->size);
    reserved_ -= s->size;
    segments_.erase(s->address);
    delete whole;
    delete s;
}

bool CachingAllocatorModel::release_available_cached_blocks(Pool &pool, uint64_t size) {
    const uint64_t m = options_.max_split_size;
    if (m == kNoMaxSplit || options_.expandable) return false;  // c10 never frees expandable blocks here
    const uint64_t want = std::max(size, m);
    // Without expandable segments, the releasable blocks are exactly the unsplit free ones.
    Block key;
    key.size = want;
    if (auto it = pool.releasable.lower_bound(&key); it != pool.releasable.end()) {
        visited_on_refusal_++;
        release_segment(pool, *it);
        return true;
    }
    // No single block is large enough: the largest oversize ones until enough is freed.
    uint64_t freed = 0;
    while (!pool.releasable.empty() && freed < want) {
        Block *largest = *pool.releasable.rbegin();
        visited_on_refusal_++;
        if (largest->size < m) break;
        freed += largest->size;
        release_segment(pool, largest);
    }
    return freed >= want;
}

void CachingAllocatorModel::release_cached_blocks() {
    // Only the blocks that give something back are visited (Pool::releasable), in the order of the
    // free set: a refusal costs what it releases, not what the cache holds.
    for (Pool *pool : {&large_, &small_}) {
        while (!pool->releasable.empty()) {
            Block *b = *pool->releasable.begin();
            visited_on_refusal_++;
            if (b->segment->expandable) unmap_block(*pool, b);
            else release_segment(*pool, b);
        }
        release_empty_ranges(*pool);
    }
}

// ---- questions ------------------------------------------------------------------------------------

uint64_t CachingAllocatorModel::block_bytes(uint64_t address) const {
    auto it = live_.find(address);
    return it == live_.end() ? 0 : it->second->size;
}

uint64_t CachingAllocatorModel::largest_free() const {
    uint64_t largest = 0;
    for (const Pool *p : {&small_, &large_})
        if (!p->free.empty()) largest = std::max(largest, (*p->free.rbegin())->size);
    return largest;
}

std::vector<SegmentInfo> CachingAllocatorModel::segments() const {
    std::vector<SegmentInfo> out;
    for (const auto &[address, s] : segments_) {
        SegmentInfo info;
        info.address = address;
        info.range = s->size;
        info.small = s->small;
        info.expandable = s->expandable;
        for (const Block *b = s->head; b; b = b->next) {
            if (b->mapped) info.bytes += b->size;
            if (b->allocated) info.allocated += b->size;
            else if (b->mapped) info.largest_free = std::max(info.largest_free, b->size);
        }
        out.push_back(info);
    }
    return out;
}

bool CachingAllocatorModel::consistent(std::string *why) const {
    auto broken = [why](const std::string &what) {
        if (why) *why = what;
        return false;
    };
    uint64_t allocated = 0, reserved = 0;
    size_t live = 0, subsets = 0, free_small = 0, free_large = 0, unmapped_small = 0, unmapped_large = 0;
    for (const auto &[address, s] : segments_) {
        const Pool &pool = s->small ? small_ : large_;
        const uint64_t page = page_of(pool);
        if (s->address != address || !s->head || s->head->prev) return broken("segment head");
        if (s->expandable != options_.expandable) return broken("segment kind");
        uint64_t at = address;
        for (const Block *b = s->head; b; b = b->next) {
            if (b->segment != s) return broken("block's segment");
            if (b->address != at || b->size == 0) return broken("blocks do not tile their segment");
            if (b->next && b->next->prev != b) return broken("prev/next links");
            if (b->size % kMinBlockSize) return broken("block size not a multiple of 512");
            at += b->size;
            if (b->allocated) {
                if (!b->mapped) return broken("a live block in unmapped space");
                auto it = live_.find(b->address);
                if (it == live_.end() || it->second != b) return broken("live block not in the live table");
                allocated += b->size;
                live++;
            } else {
                if (b->next && !b->next->allocated && b->next->mapped == b->mapped)
                    return broken("free neighbours not merged");
                Block *key = const_cast<Block *>(b);
                if (!(b->mapped ? pool.free.count(key) : pool.unmapped.count(key)))
                    return broken("free block not in its pool's set");
                bool listed = b->mapped ? pool.releasable.count(key) : pool.empty_ranges.count(key);
                bool belongs = b->mapped ? releasable(pool, b) : !b->prev && !b->next;
                if (listed != belongs) return broken("releasable or empty-range set out of step");
                subsets += listed;
                if (b->mapped) (s->small ? free_small : free_large)++;
                else (s->small ? unmapped_small : unmapped_large)++;
                if (!b->mapped && ((b->address - address) % page || b->size % page))
                    return broken("unmapped space not whole pages");
            }
            if (b->mapped) reserved += b->size;
        }
        if (at != address + s->size) return broken("blocks do not cover their segment");
        if (s->expandable && !runs_consistent(pool, s, why)) return false;
        if (s->expandable) {
            // reserved counts whole pages: a mapped run always ends on a page boundary.
            for (const Block *b = s->head; b; b = b->next)
                if (b->mapped && (!b->next || !b->next->mapped) && (b->address + b->size - address) % page)
                    return broken("mapped run not ending on a page");
        }
    }
    if (live != live_.size()) return broken("live table holds blocks of no segment");
    if (free_small != small_.free.size() || free_large != large_.free.size()) return broken("stale free set entry");
    if (unmapped_small != small_.unmapped.size() || unmapped_large != large_.unmapped.size())
        return broken("stale unmapped set entry");
    if (subsets !=
        small_.releasable.size() + large_.releasable.size() + small_.empty_ranges.size() + large_.empty_ranges.size())
        return broken("stale releasable or empty-range set entry");
    if (options_.expandable && !(walk_consistent(small_, why) && walk_consistent(large_, why))) return false;
    size_t runs = 0, room = 0;
    for (const auto &[address, s] : segments_)
        for (const Block *b = s->head; b && s->expandable; b = b->next)
            if (!b->allocated && (!b->prev || b->prev->allocated)) {
                runs++;
                room += (s->small ? small_ : large_).room.at(b->address) > 0;
            }
    if (runs != small_.runs.size() + large_.runs.size() || room != small_.room.size() + large_.room.size())
        return broken("stale run of free space");
    if (allocated != allocated_) return broken("allocated total");
    if (reserved != reserved_) return broken("reserved total");
    if (reserved_ > options_.limit) return broken("reserved past the limit");
    if (allocated_ > reserved_) return broken("allocated past reserved");
    return true;
}

bool CachingAllocatorModel::walk_consistent(const Pool &pool, std::string *why) const {
    // Whether c10's walk passes each free block, and where its runs of passed blocks end, as walking
    // the free blocks finds it.
    size_t ends = 0;
    bool before_passed = false;
    for (auto b = pool.free.begin(); b != pool.free.end(); ++b) {
        bool passed = walk_passes(pool, b);
        bool end = !passed && before_passed;
        if (passed != (*b)->passed || end != (*b)->run_end || end != (pool.run_ends.count(*b) > 0)) {
            if (why) *why = "c10's walk would not stop where the flags say";
            return false;
        }
        ends += end;
        before_passed = passed;
    }
    if (ends != pool.run_ends.size()) {
        if (why) *why = "stale run end";
        return false;
    }
    return true;
}

bool CachingAllocatorModel::runs_consistent(const Pool &pool, const Segment *s, std::string *why) const {
    // Every run of free blocks of the range is listed with its end, and indexed with its length when it
    // holds unmapped space.
    for (const Block *b = s->head; b; b = b->next) {
        if (b->allocated || (b->prev && !b->prev->allocated)) continue;
        const uint64_t start = b->address;
        bool unmapped = false;
        for (; b->next && !b->next->allocated; b = b->next) unmapped |= !b->mapped;
        unmapped |= !b->mapped;
        const uint64_t end = b->address + b->size;
        auto run = pool.runs.find(start);
        if (run == pool.runs.end() || run->second != end || pool.room.at(start) != (unmapped ? end - start : 0)) {
            if (why) *why = "run of free space not listed as it is";
            return false;
        }
    }
    return true;
}

}  // namespace gg::whatif
