// The report's usage by kind: what the quota counts, and this process's and the container's usage by
// the ledger's kinds (docs/report-schema.md, "usage"). A section of every report (shim/report/report.h).
#include <nlohmann/json.hpp>

#include "common/report/schema.h"
#include "shim/report/report.h"
#include "shim/usage/usage.h"

namespace gg::usage {
namespace {

using nlohmann::json;
namespace key = schema::key;

void section(json &r) {
    const DeviceInfo *dev = device_info(report::ordinal_of(r));
    if (!dev || !r.contains(key::usage)) return;
    Summary s = summary(*dev);
    json &u = r[key::usage];
    u[key::quota_counts] = s.mode;
    u[key::process_by_kind] = report::kinds_json(s.own_total, s.own);
    u[key::container_by_kind] = report::kinds_json(s.container_total, s.container);
    u[key::context_cost] = {{key::bytes, s.context_cost}, {key::source, s.context_cost_source}};
    u[key::self_view] = s.self_view;
}

}  // namespace

void register_section() { report::add_section(section); }

}  // namespace gg::usage
