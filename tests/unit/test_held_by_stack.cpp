// The tracker's bytes by stack (shim/track/held_by_stack.h): a table indexed by the stack id.
#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "shim/track/held_by_stack.h"
#include "shim/track/tracker.h"

using gg::HeldByStack;
using gg::KeyKind;
using gg::Tracker;

namespace {

std::map<gg::stacks::StackId, std::pair<uint64_t, uint64_t>> listed(const HeldByStack &t) {
    std::map<gg::stacks::StackId, std::pair<uint64_t, uint64_t>> m;
    t.for_each([&m](gg::stacks::StackId id, uint64_t bytes, uint64_t count) { m[id] = {bytes, count}; });
    return m;
}

std::map<gg::stacks::StackId, uint64_t> by_stack(const Tracker &t) {
    std::map<gg::stacks::StackId, uint64_t> m;
    for (const gg::StackBytes &s : t.snapshot(0).by_stack) m[s.stack] = s.bytes;
    return m;
}

gg::Allocation block(gg::stacks::StackId stack, uint64_t bytes) {
    gg::Allocation a;
    a.bytes = bytes;
    a.stack = stack;
    return a;
}

}  // namespace

TEST_SUITE("tracker: bytes by stack") {
    TEST_CASE("every id the stack table gives has its entry, in chunks made on first use; none past them") {
        auto t = std::make_unique<HeldByStack>();
        const gg::stacks::StackId last = gg::stacks::StackId(1) << 20;  // the stack table's largest id
        for (gg::stacks::StackId id : {1u, HeldByStack::kIdsPerChunk - 1, HeldByStack::kIdsPerChunk, last}) {
            HeldByStack::Held *h = t->at(id);
            REQUIRE(h != nullptr);
            h->bytes += id;
            h->count += 1;
            CHECK(t->at(id) == h);  // never moved
        }
        CHECK(t->at(last + HeldByStack::kIdsPerChunk) == nullptr);
        t->prefetch(last + HeldByStack::kIdsPerChunk);  // a hint past the table reads nothing
        auto m = listed(*t);
        CHECK(m.size() == 4);
        CHECK(m[last] == std::make_pair(uint64_t(last), uint64_t(1)));
        t->clear();
        CHECK(listed(*t).empty());
    }

    TEST_CASE("blocks of one stack under keys of every shard, from threads at once, sum to that stack") {
        auto t = std::make_unique<Tracker>();
        constexpr int kThreads = 4, kBlocks = 2000;
        std::vector<std::thread> threads;
        std::atomic<int> refused{0};
        for (int th = 0; th < kThreads; th++)
            threads.emplace_back([&t, &refused, th] {
                for (int i = 0; i < kBlocks; i++) {
                    uint64_t key = uint64_t(th) << 32 | uint64_t(i) << 12;
                    gg::Allocation out;
                    if (!t->insert(KeyKind::kPointer, key, block(7, 512))) refused++;
                    if (i % 2 && !t->take(KeyKind::kPointer, key, &out, 0)) refused++;
                }
            });
        for (auto &th : threads) th.join();
        REQUIRE(refused == 0);
        auto m = by_stack(*t);
        CHECK(m.size() == 1);
        CHECK(m[7] == uint64_t(kThreads) * kBlocks / 2 * 512);
        CHECK(t->live_bytes() == m[7]);
    }

    TEST_CASE("blocks without a stack are listed as stack 0, beside the others") {
        auto t = std::make_unique<Tracker>();
        REQUIRE(t->insert(KeyKind::kPointer, 0x1000, block(0, 100)));
        REQUIRE(t->insert(KeyKind::kPointer, 0x2000, block(5000, 200)));  // a second chunk's id
        auto m = by_stack(*t);
        CHECK(m[0] == 100);
        CHECK(m[5000] == 200);
        gg::Allocation out;
        REQUIRE(t->take(KeyKind::kPointer, 0x2000, &out, 0));
        CHECK(by_stack(*t).count(5000) == 0);
        t->clear();
        CHECK(by_stack(*t).empty());
    }
}
