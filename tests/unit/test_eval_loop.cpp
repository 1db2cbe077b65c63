// Finding the native frame that holds a stack address, and the code range around a return address:
// what the capture uses to learn the eval loop's code where its symbol falls short
// (shim/stacks/eval_loop.cpp). Learning inside a real interpreter is proven by t_pyframes.sh.
#include <doctest/doctest.h>

#include <cstdint>

#include "shim/stacks/cfi_walker.h"
#include "shim/stacks/eval_loop.h"

namespace cfi = gg::stacks::cfi;

namespace {

struct Found {
    uintptr_t return_address = 0;
    uintptr_t lo = 0, hi = 0;  // this function's code range, from its unwind entry
    bool ranged = false;
};

// Not instrumented by AddressSanitizer, whose fake stacks would move `local` off the thread's stack.
__attribute__((noinline, no_sanitize_address)) void hold_and_find(Found *f) {
    volatile char local[32] = {};
    f->return_address = gg::stacks::return_address_into_frame_holding(reinterpret_cast<uintptr_t>(&local[8]));
    local[0] = 1;  // live past the call
    f->ranged = cfi::function_range(reinterpret_cast<uintptr_t>(&hold_and_find), &f->lo, &f->hi);
}

__attribute__((noinline)) int outer_frames(int depth, Found *f) {
    if (depth == 0) {
        hold_and_find(f);
        return 0;
    }
    return outer_frames(depth - 1, f) + 1;
}

}  // namespace

TEST_SUITE("stacks: the eval loop's code found from the stack") {
    TEST_CASE("the frame that holds a local is found by its return address, a few frames out") {
        REQUIRE(cfi::available());
        Found f;
        outer_frames(5, &f);
        REQUIRE(f.ranged);
        CHECK(f.lo == reinterpret_cast<uintptr_t>(&hold_and_find));  // the entry starts at the function
        CHECK(f.return_address > f.lo);
        CHECK(f.return_address < f.hi);
    }

    TEST_CASE("an address in no frame of the walk finds none") {
        static char not_on_the_stack[8];
        CHECK(gg::stacks::return_address_into_frame_holding(reinterpret_cast<uintptr_t>(not_on_the_stack)) == 0);
        CHECK(gg::stacks::return_address_into_frame_holding(0) == 0);
    }

    TEST_CASE("the walk with slots gives walk()'s return addresses, each read from a slot further out") {
        void *ips[32], *plain[32];
        uintptr_t slots[32];
        int n = cfi::walk_with_slots(ips, slots, 32);
        int m = cfi::walk(plain, 32, nullptr);
        REQUIRE(n > 3);
        // Each walk starts inside itself (walk() one frame deeper): from the test's frame out they agree.
        int shift = 0;
        while (shift < m && plain[shift] != ips[1]) shift++;
        REQUIRE(shift < m);
        shift -= 1;
        REQUIRE(m - shift >= n);
        for (int i = 1; i < n; i++) {
            CHECK(ips[i] == plain[i + shift]);
            CHECK(slots[i] > slots[i - 1]);
            CHECK(*reinterpret_cast<void *const *>(slots[i]) == ips[i]);
        }
    }

    TEST_CASE("no code range where no unwind entry covers the address") {
        uintptr_t lo = 0, hi = 0;
        CHECK_FALSE(cfi::function_range(0, &lo, &hi));
        CHECK_FALSE(cfi::function_range(4096, &lo, &hi));
    }
}
