#include "shim/stacks/reuse.h"

#include "common/base/hot.h"

namespace gg::stacks::reuse {

SiteCache::SiteCache() { counts().threads.fetch_add(1, std::memory_order_relaxed); }

GG_HOT SiteCache::Slot *SiteCache::find(uint64_t key) {
    Slot *set = set_of(key);
    for (int w = 0; w < kWays; ++w)
        if (set[w].key == key) return &set[w];
    return nullptr;
}

GG_HOT SiteCache::Verdict SiteCache::lookup(uint64_t key, StackId *id, uint64_t *whole) {
    Slot *s = find(key);
    if (!s) return Verdict::kMiss;
    s->used = ++clock_;
    if (s->deep) return Verdict::kDeep;
    if (s->unstable) return Verdict::kUnstable;
    if (s->id == 0) return Verdict::kMiss;
    *id = s->id;
    if (whole) *whole = s->whole;
    s->hits++;
    if (due(s->hits)) return Verdict::kCheck;
    return s->whole && deep_due(s->hits) ? Verdict::kCheckDeep : Verdict::kReuse;
}

void SiteCache::mark_deep(uint64_t key) {
    Slot *s = find(key);
    if (!s || s->deep) return;
    s->deep = true;
    counts().deep_sites.fetch_add(1, std::memory_order_relaxed);
}

void SiteCache::store(uint64_t key, StackId id, uint64_t whole) {
    Slot *s = find(key);
    if (s && (s->unstable || s->deep)) return;  // stays known as unstable, or as deep
    if (!s) {
        Slot *set = set_of(key);
        s = &set[0];  // an empty way, else the least recently used
        for (int w = 0; w < kWays && s->key; ++w)
            if (!set[w].key || set[w].used < s->used) s = &set[w];
        if (s->key) counts().evicted.fetch_add(1, std::memory_order_relaxed);
    }
    Slot fresh;
    fresh.key = key;
    fresh.whole = whole;
    fresh.id = id;
    fresh.used = ++clock_;
    if (s->key == key) {  // a site's stack replaced: what its key has shown so far stays
        fresh.extension_misses = s->extension_misses;
        fresh.whole_changes = s->whole_changes;
    }
    *s = fresh;
}

bool SiteCache::may_change_whole(uint64_t key) {
    Slot *s = find(key);
    if (!s) return false;
    if (s->whole_changes + 1 >= kMaxChanges) return false;
    s->whole_changes++;
    return true;
}

bool SiteCache::extensions_help(uint64_t key) {
    Slot *s = find(key);
    return s && s->extension_misses < kMaxExtensionMisses;
}

void SiteCache::missed_extension(uint64_t key) {
    if (Slot *s = find(key); s && s->extension_misses < kMaxExtensionMisses) s->extension_misses++;
}

void SiteCache::checked(uint64_t key, bool same, StackId fresh) {
    Slot *s = find(key);
    if (!s || same) return;
    counts().changes.fetch_add(1, std::memory_order_relaxed);
    if (++s->changes >= kMaxChanges) {
        s->unstable = true;
        counts().unstable_sites.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    s->id = fresh;
    s->hits = 0;
}

namespace {
Counts g_counts;  // constant-initialised atomics: nothing runs at load or exit
}  // namespace

GG_HOT Counts &counts() { return g_counts; }

}  // namespace gg::stacks::reuse
