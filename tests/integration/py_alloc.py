"""Allocates device memory through ctypes (the GIL is released around the call, as in PyTorch's
operators) against whichever libcuda.so.1 is found: the report must name this file, the function
and the line of the call. Usage: py_alloc.py [with-gil-holder NATIVE.so | paths NATIVE.so N PATTERN | deep N PATTERN]

paths: N allocations from one Python line, through two_paths.so's path_a (1 MiB each) or path_b
(2 MiB each), all kept live; PATTERN "ab" alternates, "a" takes path_a only; "ab-deep" alternates
deep_path_a and deep_path_b, whose common part below them is 20 frames deep; "ab-depth" alternates
path_a and path_c (2 MiB each), whose frames differ in size; "ab-varying" alternates path_a and
path_a under a frame whose size changes at every call (2 MiB each)."""
import ctypes
import sys
import threading

cuda = ctypes.CDLL("libcuda.so.1")


def setup():
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuInit(0) == 0
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0


class Model:
    def grow_activations(self, n):
        ptr = ctypes.c_uint64()
        return cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(n))  # LINE-OF-ALLOC


def train_step(model):
    return model.grow_activations(1 << 30)


def paths(native, n, pattern):
    ptr = ctypes.c_uint64()
    via = {"-deep": native.alloc_via_deep, "-depth": native.alloc_via_depth, "-varying": native.alloc_via_varying}.get(
        pattern[2:], native.alloc_via
    )
    for i in range(n):
        which = 1 if pattern.startswith("ab") and i % 2 else 0
        r = via(which, ctypes.byref(ptr), ctypes.c_size_t((which + 1) << 20))  # LINE-OF-PATHS
        assert r == 0, r
    print("paths ->", n)


def below(levels, size):
    """The same `levels` Python frames (one code object, one instruction each) above every allocation,
    so that a site key of the innermost frames cannot tell the two callers of deep() apart."""
    if levels > 1:
        return below(levels - 1, size)
    ptr = ctypes.c_uint64()
    return cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))


def one_frame_higher(levels, size):
    """A frame between deep() and `below`: the Python stack under below's frames stands higher."""
    return below(levels, size)


def in_a_generator(levels, size):
    """`below` called from a generator's frame, which lives in the generator object: kept alive (in
    `generators`), each one's frame stands at an address of its own."""
    yield below(levels, size)


generators = []


def through_new_generator(levels, size):
    generators.append(in_a_generator(levels, size))
    return next(generators[-1])


def deep(n, pattern):
    """N allocations through `below` 16 frames deep, from one of two lines here: 1 MiB from caller A,
    2 MiB from caller B. PATTERN "ab" alternates; "a-then-b" makes the first half from A; "ab-heights"
    alternates with B's call made through one_frame_higher, so that the two stand at different heights;
    "ab-generators" alternates, each call 12 frames below a new generator's frame; "w-then-ah" alternates
    between a higher caller H (2 MiB) and a caller at deep()'s own height, W (4 MiB) for the first 20
    allocations and A (1 MiB) after: a warm-up line left for good; "h-a-then-ab" makes the first
    allocation from H, the next 149 from A, then A and B take turns (B's hits all odd, A's even)."""
    for i in range(n):
        b = i % 2 if pattern.startswith("ab") else i >= n // 2
        if pattern == "h-a-then-ab" and i == 0:
            r = one_frame_higher(16, 4 << 20)  # LINE-OF-HAB-H
        elif pattern == "h-a-then-ab" and (i < 150 or i % 2 == 0):
            r = below(16, 1 << 20)  # LINE-OF-HAB-A
        elif pattern == "h-a-then-ab":
            r = below(16, 2 << 20)  # LINE-OF-HAB-B
        elif pattern == "w-then-ah" and i % 2:
            r = one_frame_higher(16, 2 << 20)  # LINE-OF-WAH-H
        elif pattern == "w-then-ah" and i < 20:
            r = below(16, 4 << 20)  # LINE-OF-WAH-W
        elif pattern == "w-then-ah":
            r = below(16, 1 << 20)  # LINE-OF-WAH-A
        elif pattern == "ab-generators" and b:
            r = through_new_generator(12, 2 << 20)  # LINE-OF-GEN-B
        elif pattern == "ab-generators":
            r = through_new_generator(12, 1 << 20)  # LINE-OF-GEN-A
        elif b and pattern == "ab-heights":
            r = one_frame_higher(16, 2 << 20)  # LINE-OF-HIGH-B
        elif b:
            r = below(16, 2 << 20)  # LINE-OF-DEEP-B
        else:
            r = below(16, 1 << 20)  # LINE-OF-DEEP-A
        assert r == 0, r
    print("deep ->", n)


def main():
    setup()
    if len(sys.argv) > 1 and sys.argv[1] == "deep":
        deep(int(sys.argv[2]), sys.argv[3])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "paths":
        paths(ctypes.CDLL(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return
    # A thread of the probe library that keeps a Python thread state and runs no Python, but for a
    # callback here that allocates 2 MiB through the library's second function.
    on_idle_thread = {"autograd-like": ("run_autograd_like", "alloc_from_python"),
                      "no-unwind-info": ("run_no_unwind_info", "at_fixed_depth")}
    if len(sys.argv) > 1 and sys.argv[1] in on_idle_thread:
        lib = ctypes.CDLL(sys.argv[2])
        run, alloc = (getattr(lib, name) for name in on_idle_thread[sys.argv[1]])
        callback_type = ctypes.CFUNCTYPE(ctypes.c_int)
        run.argtypes = [callback_type]

        def python_callback():
            return alloc(ctypes.c_size_t(2 << 20))

        print(sys.argv[1], "->", run(callback_type(python_callback)))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "with-gil-holder":
        # Another Python thread keeps the GIL busy while a native thread of the probe library
        # allocates with no Python at all: the shim must neither wait for the GIL nor deadlock.
        stop = threading.Event()

        def spin():
            x = 0
            while not stop.is_set():
                x += 1

        t = threading.Thread(target=spin)
        t.start()
        native = ctypes.CDLL(sys.argv[2])
        r = native.alloc_in_native_thread(ctypes.c_size_t(1 << 20))
        stop.set()
        t.join()
        print("native thread ->", r)
        return
    print("alloc ->", train_step(Model()))


main()
