// The physical machine the test doubles pretend to be. The fake driver and the fake NVML both read it
// from here, so that a test sees one consistent machine: the same device count, capacities and UUIDs
// whichever library it asks (the shim cross-checks the driver's UUIDs against NVML's).
//
//   FAKE_CUDA_DEVICES=N      physical devices (default 1, at most kMaxDevices)
//   FAKE_CUDA_MEM=BYTES      capacity of every device (default 16 GiB)
//   FAKE_CUDA_MEM_<i>=BYTES  capacity of physical device i, overriding FAKE_CUDA_MEM
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fake {

constexpr int kMaxDevices = 16;
constexpr uint64_t kDefaultMem = 17179869184ull;  // 16 GiB

// A plain decimal integer, or `fallback` when unset or malformed (a typo must not silently become 0).
inline uint64_t env_u64(const char *name, uint64_t fallback) {
    const char *s = std::getenv(name);
    if (!s || !*s) return fallback;
    char *end = nullptr;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (*end != '\0' || *s == '-') {
        std::fprintf(stderr, "fake: ignoring %s=%s (not a plain integer)\n", name, s);
        return fallback;
    }
    return v;
}

inline int physical_count() {
    uint64_t n = env_u64("FAKE_CUDA_DEVICES", 1);
    return n > static_cast<uint64_t>(kMaxDevices) ? kMaxDevices : static_cast<int>(n);
}

inline uint64_t physical_capacity(int phys) {
    uint64_t all = env_u64("FAKE_CUDA_MEM", kDefaultMem);
    return env_u64(("FAKE_CUDA_MEM_" + std::to_string(phys)).c_str(), all);
}

// Deterministic UUID of a PHYSICAL device: "fake" in the first four bytes (easy to spot in a report),
// the index in the last one (so UUIDs differ), a mix in between so they do not look all alike.
inline void uuid_bytes(int phys, unsigned char out[16]) {
    const unsigned char head[4] = {'f', 'a', 'k', 'e'};
    for (int i = 0; i < 16; i++) out[i] = static_cast<unsigned char>(0x5a + 37 * i + 101 * phys);
    for (int i = 0; i < 4; i++) out[i] = head[i];
    out[15] = static_cast<unsigned char>(phys);
}

// NVML's form of the same UUID: "GPU-" and 8-4-4-4-12 lowercase hex (41 characters and a NUL).
inline std::string uuid_string(int phys) {
    unsigned char b[16];
    uuid_bytes(phys, b);
    char s[64];
    std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                  b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return s;
}

}  // namespace fake
