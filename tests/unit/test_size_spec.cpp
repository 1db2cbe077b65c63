#include <doctest/doctest.h>

#include "common/units/human.h"
#include "common/units/size_spec.h"

using namespace gg;

static uint64_t size_of(const char *s) {
    uint64_t b = 0;
    std::string why;
    REQUIRE_MESSAGE(parse_size(s, &b, &why), s, ": ", why);
    return b;
}

static std::string size_error(const char *s) {
    uint64_t b = 0;
    std::string why;
    CHECK_FALSE_MESSAGE(parse_size(s, &b, &why), s);
    return why;
}

TEST_CASE("sizes are 1024-based whatever the spelling, HAMi-core's included") {
    CHECK(size_of("4096") == 4096);
    CHECK(size_of("8GiB") == 8ull << 30);
    CHECK(size_of("8G") == 8ull << 30);
    CHECK(size_of("8g") == 8ull << 30);
    CHECK(size_of("1024m") == 1ull << 30);
    CHECK(size_of("512MiB") == 512ull << 20);
    CHECK(size_of("64KiB") == 64ull << 10);
    CHECK(size_of("2TiB") == 2ull << 40);
    CHECK(size_of("1.5GiB") == 3ull << 29);
    CHECK(size_of(" 3 GiB ") == 3ull << 30);
}

TEST_CASE("malformed sizes are refused with a reason") {
    CHECK(size_error("lots").find("not a size") != std::string::npos);
    CHECK(size_error("-5G").find("negative") != std::string::npos);
    CHECK(size_error("").find("empty") != std::string::npos);
    CHECK(size_error("5X").find("unknown unit") != std::string::npos);
    // Issue 20: the reason states the one rule, SI spellings included.
    CHECK(size_error("5X").find("1024-based, however spelt: B; K, KiB or KB; M, MiB or MB; G, GiB or GB") !=
          std::string::npos);
    CHECK(size_error("99999999999999999999").find("too large") != std::string::npos);
    CHECK(size_error("17179869184TiB").find("too large") != std::string::npos);
    CHECK(size_error("1.2.3G").find("not a size") != std::string::npos);
}

TEST_CASE("limit specs: default, percentages, per device by ordinal and UUID") {
    LimitSpec s;
    std::string why;
    REQUIRE(parse_limit_spec("2GiB", &s, &why));
    CHECK(s.all.kind == Limit::kBytes);
    CHECK(s.for_device(3, "").resolve(100) == 2ull << 30);

    REQUIRE(parse_limit_spec("50%", &s, &why));
    CHECK(s.for_device(0, "").resolve(1000) == 500);

    REQUIRE(parse_limit_spec("0=8GiB,1=4GiB", &s, &why));
    CHECK(s.for_device(0, "").resolve(0) == 8ull << 30);
    CHECK(s.for_device(1, "").resolve(0) == 4ull << 30);
    CHECK(s.for_device(2, "").kind == Limit::kNone);
    CHECK(s.for_device(2, "").resolve(5) == UINT64_MAX);

    REQUIRE(parse_limit_spec("4GiB,GPU-ab12=1GiB", &s, &why));
    CHECK(s.for_device(0, "GPU-ab12cd34-0000").resolve(0) == 1ull << 30);
    CHECK(s.for_device(0, "GPU-ffff").resolve(0) == 4ull << 30);
}

TEST_CASE("malformed limit specs name what is wrong") {
    LimitSpec s;
    std::string why;
    CHECK_FALSE(parse_limit_spec("lots", &s, &why));
    CHECK_FALSE(parse_limit_spec("0=", &s, &why));
    CHECK(why.find("no limit after '0='") != std::string::npos);
    CHECK_FALSE(parse_limit_spec("-5G", &s, &why));
    CHECK_FALSE(parse_limit_spec("150%", &s, &why));
    CHECK(why.find("percentage") != std::string::npos);
    CHECK_FALSE(parse_limit_spec("0%", &s, &why));
    CHECK_FALSE(parse_limit_spec("0", &s, &why));
    CHECK_FALSE(parse_limit_spec("x=1G", &s, &why));
    CHECK_FALSE(parse_limit_spec("1G,2G", &s, &why));
    CHECK_FALSE(parse_limit_spec("0=1G,0=2G", &s, &why));
    CHECK_FALSE(parse_limit_spec("1G,,0=2G", &s, &why));
}

TEST_CASE("human sizes") {
    CHECK(human_bytes(512) == "512 B");
    CHECK(human_bytes(3ull << 29) == "1.50 GiB");
}

// Issue 18, defects 6 and 7: what the parser accepts is what the ledger stores and every process
// reads back; a selector is a device or it is refused; one that selects nothing is named.
TEST_CASE("limit specs: printable ASCII only, no longer than the ledger holds") {
    LimitSpec s;
    std::string why;
    for (const char *bad : {"1GiB\n", "1GiB,\t0=2GiB", "\r1GiB", "1G\x1b[2J", "1G\x7f", "1G\xc2\x9b", "0=1G,\n1=2G"}) {
        CAPTURE(bad);
        CHECK_FALSE(parse_limit_spec(bad, &s, &why));
        CHECK((why.find("control character") != std::string::npos || why.find("not ASCII") != std::string::npos));
    }
    CHECK(parse_limit_spec("  4GiB , 1 = 2GiB  ", &s, &why));  // spaces around parts are fine
    std::string longest = "1GiB";
    while (longest.size() + 1 + 53 <= kMaxLimitSpecLength)
        longest += ",GPU-" + std::to_string(10000000 + longest.size()) + "-aaaa-bbbb-cccc-dddddddddddd=1GiB";
    CHECK(longest.size() <= kMaxLimitSpecLength);
    CHECK_MESSAGE(parse_limit_spec(longest, &s, &why), why);
    std::string too_long = longest + std::string(kMaxLimitSpecLength + 1 - longest.size(), ' ');
    CHECK_FALSE(parse_limit_spec(too_long, &s, &why));
    CHECK(why.find("more than the 4095 a ledger holds") != std::string::npos);
}

TEST_CASE("limit specs: ordinals are numbers, UUIDs are hex; unmatched entries are named") {
    LimitSpec s;
    std::string why;
    REQUIRE(parse_limit_spec("00=100MiB,GPU-ABcd=1GiB", &s, &why));
    CHECK(s.for_device(0, "GPU-ffff").resolve(0) == 100ull << 20);
    CHECK(s.for_device(1, "GPU-abcd0000").resolve(0) == 1ull << 30);
    CHECK_FALSE(parse_limit_spec("0=1G,000=2G", &s, &why));
    CHECK(why.find("given twice") != std::string::npos);
    for (const char *bad : {"GPU-nonexist=1G", "GPU-=1G", "GPU---=1G", "GPU-12g4=1G"}) {
        CAPTURE(bad);
        CHECK_FALSE(parse_limit_spec(bad, &s, &why));
        CHECK(why.find("is not a device") != std::string::npos);
    }
    REQUIRE(parse_limit_spec("4GiB,0=1GiB,7=2GiB,GPU-dead=3GiB,GPU-66616b65=5GiB", &s, &why));
    std::vector<std::string> uuids = {"GPU-66616b65-ee13-385d-82a7-ccf1163b6000"};
    CHECK(unmatched_entries(s, uuids) == std::vector<std::string>{"7=2.00 GiB", "GPU-dead=3.00 GiB"});
    CHECK(unmatched_entries(s, {}).size() == 4);
}

// Issue 20: "8GB" was taken as GiB without a word; the rule is one (every unit a power of 1024), and a
// spec with an SI spelling gets a note saying how it is read.
TEST_CASE("SI spellings are 1024-based and get a note saying so") {
    CHECK(size_of("8GB") == 8ull << 30);
    CHECK(size_of("1kb") == 1024);
    CHECK(si_spelling_note("8GB") == std::string("8GB is read as 8.00 GiB (8589934592 bytes): ") + kUnitRule);
    CHECK(si_spelling_note("0=8GiB,1=512MB").find("512MB is read as 512.00 MiB (536870912 bytes)") == 0);
    CHECK(si_spelling_note("8GiB") == "");
    CHECK(si_spelling_note("8G") == "");
    CHECK(si_spelling_note("50%") == "");
    CHECK(si_spelling_note("8XB") == "");
}
