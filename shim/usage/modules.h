// Module and library loads (cuModuleLoad*, cuLibraryLoad*): the driver puts their code and globals in
// device memory. Measured as the device's free memory (cuMemGetInfo) before and after the load, less
// what the container's processes charged meanwhile; kept per module and given back at its unload.
// With lazy loading (CUDA 12.2 and later by default) most code reaches the device later, at a
// kernel's first launch, where no hook is: NVML's view of the process counts that (self_view.h).
#pragma once
#include <cstdint>

#include "shim/api/cuda_api.h"
#include "shim/device/device.h"

namespace gg::usage::modules {

struct Ticket {
    const DeviceInfo *dev = nullptr;
    uint64_t free_before = 0, container_before = 0;
};

void before(Ticket *t);
void after(const Ticket &t, CUresult result, uint64_t key);  // key: the module or library handle
void unloaded(uint64_t key, CUresult result);

void lock_for_fork();
void unlock_after_fork();
void reset_after_fork();

}  // namespace gg::usage::modules
