// One object of type T per thread, made at the thread's first get() and deleted when the thread
// exits. For the caches of the allocation path (stack reuse, unwind rules): no lock, nothing shared.
#pragma once
#include <pthread.h>

#include <atomic>
#include <new>

namespace gg {

template <class T>
class PerThread {
public:
    // nullptr when the object or its thread-exit key cannot be made: the caller goes without.
    T *get() { return mine_ ? mine_ : make(); }
    // This thread's object if it was made, else nullptr (nothing is made).
    T *peek() const { return mine_; }

private:
    T *make() {
        long key = key_.load(std::memory_order_acquire);
        if (key < 0) {
            pthread_key_t k;
            if (pthread_key_create(&k, destroy) != 0) return nullptr;
            long none = -1;
            if (key_.compare_exchange_strong(none, long(k), std::memory_order_acq_rel)) {
                key = long(k);
            } else {  // another thread made the key first
                pthread_key_delete(k);
                key = none;
            }
        }
        T *mine = new (std::nothrow) T();
        if (!mine) return nullptr;
        if (pthread_setspecific(pthread_key_t(key), mine) != 0) {
            delete mine;
            return nullptr;
        }
        return mine_ = mine;
    }
    static void destroy(void *p) {
        mine_ = nullptr;  // a later capture in this thread's exit path makes a fresh one
        delete static_cast<T *>(p);
    }

    std::atomic<long> key_{-1};  // the pthread key, once made; a plain global needs no constructor to run
    // initial-exec: the shim is preloaded, so its TLS is in the static block and a get() costs one
    // load, never a call into the loader (which may hold its lock while our hook runs).
    __attribute__((tls_model("initial-exec"))) static inline thread_local T *mine_ = nullptr;
};

}  // namespace gg
