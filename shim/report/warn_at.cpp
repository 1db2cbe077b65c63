#include "shim/report/warn_at.h"

#include <string>

#include "common/base/log.h"
#include "common/units/human.h"
#include "shim/report/report.h"

namespace gg::report {

void warn_at_crossed(int ordinal, uint64_t used, uint64_t limit) {
    std::string message = "device " + std::to_string(ordinal) +
                          " usage crossed GPUGUARD_WARN_AT: the container holds " + human_bytes(used) + " of its " +
                          human_bytes(limit) + " limit";
    std::string path = write(Reason::kWarnAt, message, nullptr, ordinal);
    log_error("%s%s%s", message.c_str(), path.empty() ? "" : "; report: ", path.c_str());
}

}  // namespace gg::report
