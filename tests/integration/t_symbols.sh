# What the shim exports. A preload library comes first in every symbol lookup of the process, so
# anything it exports replaces the program's own definition: the shim must export its hooks and its
# API and nothing else, least of all the C++ runtime it links statically (operator new, __cxa_throw,
# std::string: PyTorch would run on the shim's copy of them instead of its own).

exports_only_hooks_and_api() {
  local defined cxx other
  defined=$(nm -D --defined-only "$LIB" | awk '{print $3}')
  expect_contains "$defined" cuMemAlloc_v2 "the shim's exports" &&
    expect_contains "$defined" gpuguard_report "the shim's exports" &&
    expect_contains "$defined" cudnnBackendFinalize "the shim's exports" || return 1
  # The two c10 functions the tensor view interposes are the only C++ names (shim/hooks/torch.cpp).
  cxx=$(grep -E '^(_Z|__cxa_|__gxx_|_Unwind_|__once_)' <<<"$defined" | grep -v -E '^_ZN3c1027report(MemoryUsage|OutOfMemory)ToProfiler')
  expect_contains "$defined" _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE "the shim's exports" || return 1
  expect_eq "$cxx" "" "C++ runtime symbols exported by the shim" || return 1
  # Everything else is a CUDA, cuDNN or NVML hook, dlsym, or the gpuguard_ API.
  other=$(grep -v -E '^((cu|cuda|cudnn|nvml)[A-Z]|gpuguard_|dlsym$|_ZN3c1027report)' <<<"$defined" | grep -v -E '^(_init|_fini)$')
  expect_eq "$other" "" "exports that are neither hooks nor the API"
}
check "exports only the hooks, dlsym and the gpuguard_ API: the static C++ runtime stays private" exports_only_hooks_and_api
