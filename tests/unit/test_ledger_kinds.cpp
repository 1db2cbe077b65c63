// The ledger's kinds (what a process holds beside its allocations, common/ledger/kinds.cpp) and the
// context cost per device with its one-measurer claim.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <string>

#include "common/ledger/ledger.h"

using namespace gg::ledger;

namespace {

const uint8_t kUuid[16] = {9, 1, 9};

struct Fixture {
    std::string path;
    Ledger *l = nullptr;
    int d = -1;
    explicit Fixture(const char *tag, const char *spec = "1000") {
        char buf[128];
        snprintf(buf, sizeof buf, "/tmp/gpuguard-kinds-test-%s-%d", tag, (int)getpid());
        path = buf;
        unlink(buf);
        OpenOptions o;
        o.path = path;
        o.limit_spec = spec;
        std::string error, notice;
        l = Ledger::open(o, &error, &notice);
        REQUIRE(l != nullptr);
        REQUIRE(l->join());
        d = l->device_index(kUuid, 1000, 5000, "gpu");
        REQUIRE(d == 0);
    }
    ~Fixture() {
        delete l;
        unlink(path.c_str());
    }
};

uint64_t kind_in_view(Ledger &l, Kind k) {
    for (const auto &v : l.devices())
        if (v.index == 0) return v.kinds[k];
    return ~0ull;
}

}  // namespace

TEST_CASE("ledger kinds: each moves the one total admission sums; allocations are the rest") {
    Fixture f("total");
    Ledger &l = *f.l;
    uint64_t used = 0;
    CHECK(l.try_charge_kind(f.d, kContext, 300, &used));
    CHECK(l.try_charge(f.d, 500, &used));
    CHECK_FALSE(l.try_charge_kind(f.d, kGraphs, 201, &used));  // 300 + 500 + 201 > 1000
    CHECK(l.own_kind(f.d, kGraphs) == 0);
    CHECK(l.try_charge_kind(f.d, kGraphs, 200, &used));
    CHECK(l.container_used(f.d) == 1000);
    CHECK(kind_in_view(l, kContext) == 300);
    CHECK(kind_in_view(l, kGraphs) == 200);
    // Memory the driver already took is charged even past the limit (the caller says so).
    l.charge_kind(f.d, kPools, 50);
    CHECK(l.container_used(f.d) == 1050);
    CHECK(l.release_kind(f.d, kPools, 80) == 50);  // clamped to what the kind holds
    CHECK(l.container_used(f.d) == 1000);
    l.set_kind(f.d, kContext, 100);
    CHECK(l.own_kind(f.d, kContext) == 100);
    CHECK(l.container_used(f.d) == 800);
}

TEST_CASE("ledger kinds: a pool's reserve serves an allocation without changing the total") {
    Fixture f("pool");
    Ledger &l = *f.l;
    l.charge_kind(f.d, kPools, 256);
    CHECK(l.kind_to_allocations(f.d, kPools, 100) == 100);
    CHECK(l.own_kind(f.d, kPools) == 156);
    CHECK(l.container_used(f.d) == 256);
    CHECK(l.kind_to_allocations(f.d, kPools, 1000) == 156);  // no more than the reserve
    CHECK(l.container_used(f.d) == 256);
    l.allocations_to_kind(f.d, kPools, 256);  // the frees give it back to the pool
    CHECK(l.own_kind(f.d, kPools) == 256);
    CHECK(l.container_used(f.d) == 256);
}

TEST_CASE("ledger kinds: leaving clears them with the slot") {
    Fixture f("leave");
    f.l->charge_kind(f.d, kContext, 300);
    f.l->leave();
    CHECK(kind_in_view(*f.l, kContext) == 0);
    CHECK(f.l->container_used(f.d) == 0);
}

TEST_CASE("ledger context cost: the better measurement wins, and one process at a time measures") {
    Fixture f("cost");
    Ledger &l = *f.l;
    CostSource s = kCostOwnProcess;
    CHECK(l.context_cost(f.d, &s) == 0);
    CHECK(s == kCostUnknown);
    REQUIRE(l.claim_context_measurement(f.d));
    CHECK(l.context_measurer(f.d) == getpid());
    CHECK(l.context_cost(f.d, &s) == 0);  // a claim is no cost
    // Another (live) process cannot claim while this one measures.
    pid_t pid = fork();
    if (pid == 0) {
        f.l->on_fork_child();  // as the shim's fork handler: a lock description of its own
        _exit(f.l->claim_context_measurement(f.d) ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(l.offer_context_cost(f.d, 518 << 20, kCostDeviceDelta));  // replaces the claim
    CHECK(l.context_measurer(f.d) == 0);
    CHECK(l.context_cost(f.d, &s) == 518u << 20);
    CHECK(s == kCostDeviceDelta);
    CHECK_FALSE(l.claim_context_measurement(f.d));  // known: nothing to measure
    CHECK_FALSE(l.offer_context_cost(f.d, 1, kCostDeviceDelta));
    CHECK(l.offer_context_cost(f.d, 612 << 20, kCostOwnProcess));
    CHECK(l.context_cost(f.d, nullptr) == 612u << 20);
}

TEST_CASE("ledger context cost: a claim whose process died, or that was dropped, is free again") {
    Fixture f("claim");
    Ledger &l = *f.l;
    pid_t pid = fork();
    if (pid == 0) {
        f.l->on_fork_child();
        _exit(f.l->claim_context_measurement(f.d) ? 0 : 1);  // claims, then dies measuring
    }
    int status = 0;
    waitpid(pid, &status, 0);
    REQUIRE(WEXITSTATUS(status) == 0);
    CHECK(l.context_measurer(f.d) == pid);
    CHECK(l.claim_context_measurement(f.d));
    l.drop_context_claim(f.d);
    CHECK(l.context_measurer(f.d) == 0);
    CHECK(l.claim_context_measurement(f.d));
}

// A claim's pid says nothing about liveness: a pid is reused, and one of another PID namespace may
// name a live process here. The measurer's lock on the cost record does.
TEST_CASE("ledger context cost: a claim that names a live pid but whose measurer is gone is free") {
    Fixture f("claim-pid");
    Ledger &l = *f.l;
    // What a measurer that died leaves, its pid since given to a live process (our parent here).
    f.l->header()->costs[f.d].context.store((uint64_t)getppid() << 8 | kCostMeasuring);
    CHECK(l.context_measurer(f.d) == getppid());
    CHECK(l.claim_context_measurement(f.d));
    CHECK(l.context_measurer(f.d) == getpid());
    l.drop_context_claim(f.d);
    CHECK(l.context_measurer(f.d) == 0);
}

TEST_CASE("ledger context cost: a measurer killed while measuring frees the claim for the next process") {
    Fixture f("claim-kill");
    Ledger &l = *f.l;
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        f.l->on_fork_child();
        char c = f.l->claim_context_measurement(f.d) ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1) _exit(1);
        pause();  // measuring, until killed
        _exit(0);
    }
    char c = 0;
    REQUIRE(read(ready[0], &c, 1) == 1);
    REQUIRE(c == 'y');
    CHECK(l.context_measurer(f.d) == pid);
    CHECK_FALSE(l.claim_context_measurement(f.d));  // alive and measuring
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(l.claim_context_measurement(f.d));  // the next process measures
    CHECK(l.context_measurer(f.d) == getpid());
    // While this process measures, another thread of it does not claim again.
    CHECK_FALSE(l.claim_context_measurement(f.d));
    l.drop_context_claim(f.d);
    CHECK(l.claim_context_measurement(f.d));
    l.drop_context_claim(f.d);
    close(ready[0]);
    close(ready[1]);
}
