// Reads or clears the fake driver's ground truth (tests/fake/fake_truth.h), so that shell tests can
// compare what the shim believes with what the "driver" actually handed out.
//   fake_truth FILE          one line per physical device: "device <i> current <bytes> max <bytes>",
//                            then one per process holding bytes: "process <pid> device <i> bytes <n>"
//   fake_truth FILE reset    zeroes every counter (e.g. after a test killed a process with SIGKILL)
#include <cstdio>
#include <cstring>

#include "../fake/fake_truth.h"

int main(int argc, char **argv) {
    bool reset = argc == 3 && std::strcmp(argv[2], "reset") == 0;
    if (argc != 2 && !reset) {
        std::fprintf(stderr, "usage: fake_truth FILE [reset]\n");
        return 2;
    }
    fake::Truth *t = fake::truth_map(argv[1], reset);
    if (!t) {
        std::fprintf(stderr, "fake_truth: cannot map %s\n", argv[1]);
        return 1;
    }
    // The file does not record how many devices the driver had: print those FAKE_CUDA_DEVICES names.
    int n = fake::physical_count();
    for (int i = 0; i < fake::kMaxDevices; i++) {
        if (reset) {
            t->dev[i].current = 0;
            t->dev[i].max = 0;
        } else if (i < n) {
            std::printf("device %d current %llu max %llu\n", i,
                        static_cast<unsigned long long>(t->dev[i].current.load()),
                        static_cast<unsigned long long>(t->dev[i].max.load()));
        }
    }
    for (fake::TruthProc &p : t->proc) {
        if (reset) {
            p.pid = 0;
            for (auto &b : p.bytes) b = 0;
            continue;
        }
        for (int i = 0; i < n; i++)
            if (p.pid.load() && p.bytes[i].load())
                std::printf("process %d device %d bytes %llu\n", p.pid.load(), i,
                            static_cast<unsigned long long>(p.bytes[i].load()));
    }
    return 0;
}
