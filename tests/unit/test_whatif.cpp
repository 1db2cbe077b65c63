// The what-if (tools/report/whatif/): the model of PyTorch's caching allocator against answers worked
// out by hand from c10's rules.
#include <doctest/doctest.h>

#include <sstream>
#include <vector>

#include "tools/report/whatif/allocator_model.h"

using namespace gg::whatif;

namespace {

constexpr uint64_t MiB = kMiB;

struct Model {
    explicit Model(Options o = Options()) : m(o) {}
    uint64_t malloc(uint64_t request) {
        uint64_t p = m.malloc(request);
        check();
        return p;
    }
    uint64_t block(uint64_t request) {  // the size of the block a request got
        uint64_t bytes = 0;
        REQUIRE(m.malloc(request, &bytes));
        check();
        return bytes;
    }
    void free(uint64_t p) {
        REQUIRE(m.free(p));
        check();
    }
    void check() {
        std::string why;
        REQUIRE_MESSAGE(m.consistent(&why), why);
    }
    CachingAllocatorModel m;
};

Options expandable(uint64_t limit = kNoLimit) {
    Options o;
    o.expandable = true;
    o.limit = limit;
    return o;
}
Options limited(uint64_t limit, uint64_t max_split = kNoMaxSplit) {
    Options o;
    o.limit = limit;
    o.max_split_size = max_split;
    return o;
}

}  // namespace

TEST_CASE("model: requests round to 512 B, segments to c10's sizes, pools split at 1 MiB") {
    CHECK(round_size(0) == 512);
    CHECK(round_size(1) == 512);
    CHECK(round_size(512) == 512);
    CHECK(round_size(513) == 1024);
    CHECK(round_size(MiB) == MiB);
    CHECK(allocation_size(512) == 2 * MiB);
    CHECK(allocation_size(MiB) == 2 * MiB);         // the largest small request
    CHECK(allocation_size(MiB + 512) == 20 * MiB);  // the smallest large one
    CHECK(allocation_size(10 * MiB - 512) == 20 * MiB);
    CHECK(allocation_size(10 * MiB) == 10 * MiB);
    CHECK(allocation_size(10 * MiB + 512) == 12 * MiB);  // up to 2 MiB

    Model m;
    uint64_t a = m.malloc(1000), b = m.malloc(1000);
    CHECK(m.m.block_bytes(a) == 1024);
    CHECK(b == a + 1024);  // split from the same 2 MiB segment
    CHECK(m.m.reserved() == 2 * MiB);
    m.malloc(MiB);  // still the small pool: fits what is left of that segment
    CHECK(m.m.reserved() == 2 * MiB);
    m.malloc(MiB + 1);  // the large pool: a 20 MiB segment of its own
    CHECK(m.m.reserved() == 22 * MiB);
    CHECK(m.m.allocated() == 2048 + MiB + MiB + 512);
    CHECK(m.m.segments().size() == 2);
}

TEST_CASE("model: the large pool splits only when more than 1 MiB remains; the small pool from 512 B") {
    Model m;
    CHECK(m.block(5 * MiB) == 5 * MiB);                 // 20 MiB segment, 15 MiB left free
    CHECK(m.block(14 * MiB + 512 * 1024) == 15 * MiB);  // 0.5 MiB would remain: the whole block
    CHECK(m.m.allocated() == 20 * MiB);
    CHECK(m.m.reserved() == 20 * MiB);
    Model s;
    CHECK(s.block(MiB) == MiB);              // 2 MiB segment, 1 MiB left free
    CHECK(s.block(MiB - 512) == MiB - 512);  // exactly 512 B would remain: split all the same
    CHECK(s.block(512) == 512);              // and that block is used
    CHECK(s.m.reserved() == 2 * MiB);
}

TEST_CASE("model: best fit by size then address, frees merge with free neighbours, cached segments return") {
    Model m;
    uint64_t b1 = m.malloc(4 * MiB), b2 = m.malloc(6 * MiB), b3 = m.malloc(4 * MiB), b4 = m.malloc(6 * MiB);
    CHECK(m.m.reserved() == 20 * MiB);  // four blocks tile one segment
    m.free(b1);
    m.free(b3);
    // Two free 4 MiB blocks: the lower one wins; 1 MiB would remain, so it is handed out whole.
    uint64_t c = m.malloc(3 * MiB);
    CHECK(c == b1);
    CHECK(m.m.block_bytes(c) == 4 * MiB);
    m.free(b2);  // merges with the free b3 behind it: 10 MiB
    CHECK(m.m.largest_free() == 10 * MiB);
    uint64_t d = m.malloc(7 * MiB);  // the 10 MiB block, split
    CHECK(d == b2);
    CHECK(m.m.block_bytes(d) == 7 * MiB);
    CHECK(m.m.largest_free() == 3 * MiB);
    CHECK(m.m.reserved() == 20 * MiB);
    for (uint64_t p : {c, d, b4}) m.free(p);
    CHECK(m.m.largest_free() == 20 * MiB);  // one free block, the whole segment
    CHECK(m.m.reserved() == 20 * MiB);      // cached
    m.m.empty_cache();
    CHECK(m.m.reserved() == 0);
    m.check();
}

TEST_CASE("model: on a refusal, unsplit cached segments are released and the request retried") {
    Model m(limited(40 * MiB));
    uint64_t a = m.malloc(12 * MiB), b = m.malloc(12 * MiB);
    m.free(a);
    m.free(b);
    CHECK(m.m.reserved() == 24 * MiB);
    CHECK(m.malloc(30 * MiB));  // 24 + 30 > 40: both cached segments go, then it fits
    CHECK(m.m.reserved() == 30 * MiB);

    // A cached block inside a segment that also holds a live block cannot go.
    Model n(limited(40 * MiB));
    uint64_t x = n.malloc(4 * MiB);
    n.malloc(4 * MiB);
    n.free(x);
    CHECK(n.malloc(30 * MiB) == 0);
    CHECK(n.m.out_of_memory_count() == 1);
    CHECK(n.m.reserved() == 20 * MiB);
}

TEST_CASE("model: max_split_size keeps oversize blocks whole and releases them first") {
    const uint64_t M = 32 * MiB;
    Model m(limited(kNoLimit, M));
    uint64_t big = m.malloc(64 * MiB);
    CHECK(m.m.block_bytes(big) == 64 * MiB);  // a request of M or more is never split
    m.free(big);
    m.malloc(8 * MiB);  // below M: never takes the 64 MiB block
    CHECK(m.m.reserved() == 84 * MiB);
    m.malloc(40 * MiB);  // 64 >= 40 + 20: too large to hand out whole
    CHECK(m.m.reserved() == 124 * MiB);
    uint64_t r = m.malloc(48 * MiB);  // 64 < 48 + 20: handed out whole, unsplit
    CHECK(r == big);
    CHECK(m.m.block_bytes(r) == 64 * MiB);

    // On a refusal: the smallest unsplit free block of at least max(request, M) goes, and only it.
    Model one(limited(190 * MiB, M));
    uint64_t x = one.malloc(64 * MiB), y = one.malloc(96 * MiB);
    one.free(x);
    one.free(y);
    CHECK(one.malloc(40 * MiB));
    CHECK(one.m.reserved() == 136 * MiB);  // the 96 MiB block stays cached

    // No single block large enough: the largest oversize ones until enough; a cached block below M stays.
    Model many(limited(100 * MiB, M));
    uint64_t p = many.malloc(40 * MiB), q = many.malloc(36 * MiB), s = many.malloc(12 * MiB);
    for (uint64_t v : {p, q, s}) many.free(v);
    CHECK(many.m.reserved() == 88 * MiB);
    CHECK(many.malloc(70 * MiB));
    CHECK(many.m.reserved() == 82 * MiB);  // 12 MiB cached + 70
}

TEST_CASE("model: expandable segments map pages as needed; pages holding live blocks stay mapped") {
    Model s(expandable());
    s.malloc(1000);
    CHECK(s.m.reserved() == 2 * MiB);  // a small page

    Model m(expandable(60 * MiB));
    std::vector<uint64_t> b;
    for (int i = 0; i < 10; i++) b.push_back(m.malloc(4 * MiB));
    CHECK(m.m.reserved() == 40 * MiB);  // two 20 MiB pages, the blocks packed back to back
    CHECK(b[5] == b[0] + 20 * MiB);
    for (int i = 0; i < 5; i++) m.free(b[i]);  // the first page holds no live block any more
    // 30 MiB needs two more pages (40 + 40 > 60): the free first page is unmapped, then it fits.
    CHECK(m.malloc(30 * MiB));
    CHECK(m.m.reserved() == 60 * MiB);

    Model pinned(expandable(60 * MiB));
    b.clear();
    for (int i = 0; i < 10; i++) b.push_back(pinned.malloc(4 * MiB));
    for (int i = 0; i < 10; i += 2) pinned.free(b[i]);  // every page keeps a live block
    CHECK(pinned.m.allocated() == 20 * MiB);
    CHECK(pinned.malloc(30 * MiB) == 0);  // although limit - allocated = 40 MiB
    CHECK(pinned.m.reserved() == 40 * MiB);
    pinned.m.empty_cache();
    CHECK(pinned.m.reserved() == 40 * MiB);

    for (int i = 1; i < 10; i += 2) pinned.free(b[i]);
    pinned.m.empty_cache();  // nothing live: every page unmapped, the range given back
    CHECK(pinned.m.reserved() == 0);
    CHECK(pinned.m.segments().empty());
}

TEST_CASE("model: with expandable segments, a free block that can grow counts as its grown size") {
    Model m(expandable());
    uint64_t a = m.malloc(4 * MiB), b = m.malloc(14 * MiB);
    m.malloc(2 * MiB);  // the first page is full
    m.malloc(8 * MiB);  // the second page: 12 MiB free after it, then unmapped space
    (void)a;
    m.free(b);
    // Free: 12 MiB (growable without end) and 14 MiB. Best fit by size alone is the 12 MiB one; c10
    // walks on to the 14 MiB block, whose grown size is smaller.
    CHECK(m.malloc(10 * MiB) == b);
    CHECK(m.m.reserved() == 40 * MiB);
}
