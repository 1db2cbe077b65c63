#include "shim/core/state.h"

namespace gg {

uint64_t State::limit_for(int ordinal, const char *uuid, uint64_t physical_total) const {
    if (fail_closed) return 0;
    return spec.for_device(ordinal, uuid).resolve(physical_total);
}

namespace detail {
std::atomic<State *> g_ready{nullptr};
std::atomic<State *> g_built{nullptr};
}  // namespace detail

void state_recheck() { detail::g_ready.store(nullptr); }

State *built_state() { return detail::g_built.load(std::memory_order_acquire); }

void install_state_for_test(State *s) {
    detail::g_built.store(s, std::memory_order_release);
    detail::g_ready.store(s, std::memory_order_release);
}

}  // namespace gg
