// The one table of our hooks (shim/api/hooks.def expanded with the hooks' own addresses), which
// the dlsym and cuGetProcAddress interposers answer from (shim/resolve/answers.h). It lives with the
// exported hooks it points at: the core, which unit tests link without them, takes a table as an
// argument instead.
#pragma once
#include "shim/resolve/answers.h"

namespace gg {

const HookTable &hook_table();

}  // namespace gg
