// gpuguard_configured_limit (include/gpuguard/gpuguard.h): the quota as configured, for Python's
// gpuguard.limit() before the program's first CUDA call, when the ledger holds no device yet to read
// a limit from. It never calls the driver: asking it for devices would initialise CUDA for the program.
#include "shim/api/export.h"
#include "shim/core/state.h"

GG_EXPORT int gpuguard_configured_limit(unsigned long long *bytes) {
    const gg::State &s = gg::state();
    if (s.fail_closed) {  // a malformed limit: every allocation is refused
        if (bytes) *bytes = 0;
        return 1;
    }
    // A share of a device, or an entry for one device, cannot be told before the devices are known.
    if (!s.spec.per_device.empty() || s.spec.all.kind == gg::Limit::kPercent) return -1;
    if (s.spec.all.kind == gg::Limit::kNone) return 0;
    if (bytes) *bytes = s.spec.all.bytes;
    return 1;
}
