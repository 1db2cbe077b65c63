// Which reports `gpuguard report` reads when it is given several, or a folder: the README's own
// `gpuguard report reports/gpuguard-quota-*.json` names every report of a folder once there are two.
#pragma once
#include <string>
#include <vector>

namespace gg::tool {

// The report files the arguments name: a file as it is, a folder as the reports in it
// (gpuguard-*.json), oldest first (by modification time, then name; a path that cannot be read stays
// first, for the reader to name its problem). False with *why for a folder that holds no report.
bool expand_reports(const std::vector<std::string> &args, std::vector<std::string> *files, std::string *why);

}  // namespace gg::tool
