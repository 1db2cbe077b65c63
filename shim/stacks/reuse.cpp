#include "shim/stacks/reuse.h"

namespace gg::stacks::reuse {

SiteCache::Verdict SiteCache::lookup(uint64_t key, StackId *id) {
    Slot &s = slot_of(key);
    if (s.key != key || s.id == 0) return Verdict::kMiss;
    if (s.unstable) return Verdict::kMiss;
    *id = s.id;
    s.hits++;
    return due(s.hits) ? Verdict::kCheck : Verdict::kReuse;
}

void SiteCache::store(uint64_t key, StackId id) {
    Slot &s = slot_of(key);
    if (s.key == key && s.unstable) return;  // stays known as unstable
    s = Slot{key, id, 0, 0, false};
}

void SiteCache::checked(uint64_t key, bool same, StackId fresh) {
    Slot &s = slot_of(key);
    if (s.key != key || same) return;
    counts().changes.fetch_add(1, std::memory_order_relaxed);
    if (++s.changes >= kMaxChanges) {
        s.unstable = true;
        counts().unstable_sites.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    s.id = fresh;
    s.hits = 0;
}

namespace {
Counts g_counts;  // constant-initialised atomics: nothing runs at load or exit
}  // namespace

Counts &counts() { return g_counts; }

}  // namespace gg::stacks::reuse
