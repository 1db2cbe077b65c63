// A value computed once per process without holding any lock while it is computed.
//
// For initialisers that take the dynamic loader's lock (dlopen, dlsym, dladdr). A C++ function-local
// static, std::call_once or pthread_once holds its guard while the initialiser runs; a thread that
// already holds the loader's lock (inside dlopen, running a library constructor that calls CUDA)
// and then waits for that guard would wait forever for a thread that waits for the loader's lock.
// Here every first caller computes the value itself (the computation must be idempotent: dlopen of
// a loaded library, a lookup) and the first result published is kept by everyone.
#pragma once
#include <atomic>

namespace gg {

template <typename T, typename Compute>
const T &race_once(std::atomic<const T *> &slot, Compute &&compute) {
    const T *v = slot.load(std::memory_order_acquire);
    if (v) return *v;
    const T *mine = new T(compute());
    if (slot.compare_exchange_strong(v, mine, std::memory_order_acq_rel)) return *mine;
    delete mine;  // another thread published first: the same value
    return *v;
}

}  // namespace gg

namespace gg {

// A process-wide object made on first use (as race_once, without a lock held while it is made) and
// never destroyed. For the shim's tables: a hook can run before the shim's static initialisers (a
// library constructor that allocates, initialised before us) and after its static destructors (a
// thread of an exiting program, or the report thread, while exit() runs them): a table destroyed at
// exit was read by a signal report (ThreadSanitizer, heap-use-after-free).
template <typename T>
T &never_destroyed(std::atomic<T *> &slot) {
    T *p = slot.load(std::memory_order_acquire);
    if (p) return *p;
    T *mine = new T();
    if (slot.compare_exchange_strong(p, mine, std::memory_order_acq_rel)) return *mine;
    delete mine;
    return *p;
}

}  // namespace gg
