#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "shim/track/live_table.h"

using namespace gg;

namespace {

Allocation alloc_of(uint64_t bytes) {
    Allocation a;
    a.bytes = bytes;
    a.thread = int32_t(bytes % 1000);
    return a;
}

using Entries = std::map<std::pair<uint64_t, int>, uint64_t>;  // (key, kind) -> bytes

Entries entries_of(const LiveTable &t) {
    Entries e;
    t.for_each([&](uint64_t key, KeyKind kind, const Allocation &a) { e[{key, int(kind)}] = a.bytes; });
    return e;
}

// Random puts and takes on keys drawn from [0, key_range), checked at every step against std::map.
void random_against_map(uint64_t key_range, int ops, unsigned seed) {
    LiveTable t;
    Entries ref;
    std::mt19937_64 rng(seed);
    for (int i = 0; i < ops; i++) {
        uint64_t key = rng() % key_range;
        KeyKind kind = rng() % 4 == 0 ? KeyKind::kHandle : KeyKind::kPointer;
        std::pair<uint64_t, int> k{key, int(kind)};
        if (rng() % 2) {
            Allocation old;
            bool replaced = false;
            REQUIRE(t.put(key, kind, alloc_of(i + 1), &old, &replaced));
            auto it = ref.find(k);
            REQUIRE(replaced == (it != ref.end()));
            if (replaced) REQUIRE(old.bytes == it->second);
            ref[k] = i + 1;
        } else {
            Allocation out;
            bool found = t.take(key, kind, &out);
            auto it = ref.find(k);
            REQUIRE(found == (it != ref.end()));
            if (found) {
                REQUIRE(out.bytes == it->second);
                REQUIRE(out.thread == int32_t(it->second % 1000));
                ref.erase(it);
            }
        }
        REQUIRE(t.size() == ref.size());
        // find() sees what take() would, without taking it: the key just changed, and another.
        uint64_t other = rng() % key_range;
        for (uint64_t probe : {key, other}) {
            const Allocation *found = t.find(probe, kind);
            auto it = ref.find({probe, int(kind)});
            REQUIRE((found != nullptr) == (it != ref.end()));
            if (found) REQUIRE(found->bytes == it->second);
        }
    }
    CHECK(entries_of(t) == ref);
    // Every entry left is still found, and taking them all leaves the table empty.
    for (auto &[k, bytes] : ref) {
        Allocation out;
        REQUIRE(t.take(k.first, KeyKind(k.second), &out));
        CHECK(out.bytes == bytes);
    }
    CHECK(t.size() == 0);
    CHECK(entries_of(t).empty());
}

}  // namespace

TEST_CASE("live table: put, take, replace, and the kind is part of the key") {
    LiveTable t;
    Allocation out, old;
    bool replaced = true;
    CHECK_FALSE(t.take(0x1000, KeyKind::kPointer, &out));  // empty, never grown
    REQUIRE(t.put(0x1000, KeyKind::kPointer, alloc_of(512), &old, &replaced));
    CHECK_FALSE(replaced);
    REQUIRE(t.put(0x1000, KeyKind::kHandle, alloc_of(4096), &old, &replaced));
    CHECK_FALSE(replaced);  // the same number as a handle is another key
    CHECK(t.size() == 2);
    REQUIRE(t.put(0x1000, KeyKind::kPointer, alloc_of(1024), &old, &replaced));
    CHECK(replaced);
    CHECK(old.bytes == 512);
    CHECK(t.size() == 2);
    REQUIRE(t.take(0x1000, KeyKind::kPointer, &out));
    CHECK(out.bytes == 1024);
    CHECK_FALSE(t.take(0x1000, KeyKind::kPointer, &out));
    REQUIRE(t.take(0x1000, KeyKind::kHandle, &out));
    CHECK(out.bytes == 4096);
    CHECK(t.size() == 0);
}

TEST_CASE("live table: grows by doubling, never past three quarters full, and keeps every entry") {
    LiveTable t;
    Allocation old;
    bool replaced;
    for (uint64_t i = 0; i < 100000; i++) {
        REQUIRE(t.put(0x7f0000000000ull + i * 512, KeyKind::kPointer, alloc_of(i + 1), &old, &replaced));
        REQUIRE(t.size() * 4 <= t.capacity() * 3);
    }
    CHECK(t.capacity() == 262144);  // 131,072 x 3/4 = 98,304 < 100,000
    CHECK((t.capacity() & (t.capacity() - 1)) == 0);
    for (uint64_t i = 0; i < 100000; i++) {
        Allocation out;
        REQUIRE(t.take(0x7f0000000000ull + i * 512, KeyKind::kPointer, &out));
        REQUIRE(out.bytes == i + 1);
    }
    CHECK(t.size() == 0);
}

TEST_CASE("live table: taking from a run that wraps past the last slot moves the rest back") {
    // Keys whose probe starts in the last slots of a 64-slot table, so that their run wraps to the
    // start; taking them in every order must leave the others findable (no tombstones, no holes).
    LiveTable probe;
    Allocation old;
    bool replaced;
    REQUIRE(probe.put(1, KeyKind::kPointer, alloc_of(1), &old, &replaced));  // makes the first 64 slots
    REQUIRE(probe.capacity() == 64);
    std::vector<uint64_t> keys;
    for (uint64_t k = 2; keys.size() < 6; k++)
        if (probe.home(k, KeyKind::kPointer) >= 62) keys.push_back(k);
    // Several orders: each rotation of the six, forwards and backwards; the first three are taken,
    // then the other three must still be found.
    for (size_t rot = 0; rot < keys.size(); rot++) {
        for (bool reverse : {false, true}) {
            LiveTable t;
            for (uint64_t k : keys) REQUIRE(t.put(k, KeyKind::kPointer, alloc_of(k), &old, &replaced));
            REQUIRE(t.capacity() == 64);
            std::vector<uint64_t> order;
            for (size_t i = 0; i < keys.size(); i++) order.push_back(keys[(rot + i) % keys.size()]);
            if (reverse) std::reverse(order.begin(), order.end());
            for (size_t i = 0; i < 3; i++) {
                Allocation out;
                REQUIRE(t.take(order[i], KeyKind::kPointer, &out));
                CHECK(out.bytes == order[i]);
            }
            for (size_t i = 3; i < order.size(); i++) {
                Allocation out;
                REQUIRE_MESSAGE(t.take(order[i], KeyKind::kPointer, &out), "key ", order[i], " lost");
                CHECK(out.bytes == order[i]);
            }
        }
    }
}

TEST_CASE("live table: random puts and takes agree with std::map, crowded and spread") {
    random_against_map(100, 200000, 1);       // crowded: few keys, long runs, many replacements
    random_against_map(1u << 20, 200000, 2);  // spread: the table grows to thousands of entries
}

TEST_CASE("live table: clear empties it, and it works again after") {
    LiveTable t;
    Allocation old, out;
    bool replaced;
    for (uint64_t i = 0; i < 1000; i++) REQUIRE(t.put(i, KeyKind::kPointer, alloc_of(i + 1), &old, &replaced));
    t.clear();
    CHECK(t.size() == 0);
    CHECK_FALSE(t.take(5, KeyKind::kPointer, &out));
    REQUIRE(t.put(5, KeyKind::kPointer, alloc_of(6), &old, &replaced));
    CHECK_FALSE(replaced);
    REQUIRE(t.take(5, KeyKind::kPointer, &out));
    CHECK(out.bytes == 6);
}
