// The what-if (tools/report/whatif/): the model of PyTorch's caching allocator against answers worked
// out by hand from c10's rules, and the replay of hand-made event histories.
#include <doctest/doctest.h>

#include <iterator>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include "tools/report/analysis.h"
#include "tools/report/whatif/allocator_model.h"
#include "tools/report/whatif/replay.h"
#include "tools/report/whatif/room_index.h"

using namespace gg::whatif;
using gg::report::Report;
using gg::report::TensorEvent;

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
    CHECK(round_size(UINT64_MAX) == UINT64_MAX - 511);  // an edited report's size: no wrap to 0
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

TEST_CASE("model: a segment PyTorch held is adopted with its live blocks where they were") {
    Model m(limited(64 * MiB));
    std::vector<bool> placed;
    // 4 MiB at 0 and at 12 MiB of a 20 MiB segment; one overlapping the first and one past the end are left out.
    uint64_t base = m.m.adopt_segment(
        20 * MiB, {{0, 4 * MiB}, {2 * MiB, 4 * MiB}, {12 * MiB, 4 * MiB}, {18 * MiB, 4 * MiB}}, &placed);
    REQUIRE(base);
    m.check();
    CHECK(placed == std::vector<bool>{true, false, true, false});
    CHECK(m.m.reserved() == 20 * MiB);
    CHECK(m.m.allocated() == 8 * MiB);
    CHECK(m.m.block_bytes(base) == 4 * MiB);
    CHECK(m.m.block_bytes(base + 12 * MiB) == 4 * MiB);
    // The free space between them is one block of 8 MiB, and 4 MiB after: best fit takes the 4 MiB.
    CHECK(m.malloc(4 * MiB) == base + 16 * MiB);
    CHECK(m.malloc(6 * MiB) == base + 4 * MiB);
    m.free(base + 12 * MiB);
    m.free(base + 4 * MiB);
    CHECK(m.m.largest_free() == 12 * MiB);  // merged: 4 to 16 MiB
    // A 2 MiB segment is the small pool's; no c10 segment is 3 MiB; the limit refuses what passes it.
    uint64_t small = m.m.adopt_segment(2 * MiB, {{512, 1024}}, &placed);
    REQUIRE(small);
    CHECK(m.malloc(1000) == small + 1536);  // the small pool: after the adopted block
    CHECK(m.malloc(500) == small);          // best fit: the 512 B before it
    CHECK(m.m.adopt_segment(3 * MiB, {}) == 0);
    CHECK(m.m.adopt_segment(44 * MiB, {}) == 0);
    CHECK(m.m.smallest_refused_by_limit() == 66 * MiB);
    CHECK(m.m.adopt_segment(42 * MiB, {}) != 0);
    m.check();
    CHECK(CachingAllocatorModel(expandable()).adopt_segment(20 * MiB, {}) == 0);  // no segments of that kind
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

// The walk that `adversarial_report.py --walk` crafts, small: free blocks of one page in address order,
// each able to grow a page less than the one before (the last, before the range's unmapped end, far
// more). c10 walks from the best fit, the first of them, to the last whose successor can grow further.
TEST_CASE("model: with expandable segments, the walk from the best fit passes every block that grows less") {
    Options o = expandable();
    o.range_bytes = 1000 * kLargeBuffer;
    Model m(o);
    const int blocks = 40;
    std::vector<uint64_t> kept, pages;
    for (int i = 0; i < blocks; i++) {
        kept.push_back(m.malloc(kLargeBuffer));
        pages.push_back(m.malloc((blocks - i) * kLargeBuffer));
    }
    for (uint64_t p : pages) m.free(p);
    m.m.empty_cache();  // the pages between the blocks unmapped
    for (uint64_t k : kept) m.free(k);
    for (int round = 0; round < 3; round++) {
        uint64_t p = m.malloc(kLargeBuffer);
        CHECK(p == kept[blocks - 2]);
        m.free(p);
    }
    // With the one before the end taken, the walk stops one earlier.
    uint64_t held = m.malloc(kLargeBuffer);
    CHECK(m.malloc(kLargeBuffer) == kept[blocks - 3]);
    m.free(held);
}

// ---- the replay ----------------------------------------------------------------------------------

namespace {

// A report of PyTorch's view, events added as PyTorch would have reported them.
struct History {
    Report r;
    uint64_t allocated = 0;
    explicit History(uint64_t limit) {
        r.name = "hand.json";
        r.limit_bytes = limit;
        r.limit_scope = "process";
        r.tensor.emplace().source = "c10";
    }
    gg::report::TensorView &tv() { return *r.tensor; }
    void event(TensorEvent::Action a, uint64_t address, uint64_t bytes, uint64_t reserved) {
        TensorEvent e;
        e.action = a;
        e.address = address;
        e.bytes = bytes;
        e.allocated = allocated;
        e.reserved = reserved;
        tv().events.push_back(e);
        tv().reserved = reserved;
        tv().allocated = allocated;
        r.process_bytes = r.container_bytes = reserved;
    }
    void alloc(uint64_t address, uint64_t bytes, uint64_t reserved) {
        allocated += bytes;
        event(TensorEvent::kAlloc, address, bytes, reserved);
    }
    void free(uint64_t address, uint64_t bytes, uint64_t reserved) {
        allocated -= bytes;
        event(TensorEvent::kFree, address, bytes, reserved);
    }
    void refused(uint64_t bytes, uint64_t reserved) {
        event(TensorEvent::kOom, 0, bytes, reserved);
        tv().oom = gg::report::TensorOom{bytes, allocated, reserved, 0, std::nullopt};
    }
};

constexpr uint64_t kBase = 0x7f0000000000;

// 440 blocks of 4 MiB, five to a 20 MiB segment; every other one freed; then 600 MiB refused under 2 GiB.
History fragmented() {
    History h(2048 * MiB);
    std::vector<uint64_t> at;
    for (uint64_t i = 0; i < 440; i++) {
        at.push_back(kBase + (i / 5) * 32 * MiB + (i % 5) * 4 * MiB);
        h.alloc(at.back(), 4 * MiB, (i / 5 + 1) * 20 * MiB);
    }
    for (uint64_t i = 1; i < 440; i += 2) h.free(at[i], 4 * MiB, 1760 * MiB);
    h.refused(600 * MiB, 1760 * MiB);
    return h;
}

// 60 blocks of 10.5, 12.5 and 14.5 MiB, each in a segment of its own with 1.5 MiB left over; then 300 MiB
// refused under 1100 MiB.
History slack() {
    History h(1100 * MiB);
    const uint64_t sizes[3] = {21 * MiB / 2, 25 * MiB / 2, 29 * MiB / 2}, segments[3] = {12 * MiB, 14 * MiB, 16 * MiB};
    uint64_t reserved = 0;
    for (int i = 0; i < 60; i++) {
        reserved += segments[i % 3];
        h.alloc(kBase + uint64_t(i) * 64 * MiB, sizes[i % 3], reserved);
    }
    h.refused(300 * MiB, reserved);
    return h;
}

// A 200 MiB block freed, ten 8 MiB blocks carved out of its segment, then 300 MiB refused under 400 MiB.
History carved() {
    History h(400 * MiB);
    h.alloc(kBase, 200 * MiB, 200 * MiB);
    h.free(kBase, 200 * MiB, 200 * MiB);
    for (uint64_t i = 0; i < 10; i++) h.alloc(kBase + i * 8 * MiB, 8 * MiB, 200 * MiB);
    h.refused(300 * MiB, 200 * MiB);
    return h;
}

}  // namespace

TEST_CASE("replay: 4 MiB blocks pin 20 MiB segments; expandable segments do not help, pages are pinned too") {
    History h = fragmented();
    REQUIRE(cannot_replay(h.r).empty());
    WhatIf w = what_if(h.r);
    CHECK(w.events == 661);
    CHECK_FALSE(w.approximate);
    REQUIRE(w.budget);
    CHECK(w.budget->bytes == 2048 * MiB);
    CHECK(w.refused_request == 600 * MiB);
    // a: the model follows PyTorch exactly and refuses the same request, although limit - allocated
    // (1168 MiB) is far more than 600 MiB.
    CHECK(w.check.compared == 661);
    CHECK(w.check.within == 661);
    CHECK(w.check.largest_difference == 0);
    CHECK(w.check.reproduces_oom == true);
    CHECK(w.check.trusted);
    // b: every 20 MiB page holds a live block: nothing to unmap.
    REQUIRE(w.expandable);
    CHECK_FALSE(w.expandable->avoids);
    CHECK_FALSE(w.expandable->runs_out_earlier);
    CHECK(w.expandable->failed_bytes == 600 * MiB);
    CHECK(w.expandable->failed_allocated == 880 * MiB);
    CHECK(w.expandable->failed_reserved == 1760 * MiB);
    // c: 440 blocks of 4 MiB were live at once; the request needs 600 MiB of new segments or pages.
    CHECK(w.needed == 1760 * MiB);
    CHECK(w.smallest_configured == 2360 * MiB);
    CHECK(w.smallest_expandable == 2360 * MiB);
    // d: 4 MiB requests are below any max_split_size: nothing changes.
    REQUIRE(w.max_split.size() == 6);
    for (const Outcome &o : w.max_split) CHECK_FALSE(o.avoids);

    std::ostringstream text;
    render_text(w, false, text);
    CHECK(text.str().find("trusted") != std::string::npos);
    CHECK(text.str().find("no: it refuses the 600.00 MiB request too") != std::string::npos);
    CHECK(text.str().find("pages that hold live blocks") != std::string::npos);
    CHECK(text.str().find("none of 32, 64, 128, 256, 512, 1024 avoids it") != std::string::npos);
    nlohmann::json j = to_json(w);
    CHECK(j["model_check"]["trusted"] == true);
    CHECK(j["expandable_segments"]["avoids_oom"] == false);
    CHECK(j["smallest_budget"]["as_configured_bytes"] == 2360 * MiB);
}

TEST_CASE("replay: slack at the end of differently sized segments; expandable segments avoid the OOM") {
    History h = slack();
    WhatIf w = what_if(h.r);
    CHECK(w.check.trusted);
    CHECK(w.check.within == w.check.compared);
    CHECK(w.check.reproduces_oom == true);
    REQUIRE(w.expandable);
    CHECK(w.expandable->avoids);
    CHECK(w.expandable->peak_reserved == 1060 * MiB);  // 750 MiB in 38 pages, then 15 more for 300 MiB
    CHECK(w.needed == 1050 * MiB);
    CHECK(w.smallest_configured == 1140 * MiB);
    CHECK(w.smallest_expandable == 1060 * MiB);
    std::ostringstream text;
    render_text(w, false, text);
    // 40 MiB spare of 1100 MiB: less than a rerun's requests vary (spare_needed: 64 MiB here).
    CHECK(text.str().find("only just: it serves every block and the 300.00 MiB request with 40.00 MiB to spare") !=
          std::string::npos);
    CHECK_FALSE(comfortably(*w.expandable, w.budget->bytes));
}

TEST_CASE("replay: a large cached block carved up by small requests; max_split_size below it avoids the OOM") {
    History h = carved();
    WhatIf w = what_if(h.r);
    CHECK(w.check.trusted);
    CHECK(w.needed == 380 * MiB);
    CHECK(w.smallest_configured == 500 * MiB);
    CHECK(w.smallest_expandable == 380 * MiB);
    REQUIRE(w.expandable);
    CHECK(w.expandable->avoids);
    REQUIRE(w.max_split.size() == 6);
    for (const Outcome &o : w.max_split) {
        CAPTURE(o.config.max_split_size >> 20);
        CHECK(o.avoids == (o.config.max_split_size < 200 * MiB));
    }
    std::ostringstream text;
    render_text(w, false, text);
    CHECK(text.str().find("32, 64, 128 only just (less than 64.00 MiB to spare)") != std::string::npos);
}

// A setting "avoids" the OOM in the summary's advice only with room for a rerun's variation: 64 MiB, or
// 2% of a budget over 3.2 GiB. On the H200 a DDP rerun under an option the replay said left 50 MiB
// spare ran out.
TEST_CASE("what-if: a setting that avoids the OOM with too little to spare is 'only just'") {
    CHECK(spare_needed(1024 * MiB) == 64 * MiB);
    CHECK(spare_needed(10240 * MiB) == 10240 * MiB / 50);
    Outcome o;
    o.avoids = true;
    o.peak_reserved = 960 * MiB;
    CHECK(comfortably(o, 1024 * MiB));  // exactly 64 MiB spare
    o.peak_reserved = 961 * MiB;
    CHECK_FALSE(comfortably(o, 1024 * MiB));
    o.peak_reserved = 2048 * MiB;  // over the budget (cannot be, but never "comfortably")
    CHECK_FALSE(comfortably(o, 1024 * MiB));
    o.avoids = false;
    o.peak_reserved = 0;
    CHECK_FALSE(comfortably(o, 1024 * MiB));

    History h = carved();
    WhatIf w = what_if(h.r);
    std::optional<Verdict> v = verdict(w);
    REQUIRE(v);
    CHECK(v->title == "Replayed: an allocator option avoids this OOM only just, with too little to spare");
    CHECK(v->detail.find("32, 64, 128 only just, with less than 64.00 MiB to spare") != std::string::npos);
}

TEST_CASE("replay: the smallest limit is where the replay starts to serve everything") {
    for (History h : {fragmented(), slack(), carved()}) {
        Trace tr = trace_of(h.r);
        for (bool exp : {false, true}) {
            Config c;
            c.expandable = exp;
            auto smallest = smallest_limit(tr, c, 0);
            REQUIRE(smallest);
            CHECK(replay(tr, c, *smallest, true).ok);
            CHECK_FALSE(replay(tr, c, *smallest - 2 * MiB, true).ok);
            CHECK(smallest_limit(tr, c, *smallest) == smallest);  // a floor at the answer changes nothing
        }
    }
}

TEST_CASE("replay: events that start mid-run are seeded with the blocks live before them, approximately") {
    History h(kNoLimit);
    h.r.limit_bytes.reset();
    h.r.device_total = 16384 * MiB;
    h.allocated = 12 * MiB;                         // three blocks live before the ring: X, Y and Z
    h.free(kBase + 4 * MiB, 4 * MiB, 20 * MiB);     // Y: freed, never handed out in the events
    h.alloc(kBase + 64 * MiB, 12 * MiB, 32 * MiB);  // W, in a 12 MiB segment of its own
    h.tv().events_dropped = 100;
    h.tv().blocks = {{kBase + 64 * MiB, 12 * MiB, "", std::nullopt},  // W, named by an event
                     {kBase + 8 * MiB, 4 * MiB, "", std::nullopt},    // Z, never named: live all along
                     {kBase, 4 * MiB, "", std::nullopt}};             // X, likewise
    h.tv().block_count = 3;
    Trace tr = trace_of(h.r);
    REQUIRE(tr.seeds.size() == 3);
    CHECK(tr.seeds[0] == std::make_pair(kBase, 4 * MiB));
    CHECK(tr.seeds[1] == std::make_pair(kBase + 4 * MiB, 4 * MiB));
    CHECK(tr.seeds[2] == std::make_pair(kBase + 8 * MiB, 4 * MiB));
    CHECK(tr.approximate);
    CHECK(tr.dropped == 100);
    WhatIf w = what_if(h.r);
    CHECK(w.approximate);
    CHECK(w.seeded == 3);
    REQUIRE_FALSE(w.caveats.empty());
    CHECK(w.caveats[0].find("last 2 block events of 102") != std::string::npos);
    // Seeded in one 20 MiB segment, as PyTorch had them: the model agrees with its reserved bytes.
    CHECK(w.check.within == 2);
    REQUIRE(w.budget);
    CHECK(w.budget->scope == "device");
    CHECK(w.budget->bytes == 16384 * MiB);
    CHECK_FALSE(w.refused_request);
    CHECK(w.check.reproduces_oom == std::nullopt);
}

// Issue 30 item 5: a report whose ring wrapped (the H200's generate() under 2 GiB kept 65,332 of 477,430
// events) was replayed from its live blocks packed into new segments and an empty cache: the model
// strayed from PyTorch's reserved bytes at every event. It now starts from the segments PyTorch held.
TEST_CASE("replay: a wrapped ring starts from the segments PyTorch held, worked out from the report") {
    History h(184 * MiB);
    const uint64_t A = kBase, B = kBase + 32 * MiB, C = kBase + 64 * MiB, W = kBase + 128 * MiB, D = kBase + 256 * MiB;
    // Before the ring: X (4 MiB) and Y (4 MiB at 12 MiB) live in A (20 MiB); B (20 MiB) and C (24 MiB)
    // cached, free; D 64 MiB of NCCL's. PyTorch reserved 64 MiB.
    h.allocated = 8 * MiB;
    h.free(A + 12 * MiB, 4 * MiB, 64 * MiB);  // Y
    h.alloc(A + 4 * MiB, 6 * MiB, 64 * MiB);  // best fit: the 16 MiB free in A, not B or C
    h.event(TensorEvent::kSegmentAlloc, W, 30 * MiB, 64 * MiB);
    h.alloc(W, 30 * MiB, 94 * MiB);
    // 100 MiB past the 120 MiB budget: the cached B and C given back, still past it.
    h.event(TensorEvent::kSegmentFree, B, 20 * MiB, 94 * MiB);
    h.event(TensorEvent::kSegmentFree, C, 24 * MiB, 94 * MiB);
    h.refused(100 * MiB, 50 * MiB);
    h.r.process_bytes = h.r.container_bytes = 114 * MiB;  // with D
    h.tv().events_dropped = 50;
    h.tv().blocks = {
        {W, 30 * MiB, "", std::nullopt}, {A + 4 * MiB, 6 * MiB, "", std::nullopt}, {A, 4 * MiB, "", std::nullopt}};
    h.tv().block_count = 3;
    h.tv().segments = {
        {A, 20 * MiB, "", "cudaMalloc"}, {W, 30 * MiB, "", "cudaMalloc"}, {D, 64 * MiB, "", "cuMemAlloc_v2"}};

    Trace tr = trace_of(h.r);
    REQUIRE(tr.seeds.size() == 2);
    // A holds the seeds; B and C make up the rest of the 64 MiB, given back in the events; D is not PyTorch's.
    CHECK(tr.cache == std::vector<std::pair<uint64_t, uint64_t>>{{A, 20 * MiB}, {B, 20 * MiB}, {C, 24 * MiB}});
    CHECK(tr.cache_free == 2);
    CHECK(tr.cache_unknown == 0);
    WhatIf w = what_if(h.r);
    REQUIRE(w.budget);
    CHECK(w.budget->bytes == 120 * MiB);
    CHECK(w.check.compared == 4);
    CHECK(w.check.within == 4);
    CHECK(w.check.largest_difference == 0);
    CHECK_FALSE(w.check.first_departure);
    CHECK(w.check.reproduces_oom == true);
    CHECK(w.check.trusted);
    REQUIRE_FALSE(w.caveats.empty());
    CHECK(w.caveats[0].find("placed where they were in the 3 segments PyTorch held then") != std::string::npos);
    CHECK(w.caveats[0].find("2 of them, holding no block, inferred from PyTorch's reserved bytes") !=
          std::string::npos);
    // The limit search, whose probes skip limits an earlier replay answers for, agrees with a replay at
    // its answer and one 2 MiB below: choosing the free segments to start from is the limit's choice too.
    for (uint64_t floor : {uint64_t(0), 100 * MiB}) {
        std::optional<uint64_t> smallest = smallest_limit(tr, Config(), floor);
        REQUIRE(smallest);
        CHECK(replay(tr, Config(), *smallest, true).ok);
        if (*smallest > floor) CHECK_FALSE(replay(tr, Config(), *smallest - 2 * MiB, true).ok);
    }

    // Reserved bytes no segment of the report accounts for are said, not invented.
    h.tv().segments.pop_back();
    h.tv().segments.push_back({D, 64 * MiB, "", "cudaMalloc"});
    for (TensorEvent &e : h.tv().events) e.reserved += 10 * MiB;
    tr = trace_of(h.r);
    CHECK(tr.cache_unknown == 10 * MiB);
    CHECK(tr.cache.size() == 3);  // D (64 MiB) would pass the reserved bytes left: not taken
    w = what_if(h.r);
    CHECK(w.caveats[0].find("10.00 MiB of PyTorch's reserved bytes then lie in no segment the report names") !=
          std::string::npos);
    CHECK_FALSE(w.check.trusted);  // 10 MiB apart from the start, 60 MiB at the refusal
    REQUIRE(w.check.first_departure);
    CHECK(w.check.first_departure->op == 0);
    CHECK(w.check.first_departure->action == 'f');
    CHECK(w.check.first_departure->bytes == 4 * MiB);
    CHECK(w.check.first_departure->model_reserved == 64 * MiB);
    CHECK(w.check.first_departure->pytorch_reserved == 74 * MiB);
    std::ostringstream text;
    render_text(w, false, text);
    CHECK(text.str().find("first apart after block event 1 (a 4.00 MiB block taken back): the model reserved 64.00 "
                          "MiB, PyTorch 74.00 MiB") != std::string::npos);
}

// No block live when the kept events start, and PyTorch's cache still there: the replay starts from it.
TEST_CASE("replay: a wrapped ring with no block live before it starts from PyTorch's cache too") {
    History h(kNoLimit);
    h.r.limit_bytes.reset();
    h.r.device_total = 16384 * MiB;
    h.alloc(kBase, 4 * MiB, 60 * MiB);  // into the cached 20 MiB segment, not a new one
    h.free(kBase, 4 * MiB, 60 * MiB);
    h.tv().events_dropped = 10;
    h.tv().segments = {{kBase, 20 * MiB, "", "cudaMalloc"}, {kBase + 64 * MiB, 40 * MiB, "", "cudaMalloc"}};
    Trace tr = trace_of(h.r);
    CHECK(tr.seeds.empty());
    CHECK(tr.cache.size() == 2);
    WhatIf w = what_if(h.r);
    CHECK(w.check.within == 2);
    REQUIRE_FALSE(w.caveats.empty());
    CHECK(w.caveats[0] ==
          "the report kept the last 2 block events of 12; no block was live before them; every setting without "
          "expandable segments starts from the 2 segments PyTorch held then (worked out from the report's segments "
          "and the segment events; 1 of them, holding no block, inferred from PyTorch's reserved bytes)");
}

TEST_CASE("replay: an edited report's segments (overlapping, empty, of no c10 size, huge) start no broken model") {
    History h(kNoLimit);
    h.r.limit_bytes.reset();
    h.r.device_total = 16384 * MiB;
    h.allocated = 12 * MiB;
    h.free(kBase + 4 * MiB, 4 * MiB, 1ull << 61);
    h.free(kBase + 64 * MiB, 4 * MiB, 1ull << 61);
    h.free(kBase + 128 * MiB + 1, 4 * MiB, 1ull << 61);           // not on 512 B
    h.event(TensorEvent::kSegmentFree, 0, 20 * MiB, 1ull << 61);  // a cuMemCreate handle: no address
    h.alloc(kBase + 4 * MiB, 4 * MiB, 1ull << 61);
    h.tv().events_dropped = 10;
    h.tv().segments = {{kBase, 20 * MiB, "", "cudaMalloc"},
                       {kBase + 2 * MiB, 20 * MiB, "", "cudaMalloc"},  // overlaps the one before
                       {kBase + 64 * MiB, 3 * MiB, "", "cudaMalloc"},  // no segment c10 makes
                       {kBase + 96 * MiB, 0, "", "cudaMalloc"},
                       {kBase + 128 * MiB, 20 * MiB, "", "cudaMalloc"},
                       {kBase + 1024 * MiB, 1ull << 60, "", "cudaMalloc"}};  // past any request
    Trace tr = trace_of(h.r);
    for (const auto &[address, bytes] : tr.cache) {
        CHECK(bytes % 512 == 0);
        CHECK(bytes <= kMaxRequest);
        CHECK(bytes != 3 * MiB);
    }
    Replay rep = replay(tr, Config(), kNoLimit, false);
    CHECK(rep.ok);  // every seed placed in a segment or, failing that, handed out afresh
    CHECK(rep.compared == 4);
    WhatIf w = what_if(h.r);
    CHECK(w.seeded == 3);
    REQUIRE_FALSE(w.caveats.empty());
}

// torch.cuda.empty_cache() gives back PyTorch's cached segments with no request refused: the model,
// which gives back only on a refusal, kept them, and stayed 20 MiB above PyTorch's reserved bytes.
TEST_CASE("replay: segments PyTorch gives back with no request refused are empty_cache(): the model follows") {
    History h(1024 * MiB);
    h.event(TensorEvent::kSegmentAlloc, kBase, 20 * MiB, 0);
    h.alloc(kBase, 4 * MiB, 20 * MiB);
    h.free(kBase, 4 * MiB, 20 * MiB);
    h.event(TensorEvent::kSegmentFree, kBase + 512 * MiB, 64 * MiB, 20 * MiB);  // NCCL's: no block was in it
    h.alloc(kBase + 64 * MiB, 4 * MiB, 20 * MiB);                               // the cached segment
    h.free(kBase + 64 * MiB, 4 * MiB, 20 * MiB);
    h.event(TensorEvent::kSegmentFree, kBase, 20 * MiB, 20 * MiB);  // empty_cache()
    h.event(TensorEvent::kSegmentAlloc, kBase + 256 * MiB, 2 * MiB, 0);
    h.alloc(kBase + 256 * MiB, 1024, 2 * MiB);  // a new small segment: 2 MiB reserved, not 22
    Trace tr = trace_of(h.r);
    CHECK(tr.empty_cache_before == std::vector<size_t>{4});
    WhatIf w = what_if(h.r);
    CHECK(w.check.compared == 5);
    CHECK(w.check.within == 5);
    CHECK(w.check.largest_difference == 0);
    CHECK(w.approximate);
    REQUIRE(w.caveats.size() == 1);
    CHECK(w.caveats[0].find("gave back its cached segments 1 times with no request refused") != std::string::npos);

    // Given back because the driver refused a segment, and retried: c10's refusal, which the model
    // makes itself under the budget (12 MiB reserved and 20 MiB more pass 30 MiB).
    History r(30 * MiB);
    r.event(TensorEvent::kSegmentAlloc, kBase, 12 * MiB, 0);
    r.alloc(kBase, 12 * MiB, 12 * MiB);
    r.free(kBase, 12 * MiB, 12 * MiB);
    r.event(TensorEvent::kSegmentFree, kBase, 12 * MiB, 12 * MiB);
    r.event(TensorEvent::kSegmentAlloc, kBase + 64 * MiB, 20 * MiB, 12 * MiB);
    r.alloc(kBase + 64 * MiB, 20 * MiB, 20 * MiB);
    tr = trace_of(r.r);
    CHECK(tr.empty_cache_before.empty());
    w = what_if(r.r);
    CHECK(w.check.within == 3);
    CHECK(w.caveats.empty());
}

TEST_CASE("replay: allocator options the model does not follow are said in a caveat") {
    History h = fragmented();
    h.tv().allocator_conf =
        "max_split_size_mb:128, roundup_power2_divisions:[256:1,>:4],garbage_collection_threshold:0.6";
    WhatIf w = what_if(h.r);
    CHECK(w.approximate);
    REQUIRE(w.caveats.size() == 1);
    CHECK(w.caveats[0] ==
          "PYTORCH_CUDA_ALLOC_CONF sets roundup_power2_divisions, garbage_collection_threshold, which the model "
          "does not follow (it replays c10's defaults there)");
    h.tv().allocator_conf = "expandable_segments:True,release_lock_on_cudamalloc:True";
    CHECK(what_if(h.r).caveats.empty());
}

TEST_CASE("replay: the budget is the limit less other processes' bytes and this process's outside PyTorch") {
    History h = fragmented();
    h.r.limit_scope = "container";
    h.r.process_bytes = 1860 * MiB;    // 100 MiB of it outside PyTorch's allocator (cuBLAS, say)
    h.r.container_bytes = 2160 * MiB;  // 300 MiB of other processes
    auto b = budget_of(h.r);
    REQUIRE(b);
    CHECK(b->others == 300 * MiB);
    CHECK(b->outside == 100 * MiB);
    CHECK(b->bytes == 1648 * MiB);
    h.r.limit_scope = "process";  // a per-process quota: others do not count
    CHECK(budget_of(h.r)->bytes == 1948 * MiB);
    h.r.limit_bytes.reset();  // no quota and no device size: no budget
    CHECK_FALSE(budget_of(h.r));
    WhatIf w = what_if(h.r);
    CHECK_FALSE(w.expandable);
    CHECK(w.max_split.empty());
    CHECK(w.smallest_configured == 2360 * MiB);  // needs no budget
}

TEST_CASE("replay: reports without a tensor view, without c10's blocks or without events say so") {
    Report r;
    CHECK(cannot_replay(r).find("no tensor view") != std::string::npos);
    r.tensor.emplace().source = "driver";
    CHECK(cannot_replay(r).find("\"driver\"") != std::string::npos);
    r.tensor->source = "c10";
    CHECK(cannot_replay(r).find("no block events") != std::string::npos);
    TensorEvent segment;
    segment.action = TensorEvent::kSegmentAlloc;
    r.tensor->events.push_back(segment);  // segments alone are nothing to replay
    CHECK(cannot_replay(r).find("no block events") != std::string::npos);
}

TEST_CASE("replay: a model that does not refuse what PyTorch refused is not trusted") {
    History h = fragmented();
    h.r.limit_bytes = 4096 * MiB;  // a budget under which the 600 MiB fit: the report contradicts the model
    WhatIf w = what_if(h.r);
    CHECK(w.check.within == w.check.compared - 1);  // at the refusal, the model has reserved 600 MiB more
    CHECK(w.check.reproduces_oom == false);
    CHECK_FALSE(w.check.trusted);
    std::ostringstream text;
    render_text(w, false, text);
    CHECK(text.str().find("NOT trusted") != std::string::npos);
}

// Issue 29: the summary prints of the replay only its verdict, yet replayed as --what-if does (10 to 14
// times). It now replays what the verdict needs: the check, and nothing more when the verdict would say
// nothing; its JSON says what it left out.
TEST_CASE("what-if for the summary: the check alone where the model does not follow the run, or no budget") {
    History h = fragmented();
    h.r.limit_bytes = 4096 * MiB;  // the model serves the 600 MiB PyTorch refused: not trusted
    WhatIf all = what_if(h.r), summary = what_if(h.r, Answers::kVerdict);
    REQUIRE_FALSE(all.check.trusted);
    CHECK(all.reach == WhatIf::Reach::kAll);
    CHECK(all.expandable);
    CHECK(all.max_split.size() == 6);
    CHECK(all.smallest_configured);
    CHECK(summary.reach == WhatIf::Reach::kCheck);
    CHECK(summary.check.compared == all.check.compared);
    CHECK(summary.check.within == all.check.within);
    CHECK_FALSE(summary.check.trusted);
    CHECK_FALSE(summary.expandable);
    CHECK(summary.max_split.empty());
    CHECK_FALSE(summary.smallest_configured);
    CHECK_FALSE(summary.smallest_expandable);
    CHECK(summary.needed == all.needed);
    CHECK(summary.unanswered ==
          "the summary stopped after the model check (the model does not follow this run): `gpuguard report "
          "--what-if` gives every answer");
    nlohmann::json j = to_json(summary);
    CHECK(j["unanswered"] == summary.unanswered);
    CHECK(j["model_check"]["compared"] == all.check.compared);
    CHECK(j["expandable_segments"].is_null());
    CHECK(j["max_split_size_mb"].is_null());
    CHECK(j["smallest_budget"]["allocated_peak_bytes"] == all.needed);
    CHECK(j["smallest_budget"]["as_configured_bytes"].is_null());
    CHECK_FALSE(to_json(all).contains("unanswered"));  // --what-if's document as it was

    h.r.limit_bytes.reset();  // no quota, no device size: no budget, no verdict
    WhatIf no_budget = what_if(h.r, Answers::kVerdict);
    CHECK(no_budget.reach == WhatIf::Reach::kCheck);
    CHECK(no_budget.check.trusted);
    CHECK_FALSE(no_budget.smallest_configured);
    CHECK(no_budget.unanswered.find("(no budget)") != std::string::npos);
}

TEST_CASE("what-if for the summary: the verdict's answers, not the smallest budget, where the model follows the run") {
    History h = fragmented();
    WhatIf all = what_if(h.r), summary = what_if(h.r, Answers::kVerdict);
    REQUIRE(all.check.trusted);
    CHECK(all.smallest_configured);
    CHECK(summary.reach == WhatIf::Reach::kVerdict);
    CHECK_FALSE(summary.smallest_configured);
    CHECK_FALSE(summary.smallest_expandable);
    nlohmann::json j = to_json(summary), k = to_json(all);
    for (const char *same : {"model_check", "budget", "events", "expandable_segments", "max_split_size_mb"})
        CHECK(j[same] == k[same]);
    CHECK(j["smallest_budget"]["allocated_peak_bytes"] == k["smallest_budget"]["allocated_peak_bytes"]);
    CHECK(j["smallest_budget"]["as_configured_bytes"].is_null());
    CHECK(j["unanswered"] == "the summary does not search for the smallest budget: `gpuguard report --what-if` does");
    REQUIRE(verdict(summary));
    REQUIRE(verdict(all));
    CHECK(verdict(summary)->title == verdict(all)->title);
    CHECK(verdict(all)->detail.find("The run needs at least") != std::string::npos);
    CHECK(verdict(summary)->detail.find("The run needs at least") == std::string::npos);
    CHECK(verdict(summary)->detail.find(". `gpuguard report --what-if` gives the smallest budget the run needs; no "
                                        "allocator does with less than its") != std::string::npos);
}

TEST_CASE("what-if for the summary: no replay of a report listing more event rows than the shim writes") {
    History h = fragmented();
    TensorEvent other;  // older events of another device, as the crafted reports pad with
    other.device = 1;
    other.bytes = 512;
    h.tv().events.insert(h.tv().events.begin(), gg::report_limits::kMaxEventRows - h.tv().events.size(), other);
    CHECK(what_if(h.r, Answers::kVerdict).reach != WhatIf::Reach::kNothing);  // the most the shim writes
    h.tv().events.insert(h.tv().events.begin(), other);
    WhatIf summary = what_if(h.r, Answers::kVerdict);
    CHECK(summary.reach == WhatIf::Reach::kNothing);
    CHECK(summary.unanswered ==
          "the report lists 218454 event rows, more than the shim writes (218453; an edited "
          "report?): the summary replays none; `gpuguard report --what-if` replays them");
    CHECK(summary.check.compared == 0);
    CHECK_FALSE(verdict(summary));
    nlohmann::json j = to_json(summary);
    CHECK(j["events"].is_null());
    CHECK(j["model_check"].is_null());
    CHECK(j["smallest_budget"].is_null());
    CHECK(j["budget"]["bytes"] == 2048 * MiB);
    WhatIf all = what_if(h.r);  // --what-if replays them all
    CHECK(all.reach == WhatIf::Reach::kAll);
    CHECK(all.check.trusted);
    CHECK(all.events == 661);
}

// The text summary shows the what-if only in its verdict, which a report of no failure has not, and in
// the line of a report it replays none of (text.cpp): it replays nothing for a report of no failure.
TEST_CASE("what-if for the text summary: no replay of a report with no failure; --json and the page keep theirs") {
    History h = fragmented();
    h.r.reason = "request";  // the program asked for the report: no failure
    gg::report::Analysis text = gg::report::analyze(h.r, Answers::kVerdictOfFailure);
    CHECK_FALSE(text.failure);
    CHECK_FALSE(text.what_if.has_value());
    gg::report::Analysis json = gg::report::analyze(h.r, Answers::kVerdict);
    REQUIRE(json.what_if.has_value());
    CHECK(json.what_if->check.compared > 0);

    h.r.reason = "allocator_oom";  // the same events, with a failure: the verdict's replays
    gg::report::Analysis failed = gg::report::analyze(h.r, Answers::kVerdictOfFailure);
    CHECK(failed.failure);
    REQUIRE(failed.what_if.has_value());
    CHECK(failed.what_if->reach == json.what_if->reach);
    CHECK(failed.what_if->check.compared == json.what_if->check.compared);

    h.r.reason = "request";  // past the shim's rows: the line that says the summary replays none stays
    TensorEvent other;
    other.device = 1;
    other.bytes = 512;
    h.tv().events.insert(h.tv().events.begin(), gg::report_limits::kMaxEventRows, other);
    gg::report::Analysis past = gg::report::analyze(h.r, Answers::kVerdictOfFailure);
    REQUIRE(past.what_if.has_value());
    CHECK(past.what_if->reach == WhatIf::Reach::kNothing);
}

TEST_CASE("what-if: the summary's verdict names expandable segments when they avoid the OOM with room to spare") {
    WhatIf w;
    w.events = 61;
    w.check.trusted = true;
    w.check.compared = w.check.within = 61;
    w.check.reproduces_oom = true;
    w.budget = Budget{};
    w.budget->bytes = 2048 * MiB;
    Outcome e;
    e.config.expandable = true;
    e.avoids = true;
    e.peak_reserved = 1280 * MiB;
    w.expandable = e;
    w.needed = 1280 * MiB;
    w.smallest_configured = 2080 * MiB;
    w.smallest_expandable = 1280 * MiB;
    std::optional<Verdict> v = verdict(w);
    REQUIRE(v);
    CHECK(v->title == "Replayed: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True avoids this OOM");
    CHECK(v->detail.find("expandable segments serve every block, reserving at most 1.25 GiB;") != std::string::npos);
    CHECK(v->detail.find("2.03 GiB for PyTorch as configured, 1.25 GiB with expandable segments") != std::string::npos);

    w.check.trusted = false;  // a model that does not follow the run says nothing
    CHECK_FALSE(verdict(w));
}

// Issue 29: a refusal copied and walked every free block of the cache, so a report of many small
// free blocks and many refusals took minutes to replay (quadratic). A refusal now visits only the
// blocks it gives back.
TEST_CASE("model: a refusal visits only the blocks it gives back, however fragmented the cache") {
    for (bool expand : {false, true}) {
        CAPTURE(expand);
        Options o = expand ? expandable(kSmallBuffer) : limited(kSmallBuffer);
        CachingAllocatorModel m(o);
        std::vector<uint64_t> blocks;
        for (uint64_t i = 0; i < kSmallBuffer / kMinBlockSize; i++) blocks.push_back(m.malloc(512));
        REQUIRE(m.reserved() == kSmallBuffer);
        for (size_t i = 0; i < blocks.size(); i += 2) REQUIRE(m.free(blocks[i]));  // 2,048 free, unmergeable
        const uint64_t refusals = 1000;
        for (uint64_t i = 0; i < refusals; i++) REQUIRE(m.malloc(4 * MiB) == 0);
        CHECK(m.out_of_memory_count() == refusals);
        CHECK(m.blocks_visited_on_refusal() == 0);  // the walk visited 2,048 blocks a refusal
        std::string why;
        REQUIRE_MESSAGE(m.consistent(&why), why);
        for (size_t i = 1; i < blocks.size(); i += 2) REQUIRE(m.free(blocks[i]));
        m.empty_cache();  // now one free block, the whole segment (its one page): given back
        CHECK(m.blocks_visited_on_refusal() == 1);
        CHECK(m.reserved() == 0);
    }
}

TEST_CASE("model: the smallest growth the limit refused is kept, what the limit search skips by") {
    CachingAllocatorModel m(limited(20 * MiB));
    CHECK(m.smallest_refused_by_limit() == UINT64_MAX);
    REQUIRE(m.malloc(20 * MiB));
    CHECK(m.smallest_refused_by_limit() == UINT64_MAX);
    CHECK(m.malloc(30 * MiB) == 0);  // a segment of 30 MiB on top of 20
    CHECK(m.smallest_refused_by_limit() == 50 * MiB);
    CHECK(m.malloc(12 * MiB) == 0);  // 12 MiB on top of 20: the smaller one is kept
    CHECK(m.smallest_refused_by_limit() == 32 * MiB);
    CHECK(m.malloc(40 * MiB) == 0);
    CHECK(m.smallest_refused_by_limit() == 32 * MiB);
}

namespace {

// A history of random requests and frees (some refused), small enough to replay at every limit.
Trace random_trace(std::mt19937_64 &rng) {
    const uint64_t sizes[] = {512, 300 * 1024, 1 * MiB, 3 * MiB, 12 * MiB, 25 * MiB, 50 * MiB};
    Trace tr;
    std::vector<uint64_t> live;
    uint64_t next = 1ull << 40;
    for (int i = 0; i < 60; i++) {
        uint64_t bytes = sizes[rng() % std::size(sizes)];
        unsigned pick = rng() % 10;
        if (pick < 5 || live.empty()) {
            tr.ops.push_back({'a', next, bytes, 0, 0});
            live.push_back(next);
            next += 64 * MiB;
        } else if (pick < 9) {
            size_t at = rng() % live.size();
            tr.ops.push_back({'f', live[at], 0, 0, 0});
            live.erase(live.begin() + at);
        } else {
            tr.ops.push_back({'o', 0, bytes * 2, 0, 0});
        }
    }
    return tr;
}

// The search as it was before it reused replays: plain bisection, one replay a step.
std::optional<uint64_t> bisected_limit(const Trace &trace, const Config &config, uint64_t at_least) {
    const uint64_t step = 2 * MiB;
    Replay unlimited = replay(trace, config, kNoLimit, true);
    if (!unlimited.ok) return std::nullopt;
    uint64_t hi = (unlimited.peak_reserved + step - 1) / step, lo = std::min(at_least / step, hi);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (replay(trace, config, mid * step, true).ok) hi = mid;
        else lo = mid + 1;
    }
    return hi * step;
}

}  // namespace

TEST_CASE("replay: the limit search that reuses its replays finds what plain bisection finds") {
    std::mt19937_64 rng(29);
    int served = 0, failed = 0;  // probes of the premise of each kind
    for (int t = 0; t < 200; t++) {
        Trace tr = random_trace(rng);
        Config c;
        c.expandable = t % 3 == 1;
        if (t % 3 == 2) c.max_split_size = 32 * MiB;
        uint64_t at_least = (rng() % 4) * 16 * MiB;
        CAPTURE(t);
        CHECK(smallest_limit(tr, c, at_least) == bisected_limit(tr, c, at_least));
        // The skip's premise: between a replay's peak and the smallest growth refused, the same replay.
        Replay probe = replay(tr, c, (rng() % 400) * MiB, true);
        if (probe.ok && probe.peak_reserved > 0) {
            Replay at_peak = replay(tr, c, probe.peak_reserved, true);
            CHECK(at_peak.ok);
            CHECK(at_peak.peak_reserved == probe.peak_reserved);
            CHECK(at_peak.refusals == probe.refusals);
            served++;
        } else if (!probe.ok && probe.smallest_refused != UINT64_MAX) {
            Replay below = replay(tr, c, probe.smallest_refused - 512, true);
            CHECK_FALSE(below.ok);
            CHECK(below.failed_at == probe.failed_at);
            failed++;
        }
    }
    CHECK(served > 10);
    CHECK(failed > 10);
}

namespace {

// A random history of requests, frees and cache releases under a limit that refuses some of them,
// folded into one number (FNV-1a of every answer: address, block size, reserved, allocated). Sizes mix
// sub-page blocks of both pools with runs of whole and partial pages, so that expandable ranges fill
// with holes of many sizes, refusals unmap them and later requests search them.
uint64_t history_digest(Options o, uint64_t seed, int steps) {
    std::mt19937_64 rng(seed);  // its output is fixed by the standard (distributions are not: none here)
    CachingAllocatorModel m(o);
    std::vector<uint64_t> live;
    uint64_t digest = 1469598103934665603ull;
    auto fold = [&digest](uint64_t v) {
        for (int i = 0; i < 8; i++, v >>= 8) digest = (digest ^ (v & 0xff)) * 1099511628211ull;
    };
    for (int i = 0; i < steps; i++) {
        uint64_t r = rng(), kind = r % 16;
        if (kind < 7 || live.empty()) {
            uint64_t request = kind < 3   ? 1 + rng() % kSmallSize           // the small pool
                               : kind < 5 ? kSmallSize + rng() % (40 * MiB)  // partial large pages
                                          : (1 + rng() % 6) * kLargeBuffer;  // whole large pages
            uint64_t bytes = 0, at = m.malloc(request, &bytes);
            if (at) live.push_back(at);
            fold(at - (at ? 1ull << 44 : 0));
            fold(bytes);
        } else if (kind < 15) {
            size_t k = rng() % live.size();
            REQUIRE(m.free(live[k]));
            live[k] = live.back();
            live.pop_back();
        } else {
            m.empty_cache();
        }
        fold(m.reserved());
        fold(m.allocated());
    }
    std::string why;
    REQUIRE_MESSAGE(m.consistent(&why), why);
    fold(m.peak_reserved());
    fold(m.out_of_memory_count());
    return digest;
}

}  // namespace

// The expected digests were made by the model as it was before the index of expandable ranges' free
// room (e89541e, a linear walk of every hole per request): the index must choose exactly as it did.
TEST_CASE("model: random histories choose as the linear search of free room did") {
    struct Case {
        bool expandable;
        uint64_t limit;
        uint64_t seed;
        uint64_t digest;
    };
    const Case cases[] = {
        {true, 200 * MiB, 1, 5855836610025968062ull},   {true, 200 * MiB, 2, 11515481022755897975ull},
        {true, 600 * MiB, 3, 17505322440234765746ull},  {true, 600 * MiB, 4, 2367595178047151033ull},
        {true, 2000 * MiB, 5, 17608346275369189650ull}, {true, kNoLimit, 6, 1764273053355927917ull},
        {false, 200 * MiB, 7, 15646054495079892037ull}, {false, 600 * MiB, 8, 5617236909031226709ull},
    };
    for (const Case &c : cases) {
        Options o = c.expandable ? expandable(c.limit) : limited(c.limit);
        o.range_bytes = 400 * MiB;  // small ranges: requests spill into new ones, whole ranges go back
        CAPTURE(c.seed);
        CHECK(history_digest(o, c.seed, 4000) == c.digest);
    }
}

// The stops of c10's walk (Pool::stops) are kept as blocks are listed, unlisted and unmapped; a stop
// left stale would change an answer only on some later request, so every step is checked.
TEST_CASE("model: the walk's stops are where c10's walk stops, at every step of random histories") {
    for (uint64_t seed : {11, 12, 13}) {
        CAPTURE(seed);
        Options o = expandable(seed == 13 ? kNoLimit : 300 * MiB);
        o.range_bytes = 200 * MiB;
        Model m(o);
        std::mt19937_64 rng(seed);
        std::vector<uint64_t> live;
        for (int i = 0; i < 1500; i++) {
            uint64_t r = rng() % 16;
            if (r < 7 || live.empty()) {
                uint64_t request = r < 2 ? 1 + rng() % kSmallSize : kSmallSize + rng() % (60 * MiB);
                if (uint64_t at = m.malloc(request)) live.push_back(at);
            } else if (r < 15) {
                size_t k = rng() % live.size();
                m.free(live[k]);
                live[k] = live.back();
                live.pop_back();
            } else {
                m.m.empty_cache();
                m.check();
            }
        }
    }
}

TEST_CASE("room index: the lowest address with enough room, as a walk of every address finds it") {
    std::mt19937_64 rng(29);
    RoomIndex index;
    std::map<uint64_t, uint64_t> oracle;
    for (int i = 0; i < 20000; i++) {
        uint64_t address = rng() % 512 * kLargeBuffer, bytes = (1 + rng() % 64) * kLargeBuffer;
        if (rng() % 3) {
            index.set(address, bytes);
            oracle[address] = bytes;
        } else {
            index.erase(address);
            oracle.erase(address);
        }
        uint64_t want = (1 + rng() % 70) * kLargeBuffer, expected = RoomIndex::kNone;
        for (const auto &[at, room] : oracle)
            if (room >= want) {
                expected = at;
                break;
            }
        REQUIRE(index.lowest_with(want) == expected);
        REQUIRE(index.size() == oracle.size());
    }
}

namespace {

// A device that writes the segment events PyTorch's would: got (S) and given back (s), with the
// model's reserved bytes before the change (a segment event carries the last totals seen).
class RecordingDevice : public Device {
public:
    std::vector<TensorEvent> *events = nullptr;
    const CachingAllocatorModel *model = nullptr;
    uint64_t alloc_segment(uint64_t bytes) override {
        uint64_t at = space_.alloc_segment(bytes);
        record(TensorEvent::kSegmentAlloc, at, bytes);
        return at;
    }
    void free_segment(uint64_t address, uint64_t bytes) override { record(TensorEvent::kSegmentFree, address, bytes); }
    uint64_t reserve_range(uint64_t bytes) override { return space_.reserve_range(bytes); }
    void release_range(uint64_t, uint64_t) override {}
    // Expandable segments: an event for each page, with no address (as the shim records c10's), and
    // the pages mapped, for tensor_view.mappings.
    bool map_pages(uint64_t address, uint64_t bytes, uint64_t page) override {
        for (uint64_t at = address; at < address + bytes; at += page) {
            record(TensorEvent::kSegmentAlloc, 0, page);
            mapped[at] = page;
        }
        return true;
    }
    void unmap_pages(uint64_t address, uint64_t bytes, uint64_t page) override {
        for (uint64_t at = address; at < address + bytes; at += page) {
            record(TensorEvent::kSegmentFree, 0, page);
            mapped.erase(at);
        }
    }
    std::map<uint64_t, uint64_t> mapped;

    // An event with the model's totals after it (before, for a segment event recorded as it changes).
    void record(TensorEvent::Action a, uint64_t address, uint64_t bytes) {
        TensorEvent e;
        e.action = a;
        e.address = address;
        e.bytes = bytes;
        e.allocated = model->allocated();
        e.reserved = model->reserved();
        events->push_back(e);
    }

private:
    AddressSpace space_;
};

// An empty report of PyTorch's blocks under a per-process `limit`, for a run to be recorded into.
Report c10_report(const char *name, uint64_t limit) {
    Report r;
    r.name = name;
    r.limit_bytes = limit;
    r.limit_scope = "process";
    r.tensor.emplace().source = "c10";
    return r;
}

// A report of a random run of the model under `limit` (blocks of the small pool, of 1 to 10 MiB and
// larger; frees; refusals that give the cache back; now and then empty_cache()), as the shim writes it
// for PyTorch.
Report recorded_run(uint64_t seed, uint64_t limit, int steps) {
    Report r = c10_report("run.json", limit);
    gg::report::TensorView &tv = *r.tensor;
    RecordingDevice device;
    Options o = limited(limit);
    CachingAllocatorModel m(o, &device);
    device.events = &tv.events;
    device.model = &m;
    std::mt19937_64 rng(seed);
    std::map<uint64_t, uint64_t> live;
    for (int i = 0; i < steps; i++) {
        if (rng() % 100 == 0) {
            m.empty_cache();  // segment events only
        } else if (live.empty() || rng() % 100 < 55) {
            const uint64_t kind = rng() % 3;
            uint64_t request = kind == 0   ? 1 + rng() % MiB
                               : kind == 1 ? MiB + rng() % (9 * MiB)
                                           : 10 * MiB + rng() % (70 * MiB);
            uint64_t bytes = 0, at = m.malloc(request, &bytes);
            if (at) {
                live[at] = bytes;
                device.record(TensorEvent::kAlloc, at, bytes);
            } else {
                device.record(TensorEvent::kOom, 0, round_size(request));
            }
        } else {
            auto it = std::next(live.begin(), rng() % live.size());
            REQUIRE(m.free(it->first));
            device.record(TensorEvent::kFree, it->first, it->second);
            live.erase(it);
        }
    }
    for (const SegmentInfo &s : m.segments()) tv.segments.push_back({s.address, s.bytes, "", "cudaMalloc"});
    for (const auto &[address, bytes] : live) tv.blocks.push_back({address, bytes, "", std::nullopt});
    tv.block_count = live.size();
    tv.allocated = m.allocated();
    tv.reserved = m.reserved();
    r.process_bytes = m.reserved();
    return r;
}

}  // namespace

// Issue 30 item 5: whatever event a ring's wrap leaves first (inside a refusal's give-back, between a
// segment got and its block, ...), the replay starts where PyTorch was and follows it at every event,
// empty_cache() included.
TEST_CASE("replay: a run cut anywhere is followed from its cut, at every event") {
    for (uint64_t seed : {1, 2, 3}) {
        const Report whole = recorded_run(seed, 300 * MiB, 3000);
        size_t refusals = 0;
        for (const TensorEvent &e : whole.tensor->events) refusals += e.action == TensorEvent::kOom;
        CHECK(refusals > 10);  // the cache is given back many times
        std::mt19937_64 rng(seed);
        for (int cut = 0; cut < 8; cut++) {
            Report r = whole;
            size_t k = 1 + rng() % (r.tensor->events.size() - 100);
            r.tensor->events.erase(r.tensor->events.begin(), r.tensor->events.begin() + k);
            r.tensor->events_dropped = k;
            CAPTURE(seed);
            CAPTURE(k);
            WhatIf w = what_if(r);
            CHECK(w.check.within == w.check.compared);
            CHECK_FALSE(w.check.first_departure);
            CHECK(w.check.reproduces_oom == true);
        }
        CHECK_FALSE(trace_of(whole).empty_cache_before.empty());
    }
}

// Issue 30 item 5, expandable segments: c10 maps 20 MiB pages of one address range per pool, and the
// page events name no page. A ring cut after A (30 MiB) and B (30 MiB) were handed out and A taken
// back leaves B live at 30 MiB, with pages 0 to 2 mapped; a 20 MiB block then goes into page 0 with no
// page mapped, and empty_cache() at the end unmaps page 0: page 0 is known mapped at the cut only from
// that block. Packed from address 0, B would hold 40 MiB, not PyTorch's 60 MiB.
TEST_CASE("replay: a wrapped ring with expandable segments starts from the pages mapped then, blocks in place") {
    const uint64_t limit = 200 * MiB;
    Report r = c10_report("exp.json", limit);
    gg::report::TensorView &tv = *r.tensor;
    tv.allocator_conf = "expandable_segments:True";
    RecordingDevice device;
    Options o = expandable(limit);
    o.range_bytes = limit + limit / 8;  // c10's: 9/8 of the memory the device is said to have
    CachingAllocatorModel m(o, &device);
    device.events = &tv.events;
    device.model = &m;
    auto alloc = [&](uint64_t bytes) {
        uint64_t at = m.malloc(bytes);
        REQUIRE(at);
        device.record(TensorEvent::kAlloc, at, bytes);
        return at;
    };
    auto free = [&](uint64_t at) {
        uint64_t bytes = 0;
        REQUIRE(m.free(at, &bytes));
        device.record(TensorEvent::kFree, at, bytes);
    };
    const uint64_t a = alloc(30 * MiB), b = alloc(30 * MiB);
    free(a);
    const size_t cut = tv.events.size();
    const uint64_t c = alloc(20 * MiB);
    CHECK(c == a);  // page 0, already mapped
    free(c);
    free(alloc(50 * MiB));  // pages 3 to 5 mapped for it
    m.empty_cache();
    tv.events.erase(tv.events.begin(), tv.events.begin() + cut);
    tv.events_dropped = cut;
    tv.blocks = {{b, 30 * MiB, "", std::nullopt}};
    tv.block_count = 1;
    tv.mappings.assign(device.mapped.begin(), device.mapped.end());
    REQUIRE(tv.mappings.size() == 2);  // B's pages
    tv.allocated = m.allocated();
    tv.reserved = m.reserved();
    r.process_bytes = m.reserved();

    Trace tr = trace_of(r);
    CHECK(tr.range_bytes == limit + limit / 8);  // c10 reserves 9/8 of the memory the shim says the device has
    REQUIRE(tr.ranges.size() == 1);
    CHECK(tr.ranges[0].mapped.size() == 3);
    CHECK(tr.pages_inferred == 1);
    CHECK(tr.cache_unknown == 0);
    WhatIf w = what_if(r);
    CHECK(w.check.compared == 4);
    CHECK(w.check.within == w.check.compared);
    CHECK_FALSE(w.check.first_departure);
    CHECK(w.check.trusted);
    REQUIRE_FALSE(w.caveats.empty());
    CHECK(w.caveats[0].find("placed where they were in the 3 pages PyTorch had mapped then (2 holding them; 1 "
                            "inferred") != std::string::npos);
    r.device_total = 160 * MiB;  // a device smaller than the limit: the shim tells its own size
    CHECK(trace_of(r).range_bytes == 180 * MiB);
}

namespace {

// A device that counts the calls mapping pages, notes the pages mapped and refuses a call of more
// than `most_pages` pages (all or none, as Device says).
struct CountingDevice : Device {
    uint64_t most_pages = UINT64_MAX;
    int map_calls = 0;
    std::set<uint64_t> pages;  // by offset from the range's first address
    uint64_t range = 0;
    uint64_t alloc_segment(uint64_t bytes) override { return space.alloc_segment(bytes); }
    void free_segment(uint64_t, uint64_t) override {}
    uint64_t reserve_range(uint64_t bytes) override { return range = space.reserve_range(bytes); }
    void release_range(uint64_t, uint64_t) override {}
    bool map_pages(uint64_t address, uint64_t bytes, uint64_t page) override {
        map_calls++;
        if (bytes / page > most_pages) return false;
        for (uint64_t at = address; at < address + bytes; at += page) pages.insert((at - range) / page);
        return true;
    }
    void unmap_pages(uint64_t, uint64_t, uint64_t) override {}
    AddressSpace space;
};

}  // namespace

TEST_CASE("model: an adopted range maps a run of pages in one call, the pages each entry alone would get") {
    const uint64_t page = 20 * MiB;
    // Pages 0 to 4 one entry each, two pages at 5, one at 7; the limit has room for 6 pages. Entry
    // by entry: 0 to 4 fit, the two pages at 5 do not, the page at 7 still does.
    const std::vector<std::pair<uint64_t, uint64_t>> mapped = {{0, page},        {page, page},     {2 * page, page},
                                                               {3 * page, page}, {4 * page, page}, {5 * page, 2 * page},
                                                               {7 * page, page}};
    const std::set<uint64_t> expected = {0, 1, 2, 3, 4, 7};
    for (uint64_t most_pages : {UINT64_MAX, uint64_t(1)}) {
        CAPTURE(most_pages);
        CountingDevice device;
        device.most_pages = most_pages;
        CachingAllocatorModel m(expandable(6 * page), &device);
        std::vector<bool> placed;
        REQUIRE(m.adopt_range(false, mapped, {{7 * page, 4 * MiB}, {5 * page, 4 * MiB}}, &placed));
        std::string why;
        CHECK_MESSAGE(m.consistent(&why), why);
        CHECK(device.pages == expected);
        CHECK(m.reserved() == 6 * page);
        CHECK(m.smallest_refused_by_limit() == 7 * page);  // the two pages at 5, on top of 5 mapped
        CHECK(placed == std::vector<bool>{true, false});
        // One call for pages 0 to 4 and one for 7; a device refusing runs gets one more try and
        // then each entry alone.
        CHECK(device.map_calls == (most_pages == 1 ? 1 + 5 + 1 : 2));
    }
}

TEST_CASE("model: adopted pages the limit refuses leave the unmapped space one block, and the range whole") {
    // Each page after the first is split from the unmapped space after it, then refused: left so, two
    // unmapped blocks side by side, a range the model never saw empty again and a layout no run makes.
    const uint64_t page = 20 * MiB;
    const std::vector<std::pair<uint64_t, uint64_t>> mapped = {
        {0, page}, {page, page}, {2 * page, page}, {3 * page, page}};
    Model m(expandable(page));
    REQUIRE(m.m.adopt_range(false, mapped, {}));
    m.check();
    CHECK(m.m.reserved() == page);
    CHECK(m.m.smallest_refused_by_limit() == 2 * page);
    m.m.empty_cache();  // nothing live: the page unmapped, the range given back
    m.check();
    CHECK(m.m.reserved() == 0);
    CHECK(m.m.segments().empty());
}
