#pragma once
// The shim is built with -fvisibility=hidden; only interposed entry points and the public API are
// exported.
#define GG_EXPORT extern "C" __attribute__((visibility("default")))

#include "common/base/hot.h"  // GG_HOT, for the hooks on every allocation's path
