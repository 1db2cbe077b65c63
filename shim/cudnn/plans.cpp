#include "shim/cudnn/plans.h"

#include <array>
#include <atomic>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "shim/base/race_once.h"

namespace gg::cudnn::plans {
namespace {

// Sharded like the tracker: Create/Destroy run for every backend descriptor, Execute for every
// convolution, possibly from several threads.
constexpr int kShards = 16;
struct Shard {
    std::mutex mu;
    std::unordered_map<const void *, int64_t> size;
};
// Never destroyed (shim/base/race_once.h): hooks may run while exit() runs static destructors.
std::atomic<std::array<Shard, kShards> *> g_shards_made{nullptr};
std::array<Shard, kShards> &shards() { return never_destroyed(g_shards_made); }

Shard &shard_of(const void *p) { return shards()[(std::hash<const void *>()(p) >> 4) % kShards]; }

}  // namespace

void created(const void *plan) {
    Shard &s = shard_of(plan);
    std::lock_guard<std::mutex> lock(s.mu);
    s.size[plan] = kUnknown;
}

void destroyed(const void *desc) {
    Shard &s = shard_of(desc);
    std::lock_guard<std::mutex> lock(s.mu);
    s.size.erase(desc);
}

bool is_plan(const void *desc) {
    Shard &s = shard_of(desc);
    std::lock_guard<std::mutex> lock(s.mu);
    return s.size.count(desc) != 0;
}

void set_workspace(const void *plan, int64_t bytes) {
    Shard &s = shard_of(plan);
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.size.find(plan);
    if (it != s.size.end()) it->second = bytes;
}

int64_t workspace(const void *plan) {
    Shard &s = shard_of(plan);
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.size.find(plan);
    return it == s.size.end() ? kUnknown : it->second;
}

void lock_for_fork() {
    for (Shard &s : shards()) s.mu.lock();
}
void unlock_after_fork() {
    for (int i = kShards - 1; i >= 0; i--) shards()[i].mu.unlock();
}

}  // namespace gg::cudnn::plans
