// Reports: a consistent snapshot taken under the tracker's locks, turned into JSON outside them
// (docs/report-schema.md), written atomically (a temporary file, then rename) into
// GPUGUARD_REPORT_DIR under a name no concurrent process can collide with. Written as they are made
// (shim/report/json_out.h): the sections of bounded size are made whole, the tensor view's rows go
// to the file one at a time, so that writing the largest report costs its largest row in memory.
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "shim/api/api.h"
#include "shim/stacks/stacks.h"

namespace gg::report {

// kAllocatorOom: PyTorch's caching allocator refused a request without a driver call failing (its
// memory fraction, say).
enum class Reason { kQuota, kDriverOom, kExit, kRequest, kSignal, kWarnAt, kAllocatorOom };
const char *reason_name(Reason r);

struct Failure {
    Api api, driver_api;
    uint64_t bytes;
    int ordinal;
    int result;
    stacks::StackId stack;
    int episode;
    uint64_t first_unix_ns;
    int thread;
};

// Writes one report and returns its path, or "" (with a line on stderr) when it could not be
// written or the cap on automatic reports was reached. `ordinal` is the device the report is about.
std::string write(Reason reason, const std::string &message, const Failure *failure, int ordinal);
// Builds the report again and replaces the file at `path` with it (the report of an episode that
// learnt more after it was written: PyTorch's own view of its out-of-memory). Not counted against
// GPUGUARD_MAX_REPORTS. False (with a line) when it could not be written.
bool rewrite(const std::string &path, Reason reason, const std::string &message, const Failure *failure, int ordinal);

// A new episode starts (called under the episode lock, so that failures that join it while its
// report is being written are counted in it); then one more failed call in the current episode.
void begin_episode(int id, uint64_t first_unix_ns);
void note_failed_call();
// fork(): the child writes its own reports, counted from zero (GPUGUARD_MAX_REPORTS is per process).
void reset_after_fork();
void lock_for_fork();
void unlock_after_fork();

// A module that adds a section to every report (cuDNN's, the tensor view's) registers it once.
using SectionFn = void (*)(nlohmann::json &report);
void add_section(SectionFn fn);
// A section written as it is made, its rows one at a time (the tensor view's: up to 50,000 blocks
// and 218,000 events), after the sections made whole.
class JsonOut;
class SectionWriter {
public:
    SectionWriter(JsonOut &out, int ordinal, std::set<stacks::StackId> *used)
        : out(out), ordinal(ordinal), used_(used) {}
    JsonOut &out;
    const int ordinal;  // the report's device (-1 when it names none)
    // The reference to a stack ("s<id>", or null for none), its frames written in the report's "stacks".
    nlohmann::json stack(stacks::StackId id);

private:
    std::set<stacks::StackId> *used_;
};
using StreamedSectionFn = void (*)(SectionWriter &section);
void add_streamed_section(StreamedSectionFn fn);

// For a section: the reference to a stack ("s<id>", or null for none), its frames added to the
// report's "stacks" when they are not there yet.
nlohmann::json referenced_stack(nlohmann::json &report, stacks::StackId id);
// For a section: the ordinal of the report's device (-1 when it names none).
int ordinal_of(const nlohmann::json &report);
// {"allocations", "context_and_modules", "graphs", "pool_reserve"} of `total`: the ledger's kinds
// (common/ledger/layout.h), the allocations the rest.
nlohmann::json kinds_json(uint64_t total, const uint64_t *kinds);

// Builds the report without writing it (tests, benchmarks).
nlohmann::json build(Reason reason, const std::string &message, const Failure *failure, int ordinal);

}  // namespace gg::report
