// The tensor view's recent history: a ring of the last N block events of PyTorch's caching allocator
// (and the segments it made or gave back), kept for a report so that `gpuguard report --what-if`
// can replay them through a model of the allocator (tools/report/whatif/). Written from the c10 hook
// under PyTorch's allocator mutex, and from the driver hooks: one slot claimed with an atomic
// increment, no lock; a reader skips a slot that was being written while it read (a sequence number
// per slot, as a seqlock).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace gg::torch {

enum class Action : uint8_t {
    kAlloc = 1,     // a block handed out
    kFree,          // a block taken back
    kOom,           // a request the allocator could not serve
    kSegmentAlloc,  // device memory the process got from the driver (a segment, or a page mapped)
    kSegmentFree,   // device memory given back to the driver
};
char action_code(Action a);  // the report's letter (common/report/schema.h, schema::action)

struct Event {
    uint64_t t_ns;  // mono_ns()
    uint64_t address;
    int64_t bytes;       // as the event says (a free's is positive here; the action tells)
    uint64_t allocated;  // PyTorch's totals for the device after the event (segment events: the last seen)
    uint64_t reserved;
    int8_t device;
    Action action;
};

class EventRing {
public:
    // Sets the capacity once (the first call wins); 0 keeps no events. The memory is reserved then
    // and filled as events come.
    void configure(size_t capacity);
    void push(const Event &e);

    struct Copy {
        size_t capacity = 0;
        uint64_t recorded = 0;      // events pushed in the process's life
        uint64_t dropped = 0;       // recorded - kept: the oldest, overwritten
        std::vector<Event> events;  // oldest first
    };
    Copy copy() const;
    // The newest `newest` events held, oldest first, each handed to `fn` as it is read (a report
    // streams them, with no copy of a ring of a million events). dropped counts as copy()'s does, the
    // events held but older than those included; left_out counts those alone.
    struct Counts {
        size_t capacity = 0;
        uint64_t recorded = 0, dropped = 0, left_out = 0;
    };
    Counts visit_newest(size_t newest, const std::function<void(const Event &)> &fn) const;
    void clear();  // in a forked child: its parent's history is not its own

private:
    // An event as six words, each an atomic so that a reader racing a writer reads a torn event
    // (which the sequence number then rejects), never undefined behaviour.
    struct Slot {
        std::atomic<uint64_t> seq;  // index + 1 once written, 0 while being written
        std::atomic<uint64_t> w[6];
    };
    std::atomic<Slot *> slots_{nullptr};
    std::atomic<size_t> capacity_{0};
    std::atomic<uint64_t> next_{0};
};

EventRing &events();

}  // namespace gg::torch
