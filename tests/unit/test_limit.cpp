// The limit's one path (issue 31): the ledger's answer of a device's limit in force.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "common/ledger/ledger.h"

using namespace gg;

TEST_CASE("ledger: the limit in force comes back with the device's index, the first registrant's") {
    ledger::OpenOptions o;  // a private ledger
    std::string error, notice;
    std::unique_ptr<ledger::Ledger> l(ledger::Ledger::open(o, &error, &notice));
    REQUIRE(l);
    const uint8_t uuid[16] = {'l', 'i', 'm', 'i', 't', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7};
    uint64_t in_force = 0;
    int d = l->device_index(uuid, 1000, 5000, "gpu", &in_force);
    REQUIRE(d >= 0);
    CHECK(in_force == 1000);
    CHECK(l->device_index(uuid, 2000, 5000, "gpu", &in_force) == d);
    CHECK(in_force == 1000);  // registered already: this process's wish does not replace it
}
