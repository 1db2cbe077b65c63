#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shim/stacks/reuse.h"

using gg::stacks::reuse::SiteCache;
using Verdict = SiteCache::Verdict;

TEST_CASE("a site's stack is reused after it was stored, with checks at the 1st, 2nd, 4th ... hit") {
    auto *c = new SiteCache();
    uint32_t id = 0;
    CHECK(c->lookup(42, &id) == Verdict::kMiss);
    c->store(42, 7);
    std::vector<int> checked;
    for (int n = 1; n <= 2048; n++) {
        id = 0;
        Verdict v = c->lookup(42, &id);
        CHECK(id == 7);
        if (v == Verdict::kCheck) {
            checked.push_back(n);
            c->checked(42, true, 7);  // the fresh unwind agreed
        } else {
            CHECK(v == Verdict::kReuse);
        }
    }
    // Past 1024, one in each window of 512 (once_a_window, shim/stacks/check_window.h): 1024 + 97, 1536 + 267.
    CHECK(checked == std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 1121, 1803});
    delete c;
}

TEST_CASE("a check that finds another stack replaces the cached one; the third change makes the site unstable") {
    auto *c = new SiteCache();
    uint64_t before = gg::stacks::reuse::counts().unstable_sites.load();
    uint32_t id = 0;
    c->store(9, 3);
    REQUIRE(c->lookup(9, &id) == Verdict::kCheck);  // the first reuse is checked
    c->checked(9, false, 4);                        // the unwinder found another stack: it replaces
    REQUIRE(c->lookup(9, &id) == Verdict::kCheck);  // and the schedule starts again
    CHECK(id == 4);
    c->checked(9, true, 4);
    REQUIRE(c->lookup(9, &id) == Verdict::kCheck);  // 2nd hit
    c->checked(9, false, 5);                        // second change
    REQUIRE(c->lookup(9, &id) == Verdict::kCheck);
    CHECK(id == 5);
    c->checked(9, false, 6);  // third change: never reused again
    CHECK(gg::stacks::reuse::counts().unstable_sites.load() == before + 1);
    for (int n = 0; n < 100; n++) CHECK(c->lookup(9, &id) == Verdict::kUnstable);
    c->store(9, 6);  // a later unwind stores nothing over the mark
    CHECK(c->lookup(9, &id) == Verdict::kUnstable);
    delete c;
}

// kWays + 1 keys of the set `first` lies in, `first` the first of them.
static std::vector<uint64_t> keys_of_one_set(uint64_t first) {
    std::vector<uint64_t> keys;
    for (uint64_t k = first; int(keys.size()) <= SiteCache::kWays; ++k)
        if (SiteCache::set_index(k) == SiteCache::set_index(first)) keys.push_back(k);
    return keys;
}

TEST_CASE("sites that share a set all stay cached up to its ways; then the least recently used one goes") {
    auto *c = new SiteCache();
    std::vector<uint64_t> keys = keys_of_one_set(1);
    uint32_t id = 0;
    for (int i = 0; i < SiteCache::kWays; ++i) c->store(keys[i], 100 + i);
    for (int i = 0; i < SiteCache::kWays; ++i) {  // all of them stay: no two evict each other
        REQUIRE(c->lookup(keys[i], &id) != Verdict::kMiss);
        CHECK(id == uint32_t(100 + i));
    }
    REQUIRE(c->lookup(keys[0], &id) != Verdict::kMiss);  // keys[1] is now the least recently used
    c->store(keys.back(), 999);
    CHECK(c->lookup(keys[1], &id) == Verdict::kMiss);
    for (int i = 0; i < SiteCache::kWays; ++i) {
        if (i == 1) continue;
        id = 0;
        CHECK(c->lookup(keys[i], &id) != Verdict::kMiss);
        CHECK(id == uint32_t(100 + i));
    }
    CHECK(c->lookup(keys.back(), &id) != Verdict::kMiss);
    CHECK(id == 999u);
    delete c;
}

// The hits a schedule checks from `from` on, up to `to`.
static std::vector<uint32_t> scheduled(bool (*due)(uint32_t), uint32_t from, uint32_t to) {
    std::vector<uint32_t> hits;
    for (uint32_t n = from; n <= to; n++)
        if (due(n)) hits.push_back(n);
    return hits;
}

// Past the powers of two: one check in each of 1,000 windows, never more than 2 * window - 2 hits
// unchecked in a row, and every phase of a pattern of every period from 2 to 128 checked within them, so
// that callers taking turns (A at even hits, B at odd; or any cycle of callers) are all checked: at every
// 64th hit B never was, and at a place moving by a fixed odd step half the phases of a period of 64 were not.
static void check_windows(bool (*due)(uint32_t), uint32_t first, uint32_t window) {
    constexpr uint32_t kWindows = 1000;
    std::vector<uint32_t> hits = scheduled(due, first + 1, first + kWindows * window);
    REQUIRE(hits.size() == kWindows);  // the windows from the one `first` (a power of two) starts
    for (size_t i = 0; i < hits.size(); i++) {
        CHECK(hits[i] / window == first / window + i);
        CHECK(hits[i] - (i ? hits[i - 1] : first) - 1 <= 2 * window - 2);
    }
    for (uint32_t period = 2; period <= 128; period++) {
        std::vector<bool> phase_checked(period);
        for (uint32_t n : hits) phase_checked[n % period] = true;
        for (uint32_t phase = 0; phase < period; phase++) {
            CAPTURE(period);
            CAPTURE(phase);
            CHECK(phase_checked[phase]);
        }
    }
}

TEST_CASE("the check schedule: powers of two up to 1024, then one hit in each 512, at a place that moves") {
    CHECK(scheduled(SiteCache::due, 1, 1024) == std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024});
    check_windows(SiteCache::due, 1024, 512);
}

TEST_CASE("a site keyed by its innermost Python frames gets a deep check in every 32 hits beside the others") {
    auto *c = new SiteCache();
    uint32_t id = 0;
    uint64_t whole = 0;
    c->store(77, 5, /*whole=*/1234);
    std::vector<int> deep;
    for (int n = 1; n <= 512; n++) {
        Verdict v = c->lookup(77, &id, &whole);
        CHECK(id == 5);
        CHECK(whole == 1234u);
        if (v == Verdict::kCheckDeep) deep.push_back(n);
        else CHECK((v == Verdict::kReuse || v == Verdict::kCheck));
    }
    // Powers of two up to 512 are the native checks (kCheck, which carry the deep check too); past 64,
    // one in each window of 32, none of them a power of two.
    CHECK(deep == std::vector<int>{70, 112, 132, 185, 203, 227, 265, 312, 349, 370, 399, 434, 471, 505});
    // A site whose key covers every frame (no whole key stored) never gets one.
    c->store(78, 6);
    for (int n = 1; n <= 512; n++) CHECK(c->lookup(78, &id, &whole) != Verdict::kCheckDeep);
    delete c;
}

TEST_CASE("a site marked deep answers kDeep from then on, and a later store does not clear the mark") {
    auto *c = new SiteCache();
    uint64_t before = gg::stacks::reuse::counts().deep_sites.load();
    uint32_t id = 0;
    c->store(91, 3, 555);
    REQUIRE(c->lookup(91, &id) == Verdict::kCheck);
    c->mark_deep(91);
    c->mark_deep(91);  // counted once
    CHECK(gg::stacks::reuse::counts().deep_sites.load() == before + 1);
    CHECK(c->lookup(91, &id) == Verdict::kDeep);
    c->store(91, 4, 556);
    CHECK(c->lookup(91, &id) == Verdict::kDeep);
    delete c;
}

TEST_CASE("a key may take another whole stack twice; a store keeps the count, and the third is refused") {
    auto *c = new SiteCache();
    uint32_t id = 0;
    uint64_t whole = 0;
    c->store(120, 3, 700);
    CHECK(c->may_change_whole(120));
    c->store(120, 4, 701);  // the new stack, its schedule started again
    REQUIRE(c->lookup(120, &id, &whole) == Verdict::kCheck);
    CHECK((id == 4 && whole == 701));
    CHECK(c->may_change_whole(120));
    c->store(120, 5, 702);
    CHECK_FALSE(c->may_change_whole(120));  // two callers taking turns: the caller marks it deep
    CHECK_FALSE(c->may_change_whole(121));  // no such key
    delete c;
}

TEST_CASE("another key stored into a slot starts with none of the counts of the key it pushed out") {
    auto *c = new SiteCache();
    std::vector<uint64_t> keys = keys_of_one_set(1000);
    c->store(keys[0], 1, 900);
    REQUIRE(c->may_change_whole(keys[0]));
    REQUIRE(c->may_change_whole(keys[0]));
    for (int n = 0; n < SiteCache::kMaxExtensionMisses; n++) c->missed_extension(keys[0]);
    REQUIRE_FALSE(c->extensions_help(keys[0]));
    uint32_t id = 0;
    for (int i = 1; i < SiteCache::kWays; ++i) c->store(keys[i], 10 + i, 900);
    for (int i = 1; i < SiteCache::kWays; ++i) c->lookup(keys[i], &id);  // keys[0] the least recent
    c->store(keys[SiteCache::kWays], 20, 901);                           // pushes keys[0] out
    REQUIRE(c->lookup(keys[0], &id) == Verdict::kMiss);
    CHECK(c->extensions_help(keys[SiteCache::kWays]));
    CHECK(c->may_change_whole(keys[SiteCache::kWays]));
    CHECK(c->may_change_whole(keys[SiteCache::kWays]));
    delete c;
}

TEST_CASE("a key's extensions are given up after kMaxExtensionMisses misses, which a store of its stack keeps") {
    auto *c = new SiteCache();
    c->store(130, 3, 800);
    for (int n = 1; n < SiteCache::kMaxExtensionMisses; n++) {
        c->missed_extension(130);
        if (n == 5) c->store(130, 4, 801);
    }
    CHECK(c->extensions_help(130));
    c->missed_extension(130);
    CHECK_FALSE(c->extensions_help(130));
    CHECK_FALSE(c->extensions_help(131));  // no such key
    delete c;
}

TEST_CASE("the deep check's schedule: powers of two up to 64, then one hit in each 32, at a place that moves") {
    CHECK(scheduled(SiteCache::deep_due, 1, 64) == std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64});
    check_windows(SiteCache::deep_due, 64, 32);
}
