// The limit's one path (issue 31): one check of its text for the shim, `gpuguard run` and `gpuguard
// doctor` (common/settings/, check_limit), and the ledger's answer of a device's limit in force.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>

#include "common/ledger/ledger.h"
#include "common/settings/settings.h"

using namespace gg;
using namespace gg::settings;

namespace {

Lookup env_of(const std::map<std::string, std::string> &vars) {
    return [vars](const char *name) -> const char * {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
    };
}

}  // namespace

TEST_CASE("limit check: a valid variable is parsed, with its source and the SI note") {
    CheckedLimit l = check_limit(read_limit(env_of({{"GPUGUARD_MEM_LIMIT", " 8GB,1=50% "}})));
    CHECK(l.ok());
    CHECK(l.setting.text == "8GB,1=50%");
    CHECK(l.setting.source == "GPUGUARD_MEM_LIMIT");
    CHECK(l.spec.all.kind == Limit::kBytes);
    CHECK(l.spec.all.bytes == 8ull << 30);
    REQUIRE(l.spec.per_device.size() == 1);
    CHECK(l.spec.per_device[0].limit.kind == Limit::kPercent);
    CHECK(l.note.find("8GB is read as 8.00 GiB") != std::string::npos);
}

TEST_CASE("limit check: no limit set is no problem and an empty spec") {
    CheckedLimit l = check_limit(read_limit(env_of({})));
    CHECK(l.ok());
    CHECK(l.spec.empty());
    CHECK(l.note.empty());
}

TEST_CASE("limit check: HAMi-core's variables go through the same check, named by their source") {
    CheckedLimit good = check_limit(read_limit(env_of({{"CUDA_DEVICE_MEMORY_LIMIT_1", "2g"}})));
    CHECK(good.ok());
    REQUIRE(good.spec.per_device.size() == 1);
    CHECK(good.spec.per_device[0].key == "1");
    CheckedLimit bad = check_limit(read_limit(env_of({{"CUDA_DEVICE_MEMORY_LIMIT", "lots"}})));
    CHECK(bad.problem.rfind("CUDA_DEVICE_MEMORY_LIMIT=lots is not a valid limit: ", 0) == 0);
}

TEST_CASE("limit check: a malformed limit is named as its origin writes it, in the same words") {
    LimitSpec spec;
    std::string why = limit_problem("12parsecs", &spec);
    REQUIRE(why.rfind("not a valid limit: ", 0) == 0);
    CheckedLimit variable = check_limit(read_limit(env_of({{"GPUGUARD_MEM_LIMIT", "12parsecs"}})));
    CheckedLimit option = check_limit(limit_option("--limit", "12parsecs"));
    CheckedLimit ledger = check_limit(ledger_limit("12parsecs"));
    CHECK(variable.problem == "GPUGUARD_MEM_LIMIT=12parsecs is " + why);
    CHECK(option.problem == "--limit 12parsecs is " + why);
    CHECK(ledger.problem == "the ledger's limit '12parsecs' is " + why);
    for (const CheckedLimit *l : {&variable, &option, &ledger}) {
        CHECK_FALSE(l->ok());
        CHECK(l->spec.empty());  // nothing of a malformed spec is used
        CHECK(l->note.empty());
    }
}

TEST_CASE("limit check: set but empty is a mistake, not no limit; a ledger's empty limit is none") {
    CheckedLimit variable = check_limit(read_limit(env_of({{"GPUGUARD_MEM_LIMIT", " "}})));
    CHECK(variable.problem == "GPUGUARD_MEM_LIMIT is set but empty (unset it for no limit)");
    CheckedLimit option = check_limit(limit_option("--limit", ""));
    CHECK(option.problem == "--limit is empty (leave it out for no limit)");
    CheckedLimit ledger = check_limit(ledger_limit(""));
    CHECK(ledger.ok());
    CHECK(ledger.spec.empty());
}

TEST_CASE("limit check: doctor's variable check uses the same words as the shim's") {
    CHECK(check_limit(ledger_limit("lots")).problem ==
          "the ledger's limit 'lots' is " + problem(Id::kMemLimit, "lots"));
    CHECK(problem(Id::kMemLimit, "4GiB").empty());
}

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
