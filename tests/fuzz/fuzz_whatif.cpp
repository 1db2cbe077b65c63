// Fuzz target: the model of PyTorch's caching allocator and the what-if replay
// (tools/report/whatif/). The replay runs on event histories from report files, which anyone can edit
// and which a shim of another version may write: any sequence of events (frees of blocks never handed
// out, blocks handed out twice, sizes of 0 or 2^64 - 1, totals that contradict the events, refusals of
// requests that fit) must give an answer, never a crash, a hang or undefined behaviour. And the model
// must keep its own structure whatever it is asked: after every operation its blocks tile their
// segments, free neighbours are merged, the totals add up and reserved never passes the limit.
//
// Input: a header byte of settings, two bytes choosing max_split_size and the limit, then 4 bytes per
// operation (at most kMaxOps of them, which bounds the work of one input): kind, size (from a table of
// c10's boundaries, or assorted), the slot of the block (a recorded address), a byte for the totals.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_require.h"
#include "tools/report/whatif/allocator_model.h"
#include "tools/report/whatif/replay.h"

using namespace gg::whatif;
using gg::report::Report;
using gg::report::TensorEvent;

namespace {

constexpr size_t kMaxOps = 512;
constexpr uint64_t MiB = kMiB;

const uint64_t kSizes[] = {0,           1,
                           511,         512,
                           513,         4096,
                           MiB - 512,   MiB,
                           MiB + 1,     2 * MiB,
                           4 * MiB,     10 * MiB - 512,
                           10 * MiB,    10 * MiB + 1,
                           20 * MiB,    21 * MiB,
                           64 * MiB,    100 * MiB,
                           600 * MiB,   1ull << 30,
                           kMaxRequest, kMaxRequest + 1,
                           UINT64_MAX};
const uint64_t kSplits[] = {21 * MiB, 32 * MiB, 64 * MiB, 128 * MiB, 1ull << 30, 0, kMaxRequest, UINT64_MAX - 1};
const uint64_t kLimits[] = {0, 2 * MiB, 20 * MiB, 64 * MiB, 200 * MiB, 2048 * MiB, 1ull << 40, UINT64_MAX};

struct Op {
    uint8_t kind;  // 0-2 a block, 3-4 a free, 5 a refusal, 6 a segment event, 7 empty_cache
    uint64_t bytes;
    uint8_t slot;
    uint8_t noise;
};

uint64_t size_of(uint8_t a, uint8_t b) {
    constexpr size_t n = sizeof kSizes / sizeof *kSizes;
    if (a < 0xC0) return kSizes[a % n];
    return (uint64_t(b) + 1) * 512 * (a - 0xBF);  // 512 B to 8 MiB, unaligned to c10's boundaries
}

void require_consistent(const CachingAllocatorModel &m) {
    std::string why;
    bool ok = m.consistent(&why);
    if (!ok) fprintf(stderr, "inconsistent model: %s\n", why.c_str());
    FUZZ_REQUIRE(ok);
    FUZZ_REQUIRE(m.allocated() <= m.reserved());
    FUZZ_REQUIRE(m.reserved() <= m.options().limit);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    const uint8_t flags = data[0];
    Options o;
    o.expandable = flags & 1;
    if (flags & 2) o.max_split_size = kSplits[data[1] % (sizeof kSplits / sizeof *kSplits)];
    if (flags & 4) o.limit = kLimits[data[2] % (sizeof kLimits / sizeof *kLimits)];
    if (flags & 8) o.range_bytes = 64 * MiB;  // small ranges: requests that need a range of their own
    std::vector<Op> ops;
    for (size_t i = 3; i + 4 <= size && ops.size() < kMaxOps; i += 4)
        ops.push_back(
            {uint8_t(data[i] % 8), size_of(data[i + 1], data[i + 2]), uint8_t(data[i + 3] % 64), data[i + 3]});

    // The model itself, as the recording: every answer checked, its totals become the events'.
    Report r;
    r.name = "fuzz.json";
    gg::report::TensorView &t = r.tensor.emplace();
    t.source = "c10";
    t.allocator_conf =
        std::string(o.expandable ? "expandable_segments:True," : "") +
        (o.max_split_size != kNoMaxSplit ? "max_split_size_mb:" + std::to_string(o.max_split_size >> 20) : "");
    {
        CachingAllocatorModel m(o);
        std::vector<uint64_t> at(64, 0), bytes(64, 0);  // slot -> the model's address, its block size
        for (const Op &op : ops) {
            TensorEvent e;
            e.address = 0x7f0000000000ull + uint64_t(op.slot) * (1ull << 32);
            e.bytes = op.bytes;
            switch (op.kind) {
                case 0:
                case 1:
                case 2: {
                    uint64_t got = 0, x = m.malloc(op.bytes, &got);
                    e.action = x ? TensorEvent::kAlloc : TensorEvent::kOom;
                    if (x) {
                        FUZZ_REQUIRE(got >= round_size(op.bytes) && m.block_bytes(x) == got);
                        if (at[op.slot]) m.free(at[op.slot]);  // the recording hands the slot out again
                        at[op.slot] = x;
                        bytes[op.slot] = e.bytes = got;
                    }
                    break;
                }
                case 3:
                case 4:
                    e.action = TensorEvent::kFree;
                    if (at[op.slot]) {
                        FUZZ_REQUIRE(m.free(at[op.slot]));
                        e.bytes = bytes[op.slot];
                        at[op.slot] = 0;
                    }  // else a free of a block the events never handed out
                    break;
                case 5: e.action = TensorEvent::kOom; break;
                case 6: e.action = op.noise & 1 ? TensorEvent::kSegmentAlloc : TensorEvent::kSegmentFree; break;
                default:
                    m.empty_cache();
                    require_consistent(m);
                    continue;
            }
            require_consistent(m);
            e.allocated = m.allocated();
            // Sometimes totals that contradict the events, as an edited file may have.
            e.reserved = op.noise >= 0xF0 ? op.bytes : m.reserved();
            e.device = op.noise == 0xEF ? 3 : 0;
            t.events.push_back(e);
        }
        for (int slot = 0; slot < 64; slot++)
            if (at[slot]) t.blocks.push_back({0x7f0000000000ull + uint64_t(slot) * (1ull << 32), bytes[slot], "", {}});
        t.allocated = m.allocated();
        t.reserved = m.reserved();
    }
    t.block_count = t.blocks.size() + (flags & 16 ? 7 : 0);
    if (flags & 32) t.events_dropped = data[1];
    if (flags & 64) t.oom = gg::report::TensorOom{size_of(data[1], data[2]), t.allocated.value_or(0), 0, 0, {}};
    if (o.limit != kNoLimit) r.limit_bytes = o.limit;
    else if (flags & 128) r.device_total = 16ull << 30;
    r.limit_scope = flags & 128 ? "container" : "process";
    r.process_bytes = t.reserved.value_or(0) + (flags & 16 ? 3 * MiB : 0);
    r.container_bytes = *r.process_bytes + data[2] * MiB;

    // The replay and its answers.
    if (!cannot_replay(r).empty()) return 0;
    WhatIf w = what_if(r);
    (void)to_json(w).dump(2);
    std::ostringstream text;
    render_text(w, flags & 1, text);
    FUZZ_REQUIRE(!text.str().empty());
    FUZZ_REQUIRE(w.check.within <= w.check.compared);
    // A smallest limit found is one the replay serves at.
    Trace tr = trace_of(r);
    if (w.smallest_configured) FUZZ_REQUIRE(replay(tr, w.recorded, *w.smallest_configured, true).ok);
    return 0;
}
