// The CUDA runtime, cuDNN and PyTorch as the loader and python3 find them.
#include <nlohmann/json.hpp>

#include <cstring>

#include "common/settings/settings.h"
#include "tools/cli/preload.h"
#include "tools/cli/process.h"
#include "tools/commands/doctor/checks.h"

namespace gg::doctor {

void check_cudart(Checks &c) {
    for (const char *name : {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}) {
        void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        auto get = sym<int (*)(int *)>(h, "cudaRuntimeGetVersion");
        int v = 0;
        std::string t = name;
        if (get && get(&v) == 0) t += " (CUDA " + version_text(v) + " runtime)";
        c.line(kOk, "cuda runtime", t + ", " + where(h));
        return;
    }
    c.line(kInfo, "cuda runtime",
           "libcudart not on the loader's path (programs may bring their own: PyTorch's is in site-packages/nvidia)");
}

std::string cudnn_version_text(size_t v) {
    size_t major = v >= 90000 ? v / 10000 : v / 1000, rest = v >= 90000 ? v % 10000 : v % 1000;
    return std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
}

void check_cudnn(Checks &c) {
    for (const char *name : {"libcudnn.so.9", "libcudnn.so.8"}) {
        void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        auto get = sym<size_t (*)()>(h, "cudnnGetVersion");
        std::string t = get ? "cuDNN " + cudnn_version_text(get()) : std::string(name) + " (no cudnnGetVersion)";
        c.line(kOk, "cudnn", t + ", " + where(h));
        return;
    }
    c.line(kInfo, "cudnn", "libcudnn.so.9 not on the loader's path (PyTorch loads its own; see below)");
}

const char kTorchProbe[] =
    "import json, sys\n"
    "r = {'python': sys.version.split()[0], 'executable': sys.executable}\n"
    "try:\n"
    "    import torch\n"
    "    r['torch'] = torch.__version__\n"
    "    r['cuda_build'] = torch.version.cuda\n"
    "    try:\n"
    "        r['cuda_available'] = bool(torch.cuda.is_available())\n"
    "        r['devices'] = torch.cuda.device_count() if r['cuda_available'] else 0\n"
    "    except Exception as e:\n"
    "        r['cuda_error'] = str(e)[:200]\n"
    "    try:\n"
    "        r['cudnn'] = torch.backends.cudnn.version()\n"
    "    except Exception:\n"
    "        pass\n"
    "except Exception as e:\n"
    "    r['torch_error'] = (type(e).__name__ + ': ' + str(e))[:200]\n"
    "print(json.dumps(r))\n";

bool check_torch(Checks &c, bool driver_ok) {
    std::string path, why;
    if (gg::tool::locate_command("python3", &path, &why) != 0) {
        c.line(kInfo, "pytorch", "no python3 on PATH");
        return false;
    }
    gg::tool::Finished f;
    if (!gg::tool::run_captured({"python3", "-c", kTorchProbe}, nullptr, 60, false, &f, &why)) {
        c.line(kWarn, "pytorch", why);
        return false;
    }
    if (f.timed_out) {
        c.line(kWarn, "pytorch", "python3 did not answer within 60 s (import torch hung?)");
        return false;
    }
    nlohmann::json r;
    std::string out = trim(f.out);
    size_t last = out.rfind('\n');
    try {
        r = nlohmann::json::parse(last == std::string::npos ? out : out.substr(last + 1));
    } catch (const std::exception &) {
        c.line(kWarn, "pytorch", "python3 " + gg::tool::describe_status(f.status) + " without answering");
        return false;
    }
    std::string py = "python " + r.value("python", std::string("?"));
    if (!r.contains("torch")) {
        c.line(kInfo, "pytorch", "not installed for " + py + " (" + r.value("executable", path) + ")");
        return false;
    }
    std::string t = "torch " + r.value("torch", std::string("?")) + " (" + py + ")";
    if (r.contains("cuda_build") && r["cuda_build"].is_string())
        t += ", built for CUDA " + r["cuda_build"].get<std::string>();
    else t += ", a CPU-only build";
    if (r.contains("cudnn") && r["cudnn"].is_number()) t += ", cuDNN " + cudnn_version_text(r["cudnn"].get<size_t>());
    bool available = r.value("cuda_available", false);
    if (available) {
        c.line(kOk, "pytorch",
               t + ", torch.cuda available with " + std::to_string(r.value("devices", 0)) + " device(s)");
    } else if (driver_ok) {
        std::string why_not = r.contains("cuda_error") ? ": " + r["cuda_error"].get<std::string>() : "";
        c.line(kWarn, "pytorch", t + ", but torch.cuda is not available" + why_not);
    } else {
        c.line(kInfo, "pytorch", t + ", torch.cuda not available (no driver)");
    }
    return available;
}

// A PyTorch process under the shim: one tensor, then the shim's own answer (gpuguard_tensor_view).
const char kTensorViewProbe[] =
    "import ctypes, torch\n"
    "x = torch.empty(1 << 20, dtype=torch.uint8, device='cuda')\n"
    "print('tensor_view', ctypes.CDLL(None).gpuguard_tensor_view())\n";

void check_tensor_view(Checks &c, const std::string &lib, bool torch_cuda) {
    if (!torch_cuda) {
        c.line(kInfo, "tensor view", "not checked: no PyTorch with CUDA here");
        return;
    }
    if (lib.empty()) return;  // the library line says why
    std::vector<std::string> env =
        gg::tool::environment_with("LD_PRELOAD", gg::tool::preload_with(lib, settings::env("LD_PRELOAD")));
    env.push_back("GPUGUARD_LEDGER=none");  // a probe: no share of the container's quota
    gg::tool::Finished f;
    std::string why;
    if (!gg::tool::run_captured({"python3", "-c", kTensorViewProbe}, &env, 60, true, &f, &why) || f.timed_out) {
        c.line(kWarn, "tensor view", "the PyTorch probe did not finish" + (why.empty() ? "" : ": " + why));
        return;
    }
    std::string answer;
    size_t at = f.out.rfind("tensor_view ");
    if (at != std::string::npos) answer = trim(f.out.substr(at + 12, 3));
    const char *conf = settings::env("PYTORCH_CUDA_ALLOC_CONF");
    bool async = conf && strstr(conf, "cudaMallocAsync");
    if (answer == "1") c.line(kOk, "tensor view", "PyTorch's caching allocator reports its tensors to the shim");
    else if (answer == "-1")
        c.line(kInfo, "tensor view", "off (GPUGUARD_TENSOR_VIEW=0): reports show driver segments only");
    else if (answer == "0" && async)
        c.line(kInfo, "tensor view",
               "PyTorch's cudaMallocAsync backend: every tensor is a driver allocation, "
               "which reports show as such");
    else if (answer == "0")
        c.line(kWarn, "tensor view",
               "PyTorch allocated a tensor but reported no block: this PyTorch does not call "
               "c10::reportMemoryUsageToProfiler; reports show driver segments only");
    else
        c.line(kWarn, "tensor view", "the PyTorch probe " + gg::tool::describe_status(f.status) + " without answering");
}

}  // namespace gg::doctor
