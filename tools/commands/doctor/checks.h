// `gpuguard doctor`'s checks, one file per group: gpu.cpp (driver, GPUs, NVML), libraries.cpp (the
// CUDA runtime, cuDNN, PyTorch), library.cpp (the preload library and a given command), quota.cpp
// (the limit, the ledger, the report folder), variables.cpp (every variable in effect). Each check
// prints its own lines through Checks; a FAIL line ends with its fix.
#pragma once
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/base/printable.h"

namespace gg::doctor {

enum Level { kOk, kInfo, kWarn, kFail };

class Checks {
public:
    void section(const char *title) { printf("\n%s\n", title); }
    void line(Level level, const std::string &what, const std::string &text, const std::string &fix = "") {
        static const char *const tags[] = {"ok", "info", "warn", "FAIL"};
        std::string t = text;
        if (!fix.empty()) t += "; fix: " + fix;
        // Values from the environment and the ledger: no control character reaches the terminal.
        printf("  %-5s %-13s %s\n", tags[level], printable(what).c_str(), printable(t).c_str());
        fflush(stdout);
        if (level == kFail) failed_++;
        if (level == kWarn) warned_++;
    }
    int failed() const { return failed_; }
    int warned() const { return warned_; }

private:
    int failed_ = 0, warned_ = 0;
};

// What the driver says of one GPU; filled by check_driver, read by the later checks.
struct Gpu {
    int ordinal;
    std::string name, uuid;
    uint64_t total = 0;
    long long nvml_used = -1;
};

// ---- the checks, in the order doctor runs them ----

bool check_driver(Checks &c, std::vector<Gpu> &gpus);  // false when there is no usable driver or GPU
void check_cudart(Checks &c);
void check_cudnn(Checks &c);
bool check_torch(Checks &c, bool driver_ok);  // true when torch.cuda is available
std::string check_library(Checks &c);         // the library's path when it loads, else ""
// Whether PyTorch's blocks reach the shim in a PyTorch process (a probe under the library).
void check_tensor_view(Checks &c, const std::string &lib, bool torch_cuda);
void check_limit_and_ledger(Checks &c, const std::vector<Gpu> &gpus);
void check_reports(Checks &c);
void check_variables(Checks &c);
void check_command(Checks &c, const std::string &lib, char **cmd);
// `gpuguard doctor --truth`: the ledger at `ledger_path` against NVML's per-process view (truth.cpp).
int check_truth(const std::string &ledger_path);
// `gpuguard doctor --probe-library LIB`, started by check_library with LD_PRELOAD=LIB.
int probe_library(const std::string &lib);

// ---- small helpers shared by the checks ----

std::string version_text(int v);  // 13000 -> "13.0"
std::string where(void *handle);  // the path a loaded library came from
std::string trim(std::string s);
std::string real_path(const std::string &p);
template <typename F>
F sym(void *h, const char *name) {
    return reinterpret_cast<F>(dlsym(h, name));
}

}  // namespace gg::doctor
