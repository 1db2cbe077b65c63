// Fuzz target: the admission's arithmetic (issue 18, defect 1: a request of SIZE_MAX wrapped the sum
// and was admitted, and its rollback took the process's other bytes off the ledger). A private
// ledger with one device and a limit from the input; other processes' slots forged with counts from
// the input (anything a writer of the file can put there); then a script of requests, frees,
// unconditional charges and driver failures. Every answer is checked against a model in 128-bit
// arithmetic, where nothing wraps:
//   - a request is admitted exactly when the exact sum of every slot plus the request is within the
//     limit (without a limit: when this process's own count does not pass UINT64_MAX);
//   - a refused request changes nothing; a rollback or a free takes back exactly what was charged;
//   - container_used() is the exact sum, saturated at UINT64_MAX, never a wrapped value;
//   - the sizes of a pitched allocation and of an array (shim/quota/sizes.h) are the exact products,
//     saturated, never wrapped.
// Input: u64 limit (UINT64_MAX: none), u8 forged slots, each (u16 slot, u64 bytes), then operations:
// u8 kind, u64 size (sizes are drawn from edges often: 0, 1, near the limit, near UINT64_MAX).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/ledger/ledger.h"
#include "fuzz_require.h"
#include "shim/quota/sizes.h"

using namespace gg::ledger;
using u128 = unsigned __int128;

namespace {

struct Reader {
    const uint8_t *p;
    size_t n;
    uint64_t u(int bytes) {
        uint64_t v = 0;
        for (int i = 0; i < bytes; i++) {
            v = v << 8 | (n ? *p : 0);
            if (n) p++, n--;
        }
        return v;
    }
};

// A size near an edge that matters, or the raw value.
uint64_t edge(uint64_t raw, uint64_t limit, uint64_t held) {
    switch (raw & 7) {
        case 0: return raw >> 3;
        case 1: return UINT64_MAX - (raw >> 3) % 4096;
        case 2: return limit - (raw >> 3) % 4096;
        case 3: return limit - held + (raw >> 3) % 3 - 1;
        case 4: return (raw >> 3) % 4096;
        default: return raw;
    }
}

uint64_t saturated(u128 v) { return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v; }

void check_sizes(uint64_t a, uint64_t b) {
    u128 pitch = ((u128)a + 511) / 512 * 512;
    u128 expect = pitch > UINT64_MAX ? (b ? (u128)UINT64_MAX + 1 : 0) : pitch * b;
    FUZZ_REQUIRE(gg::sizes::pitch_estimate(a, b) == saturated(expect));
    // element, channels, width, height, depth: a zero channel count, height or depth counts as one
    uint64_t f[5] = {a & 15, (b >> 8) & 7, a, b, (a ^ b) & 0xffff};
    if (!f[1]) f[1] = 1;
    if (!f[3]) f[3] = 1;
    if (!f[4]) f[4] = 1;
    u128 product = 1;
    bool over = false;
    for (uint64_t x : f) {
        if (x == 0) {
            product = 0, over = false;
            break;
        }
        if (!over) {
            product *= x;
            if (product > UINT64_MAX) over = true;
        }
    }
    FUZZ_REQUIRE(gg::sizes::array_bytes(a & 15, (b >> 8) & 7, a, b, (a ^ b) & 0xffff) ==
                 (over ? UINT64_MAX : (uint64_t)product));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Reader in{data, size};
    uint64_t limit = in.u(8);
    if (limit == 0) limit = 1;  // the parser never gives a limit of 0
    OpenOptions o;              // no path: a private ledger, this process's slot its first
    std::string error, notice;
    Ledger *l = Ledger::open(o, &error, &notice);
    FUZZ_REQUIRE(l);
    const uint8_t uuid[16] = {'f', 'u', 'z', 'z'};
    int dev = l->device_index(uuid, limit, 0, "fuzz");
    FUZZ_REQUIRE(dev == 0 && l->join());
    FUZZ_REQUIRE(l->limit(dev) == limit);

    // Other processes' counts, forged into the file (slot 0 is ours).
    u128 others = 0;
    int forged = (int)(in.u(1) % 8);
    Header *h = l->header();
    for (int k = 0; k < forged; k++) {
        int slot = 1 + (int)(in.u(2) % (kMaxSlots - 1));
        uint64_t bytes = edge(in.u(8), limit, 0);
        others -= h->slots[slot].bytes[dev].load();
        h->slots[slot].bytes[dev].store(bytes);
        others += bytes;
        if (h->slot_high.load() < (uint32_t)slot + 1) h->slot_high.store((uint32_t)slot + 1);
    }

    u128 own = 0;                // this process's count, as the model keeps it
    std::vector<uint64_t> held;  // what each admitted request charged
    for (int step = 0; step < 64 && in.n; step++) {
        int kind = (int)(in.u(1) % 5);
        uint64_t bytes = edge(in.u(8), limit, saturated(others + own));
        uint64_t used = 0;
        switch (kind) {
            case 0:    // a request, then the driver's answer: success
            case 1: {  // or failure: the rollback
                bool expect = limit == kNoLimit
                                  ? own + bytes <= UINT64_MAX
                                  : bytes <= limit && own + bytes <= UINT64_MAX && others + own + bytes <= limit;
                bool got = l->try_charge(dev, bytes, &used);
                FUZZ_REQUIRE(got == expect);
                if (!got) break;
                FUZZ_REQUIRE(used == saturated(others + own + bytes));
                if (kind == 0) {
                    own += bytes;
                    held.push_back(bytes);
                } else {
                    FUZZ_REQUIRE(l->release(dev, bytes) == bytes);
                }
                break;
            }
            case 2:  // a free
                if (!held.empty()) {
                    size_t i = bytes % held.size();
                    FUZZ_REQUIRE(l->release(dev, held[i]) == held[i]);
                    own -= held[i];
                    held.erase(held.begin() + (long)i);
                }
                break;
            case 3: {  // a charge after admission (a pitch larger than admitted)
                bool expect = own + bytes <= UINT64_MAX;
                FUZZ_REQUIRE(l->charge(dev, bytes) == expect);
                if (expect) {
                    own += bytes;
                    held.push_back(bytes);
                }
                break;
            }
            default: check_sizes(bytes, in.u(8)); break;
        }
        FUZZ_REQUIRE(l->own_bytes(dev) == (uint64_t)own);
        FUZZ_REQUIRE(l->container_used(dev) == saturated(others + own));
    }
    for (uint64_t b : held) FUZZ_REQUIRE(l->release(dev, b) == b);
    FUZZ_REQUIRE(l->own_bytes(dev) == 0);
    delete l;
    return 0;
}
