#include "tools/report/whatif/replay.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace gg::whatif {

uint64_t spare_needed(uint64_t budget) { return std::max<uint64_t>(uint64_t(64) << 20, budget / 50); }

using report::Report;
using report::TensorEvent;
using report::TensorView;

namespace {

// PyTorch's reserved and the model's agree when within one small segment of each other.
constexpr uint64_t kAgreement = 2 * kMiB;
// The unit of every segment and page: limits are searched in it.
constexpr uint64_t kLimitStep = 2 * kMiB;

uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
uint64_t sub_sat(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

bool block_event(const TensorEvent &e) {
    return e.action == TensorEvent::kAlloc || e.action == TensorEvent::kFree || e.action == TensorEvent::kOom;
}

size_t block_events(const TensorView &t) {
    size_t n = 0;
    for (const TensorEvent &e : t.events) n += e.device == t.device && block_event(e);
    return n;
}

}  // namespace

std::string describe(const Config &c) {
    std::string s;
    if (c.expandable) s = "expandable_segments:True";
    if (c.max_split_size != kNoMaxSplit)
        s += (s.empty() ? "" : ",") + std::string("max_split_size_mb:") + std::to_string(c.max_split_size >> 20);
    return s.empty() ? "defaults" : s;
}

std::string cannot_replay(const Report &r) {
    if (!r.tensor)
        return "has no tensor view (the process did not load PyTorch's CUDA library, or the shim that wrote it "
               "predates the tensor view): nothing to replay";
    if (!r.tensor->from_blocks())
        return "has no blocks of PyTorch's caching allocator (tensor_view.source is \"" + r.tensor->source +
               "\": the cudaMallocAsync backend, or a PyTorch without the report call): nothing to replay";
    if (block_events(*r.tensor) == 0)
        return "has no block events to replay (tensor_view.events holds none; GPUGUARD_TENSOR_EVENTS=0 keeps none)";
    return "";
}

namespace {

// A segment size c10 makes without expandable segments: a small-pool 2 MiB, or a large-pool 10 MiB or more.
bool c10_segment_size(uint64_t bytes) {
    return bytes % kMinBlockSize == 0 && (bytes == kSmallBuffer || (bytes >= kMinLargeAlloc && bytes <= kMaxRequest));
}

// PyTorch's reserved bytes when the events from `first_event` start: after the first of them.
uint64_t reserved_at(const TensorView &t, size_t first_event) {
    for (size_t i = first_event; i < t.events.size(); i++)
        if (t.events[i].device == t.device) return t.events[i].reserved;
    return 0;
}

// The most pages a range holds: what PyTorch's reserved bytes hold, and 2^16, more than any device
// has (128 GiB of 2 MiB pages, 1.25 TiB of 20 MiB ones). What a crafted report claims beyond that, a
// block of 2^60 bytes, would be more pages than could be counted (the report fuzzer's timeout), and
// each replay adopts every page again (the what-if fuzzer's: 2^20 pages a range, 100 s).
uint64_t most_pages(uint64_t page, uint64_t reserved) {
    return std::min<uint64_t>(reserved / page + 1, uint64_t(1) << 16);
}
// How many pages infer_ranges walks over in all, blocks and seeds together (most_pages() a block):
// a real report's blocks lie in a few pages each, but a crafted one's can each claim the most, event
// after event. 2^18: four pages for each of the 65,536 events the shim keeps by default. Past it no more
// pages are taken as mapped (those mapped at the report's end still are).
constexpr uint64_t kMostPagesWalked = uint64_t(1) << 18;

// The pages, by index from `base`, that a block of `bytes` at `address` lies in: [first, last], at
// most most_pages().
std::pair<uint64_t, uint64_t> pages_of(uint64_t address, uint64_t bytes, uint64_t base, uint64_t page,
                                       uint64_t reserved) {
    const uint64_t first = (address - base) / page, last = (address + bytes - 1 - base) / page;
    const uint64_t most = most_pages(page, reserved);
    return {first, last - first < most ? last : first + most - 1};
}

// Trace::cache, from the segments live at the report's end walked back over the segment events to the
// first event replayed, PyTorch's reserved bytes then, and the blocks the events hand out.
void infer_cache(const TensorView &t, size_t first_event, Trace &tr) {
    std::map<uint64_t, uint64_t> live;  // the process's device memory when the events start
    for (const report::TensorSegment &s : t.segments) live[s.address] = s.bytes;
    std::unordered_set<uint64_t> by_cuda_malloc;
    for (const report::TensorSegment &s : t.segments)
        if (s.api == "cudaMalloc") by_cuda_malloc.insert(s.address);
    for (size_t i = t.events.size(); i-- > first_event;) {
        const TensorEvent &e = t.events[i];
        if (e.device != t.device) continue;
        if (e.action == TensorEvent::kSegmentAlloc) live.erase(e.address);
        else if (e.action == TensorEvent::kSegmentFree && e.address) live[e.address] = e.bytes;
    }
    auto holding = [&live](uint64_t address) {  // the segment holding an address, or live.end()
        auto it = live.upper_bound(address);
        if (it == live.begin()) return live.end();
        --it;
        return address - it->first < it->second ? it : live.end();
    };
    // PyTorch's: a segment a block lies in, live before the events or handed out before the segment goes.
    std::set<uint64_t> pytorch, given_back;
    std::vector<uint64_t> given_back_in_order;
    for (const auto &[address, bytes] : tr.seeds)
        if (auto it = holding(address); it != live.end()) pytorch.insert(it->first);
    for (size_t i = first_event; i < t.events.size(); i++) {
        const TensorEvent &e = t.events[i];
        if (e.device != t.device) continue;
        if (e.action == TensorEvent::kAlloc) {
            if (auto it = holding(e.address); it != live.end() && !given_back.count(it->first))
                pytorch.insert(it->first);
        } else if (e.action == TensorEvent::kSegmentFree && live.count(e.address) &&
                   given_back.insert(e.address).second) {
            given_back_in_order.push_back(e.address);
        }
    }
    uint64_t reserved = reserved_at(t, first_event), accounted = 0;
    for (uint64_t address : pytorch) accounted = add_sat(accounted, live[address]);
    // The rest of the reserved bytes: cached segments no block touched, given back in the events first
    // (c10 gives back whole free segments when the driver refuses one), then those got with cudaMalloc.
    std::vector<uint64_t> candidates = given_back_in_order;
    for (const auto &[address, bytes] : live)
        if (!given_back.count(address) && by_cuda_malloc.count(address)) candidates.push_back(address);
    for (uint64_t address : candidates) {
        const uint64_t bytes = live[address];
        if (accounted >= reserved) break;
        if (pytorch.count(address) || !c10_segment_size(bytes) || bytes > reserved - accounted) continue;
        pytorch.insert(address);
        accounted += bytes;
        tr.cache_free++;
    }
    tr.cache_unknown = sub_sat(reserved, accounted);
    for (uint64_t address : pytorch)
        if (c10_segment_size(live[address])) tr.cache.emplace_back(address, live[address]);
}

// Trace::ranges, with expandable segments. The segment events name no page, so the pages mapped when
// the events start are inferred: every page holding a seed (c10 never unmaps a page holding a live
// block), then those the events show mapped already (below), then those mapped at the report's end
// (tensor_view.mappings), lowest first (c10 maps the lowest free space first), until PyTorch's reserved
// bytes then are made up. A range starts at the lowest of its pages, seeds and blocks handed out.
void infer_ranges(const TensorView &t, size_t first_event, Trace &tr) {
    uint64_t reserved = reserved_at(t, first_event), accounted = 0, walked = 0;
    for (bool small : {true, false}) {
        const uint64_t page = small ? kSmallBuffer : kLargeBuffer;
        auto ours = [small](uint64_t block_bytes) { return (block_bytes <= kSmallSize) == small; };
        Trace::Range r;
        r.small = small;
        r.base = UINT64_MAX;
        for (const auto &[address, bytes] : t.mappings)
            if (bytes == page) r.base = std::min(r.base, address);
        uint64_t lowest_seed = UINT64_MAX;  // the lowest block of the pool, live then or handed out after
        for (const auto &[address, bytes] : tr.seeds)
            if (ours(bytes)) lowest_seed = std::min(lowest_seed, address);
        for (const Trace::Op &op : tr.ops)
            if (op.action == 'a' && ours(op.bytes)) lowest_seed = std::min(lowest_seed, op.address);
        if (r.base == UINT64_MAX && lowest_seed == UINT64_MAX) continue;
        if (r.base == UINT64_MAX) r.base = lowest_seed / page * page;
        if (lowest_seed < r.base) r.base -= (r.base - lowest_seed + page - 1) / page * page;
        std::set<uint64_t> pages;  // by index from the base, no more than PyTorch's reserved bytes hold
        const uint64_t most = most_pages(page, reserved);
        for (const auto &[address, bytes] : tr.seeds)
            if (ours(bytes))
                for (auto [p, last] = pages_of(address, bytes, r.base, page, reserved);
                     p <= last && pages.size() < most && walked < kMostPagesWalked; p++, walked++)
                    pages.insert(p);
        accounted = add_sat(accounted, pages.size() * page);
        tr.ranges.push_back(r);
        for (uint64_t p : pages) tr.ranges.back().mapped.emplace_back(r.base + p * page, page);
    }
    // Candidates, most certain first: the pages a block handed out in the events lies in, when no page
    // was mapped for it right before (they were mapped then) and none of them was mapped for an earlier
    // block (so they were mapped before the events); then those mapped at the end.
    std::vector<std::pair<uint64_t, uint64_t>> candidates, mapped_at_end(t.mappings.begin(), t.mappings.end());
    std::set<std::pair<uint64_t, uint64_t>> mapped_in_events;
    bool after_map = false;
    for (size_t i = first_event; i < t.events.size(); i++) {
        const TensorEvent &e = t.events[i];
        if (e.device != t.device) continue;
        if (e.action == TensorEvent::kSegmentAlloc) after_map = true;
        if (e.action != TensorEvent::kAlloc) continue;
        const uint64_t page = e.bytes <= kSmallSize ? kSmallBuffer : kLargeBuffer;
        for (const Trace::Range &r : tr.ranges) {
            if ((page == kSmallBuffer) != r.small || e.address < r.base || !e.bytes) continue;
            for (auto [p, last] = pages_of(e.address, e.bytes, r.base, page, reserved);
                 p <= last && walked < kMostPagesWalked; p++, walked++) {
                auto at = std::make_pair(r.base + p * page, page);
                if (after_map) mapped_in_events.insert(at);
                else if (!mapped_in_events.count(at)) candidates.push_back(at);
            }
        }
        after_map = false;
    }
    std::sort(mapped_at_end.begin(), mapped_at_end.end());
    candidates.insert(candidates.end(), mapped_at_end.begin(), mapped_at_end.end());
    // Each range's pages as a set while candidates join it, written back in order after (one sort a
    // page added was quadratic in a crafted report's pages).
    std::vector<std::set<std::pair<uint64_t, uint64_t>>> have;
    for (const Trace::Range &r : tr.ranges) have.emplace_back(r.mapped.begin(), r.mapped.end());
    for (const auto &[address, bytes] : candidates) {
        for (size_t ri = 0; ri < tr.ranges.size(); ri++) {
            Trace::Range &r = tr.ranges[ri];
            const uint64_t page = r.small ? kSmallBuffer : kLargeBuffer;
            if (bytes != page || address < r.base || (address - r.base) % page || accounted >= reserved ||
                bytes > reserved - accounted || have[ri].size() >= most_pages(page, reserved))
                continue;
            if (!have[ri].emplace(address, bytes).second) continue;
            accounted += bytes;
            tr.pages_inferred++;
        }
    }
    for (size_t ri = 0; ri < tr.ranges.size(); ri++) tr.ranges[ri].mapped.assign(have[ri].begin(), have[ri].end());
    tr.cache_unknown = sub_sat(reserved, accounted);
}

// Trace::empty_cache_before and given_back_before. c10 gives segments back (`s`) on a refused
// cudaMalloc, then gets one (`S`) or refuses the request (`o`) right after, or on empty_cache(). A run
// of `s` that gives back a segment of PyTorch's (a block lay in it) is empty_cache() when no `o`
// follows it, nor an `S` that would not have fitted the budget with what PyTorch reserved before (so
// nothing was refused); with such an `S` after it, it is either (given_back_before).
void find_empty_cache(const Report &r, size_t first_event, const std::vector<size_t> &op_event, Trace &tr) {
    const TensorView &t = *r.tensor;
    std::optional<Budget> budget = budget_of(r);
    std::set<uint64_t> pytorch;  // segments of PyTorch's: those live when the events start, those a block is put in
    for (const auto &[address, bytes] : tr.cache) pytorch.insert(address);
    std::vector<size_t> runs, retries;  // event indices where a run of give-backs ends
    const TensorEvent *got = nullptr;   // the last segment got, until the next block event
    for (size_t i = 0; i < t.events.size(); i++) {
        const TensorEvent &e = t.events[i];
        if (e.device != t.device) continue;
        if (block_event(e)) {  // c10 hands out a block of a segment it got right after getting it
            if (got && e.action == TensorEvent::kAlloc && e.address - got->address < got->bytes)
                pytorch.insert(got->address);
            got = nullptr;
        }
        if (e.action == TensorEvent::kSegmentAlloc) got = &e;
        if (e.action != TensorEvent::kSegmentFree || i < first_event) continue;
        bool ours = false;
        size_t end = i;
        for (; end < t.events.size(); end++) {
            const TensorEvent &x = t.events[end];
            if (x.device != t.device) continue;
            if (x.action != TensorEvent::kSegmentFree) break;
            ours |= pytorch.count(x.address) > 0;
        }
        const TensorEvent *next = end < t.events.size() ? &t.events[end] : nullptr;
        bool refused = next && next->action == TensorEvent::kOom;
        bool retry = next && next->action == TensorEvent::kSegmentAlloc &&
                     (!budget || add_sat(e.reserved, next->bytes) > budget->bytes);
        if (ours && !refused) (retry ? retries : runs).push_back(end);
        i = end - 1;
    }
    // Each run, before the first op at or after where it ends.
    auto before_ops = [&](const std::vector<size_t> &at, std::vector<size_t> &out) {
        for (size_t event : at) {
            size_t op = std::lower_bound(op_event.begin(), op_event.end(), event) - op_event.begin();
            if (op < tr.ops.size() && (out.empty() || out.back() != op)) out.push_back(op);
        }
    };
    before_ops(runs, tr.empty_cache_before);
    if (t.max_split_size() == kNoMaxSplit) before_ops(retries, tr.given_back_before);
    if (budget) tr.given_back_budget = budget->bytes;
}

// The segments the replay starts from, and what of them was inferred.
std::string start_segments(const Trace &tr) {
    std::string s = "the " + std::to_string(tr.cache.size()) +
                    " segments PyTorch held then (worked out from the report's segments and the segment events";
    if (tr.cache_free)
        s +=
            "; " + std::to_string(tr.cache_free) + " of them, holding no block, inferred from PyTorch's reserved bytes";
    s += ")";
    if (tr.cache_unknown)
        s += "; " + report::human_bytes(tr.cache_unknown) +
             " of PyTorch's reserved bytes then lie in no segment the report names";
    return s;
}

// Trace::range_bytes: 9/8 of the device memory c10 is told of, the limit when the shim has one smaller.
uint64_t expandable_range_bytes(const Report &r) {
    uint64_t device_memory = r.device_total.value_or(0);
    if (r.limit_bytes && (!device_memory || *r.limit_bytes < device_memory)) device_memory = *r.limit_bytes;
    return add_sat(device_memory, device_memory / 8);
}

// The pages the expandable replay starts from, and what of them was inferred.
std::string start_pages(const Trace &tr) {
    size_t pages = 0;
    for (const Trace::Range &r : tr.ranges) pages += r.mapped.size();
    std::string s = "the " + std::to_string(pages) + " pages PyTorch had mapped then (" +
                    std::to_string(pages - tr.pages_inferred) + " holding them; " + std::to_string(tr.pages_inferred) +
                    " inferred, up to PyTorch's reserved bytes then, from the blocks the events put in pages "
                    "already mapped and the pages mapped at the report's end; each segment's address range taken "
                    "as 9/8 of the device memory the process was told of)";
    if (tr.cache_unknown)
        s += "; " + report::human_bytes(tr.cache_unknown) + " of PyTorch's reserved bytes then lie in no page inferred";
    return s;
}

// Where the replay places the blocks live before the events, for a caveat.
std::string placement(const Trace &tr) {
    if (!tr.ranges.empty())
        return "are placed where they were in " + start_pages(tr) +
               "; expandable segments start from them, other settings with them packed in address order";
    if (tr.cache.empty()) return "are placed in address order, and the cache PyTorch held then is unknown";
    return "are placed where they were in " + start_segments(tr) +
           "; every setting starts from them, but expandable segments, which would have placed them otherwise, "
           "start with them packed in address order";
}

}  // namespace

Trace trace_of(const Report &r) {
    Trace tr;
    const TensorView &t = *r.tensor;
    size_t total = block_events(t), skip = total > kMaxReplayEvents ? total - kMaxReplayEvents : 0;
    tr.dropped = add_sat(t.events_dropped, skip);
    size_t first_event = t.events.size();  // the first event replayed, of t.events
    std::vector<size_t> op_event;          // each op's, of t.events
    for (size_t i = 0; i < t.events.size(); i++) {
        const TensorEvent &e = t.events[i];
        if (e.device != t.device || !block_event(e)) continue;
        if (skip) {
            skip--;
            continue;
        }
        first_event = std::min(first_event, i);
        tr.ops.push_back({char(e.action), e.address, e.bytes, e.allocated, e.reserved});
        op_event.push_back(i);
    }

    // The blocks live when the events start: a free with no allocation before it in the events, and a
    // block listed live in the report that no event names.
    std::unordered_map<uint64_t, uint64_t> live;
    std::unordered_set<uint64_t> named;
    std::map<uint64_t, uint64_t> seeds;
    size_t from_frees = 0, from_list = 0;
    for (const Trace::Op &op : tr.ops) {
        if (op.action == 'a') {
            live[op.address] = op.bytes;
            named.insert(op.address);
        } else if (op.action == 'f') {
            named.insert(op.address);
            if (!live.erase(op.address) && seeds.emplace(op.address, op.bytes).second) from_frees++;
        }
    }
    for (const report::TensorBlock &b : t.blocks) {
        if (seeds.size() >= kMaxReplayEvents) break;
        if (!named.count(b.address) && seeds.emplace(b.address, b.bytes).second) from_list++;
    }
    tr.seeds.assign(seeds.begin(), seeds.end());
    if (!t.expandable_segments() && (tr.dropped > 0 || !tr.seeds.empty())) infer_cache(t, first_event, tr);
    tr.range_bytes = expandable_range_bytes(r);
    if (t.expandable_segments() && (tr.dropped > 0 || !tr.seeds.empty())) infer_ranges(t, first_event, tr);
    if (!t.expandable_segments()) find_empty_cache(r, first_event, op_event, tr);

    if (tr.dropped > 0) {
        tr.approximate = true;
        tr.caveats.push_back(
            "the report kept the last " + std::to_string(tr.ops.size()) + " block events of " +
            std::to_string(add_sat(tr.ops.size(), tr.dropped)) + "; " +
            (tr.seeds.empty() && !tr.cache.empty()
                 ? "no block was live before them; every setting without expandable segments starts "
                   "from " +
                       start_segments(tr)
                 : "the " + std::to_string(tr.seeds.size()) + " blocks live before them " + placement(tr)));
        if (from_list && t.block_count > t.blocks.size())
            tr.caveats.push_back("the report lists " + std::to_string(t.blocks.size()) + " of " +
                                 std::to_string(t.block_count) + " live blocks (the largest)");
    } else if (!tr.seeds.empty()) {
        tr.approximate = true;
        tr.caveats.push_back(std::to_string(from_frees + from_list) +
                             " blocks are freed or listed live without an allocation in the events; they are taken "
                             "as live from the start" +
                             (tr.cache.empty() ? std::string() : " and " + placement(tr)));
    }

    if (!tr.empty_cache_before.empty()) {
        tr.approximate = true;
        tr.caveats.push_back("PyTorch gave back its cached segments " + std::to_string(tr.empty_cache_before.size()) +
                             " times with no request refused (torch.cuda.empty_cache(), from the segment events): "
                             "the model does too, there");
    }

    bool refusal_in_events = false;
    for (const Trace::Op &op : tr.ops) refusal_in_events |= op.action == 'o';
    if (!refusal_in_events) {
        if (t.oom && t.oom->requested > 0) tr.final_request = t.oom->requested;
        else if (r.failed && r.failed->bytes && *r.failed->bytes > 0) tr.final_request = *r.failed->bytes;
    }
    return tr;
}

namespace {

// The model starts from the segments PyTorch held (Trace::cache), the seeds at their places in them:
// those holding seeds first, then the free ones, each in address order, the limit refusing what passes
// it (c10 under a smaller limit would have given them back). Every choice goes through the model's
// limit, so the limit search's ranges (smallest_limit) hold from the start too.
void adopt_cache(const Trace &trace, CachingAllocatorModel &m, std::unordered_map<uint64_t, uint64_t> &model_address) {
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> held(trace.cache.size());  // seeds by offset
    auto seed = trace.seeds.begin();
    for (size_t i = 0; i < trace.cache.size(); i++) {
        const auto [address, bytes] = trace.cache[i];
        seed = std::lower_bound(seed, trace.seeds.end(), std::make_pair(address, uint64_t(0)));
        for (; seed != trace.seeds.end() && seed->first - address < bytes; ++seed)
            held[i].emplace_back(seed->first - address, seed->second);
    }
    std::vector<bool> placed;
    for (bool holding : {true, false}) {
        for (size_t i = 0; i < trace.cache.size(); i++) {
            if (held[i].empty() == holding) continue;
            const uint64_t base = m.adopt_segment(trace.cache[i].second, held[i], &placed);
            for (size_t j = 0; base && j < held[i].size(); j++)
                if (placed[j]) model_address[trace.cache[i].first + held[i][j].first] = base + held[i][j].first;
        }
    }
}

// The same with expandable segments: the ranges PyTorch held (Trace::ranges), the seeds at their places.
void adopt_ranges(const Trace &trace, CachingAllocatorModel &m, std::unordered_map<uint64_t, uint64_t> &model_address) {
    for (const Trace::Range &r : trace.ranges) {
        std::vector<std::pair<uint64_t, uint64_t>> mapped, held;  // by offset
        for (const auto &[address, bytes] : r.mapped) mapped.emplace_back(address - r.base, bytes);
        for (const auto &[address, bytes] : trace.seeds)
            if ((bytes <= kSmallSize) == r.small && address >= r.base) held.emplace_back(address - r.base, bytes);
        std::vector<bool> placed;
        const uint64_t base = m.adopt_range(r.small, mapped, held, &placed);
        for (size_t j = 0; base && j < held.size(); j++)
            if (placed[j]) model_address[r.base + held[j].first] = base + held[j].first;
    }
}

}  // namespace

Replay replay(const Trace &trace, const Config &config, uint64_t limit, bool stop) {
    Options o;
    o.expandable = config.expandable;
    o.max_split_size = config.max_split_size;
    o.limit = limit;
    if (trace.range_bytes) o.range_bytes = trace.range_bytes;
    CachingAllocatorModel m(o);
    Replay out;
    auto ended = [&]() {
        out.peak_allocated = m.peak_allocated();
        out.peak_reserved = m.peak_reserved();
        out.smallest_refused = m.smallest_refused_by_limit();
        return out;
    };
    auto failed = [&](size_t at, uint64_t bytes, bool refusal) {
        if (!out.ok) return;
        out.ok = false;
        out.failed_at = at;
        out.failed_bytes = bytes;
        out.failed_at_refusal = refusal;
        out.failed_allocated = m.allocated();
        out.failed_reserved = m.reserved();
    };
    // A request PyTorch refused: served by the model, it is given back at once (the program went on
    // without it).
    auto refused_request = [&](size_t at, uint64_t bytes) {
        out.refusals++;
        uint64_t x = m.malloc(bytes);
        out.last_refusal_refused = x == 0;
        if (x) {
            m.free(x);
        } else {
            out.refused_too++;
            failed(at, bytes, true);
        }
    };

    std::unordered_map<uint64_t, uint64_t> model_address;  // recorded address -> the model's
    model_address.reserve(trace.seeds.size() + trace.ops.size() / 2 + 1);
    if (!config.expandable) adopt_cache(trace, m, model_address);
    else adopt_ranges(trace, m, model_address);
    for (const auto &[address, bytes] : trace.seeds) {
        if (model_address.count(address)) continue;  // placed in its segment
        uint64_t x = m.malloc(bytes);
        if (x) {
            model_address[address] = x;
            continue;
        }
        out.blocks_not_served++;
        failed(kAtSeeds, bytes, false);
        if (stop) return ended();
    }
    auto empty_cache = trace.empty_cache_before.begin(), given_back = trace.given_back_before.begin();
    const bool as_recorded =
        !config.expandable && config.max_split_size == kNoMaxSplit && limit == trace.given_back_budget;
    for (size_t i = 0; i < trace.ops.size(); i++) {
        const Trace::Op &op = trace.ops[i];
        for (; empty_cache != trace.empty_cache_before.end() && *empty_cache <= i; ++empty_cache) m.empty_cache();
        for (; given_back != trace.given_back_before.end() && *given_back <= i; ++given_back)
            if (as_recorded) m.empty_cache();
        if (op.action == 'a') {
            auto it = model_address.find(op.address);
            if (it != model_address.end()) {  // handed out twice without a free between: the free was lost
                m.free(it->second);
                model_address.erase(it);
            }
            uint64_t x = m.malloc(op.bytes);
            if (x) {
                model_address[op.address] = x;
            } else {
                out.blocks_not_served++;
                failed(i, op.bytes, false);
            }
        } else if (op.action == 'f') {
            auto it = model_address.find(op.address);
            if (it != model_address.end()) {
                m.free(it->second);
                model_address.erase(it);
            }
        } else {
            refused_request(i, op.bytes);
        }
        uint64_t diff = m.reserved() > op.reserved ? m.reserved() - op.reserved : op.reserved - m.reserved();
        out.compared++;
        out.within += diff <= kAgreement;
        if (diff > kAgreement && !out.first_departure)
            out.first_departure = Departure{i, op.action, op.bytes, m.reserved(), op.reserved};
        out.largest_difference = std::max(out.largest_difference, diff);
        if (stop && !out.ok) return ended();
    }
    if (trace.final_request) refused_request(trace.ops.size(), *trace.final_request);
    return ended();
}

std::optional<uint64_t> smallest_limit(const Trace &trace, const Config &config, uint64_t at_least) {
    // Limits [from, to) known to replay as one did (the model chooses the same under each), and whether
    // that replay served everything: a probe that falls in one needs no replay of its own.
    struct Known {
        uint64_t from, to;
        bool ok;
    };
    std::vector<Known> known;
    auto serves = [&](uint64_t limit) {
        for (const Known &k : known)
            if (k.from <= limit && limit < k.to) return k.ok;
        Replay r = replay(trace, config, limit, true);
        known.push_back({r.peak_reserved, std::max(r.smallest_refused, limit + 1), r.ok});
        return r.ok;
    };
    if (!serves(kNoLimit)) return std::nullopt;  // a request no limit serves
    // Bisection over multiples of the step in [lo, hi], where hi serves everything.
    uint64_t hi = (known[0].from + kLimitStep - 1) / kLimitStep;
    uint64_t lo = std::min(at_least / kLimitStep, hi);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (serves(mid * kLimitStep)) hi = mid;
        else lo = mid + 1;
    }
    return hi * kLimitStep;
}

std::optional<Budget> budget_of(const Report &r) {
    Budget b;
    const TensorView &t = *r.tensor;
    if (r.process_bytes && t.reserved) b.outside = sub_sat(*r.process_bytes, *t.reserved);
    bool per_process = r.limit_scope == "process";
    if (!per_process) {
        if (r.container_bytes && r.process_bytes && *r.container_bytes >= *r.process_bytes) {
            b.others = *r.container_bytes - *r.process_bytes;
        } else {
            for (const report::LedgerProcess &p : r.ledger_processes)
                if (!p.self) b.others = add_sat(b.others, p.bytes);
        }
    }
    uint64_t base = 0;
    if (r.limit_bytes) {
        b.limit = r.limit_bytes;
        b.scope = per_process ? "process" : "container";
        base = *r.limit_bytes;
    } else if (r.device_total) {
        b.device_total = r.device_total;
        b.scope = "device";
        base = *r.device_total;
    } else {
        return std::nullopt;
    }
    b.bytes = sub_sat(sub_sat(base, b.others), b.outside);
    return b;
}

namespace {

Outcome outcome_of(const Config &c, const Replay &rep) {
    Outcome o;
    o.config = c;
    o.avoids = rep.ok;
    o.runs_out_earlier = !rep.ok && !rep.failed_at_refusal;
    o.failed_bytes = rep.failed_bytes;
    o.failed_allocated = rep.failed_allocated;
    o.failed_reserved = rep.failed_reserved;
    o.peak_reserved = rep.peak_reserved;
    return o;
}

// The options of PYTORCH_CUDA_ALLOC_CONF that change where c10 puts blocks and that the model does not
// follow (roundup_power2_divisions, garbage_collection_threshold, max_non_split_rounding_mb, and any it
// does not know), comma-separated; "" when none. The rest are the two it follows and those of host
// memory or locking only.
std::string unmodelled_options(const std::string &conf) {
    static const char *const kFollowed[] = {"expandable_segments",
                                            "max_split_size_mb",
                                            "backend",
                                            "release_lock_on_cudamalloc",
                                            "pinned_use_cuda_host_register",
                                            "pinned_num_register_threads",
                                            "pinned_use_background_threads",
                                            "pinned_reserve_segment_size_mb"};
    std::string out, key;
    int depth = 0;  // inside [...]: roundup_power2_divisions:[256:1,>:4] holds commas
    bool in_key = true;
    auto end_option = [&]() {
        key.erase(0, key.find_first_not_of(' '));
        key.erase(key.find_last_not_of(' ') + 1);
        bool followed = key.empty();
        for (const char *k : kFollowed) followed |= key == k;
        if (!followed) out += (out.empty() ? "" : ", ") + key;
        key.clear();
        in_key = true;
    };
    for (char c : conf) {
        if (c == '[') depth++;
        else if (c == ']' && depth > 0) depth--;
        if (c == ',' && depth == 0) end_option();
        else if (c == ':' && depth == 0) in_key = false;
        else if (in_key) key += c;
    }
    end_option();
    return out;
}

// a: whether the model follows PyTorch on this run, from the replay of the settings it ran with under
// the budget (`budget`: there is one).
WhatIf::Check check_of(const Replay &rec, bool budget) {
    WhatIf::Check c;
    c.compared = rec.compared;
    c.within = rec.within;
    c.largest_difference = rec.largest_difference;
    c.first_departure = rec.first_departure;
    if (budget && rec.refusals > 0) c.reproduces_oom = rec.blocks_not_served == 0 && rec.last_refusal_refused;
    bool agrees = c.compared > 0 && c.within * 10 >= c.compared * 9;
    bool runs_out_earlier = budget && rec.blocks_not_served > 0;
    c.trusted = agrees && !runs_out_earlier && c.reproduces_oom != false;
    if (!agrees) {
        c.why = "the model's reserved bytes stray more than 2 MiB from PyTorch's at over a tenth of the events";
    } else if (runs_out_earlier) {
        c.why = "under this budget the model runs out before PyTorch did (the budget or the model is off)";
    } else if (c.reproduces_oom == false) {
        c.why = "under this budget the model serves the request PyTorch refused (the budget or the model is off)";
    } else if (c.reproduces_oom == true) {
        c.why = "it follows PyTorch's reserved bytes and refuses the same request under the same budget";
    } else {
        c.why = "it follows PyTorch's reserved bytes";
    }
    return c;
}

}  // namespace

bool summary_replays(const Report &r) { return r.tensor->events.size() <= report_limits::kMaxEventRows; }

WhatIf what_if(const Report &r, Answers answers) {
    if (answers == Answers::kVerdictOfFailure) answers = Answers::kVerdict;
    WhatIf w;
    w.report = r.name;
    const TensorView &t = *r.tensor;
    w.allocator_conf = t.allocator_conf;
    w.recorded.expandable = t.expandable_segments();
    w.recorded.max_split_size = t.max_split_size();
    w.budget = budget_of(r);
    if (answers == Answers::kVerdict && !summary_replays(r)) {
        w.reach = WhatIf::Reach::kNothing;
        w.unanswered = "the report lists " + std::to_string(t.events.size()) +
                       " event rows, more than the shim writes (" + std::to_string(report_limits::kMaxEventRows) +
                       "; an edited report?): the summary replays none; `gpuguard report --what-if` replays them";
        return w;
    }
    Trace tr = trace_of(r);
    w.events = tr.ops.size();
    w.seeded = tr.seeds.size();
    w.dropped = tr.dropped;
    w.approximate = tr.approximate;
    w.caveats = tr.caveats;
    if (std::string options = unmodelled_options(t.allocator_conf); !options.empty()) {
        w.approximate = true;
        w.caveats.push_back("PYTORCH_CUDA_ALLOC_CONF sets " + options +
                            ", which the model does not follow (it replays c10's defaults there)");
    }
    const uint64_t limit = w.budget ? w.budget->bytes : kNoLimit;

    // c: PyTorch's own allocated peak, the refused request on top of what it held then.
    uint64_t last_allocated = 0;
    for (const Trace::Op &op : tr.ops) {
        w.needed = std::max(w.needed, op.action == 'o' ? add_sat(op.allocated, op.bytes) : op.allocated);
        if (op.action == 'o') w.refused_request = op.bytes;
        last_allocated = op.allocated;
    }
    if (tr.final_request) {
        w.refused_request = tr.final_request;
        uint64_t held = t.oom && t.oom->requested == *tr.final_request ? t.oom->allocated : last_allocated;
        w.needed = std::max(w.needed, add_sat(held, *tr.final_request));
    }

    // a: the settings PyTorch ran with, under the same budget.
    Replay rec = replay(tr, w.recorded, limit, false);
    w.check = check_of(rec, w.budget.has_value());
    if (answers == Answers::kVerdict && (!w.check.trusted || !w.budget)) {  // verdict() would say nothing
        w.reach = WhatIf::Reach::kCheck;
        w.unanswered = std::string("the summary stopped after the model check (") +
                       (w.check.trusted ? "no budget" : "the model does not follow this run") +
                       "): `gpuguard report --what-if` gives every answer";
        return w;
    }

    Config expandable = w.recorded;
    expandable.expandable = true;
    if (answers == Answers::kAll) {
        w.smallest_configured = smallest_limit(tr, w.recorded, w.needed);
        // Recorded with expandable segments, the two searches are one question: asked once.
        w.smallest_expandable =
            w.recorded.expandable ? w.smallest_configured : smallest_limit(tr, expandable, w.needed);
    } else {
        // The searches are half the replays or more (one replay a probe), and the verdict's other
        // answers need 8 in all: the summary's replays stay within 8 of at most kMaxEventRows events.
        w.reach = WhatIf::Reach::kVerdict;
        w.unanswered = "the summary does not search for the smallest budget: `gpuguard report --what-if` does";
    }

    if (w.budget) {
        // b and d: other settings under the same budget.
        w.expandable = w.recorded.expandable ? outcome_of(expandable, rec)
                                             : outcome_of(expandable, replay(tr, expandable, limit, true));
        for (uint64_t mb : kSplitSizesMb) {
            Config split = w.recorded;
            split.max_split_size = mb << 20;
            w.max_split.push_back(outcome_of(split, replay(tr, split, limit, true)));
        }
    }
    return w;
}

}  // namespace gg::whatif
