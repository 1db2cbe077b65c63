// A PyTorch CUDA memory snapshot, the file torch.cuda.memory._dump_snapshot() writes, so that
// pytorch.org/memory_viz (torch/utils/viz/MemoryViz.js) and torch/cuda/_memory_viz.py open our data.
//
// Both read only Python pickles: MemoryViz.js carries its own unpickler (protocol 2 to 4, a subset of
// opcodes) and _memory_viz.py calls pickle.load; neither reads JSON. So this writes a pickle by hand,
// protocol 2, with only opcodes that both know: PROTO, EMPTY_DICT/MARK/SETITEMS, EMPTY_LIST/APPENDS,
// BINUNICODE, BININT1/BININT2/BININT/LONG1, BINFLOAT, NONE, NEWTRUE/NEWFALSE, STOP, and the memo
// (BINPUT/LONG_BINPUT, BINGET/LONG_BINGET) for strings and for the trace entries' frames: each is
// written once and fetched after, since every block repeats its stack's frames (file names, symbols), a
// report lists up to 50,000 blocks and its ring up to 218,453 events. Lists go in batches of 1000 items,
// as Python's pickle writes them (Pickler::item says why).
//
// Mapping, with a tensor view (tensor_view.source "c10": PyTorch reported its blocks): what
// torch.cuda.memory._snapshot() holds. Each segment (a driver allocation; for expandable segments
// each run of adjacent mapped ranges, as PyTorch's snapshot shows them) carries the live blocks that
// lie in it as "active_allocated" and the gaps between them as "inactive" blocks, in address order:
// MemoryViz.js and _memory_viz.segsum derive a block's address from the segment's address plus the
// sizes before it, so the blocks must tile the segment exactly. A driver allocation with no block in
// it whose stack does not pass through the caching allocator (NCCL's, say) is not PyTorch's; it is
// kept as one allocated block with a first frame saying so, rather than shown as free memory.
//
// Without one: each of the report's top_allocations is a segment holding one active block (the shim
// sees driver allocations, which is what PyTorch calls segments). Live bytes of a stack not covered by
// top_allocations become one more segment per stack, at a made-up address above 2^48 (no device
// pointer lives there; below 2^53 so JavaScript numbers keep it exact), whose innermost frame says so.
//
// device_traces, with a tensor view: the report's ring of block events (tensor_view.events) as
// PyTorch's trace entries, oldest first, so that the "Active Memory Timeline" replays the run: alloc,
// free_requested + free_completed, segment_alloc/segment_free, oom. The ring records no stacks; an
// alloc whose block is still live at the report carries that block's frames (a segment_alloc its
// segment's), the others a first frame saying they were freed. Without a ring, one "oom" entry when the
// report is a failure. Frames are Python first, then native, each innermost first (frames_of).
#include "tools/report/render.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gg::report {

namespace {

class Pickler {
public:
    std::string out;
    Pickler() { out += "\x80\x02"; }  // PROTO 2
    void finish() { out += '.'; }     // STOP

    void value(const json &v) {
        switch (v.type()) {
            case json::value_t::null: out += 'N'; break;
            case json::value_t::boolean: out += v.get<bool>() ? '\x88' : '\x89'; break;
            case json::value_t::number_unsigned: uint(v.get<uint64_t>()); break;
            case json::value_t::number_integer: sint(v.get<int64_t>()); break;
            case json::value_t::number_float: real(v.get<double>()); break;
            case json::value_t::string: string(v.get_ref<const std::string &>()); break;
            case json::value_t::array:
                begin_list();
                for (const json &e : v) {
                    item();
                    value(e);
                }
                end_list();
                break;
            case json::value_t::object:
                out += '}';  // EMPTY_DICT
                if (!v.empty()) {
                    out += '(';
                    for (auto it = v.begin(); it != v.end(); ++it) {
                        string(it.key());
                        value(it.value());
                    }
                    out += 'u';  // SETITEMS
                }
                break;
            default: out += 'N'; break;  // binary, discarded: never produced here
        }
    }

    // A value written many times (a stack's frames, in every entry of its block): written once and
    // fetched from the memo after, so that reading gives the same object each time.
    void shared(const json &v) {
        auto it = shared_.find(&v);
        if (it != shared_.end()) return get(it->second);
        value(v);
        if (uint64_t index = put()) shared_.emplace(&v, index - 1);
    }
    // A list written item by item: begin_list(), then item() and a value each, then end_list(). Items
    // go in batches of kBatch, each a MARK ... APPENDS, as Python's pickle writes them: MemoryViz.js
    // appends a batch with push(...items), and one call with hundreds of thousands of arguments
    // overflows a JavaScript engine's stack.
    void begin_list() {
        out += ']';  // EMPTY_LIST
        batch_.push_back(0);
    }
    void item() {
        if (batch_.back() == kBatch) {
            out += 'e';  // APPENDS
            batch_.back() = 0;
        }
        if (batch_.back()++ == 0) out += '(';  // MARK
    }
    void end_list() {
        if (batch_.back()) out += 'e';
        batch_.pop_back();
    }
    // A dict written item by item: begin_dict(), then key() and a value each, then end_dict().
    void begin_dict() { out += "}("; }  // EMPTY_DICT, MARK
    void end_dict() { out += 'u'; }     // SETITEMS
    void key(const std::string &k) { string(k); }
    void number(uint64_t v) { uint(v); }
    void number(int64_t v) { sint(v); }
    void text(const std::string &v) { string(v); }

private:
    void le(uint64_t v, int n) {
        for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
    }
    void uint(uint64_t v) {
        if (v < 0x100) {
            out += 'K';  // BININT1
            le(v, 1);
        } else if (v < 0x10000) {
            out += 'M';  // BININT2
            le(v, 2);
        } else if (v < 0x80000000ull) {
            out += 'J';  // BININT, signed 32-bit
            le(v, 4);
        } else {
            // LONG1: little-endian two's complement, with a zero byte on top if the sign bit is set.
            std::string bytes;
            for (uint64_t x = v; x; x >>= 8) bytes += static_cast<char>(x & 0xff);
            if (static_cast<unsigned char>(bytes.back()) & 0x80) bytes += '\0';
            out += '\x8a';
            out += static_cast<char>(bytes.size());
            out += bytes;
        }
    }
    void sint(int64_t v) {
        if (v >= 0) return uint(static_cast<uint64_t>(v));
        if (v >= INT32_MIN) {
            out += 'J';
            le(static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
            return;
        }
        out += '\x8a';
        out += '\x08';
        le(static_cast<uint64_t>(v), 8);
    }
    void real(double d) {
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        out += 'G';  // BINFLOAT, big-endian
        for (int i = 7; i >= 0; --i) out += static_cast<char>((bits >> (8 * i)) & 0xff);
    }
    void string(const std::string &s) {
        auto it = memo_.find(s);
        if (it != memo_.end()) return get(it->second);
        out += 'X';  // BINUNICODE: 4-byte length, UTF-8
        le(s.size(), 4);
        out += s;
        if (uint64_t index = put()) memo_.emplace(s, index - 1);
    }
    void get(uint64_t index) { indexed('h', 'j', index); }  // BINGET, LONG_BINGET
    // Memoizes the value just written; returns its index + 1, or 0 when the memo is full (LONG_BINPUT's
    // index is 32 bits): the value is then written again each time.
    uint64_t put() {
        if (next_ >= UINT32_MAX) return 0;
        uint64_t index = next_++;
        indexed('q', 'r', index);  // BINPUT, LONG_BINPUT
        return index + 1;
    }
    // A memo opcode with its index: the one-byte form below 256, else the four-byte one.
    void indexed(char short_op, char long_op, uint64_t index) {
        out += index < 0x100 ? short_op : long_op;
        le(index, index < 0x100 ? 1 : 4);
    }
    static constexpr size_t kBatch = 1000;
    std::vector<size_t> batch_;                          // items in the open batch of each open list
    uint64_t next_ = 0;                                  // the next memo index
    std::unordered_map<std::string, uint64_t> memo_;     // strings written, by their memo index
    std::unordered_map<const json *, uint64_t> shared_;  // shared values written, by their memo index
};

// Python frames first, then native ones, each innermost first: memory_viz lists a block's frames in
// order, and PyTorch's own snapshot (stacks="python", the default) holds the program's lines only, so
// the first frames should be the program's, not libc10's. Native frames follow for stacks without
// Python and for what called into the driver.
json frames_of(const Report &r, const std::string &stack_id) {
    json python = json::array(), native = json::array();
    const Stack *s = r.stack(stack_id);
    if (!s) return python;
    for (const Frame &f : s->frames) {
        if (f.python) python.push_back({{"filename", f.file}, {"line", f.line.value_or(0)}, {"name", f.function}});
        else if (!(base_name(f.module).rfind("libgpuguard", 0) == 0))
            native.push_back({{"filename", f.module},
                              {"line", 0},
                              {"name", f.symbol.empty() ? base_name(f.module) + "+" + f.offset : f.symbol}});
    }
    for (json &f : native) python.push_back(std::move(f));
    return python;
}

uint64_t parse_address(const std::string &s) {
    if (s.size() < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return 0;
    return strtoull(s.c_str() + 2, nullptr, 16);
}

json block(uint64_t address, uint64_t size, bool allocated, json frames) {
    // requested_size: the report keeps the size c10 rounded to (what memory_allocated() counts), not
    // the one asked for; an inactive block was asked for by nobody.
    return {{"address", address},
            {"size", size},
            {"requested_size", allocated ? size : 0},
            {"state", allocated ? "active_allocated" : "inactive"},
            {"frames", allocated ? std::move(frames) : json::array()}};
}

// PyTorch's small pool serves requests of at most 1 MiB (kSmallSize) from segments of 2 MiB
// (kSmallBuffer), the large pool larger ones from larger segments. An expandable segment of the small
// pool may have more than 2 MiB mapped, so a segment's live blocks say which pool it is when it has any.
const char *segment_type(uint64_t size, uint64_t largest_block) {
    if (largest_block) return largest_block > (1u << 20) ? "large" : "small";
    return size > (2u << 20) ? "large" : "small";
}

json segment(int device, uint64_t address, uint64_t size, json frames, json blocks, bool expandable = false) {
    uint64_t allocated = 0, largest = 0;
    for (const json &b : blocks)
        if (b["state"] == "active_allocated") {
            allocated += b["size"].get<uint64_t>();
            largest = std::max(largest, b["size"].get<uint64_t>());
        }
    return {{"device", device},
            {"address", address},
            {"total_size", size},
            {"allocated_size", allocated},
            {"active_size", allocated},
            {"requested_size", allocated},
            {"stream", 0},
            {"segment_type", segment_type(size, largest)},
            {"is_expandable", expandable},
            {"frames", std::move(frames)},
            {"blocks", std::move(blocks)}};
}

json whole_segment(int device, uint64_t address, uint64_t size, const json &frames) {
    return segment(device, address, size, frames, json::array({block(address, size, true, frames)}));
}

// A range of the tensor view: a driver allocation, or a run of adjacent mapped ranges, and the blocks
// that lie in it in address order.
struct Region {
    uint64_t address, size;
    std::string stack;  // the stack that made it; "" for mapped ranges (none is recorded)
    bool expandable;
    std::vector<const TensorBlock *> blocks;
};

// Ends saturate: a report's numbers may be anything up to 2^64 - 1 (fuzz_report reads them).
uint64_t end_of(uint64_t address, uint64_t size) { return size > UINT64_MAX - address ? UINT64_MAX : address + size; }

// The driver allocations, then the mapped ranges, by address. Adjacent mapped ranges (sorted by
// address on load) are one segment, as PyTorch shows an expandable segment's mapped pages; a range
// overlapping a driver allocation or an earlier range (neither can happen) is left out.
std::vector<Region> regions_of(const TensorView &tv) {
    std::vector<Region> regions;
    for (const TensorSegment &s : tv.segments) regions.push_back({s.address, s.bytes, s.stack, false, {}});
    size_t last = SIZE_MAX;  // the expandable region being extended
    for (const auto &range : tv.mappings) {
        // Not a structured binding: a C++17 lambda cannot capture one (clang refuses; gcc lets it pass).
        const uint64_t address = range.first, bytes = range.second;
        bool overlaps = std::any_of(tv.segments.begin(), tv.segments.end(), [&](const TensorSegment &s) {
            return address < end_of(s.address, s.bytes) && s.address < end_of(address, bytes);
        });
        uint64_t last_end = last == SIZE_MAX ? 0 : end_of(regions[last].address, regions[last].size);
        if (overlaps || (last != SIZE_MAX && address < last_end)) continue;
        if (last != SIZE_MAX && address == last_end) {
            regions[last].size = end_of(address, bytes) - regions[last].address;
        } else {
            last = regions.size();
            regions.push_back({address, bytes, "", true, {}});
        }
    }
    std::sort(regions.begin(), regions.end(), [](const Region &a, const Region &b) { return a.address < b.address; });
    return regions;
}

// Each block into the region it lies in, by address; returns those in no region or overlapping a block
// before them.
std::vector<const TensorBlock *> place_blocks(const TensorView &tv, std::vector<Region> &regions) {
    std::vector<const TensorBlock *> blocks;
    for (const TensorBlock &b : tv.blocks) blocks.push_back(&b);
    std::sort(blocks.begin(), blocks.end(),
              [](const TensorBlock *a, const TensorBlock *b) { return a->address < b->address; });
    std::vector<const TensorBlock *> orphans;
    for (const TensorBlock *b : blocks) {
        auto it = std::upper_bound(regions.begin(), regions.end(), b->address,
                                   [](uint64_t a, const Region &g) { return a < g.address; });
        Region *g = it == regions.begin() ? nullptr : &*(it - 1);
        bool inside = g && b->address - g->address < g->size && b->bytes <= g->size - (b->address - g->address);
        bool after_previous =
            inside && (g->blocks.empty() || end_of(g->blocks.back()->address, g->blocks.back()->bytes) <= b->address);
        if (after_previous) g->blocks.push_back(b);
        else orphans.push_back(b);
    }
    return orphans;
}

// The frames of each stack, made once: every block of a stack carries them.
class FramesByStack {
public:
    explicit FramesByStack(const Report &r) : r_(r) {}
    const json &operator()(const std::string &stack) {
        auto it = frames_.find(stack);
        return it != frames_.end() ? it->second : frames_[stack] = frames_of(r_, stack);
    }
    // A stack's frames under a first frame that says what the segment is.
    json noted(const std::string &stack, const char *note) {
        json f = (*this)(stack);
        f.insert(f.begin(), json{{"filename", "gpuguard"}, {"line", 0}, {"name", note}});
        return f;
    }

private:
    const Report &r_;
    std::map<std::string, json> frames_;
};

// One region as a segment: its blocks as allocated, the gaps between them as free; a driver allocation
// of no block made outside the caching allocator as one allocated block.
json region_segment(const Report &r, int device, Region &g, FramesByStack &frames) {
    g.size = end_of(g.address, g.size) - g.address;
    const Stack *made_by = r.stack(g.stack);
    if (g.blocks.empty() && made_by && !through_caching_allocator(*made_by))
        return whole_segment(
            device, g.address, g.size,
            frames.noted(g.stack, "[a driver allocation made outside PyTorch's caching allocator: in use, not free]"));
    json list = json::array();
    uint64_t at = g.address;
    for (const TensorBlock *b : g.blocks) {
        if (b->address > at) list.push_back(block(at, b->address - at, false, {}));
        list.push_back(block(b->address, b->bytes, true, frames(b->stack)));
        at = b->address + b->bytes;
    }
    if (at < g.address + g.size) list.push_back(block(at, g.address + g.size - at, false, {}));
    return segment(device, g.address, g.size, frames(g.stack), std::move(list), g.expandable);
}

// The tensor view's segments with their blocks (see the top of this file).
json segments_with_blocks(const Report &r, const TensorView &tv) {
    std::vector<Region> regions = regions_of(tv);
    std::vector<const TensorBlock *> orphans = place_blocks(tv, regions);
    FramesByStack frames(r);
    json out = json::array();
    for (Region &g : regions) out.push_back(region_segment(r, tv.device, g, frames));
    for (const TensorBlock *b : orphans)
        out.push_back(whole_segment(tv.device, b->address, end_of(b->address, b->bytes) - b->address,
                                    frames.noted(b->stack, "[a block in no segment that the report lists]")));
    return out;
}

// Without a tensor view: the driver allocations the report lists, and the rest of each stack's bytes
// at made-up addresses (see the top of this file).
json driver_segments(const Report &r, int default_device, int &max_device) {
    json segments = json::array();
    std::map<std::string, uint64_t> listed;  // bytes of top_allocations per stack
    for (const Allocation &al : r.top_allocations) {
        uint64_t addr = parse_address(al.address);
        if (!addr || !al.bytes) continue;
        int dev = al.device.value_or(default_device);
        max_device = std::max(max_device, dev);
        segments.push_back(whole_segment(dev, addr, al.bytes, frames_of(r, al.stack)));
        listed[al.stack] += al.bytes;
    }
    uint64_t fake = 1ull << 48;
    for (const StackBytes &sb : r.by_stack) {
        uint64_t have = listed[sb.stack];
        if (sb.bytes <= have) continue;
        uint64_t rest = sb.bytes - have;
        json frames = frames_of(r, sb.stack);
        uint64_t n = sb.count > 0 ? sb.count : 1;
        frames.insert(frames.begin(),
                      json{{"filename", "gpuguard"},
                           {"line", 0},
                           {"name", "[" + human_bytes(rest) +
                                        " in allocations of this stack that the report does not list one by one (" +
                                        std::to_string(n) + " allocations in all); address made up]"}});
        segments.push_back(whole_segment(default_device, fake, rest, frames));
        fake += (rest + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    }
    return segments;
}

// Device ordinals past this get no trace list of their own: a report may say any int, and one list per
// ordinal up to it would be a hang (and INT_MAX an endless loop).
constexpr int kMaxTraceDevices = 64;
int trace_device(int device, int fallback) { return device >= 0 && device < kMaxTraceDevices ? device : fallback; }

// The first frame of an event whose block or segment was freed before the report: the event ring
// records no stacks, and the report keeps those of live blocks and segments only.
constexpr const char *kFreedNote =
    "[freed before the report: gpuguard keeps the stacks of live blocks and segments only]";

// For each of the ring's events, the stack of what it made when the report still lists that: an alloc
// (a segment got) that is the last event at its address, whose block (segment) is live at the report.
std::vector<const std::string *> live_makers(const TensorView &tv) {
    std::unordered_map<uint64_t, const TensorBlock *> blocks;
    for (const TensorBlock &b : tv.blocks) blocks.emplace(b.address, &b);
    std::unordered_map<uint64_t, const TensorSegment *> segments;
    for (const TensorSegment &s : tv.segments) segments.emplace(s.address, &s);
    std::vector<const std::string *> maker(tv.events.size(), nullptr);
    std::unordered_set<uint64_t> blocks_later, segments_later;  // addresses with an event after this one
    for (size_t i = tv.events.size(); i-- > 0;) {
        const TensorEvent &e = tv.events[i];
        if (e.action == TensorEvent::kAlloc || e.action == TensorEvent::kFree) {
            if (!blocks_later.insert(e.address).second || e.action != TensorEvent::kAlloc) continue;
            auto it = blocks.find(e.address);
            if (it != blocks.end() && it->second->bytes == e.bytes) maker[i] = &it->second->stack;
        } else if (e.action == TensorEvent::kSegmentAlloc || e.action == TensorEvent::kSegmentFree) {
            if (!segments_later.insert(e.address).second || e.action != TensorEvent::kSegmentAlloc) continue;
            auto it = segments.find(e.address);
            if (it != segments.end() && it->second->bytes == e.bytes) maker[i] = &it->second->stack;
        }
    }
    return maker;
}

// One of PyTorch's trace entries, kept light until it is pickled: a ring holds up to 218,453 events,
// and a json object each took seconds to make. Its frames are shared: a stack's frames are pickled
// once and fetched from the memo by every entry after (Pickler::shared).
struct TraceEntry {
    const char *action;
    uint64_t address, size;
    int64_t time_us;
    const json *frames;                   // outlives the entry: FramesByStack's, freed_frames(), FinalOom's
    std::optional<uint64_t> device_free;  // "oom" entries only
};

const json &freed_frames() {
    static const json frames = json::array({{{"filename", "gpuguard"}, {"line", 0}, {"name", kFreedNote}}});
    return frames;
}

// PyTorch's keys: an "oom" entry has device_free where the others have addr (torch/csrc/cuda/Module.cpp
// writes the one field under either name).
void pickle_entry(Pickler &p, const TraceEntry &e) {
    p.begin_dict();
    p.key("action");
    p.text(e.action);
    p.key(e.device_free ? "device_free" : "addr");
    p.number(e.device_free ? *e.device_free : e.address);
    p.key("size");
    p.number(e.size);
    p.key("stream");
    p.number(uint64_t(0));
    p.key("time_us");
    p.number(e.time_us);
    p.key("frames");
    p.shared(*e.frames);
    p.end_dict();
}

// The request the report is about, as PyTorch's "oom" trace entry: the request c10 refused when the
// tensor view has one (a report of reason allocator_oom has no failed driver call), else the failed
// driver call.
struct FinalOom {
    uint64_t size = 0, device_free = 0;
    int device = 0;
    int64_t time_us = 0;
    json frames;
};

std::optional<FinalOom> final_oom(const Report &r, int default_device) {
    FinalOom oom;
    oom.device = default_device;
    std::optional<int64_t> time = r.time_unix_ns;
    if (r.tensor && r.tensor->oom) {
        oom.size = r.tensor->oom->requested;
        oom.device = trace_device(r.tensor->oom->device, default_device);
        if (r.tensor->oom->time_unix_ns) time = r.tensor->oom->time_unix_ns;
    } else if (r.failed && r.failed->bytes && (r.reason == "quota" || r.reason == "driver_oom")) {
        oom.size = *r.failed->bytes;
    } else {
        return std::nullopt;
    }
    // device_free: for a quota refusal, what the limit still allowed; else what the driver had.
    if (r.reason == "quota" && r.limit_bytes) {
        uint64_t held = r.limit_scope == "process" ? r.live_bytes() : r.container_bytes.value_or(r.live_bytes());
        oom.device_free = *r.limit_bytes > held ? *r.limit_bytes - held : 0;
    } else {
        oom.device_free = r.device_free.value_or(0);
    }
    oom.time_us = time ? *time / 1000 : 0;
    oom.frames = r.failed ? frames_of(r, r.failed->stack) : json::array();
    return oom;
}

TraceEntry oom_entry(const FinalOom &oom) { return {"oom", 0, oom.size, oom.time_us, &oom.frames, oom.device_free}; }

// The ring's block events as PyTorch's trace entries, oldest first, onto each event's device. A free is
// free_requested then free_completed, adjacent, as the native allocator records a free on its own
// stream (memory_viz folds the pair into one "free"). Segment events of a cuMemCreate handle (address
// 0: expandable segments' physical pages) have no range to show and are left out: the pages' mappings
// are not in the ring. Returns whether the ring holds the final oom (its last refusal of that size),
// which then carries the report's figures.
bool add_ring_events(const TensorView &tv, const std::optional<FinalOom> &oom, int default_device,
                     FramesByStack &frames, std::vector<std::vector<TraceEntry>> &traces) {
    const std::vector<const std::string *> maker = live_makers(tv);
    size_t final_oom_at = SIZE_MAX;
    for (size_t i = 0; oom && i < tv.events.size(); i++)
        if (tv.events[i].action == TensorEvent::kOom && tv.events[i].bytes == oom->size) final_oom_at = i;
    const int64_t t0 = tv.timeline_t0_unix_ns.value_or(0);
    static const json no_frames = json::array();
    const json *freed = &freed_frames();
    for (size_t i = 0; i < tv.events.size(); i++) {
        const TensorEvent &e = tv.events[i];
        std::vector<TraceEntry> &list = traces[static_cast<size_t>(trace_device(e.device, default_device))];
        const int64_t time_us = (t0 + e.t_ns) / 1000;
        const json *made_by = maker[i] ? &frames(*maker[i]) : freed;
        switch (e.action) {
            case TensorEvent::kAlloc: list.push_back({"alloc", e.address, e.bytes, time_us, made_by, {}}); break;
            case TensorEvent::kFree:
                list.push_back({"free_requested", e.address, e.bytes, time_us, freed, {}});
                list.push_back({"free_completed", e.address, e.bytes, time_us, freed, {}});
                break;
            case TensorEvent::kSegmentAlloc:
                if (e.address) list.push_back({"segment_alloc", e.address, e.bytes, time_us, made_by, {}});
                break;
            case TensorEvent::kSegmentFree:
                if (e.address) list.push_back({"segment_free", e.address, e.bytes, time_us, freed, {}});
                break;
            case TensorEvent::kOom:
                // An earlier refusal: what the device had free then is not known.
                if (i == final_oom_at) list.push_back(oom_entry(*oom));
                else list.push_back({"oom", 0, e.bytes, time_us, &no_frames, uint64_t(0)});
                break;
        }
    }
    return final_oom_at != SIZE_MAX;
}

}  // namespace

std::string render_memory_viz(const Report &r) {
    const int default_device =
        trace_device(r.failed && r.failed->device ? *r.failed->device : r.device_ordinal.value_or(0), 0);
    int max_device = default_device;
    const TensorView *tv = r.tensor && r.tensor->from_blocks() ? &*r.tensor : nullptr;
    json segments;
    if (tv) {
        segments = segments_with_blocks(r, *tv);
        max_device = std::max(max_device, trace_device(tv->device, default_device));
        for (const TensorEvent &e : tv->events)
            max_device = std::max(max_device, trace_device(e.device, default_device));
    } else {
        segments = driver_segments(r, default_device, max_device);
    }
    const std::optional<FinalOom> oom = final_oom(r, default_device);
    if (oom) max_device = std::max(max_device, oom->device);
    max_device = std::min(max_device, kMaxTraceDevices - 1);

    std::vector<std::vector<TraceEntry>> traces(static_cast<size_t>(max_device) + 1);
    FramesByStack frames(r);
    bool oom_in_ring = tv && add_ring_events(*tv, oom, default_device, frames, traces);
    if (oom && !oom_in_ring) traces[static_cast<size_t>(oom->device)].push_back(oom_entry(*oom));

    Pickler p;
    p.begin_dict();
    p.key("segments");
    p.value(segments);
    p.key("device_traces");
    p.begin_list();
    for (const std::vector<TraceEntry> &list : traces) {
        p.item();
        p.begin_list();
        for (const TraceEntry &e : list) {
            p.item();
            pickle_entry(p, e);
        }
        p.end_list();
    }
    p.end_list();
    p.end_dict();
    p.finish();
    return p.out;
}

}  // namespace gg::report
