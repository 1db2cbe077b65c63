// The shared per-container ledger: one small file, mapped by every process of a container that names
// the same GPUGUARD_LEDGER path, holding per-device limits and per-process byte counts.
//
// Why it is shaped this way (the peers' failures, docs/platform-facts.md): a process-shared lock plus an owner pid
// hangs everyone when its holder is SIGKILLed; a single "used" counter updated beside a per-process
// one leaks or goes negative when a process dies between the two updates; compacting slots leaves
// other processes with stale pointers. So:
//   - there is no lock at all: every counter is a lock-free std::atomic<uint64_t> in the mapping;
//   - the only counters are per (process slot, device); the container's usage is their sum, so a
//     dead process's bytes are exactly its slot's, and reclaiming them is one exchange per device;
//   - admission adds to its own slot first, then sums all slots, and backs out if the sum passes the
//     limit. With sequentially consistent operations, of two racing admissions the later one always
//     sees the earlier one's bytes, so admitted bytes together never exceed the limit;
//   - slots never move; a freed slot is reused in place;
//   - who owns a slot is not written in the file but held by the kernel: an open-file-description
//     lock on the slot's bytes (common/ledger/processes.cpp), taken once when the process joins (never
//     per allocation) and dropped by the kernel when the process dies or execs. A slot whose lock
//     is free is dead whatever it says, so a process killed at any instruction of claiming,
//     reclaiming or leaving a slot leaves nothing that is not taken back, and no pid is needed:
//     processes in other PID namespaces share one ledger safely.
// The file is created complete (written to a temporary name, then linked into place), so no process
// ever maps a half-initialised ledger.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/ledger/layout.h"

namespace gg::ledger {

std::string uuid_string(const uint8_t uuid[16]);  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"

struct OpenOptions {
    std::string path;        // empty: a private, per-process ledger (anonymous memory)
    std::string limit_spec;  // this process's wish; "" for none
    int group = -1;          // gid for mode 0660 (GPUGUARD_LEDGER_GROUP), -1 for 0600
    bool read_only = false;  // gpuguard top
};

class Ledger {
public:
    // Opens or creates. On failure returns null and sets *error to one line naming the file and the
    // problem; the file is left as it was. *notice gets a line worth printing (a differing limit).
    static Ledger *open(const OpenOptions &options, std::string *error, std::string *notice);
    ~Ledger();

    const std::string &path() const { return path_; }  // "" for a private ledger
    bool shared() const { return !path_.empty(); }
    std::string limit_spec() const;

    // The device's index in this ledger, registering it on first use with the limit computed by the
    // caller. Returns -1 when the table is full. *limit_in_force, when given, receives the limit that
    // stands (the first registrant's), read once with the index; it is left alone on -1.
    int device_index(const uint8_t uuid[16], uint64_t limit_if_new, uint64_t physical_total, const char *name,
                     uint64_t *limit_in_force = nullptr);
    uint64_t limit(int dev) const { return header_->devices[dev].limit.load(); }

    // This process's slot; claims one on first use and again after fork (a child must never write
    // into its parent's slot). Returns false when every slot is held by a live process.
    bool join();
    bool joined() const;  // whether this process holds a slot now
    // Whether this process's last join() failed because every slot was held by a live process (and
    // not because the file could not be opened again, which says so itself): what a refusal says.
    bool slots_all_held() const;
    void on_fork_child();  // called in the child: forget the parent's slot and its lock
    // A clean exit: the driver frees the process's memory, so its bytes leave the ledger at once
    // (a killed process's are reclaimed by the others instead).
    void leave();

    // Admission: true and the bytes are charged to this process, or false and nothing changed.
    // *container_used receives the container's usage on the device as seen by the decision. No sum
    // wraps: a request larger than the limit, or one that would wrap a count, is refused uncharged.
    bool try_charge(int dev, uint64_t bytes, uint64_t *container_used);
    // Unconditional charge (an allocation that grew after admission, e.g. a pitch); false, and
    // nothing charged, when the count would wrap or the process has no slot.
    bool charge(int dev, uint64_t bytes);
    // Takes back what a charge added: exactly `bytes`, clamped at zero, never more. Returns the bytes
    // actually released (less than asked when the slot held less: a bug or a foreign pointer).
    uint64_t release(int dev, uint64_t bytes);

    uint64_t container_used(int dev) const;
    uint64_t own_bytes(int dev) const;
    uint64_t own_peak(int dev) const;

    // What this process holds beside its allocations, by kind (layout.h, Kind;
    // common/ledger/kinds.cpp). Each keeps bytes[dev] the total that admission sums, and moves the
    // kind's counter with it; the allocations are the rest. try_charge_kind admits as try_charge
    // does; the others are unconditional (memory the driver has already taken).
    bool try_charge_kind(int dev, Kind k, uint64_t bytes, uint64_t *container_used);
    void charge_kind(int dev, Kind k, uint64_t bytes);
    uint64_t release_kind(int dev, Kind k, uint64_t bytes);  // clamped: returns what was released
    void set_kind(int dev, Kind k, uint64_t bytes);          // charges or releases the difference
    // Moves bytes between a kind and the allocations, the total unchanged: an allocation drawn from
    // a pool's reserve, a free that gives its bytes back to the pool. Returns what was moved.
    uint64_t kind_to_allocations(int dev, Kind k, uint64_t at_most);
    void allocations_to_kind(int dev, Kind k, uint64_t bytes);
    uint64_t own_kind(int dev, Kind k) const;

    // What a CUDA context costs on the device, as measured (layout.h, DeviceCost): 0 while unknown.
    uint64_t context_cost(int dev, CostSource *source) const;
    // Keeps the measurement when its source is better than the one the ledger holds (or the first).
    bool offer_context_cost(int dev, uint64_t bytes, CostSource source);
    // While no cost is known, one process at a time measures it: claim_ returns true for the one
    // that may (the cost unknown and nobody alive measuring: the measurer holds an OFD lock on the
    // device's cost record, which its death frees, as a slot's), measurer() the pid measuring (0:
    // none; for people, never for liveness), drop_ gives the claim up (after the offer of the
    // measurement, or when it failed) and the lock with it. See shim/usage/context.cpp.
    bool claim_context_measurement(int dev);
    int context_measurer(int dev) const;
    void drop_context_claim(int dev);

    // Frees the slots of processes that died. Returns how many were reclaimed. `periodic` limits it
    // to once per 500 ms across all processes of the ledger.
    int reclaim_dead(bool periodic);

    // The counters `gpuguard exporter` reads: a refusal by the quota on a device, a report written.
    // No-ops on a read-only view.
    void count_refusal(int dev);
    void count_report();
    struct Counters {
        uint64_t reports_written, reclaimed_processes;
    };
    Counters counters() const;

    // Snapshot for reports and `gpuguard top`.
    struct DeviceView {
        int index;
        std::string uuid, name;
        uint64_t limit, used, peak, physical_total;
        std::array<uint64_t, kKinds> kinds;  // of `used`, by kind; allocations are the rest
        uint64_t context_cost;               // 0 while unknown
        CostSource context_source;
        uint64_t refusals;  // by the quota, counted by every process of the ledger
    };
    struct ProcessView {
        int slot;
        uint64_t generation;  // the slot's claims, this one's included: with slot, this process alone
        int pid;              // in its own PID namespace
        std::string command;
        std::vector<uint64_t> bytes, peak;                // per device index
        std::vector<std::array<uint64_t, kKinds>> kinds;  // of bytes, per device index
        bool alive, reclaimed, self;
        bool other_namespace;  // its pid is in another PID namespace than the reader's
    };
    // devices()'s `used` counts the processes alive now; container_used() counts every slot until
    // the dead ones are reclaimed (what admission sees).
    std::vector<DeviceView> devices() const;
    std::vector<ProcessView> processes() const;

    Header *header() const { return header_; }  // tests only

    // The file truncated under a running process (by hand, or by a tool that rewrites it in place):
    // touching the mapping past the new end raises SIGBUS, and no check before each access could
    // close that window. So the shim's SIGBUS handler (shim/core/sigbus_rescue.cpp) calls rescue_fault(), which
    // is async-signal-safe: when the address lies in this mapping, the mapping is replaced in place
    // (mremap) by a private copy of what this process knew of the header and the device table
    // (remember()), its own slot live in it, and true is returned; the faulting access then
    // completes on the copy. From then on the quota is this process's alone (other processes'
    // usage is no longer seen); take_recovery() tells the one caller that must put back into its
    // slot the bytes this process charged before rescued_at_ns() (CLOCK_MONOTONIC), which were lost
    // with the file (add_own_bytes(), from the shim's tracker).
    bool rescue_fault(const void *addr);
    bool take_recovery();
    uint64_t rescued_at_ns() const { return rescued_at_ns_.load(); }
    void add_own_bytes(int dev, uint64_t bytes);
    // Refreshes the private copy that rescue_fault() restores. Not hot: at open and after each
    // device lookup.
    void remember();

    // Tests only: called at each step of claiming a slot, so that a test can end the process there
    // (as a SIGKILL would) and check that nothing leaks.
    static void (*claim_step_for_test)(int step);

private:
    Ledger() = default;
    Header *header_ = nullptr;
    size_t map_size_ = 0;
    std::string path_;
    // The file, open while the ledger is: its OFD locks are this process's ownership of its slot.
    // fd_pid_: the process that opened this description (a forked child opens its own).
    int fd_ = -1;
    std::atomic<int> fd_pid_{0};
    std::atomic<Slot *> slot_{nullptr};
    std::atomic<int> slot_pid_{0};
    std::atomic<int> full_pid_{0};  // the process whose last join() found every slot held
    // Serialises this process's threads around the locks it takes (join, reclaim_dead, leave,
    // remember): the kernel does not tell two threads of one open file description apart.
    std::mutex join_mu_;
    std::mutex device_mu_;  // the same, for device entries (device_index)
    bool read_only_ = false;
    uint64_t pid_ns_ = 0;
    // rescue_fault(): the private copy (a mapping of the ledger's size, shared ledgers only) and
    // its state: kIntact, kRemembering (remember() is writing the copy), kRescuing, kRescued,
    // kRecovered (own bytes put back), kFailed.
    Header *remembered_ = nullptr;
    std::atomic<int> rescue_{0};
    std::atomic<uint64_t> rescued_at_ns_{0};
    uint64_t sum(int dev) const;
    bool owner_alive(int i) const;  // slot i's owner (common/ledger/processes.cpp)
    bool own_descriptor();          // an open file description of this process's own
    // Ledger::open's steps (common/ledger/open.cpp).
    bool adopt(int fd, void *map, std::string *error);
    void drop();
    enum class Publish { kDone, kExists, kFailed };
    Publish publish_new(const OpenOptions &o, bool replace, std::string *error);
    void finish_open();
    // What one try at the path came to: opened (return it), try again, stop (*error says why), or,
    // for replace_if_idle alone, the file's limit stands (go on and join it).
    enum class Step { kOpened, kAgain, kStop, kStands };
    static Ledger *open_private(const OpenOptions &o, std::string *error);
    Step open_attempt(const OpenOptions &o, int attempt, int *cause, std::string *error, std::string *notice);
    Step create_at_path(const OpenOptions &o, int *cause, std::string *error);
    Step replace_if_idle(const OpenOptions &o, int attempt, int *cause, std::string *error);
    Step replace_idle(const OpenOptions &o, int *cause, std::string *error);
    Step join_found(const OpenOptions &o, int attempt, std::string *error);
    std::atomic<uint64_t> *own_kind_counter(int dev, Kind k) const;  // null without a slot
    // A thread of this process measures the context cost of the device: it holds the lock on the
    // device's cost record (kinds.cpp), which the kernel does not tell apart between our threads.
    std::atomic<bool> measuring_[kMaxDevices] = {};
};

// Zeroes what a slot holds by kind: when it is claimed, reclaimed or left (kinds.cpp).
void clear_kinds(Header *h, const Slot &s);

// Validation of a mapped file, shared with the fuzz target: "" when good, else why not.
std::string validate(const void *data, size_t size);

}  // namespace gg::ledger
