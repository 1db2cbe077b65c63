"""A Python program that allocates through ctypes, the way PyTorch reaches the driver: ctypes
releases the GIL around every foreign call, so the shim reads this thread's Python frames without
it (shim/python/frames.cpp). Run with and without LD_PRELOAD=libgpuguard.so by tests/bench/run.sh.

Usage: bench_py.py PAIRS DEPTH [SIZE]
       bench_py.py blocks N DEPTH
  PAIRS  cuMemAlloc_v2 + cuMemFree_v2 pairs, timed together after 1000 for warm-up
  DEPTH  Python frames above the loop (a training script's call chain is some 15-30 deep)
  blocks N block reports of PyTorch's caching allocator (c10's reportMemoryUsageToProfiler, a block
         handed out and taken back) from 8 Python lines in turn, as a PyTorch operator reports them:
         the tensor view's cost for a block called from Python (the test double's libc10.so defines
         the function; the shim's definition forwards to it)
Prints: py version=3.X n=PAIRS ns_per_pair=...  or  py blocks version=3.X n=N ns_per_report=...
The driver is "libcuda.so.1" from the loader's path (the test driver under tests/bench/run.sh).
"""
import ctypes
import sys
import time


def blocks(n, depth):
    ctypes.CDLL("libc10.so", mode=ctypes.RTLD_GLOBAL)
    report = ctypes.CDLL(None)._ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE
    # c10::Device is {int8 type, int8 index}, passed in a register: CUDA (1), device 0.
    report.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint16]
    cuda_device = 1
    size = 1 << 20

    def site(ptr):  # each of the 8 sites below is a Python line of its own
        report(ptr, size, size, 8 * size, cuda_device)
        report(ptr, -size, 0, 8 * size, cuda_device)

    sites = [lambda p: site(p), lambda p: site(p), lambda p: site(p), lambda p: site(p),
             lambda p: site(p), lambda p: site(p), lambda p: site(p), lambda p: site(p)]

    def loop(count):
        for i in range(count):
            sites[i & 7](0x7f0000000000 + ((i & 7) << 20))

    def timed():
        loop(1000)
        t0 = time.perf_counter_ns()
        loop(n)
        return (time.perf_counter_ns() - t0) / (2 * n)

    def nest(d):
        return timed() if d <= 0 else nest(d - 1)

    ns = nest(depth)
    print(f"py blocks version={sys.version_info[0]}.{sys.version_info[1]} n={n} ns_per_report={ns:.1f}")


def main():
    if sys.argv[1] == "blocks":
        return blocks(int(sys.argv[2]), int(sys.argv[3]))
    pairs, depth = int(sys.argv[1]), int(sys.argv[2])
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 512
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    for name, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(dev), 0)),
                       ("cuDevicePrimaryCtxRetain", (ctypes.byref(ctx), dev)), ("cuCtxSetCurrent", (ctx,))):
        rc = getattr(cuda, name)(*args)
        if rc != 0:
            sys.exit(f"bench_py: {name} failed: {rc}")

    def loop(n):
        alloc, free, ptr = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2, ctypes.c_uint64()
        ref = ctypes.byref(ptr)
        for _ in range(n):
            if alloc(ref, size) != 0 or free(ptr.value) != 0:
                sys.exit("bench_py: allocation failed")

    def timed():
        loop(1000)
        t0 = time.perf_counter_ns()
        loop(pairs)
        return (time.perf_counter_ns() - t0) / pairs

    def nest(d):
        return timed() if d <= 0 else nest(d - 1)

    ns = nest(depth)
    print(f"py version={sys.version_info[0]}.{sys.version_info[1]} n={pairs} ns_per_pair={ns:.1f}")


if __name__ == "__main__":
    main()
