// A PyTorch CUDA memory snapshot, the file torch.cuda.memory._dump_snapshot() writes, so that
// pytorch.org/memory_viz (torch/utils/viz/MemoryViz.js) and torch/cuda/_memory_viz.py open our data.
//
// Both read only Python pickles: MemoryViz.js carries its own unpickler (protocol 2 to 4, a subset of
// opcodes) and _memory_viz.py calls pickle.load; neither reads JSON. So this writes a pickle by hand,
// protocol 2, with only opcodes that both know: PROTO, EMPTY_DICT/MARK/SETITEMS, EMPTY_LIST/APPENDS,
// BINUNICODE, BININT1/BININT2/BININT/LONG1, BINFLOAT, NONE, NEWTRUE/NEWFALSE, STOP. No memo: every
// value is written once.
//
// Mapping. Each of the report's top_allocations is a segment holding one active block (the shim sees
// driver allocations, which is what PyTorch calls segments). Live bytes of a stack not covered by
// top_allocations become one more segment per stack, at a made-up address above 2^48 (no device
// pointer lives there; below 2^53 so JavaScript numbers keep it exact), whose innermost frame says so.
// device_traces holds one "oom" event when the report is a failure; the shim records no per-allocation
// event history, so the "Active Memory Timeline" view shows the live allocations as one flat step.
#include "tools/report/render.h"

#include <cstring>
#include <map>

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
                out += ']';  // EMPTY_LIST
                if (!v.empty()) {
                    out += '(';  // MARK
                    for (const json &e : v) value(e);
                    out += 'e';  // APPENDS
                }
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
        out += 'X';  // BINUNICODE: 4-byte length, UTF-8
        le(s.size(), 4);
        out += s;
    }
};

json frames_of(const Report &r, const std::string &stack_id) {
    json frames = json::array();
    const Stack *s = r.stack(stack_id);
    if (!s) return frames;
    for (const Frame &f : s->frames) {  // innermost first, like PyTorch's
        if (f.python) frames.push_back({{"filename", f.file}, {"line", f.line.value_or(0)}, {"name", f.function}});
        else if (!(base_name(f.module).rfind("libgpuguard", 0) == 0))
            frames.push_back({{"filename", f.module},
                              {"line", 0},
                              {"name", f.symbol.empty() ? base_name(f.module) + "+" + f.offset : f.symbol}});
    }
    return frames;
}

uint64_t parse_address(const std::string &s) {
    if (s.size() < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return 0;
    return strtoull(s.c_str() + 2, nullptr, 16);
}

// One segment holding one active block, written straight into the pickle: `frames` is the stack's
// list already pickled, shared by the segment and its block. (Built as a JSON document first, then
// pickled, a 62 MB report took 1.3 GB; written so, the output is the only copy.)
void segment(Pickler &p, int device, uint64_t address, uint64_t size, const std::string &frames) {
    auto key = [&p](const char *k) { p.string(k); };
    p.out += "}(";  // EMPTY_DICT MARK
    key("device"), p.sint(device);
    key("address"), p.uint(address);
    key("total_size"), p.uint(size);
    key("allocated_size"), p.uint(size);
    key("active_size"), p.uint(size);
    key("requested_size"), p.uint(size);
    key("stream"), p.uint(0);
    key("segment_type"), p.string(size > (1u << 20) ? "large" : "small");
    key("is_expandable"), p.out += '\x89';
    key("frames"), p.out += frames;
    key("blocks"), p.out += "](}(";  // a list of one dict
    key("address"), p.uint(address);
    key("size"), p.uint(size);
    key("requested_size"), p.uint(size);
    key("state"), p.string("active_allocated");
    key("frames"), p.out += frames;
    p.out += "ueu";  // SETITEMS (the block), APPENDS (blocks), SETITEMS (the segment)
}

std::string pickled(const json &v) {
    Pickler p;
    p.out.clear();  // no PROTO: a piece of the whole
    p.value(v);
    return p.out;
}

}  // namespace

std::string render_memory_viz(const Report &r) {
    const int default_device = r.failed && r.failed->device ? *r.failed->device : r.device_ordinal.value_or(0);
    int max_device = std::max(default_device, 0);
    std::map<std::string, uint64_t> listed;    // bytes of top_allocations per stack
    std::map<std::string, std::string> cache;  // a stack's frames, pickled once
    Pickler p;
    p.out += "}(";  // the snapshot: {"segments": [...], "device_traces": [...]}
    p.string("segments");
    p.out += ']';
    size_t mark = p.out.size();
    p.out += '(';
    size_t segments = 0;
    for (const Allocation &al : r.top_allocations) {
        uint64_t addr = parse_address(al.address);
        if (!addr || !al.bytes) continue;
        int dev = al.device.value_or(default_device);
        max_device = std::max(max_device, dev);
        auto it = cache.find(al.stack);
        if (it == cache.end()) it = cache.emplace(al.stack, pickled(frames_of(r, al.stack))).first;
        segment(p, dev, addr, al.bytes, it->second);
        segments++;
        listed[al.stack] += al.bytes;
    }
    cache.clear();
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
        segment(p, default_device, fake, rest, pickled(frames));
        segments++;
        fake += (rest + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    }
    if (segments) p.out += 'e';  // APPENDS
    else p.out.erase(mark);      // an empty list: no MARK

    json traces = json::array();
    for (int d = 0; d <= max_device; ++d) traces.push_back(json::array());
    if (r.failed && r.failed->bytes && (r.reason == "quota" || r.reason == "driver_oom")) {
        // device_free: for a quota refusal, what the limit still allowed; for the driver, what it had.
        uint64_t free = 0;
        if (r.reason == "quota" && r.limit_bytes) {
            uint64_t held = r.limit_scope == "process" ? r.live_bytes() : r.container_bytes.value_or(r.live_bytes());
            free = *r.limit_bytes > held ? *r.limit_bytes - held : 0;
        } else {
            free = r.device_free.value_or(0);
        }
        double time_us = r.time_unix_ns ? static_cast<double>(*r.time_unix_ns) / 1000.0 : 0.0;
        traces[static_cast<size_t>(std::max(default_device, 0))].push_back({{"action", "oom"},
                                                                            {"addr", 0},
                                                                            {"size", *r.failed->bytes},
                                                                            {"stream", 0},
                                                                            {"device_free", free},
                                                                            {"time_us", static_cast<int64_t>(time_us)},
                                                                            {"frames", frames_of(r, r.failed->stack)}});
    }
    p.string("device_traces");
    p.value(traces);
    p.out += 'u';  // SETITEMS
    p.finish();
    return p.out;
}

}  // namespace gg::report
