// `gpuguard doctor`: everything one checks when a program runs out of GPU memory, or when gpuguard
// seems not to act, in one list: the driver and GPUs, the CUDA libraries, PyTorch, the preload
// library and whether it really loads (into a given command, with `-- CMD`), the ledger, the report
// folder and the variables in effect. Each failed check is one line with its fix. The checks are
// in this folder, one file per group (checks.h).
#include <cstdio>
#include <cstring>

#include "common/base/version.h"
#include "common/settings/settings.h"
#include "tools/cli/args.h"
#include "tools/commands/doctor/checks.h"

using namespace gg::doctor;

namespace {

const char kUsage[] =
    "usage: gpuguard doctor [-- COMMAND [ARGS...]]\n"
    "       gpuguard doctor --truth [--ledger PATH]\n"
    "\n"
    "Checks what matters when a program runs out of GPU memory or gpuguard seems not to act: the\n"
    "driver and GPUs, the CUDA runtime, cuDNN and PyTorch, the preload library and its libunwind,\n"
    "the limit, the ledger, the report folder and every GPUGUARD_* variable (a malformed one is\n"
    "flagged). With -- COMMAND it runs COMMAND with libgpuguard.so preloaded and says whether the\n"
    "library really is in the command's process (a static program or one that clears LD_PRELOAD\n"
    "escapes it). COMMAND must live long enough to be looked at (a second is plenty).\n"
    "\n"
    "With --truth it compares the ledger (default GPUGUARD_LEDGER) with the driver's own view of each\n"
    "process (NVML, what nvidia-smi --query-compute-apps shows): per process the ledger's bytes, the\n"
    "driver's and the difference, then the container's total against its limit, within max(64 MiB, 2%)\n"
    "of it. In a container NVML may list the host's pids or none; then only totals are compared.\n"
    "\n"
    "Lines start with ok, info (not needed by gpuguard), warn or FAIL; a FAIL line ends with its fix.\n"
    "\n"
    "Exit status: 0 everything needed is in place; 1 a check failed; 2 bad usage.\n";

}  // namespace

int cmd_doctor(int argc, char **argv) {
    char **cmd = nullptr;
    bool truth = false;
    std::string ledger;
    bool have_ledger = false;
    gg::tool::Args a("doctor", argc, argv);
    while (!a.done()) {
        std::string lib;
        if (a.flag("--truth")) {
            truth = true;
            continue;
        }
        if (a.option("--ledger", "a path", &ledger)) {
            if (a.failed() || ledger.empty()) return a.usage_error("--ledger needs a path");
            have_ledger = true;
            continue;
        }
        if (a.flag("-h") || a.flag("--help")) {
            fputs(kUsage, stdout);
            return 0;
        }
        if (a.next() == "--probe-library" && a.rest_count() >= 2 && a.option("--probe-library", "a path", &lib))
            return probe_library(lib);
        if (a.flag("--")) {
            if (a.done()) return a.usage_error("-- needs a command after it");
            cmd = a.rest();
            break;
        }
        return a.usage_error("unknown argument '" + a.next() + "'");
    }
    if (have_ledger && !truth) return a.usage_error("--ledger goes with --truth");
    if (truth) {
        if (cmd) return a.usage_error("--truth takes no command");
        return check_truth(have_ledger ? ledger : gg::settings::read_ledger_path(gg::settings::process_env()));
    }
    Checks c;
    printf("gpuguard doctor %s\n", GPUGUARD_VERSION_STRING);
    c.section("GPU and driver");
    std::vector<Gpu> gpus;
    bool driver_ok = check_driver(c, gpus);
    c.section("CUDA libraries");
    check_cudart(c);
    check_cudnn(c);
    bool torch_cuda = check_torch(c, driver_ok);
    c.section("gpuguard");
    std::string lib = check_library(c);
    check_tensor_view(c, lib, torch_cuda);
    check_limit_and_ledger(c, gpus);
    check_reports(c);
    check_variables(c);
    if (cmd) {
        c.section("command");
        if (lib.empty())
            c.line(kFail, "preload", "not tried: the library does not load (see above)", "see the library line above");
        else check_command(c, lib, cmd);
    }
    printf("\n");
    if (c.failed()) printf("%d check(s) failed, %d warning(s)\n", c.failed(), c.warned());
    else
        printf("everything gpuguard needs is in place%s\n",
               c.warned() ? (" (" + std::to_string(c.warned()) + " warning(s))").c_str() : "");
    return c.failed() ? 1 : 0;
}
