// Frames of a report's stacks for unit tests that make up reports (tools/report/model.h): a Python
// frame by file, function and line; a native one by module and symbol.
#pragma once

#include <string>

#include "tools/report/model.h"

namespace gg::testing {

inline report::Frame py(const std::string &file, const std::string &function, int line) {
    report::Frame f;
    f.python = true;
    f.file = file;
    f.function = function;
    f.line = line;
    return f;
}

inline report::Frame native(const std::string &module, const std::string &symbol) {
    report::Frame f;
    f.module = module;
    f.symbol = symbol;
    return f;
}

}  // namespace gg::testing
