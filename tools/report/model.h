// A gpuguard report read from disk (docs/report-schema.md), and the small vocabulary every renderer
// shares: sizes for people, frame labels, "the frame that explains this stack".
//
// Loading is strict about what the file is (valid JSON, schema name, version) and lenient about what
// it holds: a missing or mistyped field is "unknown" (an empty optional), never an error, so that a
// report from a newer shim or a cut-down test fixture still renders. A number outside what its field
// can mean is unknown too: sizes in [0, 2^64), times (Unix ns, offsets, ages) in [0, 2^62) so that
// renderers may add or subtract two of them, device ordinals within int.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/report/limits.h"
#include "common/units/human.h"

namespace gg::report {

using json = nlohmann::json;
using Bytes = std::optional<uint64_t>;

struct Frame {
    bool python = false;
    // python frames
    std::string file, function;
    std::optional<int64_t> line;
    // native frames
    std::string module, symbol, offset, ip, build_id;
    // Where the module's debug info puts the frame (tools/report/symbolize.h); empty when not named.
    std::string source_file;
    std::optional<int64_t> source_line;
};

struct Stack {
    std::string id;
    std::vector<Frame> frames;  // innermost first, as in the file
};

struct StackBytes {
    std::string stack;  // key into Report::stacks; empty when the report had null
    uint64_t bytes = 0;
    uint64_t count = 0;
};

struct Allocation {
    std::string address, api, stack, tag;
    uint64_t bytes = 0;
    std::optional<int> device;
    std::optional<int64_t> age_ns, thread;
};

struct FailedRequest {
    std::string api, driver_api, stack;
    Bytes bytes;
    std::optional<int> device;
    std::optional<int64_t> thread, driver_result;
};

struct LedgerProcess {
    int64_t pid = 0;
    std::string command;
    uint64_t bytes = 0;
    Bytes peak_bytes;
    bool alive = true, self = false;
};

struct LedgerDevice {
    std::string uuid;
    Bytes limit_bytes, used_bytes, peak_bytes;
};

struct CudnnStack {
    std::string stack;
    uint64_t largest_bytes = 0, count = 0;
};

struct Cudnn {
    Bytes workspace_cap_bytes, largest_workspace_requested_bytes, workspace_in_use_bytes;
    std::optional<uint64_t> plans_rejected;
    std::vector<CudnnStack> requests_by_stack;
};

// PyTorch's caching allocator as the report's "tensor_view" section shows it (docs/report-schema.md).
struct TensorBlock {  // a live block: one tensor's storage
    uint64_t address = 0, bytes = 0;
    std::string stack;
    std::optional<int64_t> age_ns;
};
struct TensorSegment {  // device memory the process got from the driver
    uint64_t address = 0, bytes = 0;
    std::string stack, api;
};
struct TensorEvent {
    enum Action : char { kAlloc = 'a', kFree = 'f', kOom = 'o', kSegmentAlloc = 'S', kSegmentFree = 's' };
    int64_t t_ns = 0;  // since the timeline's t0
    Action action = kAlloc;
    uint64_t address = 0, bytes = 0, allocated = 0, reserved = 0;
    int device = 0;
};
struct TensorOom {  // the request c10 could not serve
    uint64_t requested = 0, allocated = 0, reserved = 0;
    int device = 0;
    std::optional<int64_t> time_unix_ns;
};
struct TensorView {
    std::string source;          // "c10": PyTorch reported its blocks; "driver": segments only
    std::string backend;         // "native" or "cudaMallocAsync"
    std::string allocator_conf;  // PYTORCH_CUDA_ALLOC_CONF as the process had it
    int device = 0;
    Bytes allocated, reserved, peak_allocated, peak_reserved;
    uint64_t block_count = 0;
    std::vector<TensorBlock> blocks;                      // listed ones, largest first
    std::vector<StackBytes> by_stack, peak_by_stack;      // largest first
    std::vector<TensorSegment> segments;                  // by address
    std::vector<std::pair<uint64_t, uint64_t>> mappings;  // expandable segments' mapped ranges, by address
    std::optional<TensorOom> oom;
    std::optional<int64_t> timeline_t0_unix_ns;
    struct Point {
        int64_t t_ns;
        uint64_t allocated, reserved;
    };
    std::vector<Point> timeline;  // by time
    uint64_t events_capacity = 0, events_recorded = 0, events_dropped = 0;
    std::vector<TensorEvent> events;  // oldest first
    // tensor_view.coverage: the view switched off at run time (gpuguard.tensor_view) leaves the blocks
    // made meanwhile unlisted; absent in older reports, which listed everything.
    bool coverage_complete = true, off = false;
    uint64_t unlisted_bytes = 0, switched_off = 0;

    bool from_blocks() const { return source == "c10"; }
    // The option as the allocator parses it: "expandable_segments:True" anywhere in the conf.
    bool expandable_segments() const;
    // max_split_size_mb from the conf, in bytes; UINT64_MAX when unset.
    uint64_t max_split_size() const;
};

struct ApiCounts {
    std::string api;
    uint64_t allocs = 0, frees = 0, failures = 0, live_bytes = 0, live_count = 0;
};

struct Report {
    std::string path;  // as given on the command line
    std::string name;  // its base name, for messages
    json raw;  // the whole document; its arrays of rows empty unless Keep::kDocument (--html copies them from `text`)
    std::string text;  // the file's text, kept with Keep::kText only: --html copies the arrays of rows from it

    std::string reason, message, gpuguard_version;
    std::string phase;  // as the program tagged it (gpuguard_phase); "" for none
    std::optional<int64_t> time_unix_ns;

    // process
    std::optional<int64_t> pid, ppid, uid, start_unix_ns;
    std::vector<std::string> command;
    std::string exe, hostname;
    std::map<std::string, std::string> env;

    // device
    std::optional<int> device_ordinal;
    std::string device_uuid, device_name;
    Bytes device_total, device_free;  // physical; unknown when the file says -1

    // limit (absent when no quota)
    Bytes limit_bytes;
    std::string limit_spec, limit_source, limit_scope;

    // usage
    Bytes process_bytes, process_peak_bytes, container_bytes;
    std::optional<uint64_t> live_allocations;

    std::optional<FailedRequest> failed;
    std::optional<int64_t> episode_id, episode_failed_calls;

    std::vector<ApiCounts> counts_by_api;
    std::vector<Allocation> top_allocations;
    std::vector<StackBytes> by_stack;  // largest first (sorted on load)

    Bytes peak_bytes;
    std::optional<int64_t> peak_time_unix_ns;
    std::vector<StackBytes> peak_by_stack;

    std::optional<int64_t> timeline_t0_unix_ns;
    std::vector<std::pair<int64_t, uint64_t>> timeline;  // [t_ns, live bytes], sorted by time

    std::map<std::string, Stack> stacks;

    bool has_ledger = false;
    std::string ledger_path;
    std::vector<LedgerDevice> ledger_devices;
    std::vector<LedgerProcess> ledger_processes;

    std::optional<Cudnn> cudnn;
    std::optional<TensorView> tensor;

    const Stack *stack(const std::string &id) const;
    // The process's live bytes: usage.process_bytes, else the sum of by_stack.
    uint64_t live_bytes() const;
    // The process's high-water mark: the largest of peak.bytes, usage.process_peak_bytes.
    Bytes peak() const;
    std::string command_line() const;  // "python3 train.py --epochs 3", or "" when unknown
};

// Why a file could not be read as a report; `message` is one line without the "gpuguard: " prefix,
// starting with the file's name.
struct LoadError {
    std::string message;
};

// What a report may be: no report gpuguard writes comes near either (its deepest value is 6 levels
// down; GPUGUARD_TOP_N=100000 with deep stacks of their own stays far under the size), and a file
// past them is refused before it is parsed: a report 100,000 levels deep overflowed the stack of
// every recursive walk, /dev/zero never ended, and memory grows about eight times the file's size.
struct Limits {
    size_t max_bytes = report_limits::kMaxReportBytes;  // the shim's writer keeps under it too
    int max_depth = 64;
};

// What Report::raw keeps of the document. The model is the same either way: its arrays of rows (the
// tensor view's events, blocks, segments, mappings and timeline, the timeline's points) are read as they
// are parsed (tools/report/streamed_rows.h). Kept whole with kDocument; otherwise each array of rows
// stays in it empty, and never costs the time and memory of a JSON value a row (most of a large
// report's). kText, for the renderers that embed the document (--html), keeps the file's text beside it
// (Report::text), from which they copy the arrays of rows: at 64 MiB, a document of every row took
// about 1.7 CPU s and 400 MB more than the text.
enum class Keep { kDocument, kModelOnly, kText };

// Where the arrays of rows lie in a report: the keys from the document's root, through objects.
const std::vector<std::vector<const char *>> &row_array_paths();

// Reads and validates a report. Returns false and fills `err` on a missing, unreadable, non-JSON,
// truncated, too large, too deep or foreign file, or a version this build does not read. Never throws.
bool load(const std::string &path, Report &out, LoadError &err, const Limits &limits = Limits(),
          Keep keep = Keep::kDocument);
// The same from the file's contents; `name` is what messages call it. The fuzz target's entry.
bool parse(const std::string &text, const std::string &name, Report &out, LoadError &err,
           const Limits &limits = Limits(), Keep keep = Keep::kDocument);

// ---- shared vocabulary -----------------------------------------------------------------------

// The numbers of common/units/human.h, and a size that may be unknown.
using ::gg::human_bytes;
using ::gg::human_delta;
using ::gg::human_duration_ns;
using ::gg::human_time_unix_ns;
using ::gg::percent;
std::string human_bytes(const Bytes &bytes, const char *unknown = "unknown");

// Module base name: "/usr/lib/libtorch_cuda.so" -> "libtorch_cuda.so".
std::string base_name(const std::string &path);
// A Python file as people recognise it: the path below site-packages/dist-packages, else its last two
// components ("work/train.py").
std::string short_python_file(const std::string &file);
// "c10::cuda::CUDACachingAllocator::malloc(int, unsigned long)" -> "c10::cuda::CUDACachingAllocator::malloc"
std::string short_symbol(const std::string &symbol);

// One line per frame, for people: "step (train.py:42)", "c10::cuda::CUDACachingAllocator::malloc
// (libc10_cuda.so)", "main (alloc_until_oom.c:56)" when debug info named it, "libfoo.so+0x1234" when
// unsymbolized.
std::string frame_label(const Frame &f);
// A key that identifies a frame across runs (no addresses): used to merge flame-graph nodes and to
// match stacks between two reports.
std::string frame_key(const Frame &f);
std::string stack_key(const Stack &s);

// Frames of the machinery below the program: the driver, the runtime and the shim itself.
bool is_plumbing(const Frame &f);
// Plumbing, or the generic allocation path of a framework (PyTorch's caching allocator in libc10,
// at::empty and its kin): frames every allocation passes through, which say nothing about which one.
bool is_allocation_machinery(const Frame &f);
// A Python frame in an installed package (site-packages, dist-packages, the standard library).
bool is_library_python(const Frame &f);
// The frame that says where an allocation came from: the innermost Python frame when there is one,
// else the innermost native frame outside the plumbing (and, when there is such a frame, outside the
// allocation machinery too). Null when the stack has neither.
const Frame *best_frame(const Stack &s);
std::string best_label(const Report &r, const std::string &stack_id);  // "[unknown stack]" when none
// The best frame, followed by the program's own innermost Python frame when the best one is in a
// library: "_conv_forward (torch/nn/modules/conv.py:549) ← forward (work/model.py:34)".
std::string where_label(const Report &r, const std::string &stack_id);

// Frames outermost first with the shim's own frames dropped: the order of flame graphs.
std::vector<const Frame *> frames_outermost_first(const Stack &s);

}  // namespace gg::report
