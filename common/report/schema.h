// The report format (docs/report-schema.md): its name, its version and every key, shared by the
// writer in the shim (shim/report/, shim/stacks/, shim/cudnn/) and the reader in the command
// (tools/report/model.cpp), so that a key renamed on one side is renamed on the other. The unit test
// test_report.cpp builds a report with the shim's writer and reads it back with the command's reader.
#pragma once

namespace gg::schema {

constexpr const char *kName = "gpuguard.report";
// Raised only when a field is removed or changes meaning; additions keep it.
constexpr int kVersion = 1;

// Values of fields that readers compare against.
namespace value {
constexpr const char kNative[] = "native";  // frames[].kind
constexpr const char kPython[] = "python";
constexpr const char kCudnnWorkspace[] = "cudnn_workspace";  // top_allocations[].tag
constexpr const char kSourceC10[] = "c10";                   // tensor_view.source: PyTorch reported its blocks
constexpr const char kSourceDriver[] = "driver";             // tensor_view.source: no block reports, segments only
constexpr const char kBackendNative[] = "native";            // tensor_view.backend
constexpr const char kBackendAsync[] = "cudaMallocAsync";
}  // namespace value

// Every key of the format, named as it is spelled in the file.
namespace key {
constexpr const char address[] = "address";
constexpr const char age_ns[] = "age_ns";
constexpr const char algorithms_rejected[] = "algorithms_rejected";
constexpr const char alive[] = "alive";
constexpr const char allocs[] = "allocs";
constexpr const char api[] = "api";
constexpr const char build_id[] = "build_id";
constexpr const char by_stack[] = "by_stack";
constexpr const char bytes[] = "bytes";
constexpr const char capture[] = "capture";
constexpr const char changes[] = "changes";
constexpr const char checks[] = "checks";
constexpr const char command[] = "command";
constexpr const char container_bytes[] = "container_bytes";
constexpr const char count[] = "count";
constexpr const char counts_by_api[] = "counts_by_api";
constexpr const char cudnn[] = "cudnn";
constexpr const char deep_checks[] = "deep_checks";
constexpr const char deep_sites[] = "deep_sites";
constexpr const char device[] = "device";
constexpr const char devices[] = "devices";
constexpr const char driver_api[] = "driver_api";
constexpr const char driver_result[] = "driver_result";
constexpr const char env[] = "env";
constexpr const char episode[] = "episode";
constexpr const char evicted[] = "evicted";
constexpr const char exe[] = "exe";
constexpr const char failed_calls[] = "failed_calls";
constexpr const char failed_request[] = "failed_request";
constexpr const char failures[] = "failures";
constexpr const char fallbacks[] = "fallbacks";
constexpr const char file[] = "file";
constexpr const char first_unix_ns[] = "first_unix_ns";
constexpr const char frames[] = "frames";
constexpr const char free_bytes[] = "free_bytes";
constexpr const char frees[] = "frees";
constexpr const char function[] = "function";
constexpr const char gpuguard_version[] = "gpuguard_version";
constexpr const char hostname[] = "hostname";
constexpr const char id[] = "id";
constexpr const char ip[] = "ip";
constexpr const char kind[] = "kind";
constexpr const char largest_bytes[] = "largest_bytes";
constexpr const char largest_rejected_bytes[] = "largest_rejected_bytes";
constexpr const char largest_workspace_requested_bytes[] = "largest_workspace_requested_bytes";
constexpr const char ledger[] = "ledger";
constexpr const char library[] = "library";
constexpr const char limit[] = "limit";
constexpr const char limit_bytes[] = "limit_bytes";
constexpr const char line[] = "line";
constexpr const char live_allocations[] = "live_allocations";
constexpr const char live_bytes[] = "live_bytes";
constexpr const char live_count[] = "live_count";
constexpr const char message[] = "message";
constexpr const char module[] = "module";
constexpr const char name[] = "name";
constexpr const char offset[] = "offset";
constexpr const char on[] = "on";
constexpr const char ordinal[] = "ordinal";
constexpr const char path[] = "path";
constexpr const char phase[] = "phase";
constexpr const char peak[] = "peak";
constexpr const char peak_bytes[] = "peak_bytes";
constexpr const char pid[] = "pid";
constexpr const char plans_rejected[] = "plans_rejected";
constexpr const char points[] = "points";
constexpr const char ppid[] = "ppid";
constexpr const char process[] = "process";
constexpr const char process_bytes[] = "process_bytes";
constexpr const char process_peak_bytes[] = "process_peak_bytes";
constexpr const char processes[] = "processes";
constexpr const char python[] = "python";
constexpr const char reason[] = "reason";
constexpr const char requests_by_stack[] = "requests_by_stack";
constexpr const char reused[] = "reused";
constexpr const char rules_learned[] = "rules_learned";
constexpr const char schema[] = "schema";
constexpr const char scope[] = "scope";
constexpr const char self[] = "self";
constexpr const char source[] = "source";
constexpr const char spec[] = "spec";
constexpr const char stack[] = "stack";
constexpr const char stack_depth[] = "stack_depth";
constexpr const char stack_reuse[] = "stack_reuse";
constexpr const char stacks[] = "stacks";
constexpr const char start_unix_ns[] = "start_unix_ns";
constexpr const char symbol[] = "symbol";
constexpr const char t0_unix_ns[] = "t0_unix_ns";
constexpr const char tag[] = "tag";
constexpr const char thread[] = "thread";
constexpr const char threads[] = "threads";
constexpr const char time_unix_ns[] = "time_unix_ns";
constexpr const char timeline[] = "timeline";
constexpr const char top_allocations[] = "top_allocations";
constexpr const char total_bytes[] = "total_bytes";
constexpr const char uid[] = "uid";
constexpr const char unstable_sites[] = "unstable_sites";
constexpr const char unwinder[] = "unwinder";
constexpr const char unwound[] = "unwound";
constexpr const char usage[] = "usage";
constexpr const char used_bytes[] = "used_bytes";
constexpr const char uuid[] = "uuid";
constexpr const char version[] = "version";
constexpr const char walker[] = "walker";
constexpr const char walks[] = "walks";
constexpr const char whole_keys[] = "whole_keys";
constexpr const char workspace_cap[] = "workspace_cap";
constexpr const char workspace_cap_bytes[] = "workspace_cap_bytes";
constexpr const char workspace_in_use_bytes[] = "workspace_in_use_bytes";
constexpr const char workspace_in_use_peak_bytes[] = "workspace_in_use_peak_bytes";
constexpr const char tensor_view[] = "tensor_view";
constexpr const char backend[] = "backend";
constexpr const char allocator_conf[] = "allocator_conf";
constexpr const char allocated_bytes[] = "allocated_bytes";
constexpr const char reserved_bytes[] = "reserved_bytes";
constexpr const char peak_allocated_bytes[] = "peak_allocated_bytes";
constexpr const char peak_reserved_bytes[] = "peak_reserved_bytes";
constexpr const char blocks[] = "blocks";
constexpr const char listed[] = "listed";
constexpr const char list[] = "list";
constexpr const char segments[] = "segments";
constexpr const char mappings[] = "mappings";
constexpr const char oom[] = "oom";
constexpr const char requested_bytes[] = "requested_bytes";
constexpr const char events[] = "events";
constexpr const char capacity[] = "capacity";
constexpr const char recorded[] = "recorded";
constexpr const char dropped[] = "dropped";
constexpr const char left_out[] = "left_out";
constexpr const char rows[] = "rows";
constexpr const char columns[] = "columns";
constexpr const char peak_by_stack[] = "peak_by_stack";
constexpr const char refusals_recovered[] = "refusals_recovered";
// What the quota counts beside allocations (issue 19): usage.quota_counts, the kinds by name.
constexpr const char quota_counts[] = "quota_counts";
constexpr const char process_by_kind[] = "process_by_kind";
constexpr const char container_by_kind[] = "container_by_kind";
constexpr const char by_kind[] = "by_kind";
constexpr const char allocations[] = "allocations";
constexpr const char context_and_modules[] = "context_and_modules";
constexpr const char graphs[] = "graphs";
constexpr const char pool_reserve[] = "pool_reserve";
constexpr const char context_cost[] = "context_cost";
constexpr const char self_view[] = "self_view";
// The tensor view switched at run time (issue 28): tensor_view.coverage.
constexpr const char recalled[] = "recalled";  // capture.walker: short walks answered by the walk memo
constexpr const char trusted[] = "trusted";    // capture.walker: of those, answered by the tag, the words not compared
constexpr const char coverage[] = "coverage";
constexpr const char complete[] = "complete";
constexpr const char unlisted_bytes[] = "unlisted_bytes";
constexpr const char listed_since_ns[] = "listed_since_ns";
constexpr const char switched_off[] = "switched_off";
constexpr const char off[] = "off";
constexpr const char off_ns[] = "off_ns";
}  // namespace key

// The rows of the tensor view and of the timeline are arrays, not objects (a report holds up to 50,000
// blocks and 65,536 events), so their columns are named here once, in order: the writer puts each value
// at its column's index (shim/torch/section.cpp), the readers take it from there (tools/report/load.cpp,
// and report.js through the constants tools/report/schema_js.py makes from these lists), and
// tensor_view.events.columns writes the events' names into the file.
#define GG_SCHEMA_POINT_COLUMNS(X) X(t_ns) X(bytes)  // timeline.points: the process's live bytes
#define GG_SCHEMA_BLOCK_COLUMNS(X) X(address) X(bytes) X(stack) X(age_ns)
#define GG_SCHEMA_SEGMENT_COLUMNS(X) X(address) X(bytes) X(stack) X(api)
#define GG_SCHEMA_MAPPING_COLUMNS(X) X(address) X(bytes)
#define GG_SCHEMA_TENSOR_POINT_COLUMNS(X) X(t_ns) X(allocated) X(reserved)
#define GG_SCHEMA_EVENT_COLUMNS(X) X(t_ns) X(action) X(address) X(bytes) X(allocated) X(reserved) X(device)

#define GG_SCHEMA_COLUMN_INDEX(name) name,
#define GG_SCHEMA_COLUMN_NAME(name) #name,
// A row's columns as indices: point_row::t_ns is 0. kColumns: how many.
#define GG_SCHEMA_ROW(row, COLUMNS)                                      \
    namespace row {                                                      \
    enum Column : unsigned { COLUMNS(GG_SCHEMA_COLUMN_INDEX) kColumns }; \
    }
GG_SCHEMA_ROW(point_row, GG_SCHEMA_POINT_COLUMNS)
GG_SCHEMA_ROW(block_row, GG_SCHEMA_BLOCK_COLUMNS)
GG_SCHEMA_ROW(segment_row, GG_SCHEMA_SEGMENT_COLUMNS)
GG_SCHEMA_ROW(mapping_row, GG_SCHEMA_MAPPING_COLUMNS)
GG_SCHEMA_ROW(tensor_point_row, GG_SCHEMA_TENSOR_POINT_COLUMNS)
GG_SCHEMA_ROW(event_row, GG_SCHEMA_EVENT_COLUMNS)
namespace event_row {
constexpr const char *kNames[] = {GG_SCHEMA_EVENT_COLUMNS(GG_SCHEMA_COLUMN_NAME)};
}
#undef GG_SCHEMA_ROW
#undef GG_SCHEMA_COLUMN_INDEX
#undef GG_SCHEMA_COLUMN_NAME

// The events' action column: one letter each.
namespace action {
constexpr char kAlloc = 'a';         // a block handed out
constexpr char kFree = 'f';          // a block taken back
constexpr char kOom = 'o';           // a request the allocator could not serve
constexpr char kSegmentAlloc = 'S';  // device memory got from the driver
constexpr char kSegmentFree = 's';   // device memory given back
constexpr bool known(char c) {
    return c == kAlloc || c == kFree || c == kOom || c == kSegmentAlloc || c == kSegmentFree;
}
}  // namespace action

}  // namespace gg::schema
