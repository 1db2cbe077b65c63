// Parsing of sizes and limits, as users write them in GPUGUARD_MEM_LIMIT, `gpuguard run --limit`,
// HAMi-core's CUDA_DEVICE_MEMORY_LIMIT and GPUGUARD_CUDNN_WORKSPACE_LIMIT.
#pragma once
// (Sizes for people: common/units/human.h.)
#include <cstdint>
#include <string>
#include <vector>

namespace gg {

// The one rule for units: every unit is a power of 1024, however it is spelt, case ignored. K, KiB and
// KB are 1024 bytes; M, MiB, MB 1024^2; G, GiB, GB 1024^3; T, TiB, TB 1024^4; B or no unit is bytes.
// "8GiB", "8G", "8g" (HAMi-core's and Docker's spelling), "512MiB", "4096", "1.5GiB". Returns false
// with a reason in *why for anything else (negative, empty, overflow, junk); the reason lists the units.
bool parse_size(const std::string &text, uint64_t *bytes, std::string *why);
// The rule, as the reason for an unknown unit and the documentation say it.
extern const char kUnitRule[];

// A note for a size or limit spec that uses an SI spelling (KB, MB, GB, TB), which some read as
// powers of 1000: "8GB is read as 8 GiB (8589934592 bytes): units are 1024-based". "" for none, and
// for a spec that does not parse. `gpuguard run` and `doctor` print it, so that 8GB is never taken
// as GiB without a word.
std::string si_spelling_note(const std::string &spec);

// One limit: bytes, or a percentage of the device's physical memory.
struct Limit {
    enum Kind { kNone, kBytes, kPercent } kind = kNone;
    uint64_t bytes = 0;
    double percent = 0;                               // 0 < percent <= 100
    uint64_t resolve(uint64_t physical_total) const;  // UINT64_MAX for kNone
    std::string str() const;                          // "2.00 GiB", "50%", "none"
};

// A whole specification: a default for every device, and per-device entries keyed by ordinal ("0")
// or by UUID ("GPU-5e1d..." or a unique prefix of it). "8GiB", "50%", "0=8GiB,1=4GiB",
// "4GiB,1=2GiB" (a default plus an override).
struct LimitSpec {
    Limit all;
    struct Entry {
        std::string key;  // ordinal digits, or a UUID (prefix) starting with "GPU-"
        Limit limit;
    };
    std::vector<Entry> per_device;
    bool empty() const { return all.kind == Limit::kNone && per_device.empty(); }
    // The limit of one device, given its ordinal in the caller's view and its UUID string.
    Limit for_device(int ordinal, const std::string &uuid) const;
};

// The longest spec the parser accepts: what the ledger's limit field holds (common/ledger/layout.h),
// so that every process reads back exactly the spec its creator wrote.
constexpr size_t kMaxLimitSpecLength = 4095;

// Text is printable ASCII: a control byte (a newline, a tab, an escape) or a byte that is not ASCII
// makes the whole spec malformed, and only spaces around the spec and its parts are ignored.
// Ordinals are numbers ("00" is device 0); UUID prefixes are hex digits and dashes after "GPU-", in
// any case (kept in lower case, as the driver writes them).
bool parse_limit(const std::string &text, Limit *out, std::string *why);
bool parse_limit_spec(const std::string &text, LimitSpec *out, std::string *why);

// The per-device entries of `spec` that select none of the devices a process sees (ordinals 0 to
// uuids.size() - 1, with these UUIDs): each as "key=limit", for the one line that says so. The shim
// and `gpuguard doctor` both ask this.
std::vector<std::string> unmatched_entries(const LimitSpec &spec, const std::vector<std::string> &uuids);

}  // namespace gg
