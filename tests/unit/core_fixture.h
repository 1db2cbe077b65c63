// A shim core of its own for a unit test: a configuration, a private ledger with a limit, one device
// of 16 GiB, a driver whose every entry is missing, and a fresh tracker, installed as the process's
// state (shim/core/state.h, install_state_for_test). Tests then call the core's interface (guard,
// tracker, report) as a hook would. Reports go to a folder of the fixture's own.
#pragma once
#include <dirent.h>
#include <unistd.h>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/ledger/ledger.h"
#include "common/units/size_spec.h"
#include "shim/core/config.h"
#include "shim/core/state.h"
#include "shim/device/device.h"
#include "shim/quota/episode.h"
#include "shim/report/report.h"
#include "shim/resolve/real.h"
#include "shim/track/tracker.h"

namespace gg::testing {

constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

class Core {
public:
    explicit Core(const std::string &limit = "1GiB", int stack_depth = 0) {
        char dir[] = "/tmp/gpuguard-unit-core.XXXXXX";
        report_dir_ = mkdtemp(dir) ? dir : "/tmp";
        cfg_.report_dir = report_dir_;
        cfg_.stack_depth = stack_depth;
        cfg_.limit_text = limit;
        std::string why;
        if (!limit.empty()) parse_limit_spec(limit, &cfg_.limit, &why);
        ledger::OpenOptions o;  // no path: a private ledger
        o.limit_spec = limit;
        std::string error, notice;
        ledger_ = ledger::Ledger::open(o, &error, &notice);
        state_.cfg = &cfg_;
        state_.ledger = ledger_;
        state_.spec = cfg_.limit;
        install_real_driver_for_test(&driver_);
        // A fresh process as far as the core can tell: no allocation, episode or report of an earlier
        // test (what a forked child resets too).
        tracker().clear_after_fork();
        episode::reset_after_fork();
        report::reset_after_fork();
        install_state_for_test(&state_);

        const uint8_t uuid[16] = {'g', 'g', '-', 't', 'e', 's', 't', 0, 0, 0, 0, 0, 0, 0, 0, 1};
        DeviceInfo d;
        d.ordinal = 0;
        d.physical_total = 16 * kGiB;
        snprintf(d.uuid, sizeof d.uuid, "%s", ledger::uuid_string(uuid).c_str());
        snprintf(d.name, sizeof d.name, "Unit GPU");
        d.limit = state_.limit_for(0, d.uuid, d.physical_total);
        d.ledger_index = ledger_->device_index(uuid, d.limit, d.physical_total, d.name, &d.limit);
        preset_device_for_test(d, 1);
        device_ = d;
    }
    ~Core() {
        install_state_for_test(nullptr);
        tracker().clear_after_fork();
        for (const std::string &f : reports()) unlink(f.c_str());
        rmdir(report_dir_.c_str());
        delete ledger_;
    }
    Core(const Core &) = delete;
    Core &operator=(const Core &) = delete;

    ledger::Ledger &ledger() { return *ledger_; }
    const DeviceInfo &device() const { return device_; }
    uint64_t used() const { return ledger_->container_used(device_.ledger_index); }

    // The reports written so far, by path.
    std::vector<std::string> reports() const {
        std::vector<std::string> out;
        if (DIR *d = opendir(report_dir_.c_str())) {
            while (dirent *e = readdir(d))
                if (strncmp(e->d_name, "gpuguard-", 9) == 0) out.push_back(report_dir_ + "/" + e->d_name);
            closedir(d);
        }
        return out;
    }

private:
    std::string report_dir_;
    Config cfg_;
    State state_;
    RealDriver driver_;
    ledger::Ledger *ledger_ = nullptr;
    DeviceInfo device_;
};

}  // namespace gg::testing
