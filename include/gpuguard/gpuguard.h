/* gpuguard's public C API, for programs that want to ask for a report themselves.
 *
 * Programs need not link anything: gpuguard_report_now() finds the function with dlsym when the
 * program runs under the shim (LD_PRELOAD=libgpuguard.so) and does nothing otherwise, so the same
 * binary runs with and without gpuguard. Link with -ldl on glibc older than 2.34. */
#ifndef GPUGUARD_GPUGUARD_H
#define GPUGUARD_GPUGUARD_H

#include <dlfcn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported by libgpuguard.so: writes a report (reason "request") whose message is `reason` (its first
 * 4 KiB, cut between UTF-8 characters and marked " [message cut: N bytes in all]"), into
 * GPUGUARD_REPORT_DIR. The report is about the calling thread's device; before CUDA has a device, about
 * none. Returns 0 when it was written, -1 otherwise (a line on stderr says why). */
int gpuguard_report(const char *reason);

/* Exported by libgpuguard.so: tags the calling thread's phase ("train", "eval"); a report that thread
 * writes while it is set names it ("phase"); other threads' reports do not (the signal's report names
 * the main thread's). NULL or "" clears it. Returns 0, -1 when it cannot be kept (no memory).
 * Python: `with gpuguard.phase("eval"):`. */
int gpuguard_phase(const char *name);
/* Exported by libgpuguard.so: the quota every device gets, as configured, known before the first CUDA
 * call: 1 with *bytes set (0: a malformed limit, every allocation refused), 0 for no limit, -1 when it
 * cannot be told before CUDA has the devices (a share of a device's memory, entries per device). */
int gpuguard_configured_limit(unsigned long long *bytes);
/* Exported by libgpuguard.so: whether PyTorch's caching allocator reports its blocks to the shim (the
 * tensor view): 1 it has, 0 not yet (no tensor allocated, the cudaMallocAsync backend, or a PyTorch
 * without the report), -1 turned off (GPUGUARD_TENSOR_VIEW=0). `gpuguard doctor` asks it. */
int gpuguard_tensor_view(void);
/* Exported by libgpuguard.so: switches the tensor view on (1) or off (0) now; returns whether it was
 * on (1) or off (0). Off, a block PyTorch reports costs what it costs with GPUGUARD_TENSOR_VIEW=0.
 * Back on, the blocks made while it was off are not listed until they are freed, and reports say how
 * many bytes are unlisted (tensor_view.coverage). Python: `with gpuguard.tensor_view(False):`. */
int gpuguard_set_tensor_view(int on);

/* Calls gpuguard_report when the shim is loaded. Returns 0 on success, -1 on failure, 1 when the
 * program is not running under gpuguard. */
static inline int gpuguard_report_now(const char *reason) {
    int (*fn)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "gpuguard_report");
    return fn ? fn(reason) : 1;
}

#ifdef __cplusplus
}
#endif
#endif
