// How large a report may be: the one place the shim's writer and the command's reader take it from,
// so that every report the shim writes is one `gpuguard report` reads (issue 29).
#pragma once
#include <cstddef>

namespace gg::report_limits {

// The reader refuses a larger file before parsing it (a JSON document costs about eight times its
// size in memory); the writer never writes one.
constexpr size_t kMaxReportBytes = size_t(64) << 20;

// A caller's message (gpuguard_report, gpuguard.report()) is cut to this many bytes, with a marker
// saying how many were left out: a message is a line for a person, not a payload.
constexpr size_t kMaxMessageBytes = size_t(64) << 10;

// The tensor view's event rows take at most this share of a report: the ring may be configured to
// hold more (GPUGUARD_TENSOR_EVENTS up to 1,048,576) than a readable report can list. A row as the
// writer prints it (seven numbers of at most 20 digits, one per line at depth 5, two bracket lines)
// is at most kMaxEventRowBytes, so the newest kMaxEventRows rows always fit; the older ones are
// counted as dropped and as left out.
constexpr size_t kEventRowsShare = size_t(40) << 20;
constexpr size_t kMaxEventRowBytes = 192;
constexpr size_t kMaxEventRows = kEventRowsShare / kMaxEventRowBytes;

}  // namespace gg::report_limits
