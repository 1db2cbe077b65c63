#include "shim/cudnn/cap.h"

#include "shim/core/config.h"
#include "shim/core/state.h"
#include "shim/cudnn/record.h"
#include "shim/device/device.h"
#include "shim/quota/guard.h"

namespace gg::cudnn {

Cap current_cap() {
    const Config &c = *state().cfg;
    Cap cap;
    switch (c.cudnn_cap.mode) {
        case settings::CudnnCap::kOff: return cap;
        case settings::CudnnCap::kBytes:
            cap.on = true;
            cap.bytes = c.cudnn_cap.bytes;
            break;
        case settings::CudnnCap::kAuto: {
            // The same view cuMemGetInfo gives the program: what the container may still allocate.
            guard::QuotaView q = guard::quota_of(current_ordinal());
            if (!q.limited) return cap;
            cap.on = true;
            cap.bytes = q.limit > q.container_used ? q.limit - q.container_used : 0;
            break;
        }
    }
    cap_applied(cap.bytes);
    return cap;
}

}  // namespace gg::cudnn
