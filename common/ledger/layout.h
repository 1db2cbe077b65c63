// The ledger file's layout: what every process of a container maps (common/ledger/ledger.h says why
// it is shaped this way). A change here is a new kLayoutVersion: processes of two versions must never
// share one file.
#pragma once
#include <atomic>
#include <cstdint>

namespace gg::ledger {

constexpr int kMaxDevices = 32;
constexpr int kMaxSlots = 512;
// 2: a slot's owner is alive while it holds an open-file-description lock on the slot's bytes
// (liveness no longer by pid: version-1 processes would reclaim version-2 slots), a slot records
// its PID namespace instead of its start time.
// 3: Header::retired, and the replacement protocol of Ledger::open around it.
// 4: limit_spec holds 4096 bytes: every spec the parser accepts (common/units/size_spec.h).
// 5: what each process holds beside its allocations, by kind (SlotKinds), and the measured cost of a
// context per device (DeviceCost), both appended after the slots.
// 6: the exporter's counters (ExportCounters), appended after the context costs.
// 7: Slot::generation, so that the exporter names each process by something no other process of the
// ledger shares (two PID namespaces share pids).
constexpr uint32_t kLayoutVersion = 7;
constexpr uint64_t kNoLimit = UINT64_MAX;
static_assert(std::atomic<uint64_t>::is_always_lock_free, "ledger counters must be address-free");

// Ownership is not in these states but in the kernel: a process owns a slot (or a device entry it
// registers) while it holds an F_OFD_SETLK write lock on that slot's (entry's) byte range of the
// file, taken before it writes there. The kernel drops the lock when the process dies, by any
// signal, in any PID namespace, and at exec (the descriptor is close-on-exec). So a slot whose lock
// is free belongs to nobody, whatever its state says: the state is what its last owner got to write.
// Free and reclaimed slots hold no bytes.
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
    std::atomic<int32_t> pid;      // in the owner's PID namespace: for people, never for liveness
    std::atomic<uint64_t> pid_ns;  // that namespace's inode (/proc/self/ns/pid), 0 when unknown
    // How many times the slot has been claimed, this owner's claim included: with the slot's index,
    // one process of the ledger for its whole life (an inode number and a pid are both reused).
    std::atomic<uint64_t> generation;
    char command[96];
    std::atomic<uint64_t> bytes[kMaxDevices];
    std::atomic<uint64_t> peak[kMaxDevices];
};

// What the driver takes for a process beside its allocations (docs/architecture.md, "What the quota
// counts"). A slot's bytes[d] is the total that admission sums; these say how much of it is which
// kind, and the allocations are the rest. Kept apart from Slot, indexed like the slots, so that a
// reader of allocations alone never touches them.
enum Kind : int {
    kContext = 0,  // CUDA contexts and the modules and libraries loaded into them
    kGraphs = 1,   // CUDA graphs' memory pool (graph memory nodes)
    kPools = 2,    // stream-ordered pools' memory reserved beyond their live allocations
    kKinds = 3
};
struct SlotKinds {
    std::atomic<uint64_t> bytes[kMaxDevices][kKinds];
};
// The memory a CUDA context costs on a device, as first measured (shim/usage/context.cpp), so that a
// process that cannot measure its own charges what another one measured.
// kCostMeasuring: no cost yet, and a process is measuring it (its context is the only one made on
// the device meanwhile; the others of the ledger wait for it). The measurer holds an OFD write lock
// on the record's bytes while it measures, which says it is alive (its death frees the lock); the
// pid that stands in the bytes is for people, never for liveness (a pid is reused, or belongs to
// another PID namespace).
enum CostSource : uint32_t { kCostUnknown = 0, kCostDeviceDelta = 1, kCostOwnProcess = 2, kCostMeasuring = 3 };
struct DeviceCost {
    std::atomic<uint64_t> context;  // bytes << 8 | CostSource: one word, so bytes and source agree
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
    char limit_spec[4096];            // the limit as the creator gave it; empty for none. Never changes.
    std::atomic<uint32_t> slot_high;  // slots [0, slot_high) have been used at least once
    // 1 while a process that found this ledger idle replaces it (it holds the lock on the magic's
    // bytes meanwhile), and for good once it has: a process that joins and then reads 1 leaves and
    // opens the path again (Ledger::open says why this makes the decision one).
    std::atomic<uint32_t> retired;
    std::atomic<uint64_t> reclaimed_processes;
    std::atomic<uint64_t> last_reclaim_ns;  // CLOCK_MONOTONIC of the last scan for dead processes
    DeviceEntry devices[kMaxDevices];
    Slot slots[kMaxSlots];
    SlotKinds kinds[kMaxSlots];     // kinds[i] belongs to slots[i]
    DeviceCost costs[kMaxDevices];  // costs[i] belongs to devices[i]
    ExportCounters counters;        // since layout 6
};

}  // namespace gg::ledger
