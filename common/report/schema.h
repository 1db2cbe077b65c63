// The name and version of the report format (docs/report-schema.md). The shim writes them and
// `gpuguard report` refuses any other: both sides include this header so they cannot drift.
#pragma once

namespace gg::schema {

constexpr const char *kName = "gpuguard.report";
// Raised only when a field is removed or changes meaning; additions keep it.
constexpr int kVersion = 1;

}  // namespace gg::schema
