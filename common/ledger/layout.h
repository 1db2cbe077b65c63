// The ledger file's layout: what every process of a container maps (common/ledger/ledger.h says why
// it is shaped this way). A change here is a new kLayoutVersion: processes of two versions must never
// share one file.
#pragma once
#include <atomic>
#include <cstdint>

namespace gg::ledger {

constexpr int kMaxDevices = 32;
constexpr int kMaxSlots = 512;
constexpr uint32_t kLayoutVersion = 2;
constexpr uint64_t kNoLimit = UINT64_MAX;
static_assert(std::atomic<uint64_t>::is_always_lock_free, "ledger counters must be address-free");

enum DeviceState : uint32_t { kDeviceFree = 0, kDeviceClaiming = 1, kDeviceReady = 2 };
enum SlotState : uint32_t { kSlotFree = 0, kSlotClaiming = 1, kSlotLive = 2, kSlotReclaiming = 3, kSlotReclaimed = 4 };

struct DeviceEntry {
    std::atomic<uint32_t> state;
    uint32_t reserved;
    uint8_t uuid[16];
    std::atomic<uint64_t> limit;           // kNoLimit when none
    std::atomic<uint64_t> peak;            // high-water mark of the container's bytes on this device
    std::atomic<uint64_t> physical_total;  // as the driver reported it
    char name[64];
};

struct Slot {
    std::atomic<uint32_t> state;
    std::atomic<int32_t> pid;
    std::atomic<uint64_t> start_ticks;  // /proc/<pid>/stat field 22: tells a reused pid from the old process
    char command[96];
    std::atomic<uint64_t> bytes[kMaxDevices];
    std::atomic<uint64_t> peak[kMaxDevices];
};

// What `gpuguard exporter` counts besides usage: every process of the ledger adds to them.
struct ExportCounters {
    std::atomic<uint64_t> refusals[kMaxDevices];  // allocations refused by the quota, per device
    std::atomic<uint64_t> reports_written;        // reports written by the ledger's processes
};

struct Header {
    char magic[8];  // "GPUGLEDG"
    uint32_t layout_version;
    uint32_t header_size;
    uint64_t file_size;
    uint32_t max_devices;
    uint32_t max_slots;
    uint64_t created_unix_ns;
    int32_t creator_pid;
    uint32_t reserved;
    char limit_spec[256];             // the limit as the creator gave it; empty for none. Never changes.
    std::atomic<uint32_t> slot_high;  // slots [0, slot_high) have been used at least once
    uint32_t reserved2;
    std::atomic<uint64_t> reclaimed_processes;
    std::atomic<uint64_t> last_reclaim_ns;  // CLOCK_MONOTONIC of the last scan for dead processes
    DeviceEntry devices[kMaxDevices];
    Slot slots[kMaxSlots];
    ExportCounters counters;  // since layout 2
};

}  // namespace gg::ledger
