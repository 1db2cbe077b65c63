#include <dlfcn.h>
#include <doctest/doctest.h>
#include <link.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "shim/stacks/merge.h"
#include "shim/stacks/stacks.h"
#include "shim/stacks/table.h"
#include "shim/stacks/unwind.h"

using gg::stacks::StackId;

// Sets the stacks module's reuse for one case, and back to the default when it ends, however it ends.
struct ReuseFor {
    explicit ReuseFor(bool reuse) { gg::stacks::configure(48, false, reuse); }
    ~ReuseFor() { gg::stacks::configure(48, false); }
};

// Call sites under test. Exported (the build hides symbols by default; -rdynamic on the test binary
// then lets dladdr name them) and never inlined; the empty asm after each call keeps the compiler
// from turning it into a tail call, which would take the function's own frame off the stack.
#define GG_SITE extern "C" __attribute__((noinline, visibility("default")))
GG_SITE StackId gg_test_alpha(int) {
    StackId id = gg::stacks::capture(0);
    asm volatile("" ::: "memory");
    return id;
}
GG_SITE StackId gg_test_beta(int) {
    StackId id = gg::stacks::capture(0);
    asm volatile("" ::: "memory");
    return id;
}
GG_SITE StackId gg_test_recurse(int n) {
    StackId id = n == 0 ? gg::stacks::capture(0) : gg_test_recurse(n - 1);
    asm volatile("" ::: "memory");
    return id;
}
GG_SITE StackId gg_test_skip_one(int) {  // stands for a hook: skip=1 drops this frame
    StackId id = gg::stacks::capture(1);
    asm volatile("" ::: "memory");
    return id;
}

// "The same site" must be the same call instruction all the way out: two calls written on two lines
// (or a loop the compiler unrolls or peels) are two return addresses, hence two stacks. So repeated
// captures go through this one call of site(i).
using Site = StackId (*)(int);
GG_SITE void gg_test_repeat(Site site, StackId *out, int n) {
    _Pragma("GCC unroll 1") for (int i = 0; i < n; ++i) {
        out[i] = site(i);
        asm volatile("" ::: "memory");
    }
}

static std::string hex(uintptr_t v) {
    char buf[24];
    snprintf(buf, sizeof(buf), "0x%zx", size_t(v));
    return buf;
}

TEST_SUITE("stacks") {
    TEST_CASE("distinct call sites get distinct ids; the same site always the same id") {
        gg::stacks::configure(48, false);
        StackId a[2], b[1];
        gg_test_repeat(gg_test_alpha, a, 2);
        gg_test_repeat(gg_test_beta, b, 1);
        REQUIRE(a[0] != 0);
        REQUIRE(b[0] != 0);
        CHECK(a[0] == a[1]);
        CHECK(a[0] != b[0]);
        CHECK(gg::stacks::count() >= 2);
    }

    TEST_CASE("a site without Python frames is recalled from the walk memo, and told from another of the same depth") {
        gg::stacks::configure(48, false);
        // alpha and beta have one shape, so their walks start at one depth: the memo must tell them apart
        // by the return addresses it compares. Taking turns, each recalls its own stack.
        StackId id[6];
        static gg::stacks::ReuseCounts before;  // once both were walked
        // A process's first capture learns how many of the shim's frames a walk passes (capture.cpp,
        // frames_above_caller), which sizes the walks after it: a walk before and one after are walks of
        // two sizes, never recalled one for the other. Learnt first, so that this case holds alone too.
        gg_test_alpha(0);
        gg_test_repeat(
            [](int i) {
                if (i == 2) before = gg::stacks::reuse_counts();
                return i % 2 ? gg_test_beta(i) : gg_test_alpha(i);
            },
            id, 6);
        auto after = gg::stacks::reuse_counts();
        CHECK(after.reused - before.reused == 4);
        CHECK(after.unwound == before.unwound);
        REQUIRE(id[0] != 0);
        CHECK(id[0] != id[1]);
        for (int i = 2; i < 6; i++) CHECK(id[i] == id[i % 2]);
        // The frames are those of a fresh walk: alpha's innermost is alpha.
        CHECK(gg::stacks::frames_json(id[4])[0].value("symbol", "").find("gg_test_alpha") != std::string::npos);
        CHECK(gg::stacks::frames_json(id[5])[0].value("symbol", "").find("gg_test_beta") != std::string::npos);
    }

    TEST_CASE("two sites of one depth taking turns keep their own stacks once their walks are trusted") {
        // The walk memo trusts a walk after 64 recalls with its words compared (shim/stacks/walk_memo.h):
        // alpha and beta part at a fork the memo learned, so each is the one walk of its set, and its
        // tag is given without the words compared but at one recall in 32. Each must still get its own.
        // On a thread of its own: an empty memo, where no walk of another case shares their sets.
        gg::stacks::configure(48, false);
        constexpr int kTurns = 600;
        static StackId id[kTurns];
        gg::stacks::WalkerCounts before, after;
        std::thread([&] {
            gg_test_alpha(0);  // the first capture sizes the walks after it (see the case above)
            before = gg::stacks::walker_counts();
            gg_test_repeat([](int i) { return i % 2 ? gg_test_beta(i) : gg_test_alpha(i); }, id, kTurns);
            after = gg::stacks::walker_counts();
        }).join();
        REQUIRE(id[0] != 0);
        REQUIRE(id[1] != id[0]);
        int own = 0;
        for (int i = 0; i < kTurns; i++) own += id[i] == id[i % 2];
        CHECK(own == kTurns);
        // 300 recalls each (less the first walks): the first 64 compared, then one in 32.
        CHECK(after.trusted - before.trusted >= uint64_t(2 * (kTurns / 2 - 64 - 16)));
        CHECK(after.trusted - before.trusted <= uint64_t(2 * (kTurns / 2 - 64)));
    }

    TEST_CASE("a new call site at a trusted site's depth takes its stack until a check; without reuse never") {
        // The bargain of the walk memo's trusted recalls (shim/stacks/walk_memo.h), as a C++ program
        // meets it: one function called in a loop from one place, then from another at the same depth.
        // The second place's first captures take the first's stack, until a check (one recall in 32)
        // lands on one of them; from then on each has its own. GPUGUARD_STACK_REUSE=0 turns it off.
        for (bool reuse : {true, false}) {
            ReuseFor mode(reuse);
            constexpr int kFirst = 300, kSecond = 300;
            static StackId first[kFirst], second[kSecond];
            gg::stacks::WalkerCounts before, after;
            std::thread([&] {
                gg_test_repeat(gg_test_alpha, first, kFirst);
                asm volatile("" ::: "memory");
                before = gg::stacks::walker_counts();
                gg_test_repeat(gg_test_alpha, second, kSecond);
                after = gg::stacks::walker_counts();
            }).join();
            REQUIRE(first[0] != 0);
            int wrong = 0;
            for (StackId id : second) wrong += id == first[0];
            const StackId own = second[kSecond - 1];
            CHECK(own != first[0]);
            int own_after = 0;
            for (int i = wrong; i < kSecond; i++) own_after += second[i] == own;
            CAPTURE(reuse);
            CHECK(own_after == kSecond - wrong);  // the wrong ones came first, and then none
            if (reuse) CHECK(wrong < 2 * 32);
            else CHECK(wrong == 0);
            // The second place's walk is trusted in its turn (whether its first captures met the first's
            // trusted walk depends on where the compiler put the two calls: how many were wrong).
            if (reuse) CHECK(after.trusted - before.trusted >= uint64_t(kSecond - 64 - 2 * 32 - 16));
            else CHECK(after.trusted == before.trusted);
        }
    }

    TEST_CASE("the same function reached through recursions of different depth gives different stacks") {
        StackId id[3];
        gg_test_repeat([](int i) { return gg_test_recurse(i == 1 ? 5 : 3); }, id, 3);
        CHECK(id[0] != 0);
        CHECK(id[0] != id[1]);
        CHECK(id[0] == id[2]);
    }

    TEST_CASE("frames_json starts at capture()'s caller and names module, offset, build id and symbol") {
        REQUIRE(std::string(gg::stacks::unwinder()) != "none");
        nlohmann::json frames = gg::stacks::frames_json(gg_test_alpha(0));
        REQUIRE(frames.size() >= 2);
        const nlohmann::json &f = frames[0];
        CHECK(f["kind"] == "native");
        CHECK(f["symbol"].get<std::string>() == "gg_test_alpha");
        CHECK(frames[1]["symbol"].get<std::string>().find("gg_test_alpha") == std::string::npos);

        Dl_info info{};
        link_map *lm = nullptr;
        REQUIRE(
            dladdr1(reinterpret_cast<void *>(&gg_test_alpha), &info, reinterpret_cast<void **>(&lm), RTLD_DL_LINKMAP));
        char exe[4096] = {};
        REQUIRE(readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0);
        CHECK(f["module"].get<std::string>() == exe);
        uintptr_t ip = std::stoull(f["ip"].get<std::string>(), nullptr, 16);
        CHECK(f["offset"].get<std::string>() == hex(ip - lm->l_addr));
        CHECK(ip > reinterpret_cast<uintptr_t>(&gg_test_alpha));  // a return address inside alpha
        std::string build_id = f["build_id"];
        CHECK(build_id.size() >= 16);
        CHECK(build_id.find_first_not_of("0123456789abcdef") == std::string::npos);
    }

    TEST_CASE("skip drops the caller's own frames") {
        nlohmann::json frames = gg::stacks::frames_json(gg_test_skip_one(0));
        REQUIRE(!frames.empty());
        CHECK(frames[0]["symbol"].get<std::string>() != "gg_test_skip_one");
        CHECK(frames[0]["symbol"].get<std::string>() != "gg_test_alpha");
    }

    TEST_CASE("an unknown id gives no frames") {
        CHECK(gg::stacks::frames_json(0).empty());
        CHECK(gg::stacks::frames_json(0xFFFFFF).empty());
    }

    TEST_CASE("threads capturing at once agree on ids") {
        // Without reuse: every capture unwinds and interns (reuse's own bargains aside: beta, at alpha's
        // depth after 2,000 of alpha's captures, would take alpha's stack until a check lands on one of
        // its own, as the walk memo's trusted recalls have it: shim/stacks/walk_memo.h).
        ReuseFor mode(false);
        constexpr int kThreads = 8, kRounds = 2000;
        std::vector<std::vector<StackId>> alpha(kThreads), beta(kThreads);
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t)
            threads.emplace_back([&, t] {
                std::vector<StackId> depths(kRounds);
                alpha[t].resize(kRounds), beta[t].resize(kRounds);
                gg_test_repeat(gg_test_alpha, alpha[t].data(), kRounds);
                // New stacks interned while other threads look theirs up.
                gg_test_repeat([](int i) { return gg_test_recurse(i % 7); }, depths.data(), kRounds);
                gg_test_repeat(gg_test_beta, beta[t].data(), kRounds);
            });
        for (auto &th : threads) th.join();
        StackId a0 = alpha[0][0], b0 = beta[0][0];
        CHECK(a0 != 0);
        CHECK(a0 != b0);
        for (int t = 0; t < kThreads; ++t) {  // every thread ran the same lambda, so the same stacks
            int mismatches = 0;
            for (int i = 0; i < kRounds; ++i) mismatches += (alpha[t][i] != a0) + (beta[t][i] != b0);
            CHECK(mismatches == 0);
        }
    }

    TEST_CASE("while a fork is being prepared a capture gets no native frames, and returns; after it, they come back") {
        // The unwinders' fork gate (shim/stacks/unwind.h): libunwind and libgcc take locks of their own,
        // so from before_fork() to after_fork() new unwinds are skipped rather than risk a child forked
        // holding one. The prepare handler calls before_fork() on the forking thread itself, which may
        // allocate in between (a capture there must not wait for itself).
        StackId during = 0, after = 0;
        std::thread([&] {
            ReuseFor mode(false);  // every capture walks: nothing recalled from before
            gg::stacks::unwind::before_fork();
            during = gg_test_recurse(2);
            gg::stacks::unwind::after_fork(false);
            after = gg_test_recurse(2);
        }).join();
        CHECK(gg::stacks::native_frames(during).empty());
        CHECK_FALSE(gg::stacks::native_frames(after).empty());
    }

    TEST_CASE("a child forked between before_fork() and after_fork(true) unwinds") {
        gg::stacks::configure(48, false);
        REQUIRE_FALSE(gg::stacks::native_frames(gg_test_beta(0)).empty());
        gg::stacks::unwind::before_fork();
        pid_t child = fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            gg::stacks::unwind::after_fork(true);
            _exit(gg::stacks::native_frames(gg_test_recurse(3)).empty() ? 1 : 0);
        }
        gg::stacks::unwind::after_fork(false);
        int status = 0;
        REQUIRE(waitpid(child, &status, 0) == child);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
    }

    TEST_CASE("the libgcc fallback unwinder captures the same stacks") {
        std::string before = gg::stacks::unwinder();
        StackId a[3], b[1];
        gg_test_repeat(
            [](int i) {
                if (i == 1) REQUIRE(gg::stacks::unwind::select("libgcc"));
                return gg_test_alpha(i);
            },
            a, 3);
        CHECK(std::string(gg::stacks::unwinder()) == "libgcc");
        gg_test_repeat(gg_test_beta, b, 1);
        CHECK(a[1] != 0);
        CHECK(a[1] != b[0]);
        CHECK(a[1] == a[2]);
        CHECK(gg::stacks::frames_json(a[1])[0]["symbol"].get<std::string>() == "gg_test_alpha");
        // Both unwinders report return addresses from capture()'s caller outward, so switching unwinder
        // does not split a stack in two.
        if (before == "libunwind") CHECK(a[0] == a[1]);
        REQUIRE(gg::stacks::unwind::select(before.c_str()));
    }

    TEST_CASE("no unwinder: capture returns 0 rather than failing") {
        std::string before = gg::stacks::unwinder();
        // The thread's last walk by the caching walker (a depth its memo keeps), tagged with its stack: no
        // capture under "none" may answer with it.
        gg::stacks::configure(48, false);
        REQUIRE(gg::stacks::unwind::select("cfi"));
        REQUIRE(gg_test_alpha(0) != 0);
        REQUIRE(gg::stacks::unwind::select("none"));
        CHECK(gg_test_alpha(0) == 0);
        REQUIRE(gg::stacks::unwind::select(before.c_str()));
    }

    TEST_CASE("stack table: equal words and tag share an id, a different split does not") {
        uintptr_t w[] = {0x1000, 0x2000, 0x3000};
        uint32_t a = gg::stacks::table::intern(w, 3, 3), b = gg::stacks::table::intern(w, 3, 2);
        CHECK(a != 0);
        CHECK(a != b);
        CHECK(gg::stacks::table::intern(w, 3, 3) == a);
        std::vector<uintptr_t> back;
        uint32_t tag = 0;
        REQUIRE(gg::stacks::table::get(a, &back, &tag));
        CHECK(back == std::vector<uintptr_t>(w, w + 3));
        CHECK(tag == 3);
        CHECK(gg::stacks::table::intern(w, 0, 0) == 0);
    }

    TEST_CASE("stack table: copy gives an id's length and tag, and at most the words asked for") {
        uintptr_t w[] = {0x1100, 0x2200, 0x3300, 0x4400};
        uint32_t id = gg::stacks::table::intern(w, 4, 1);
        REQUIRE(id != 0);
        uintptr_t out[4] = {0, 0, 0, 0};
        uint32_t tag = 0;
        CHECK(gg::stacks::table::copy(id, out, 2, &tag) == 4);
        CHECK(tag == 1);
        CHECK((out[0] == 0x1100 && out[1] == 0x2200 && out[2] == 0 && out[3] == 0));
        CHECK(gg::stacks::table::copy(id, out, 4, &tag) == 4);
        CHECK(out[3] == 0x4400);
        CHECK(gg::stacks::table::copy(0, out, 4, &tag) == 0);
        CHECK(gg::stacks::table::copy(id + (1u << 24), out, 4, &tag) == 0);  // never returned by intern
    }

    TEST_CASE("Python frames stand before the eval-loop frame that ran them") {
        using gg::stacks::merge_order;
        auto order = [](const std::vector<bool> &eval, const std::vector<bool> &entry) {
            std::string s;
            for (auto p : merge_order(eval, entry)) s += (p.python ? "p" : "n") + std::to_string(p.index) + " ";
            return s;
        };
        // n0 (torch) <- n1 eval <- n2 (C call) <- n3 eval <- n4 main; Python: p0 p1 in n1's run (p1 entry),
        // p2 in n3's run (entry).
        CHECK(order({false, true, false, true, false}, {false, true, true}) == "n0 p0 p1 n1 n2 p2 n3 n4 ");
        CHECK(order({false, false}, {false, true}) == "n0 n1 p0 p1 ");  // no eval loop seen
        CHECK(order({true}, {false, true, true}) == "p0 p1 n0 p2 ");    // depth cut: the rest go last
        CHECK(order({}, {true}) == "p0 ");
    }

}  // TEST_SUITE
