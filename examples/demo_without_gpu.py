"""The demo's program on a machine without a GPU: a "training loop" that allocates device memory
through the CUDA driver API (ctypes, which releases the GIL around the call, as PyTorch does) and
grows its activations each step until the quota stops it. Run under the test driver by `make demo`."""
import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1")
MiB = 1 << 20


def device_alloc(nbytes):
    ptr = ctypes.c_uint64()
    result = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes))
    if result != 0:
        raise MemoryError(f"CUDA error {result} allocating {nbytes >> 20} MiB")
    return ptr.value


class Model:
    def __init__(self):
        self.weights = [device_alloc(64 * MiB) for _ in range(4)]  # parameters
        self.optimizer_state = [device_alloc(128 * MiB) for _ in range(2)]

    def forward(self, batch):
        return [device_alloc(batch * MiB) for _ in range(3)]  # activations kept for backward


def main():
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cuda.cuInit(0)
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)
    model = Model()
    kept = []
    batch = 16
    try:
        for step in range(100):
            kept += model.forward(batch)  # a leak: activations are never released
            print(f"step {step}: batch {batch}")
            batch *= 2
    except MemoryError as e:
        print(f"out of memory at step {step}: {e}")
        return 0
    return 1


sys.exit(main())
