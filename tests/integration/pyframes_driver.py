"""Runs gg::py inside a real interpreter through tests/integration/pyprobe (PYPROBE names the library).

Usage: pyframes_driver.py MODE, one of:
  info      only the first line, printed in every mode: available=0|1 version=X.Y
  stack     prints the captured frames, then SAME or DIFF against the interpreter's own view
  generators  SAME or DIFF for captures inside a generator run by a for loop and a coroutine run by
            send(): frames owned by generator objects, linked into the thread's frame list
  callback  Python -> C -> Python -> C: prints function:entry for each captured frame
  threads   a native thread's frame count and a Python thread's innermost frame, while another
            Python thread spins holding the GIL
  evalloops how many eval-loop native frames a direct call sees by the loop's symbol, then (both
            lines after) a direct call and a callback once the capture's learning has run
  bench     median ns of one capture at a 30-frame Python depth
  lines [CALLS ROUNDS]  captures from CALLS (8) lines of one long function, each line ROUNDS (50)
            times in turn: SAME or DIFF for every capture against the interpreter's view, how many,
            then the median ns of one capture
  keys      site keys (gg::py::site_key): whether one stack gives one key and stacks that differ inside,
            30 frames out or in depth give others
  keybench [DEPTH EVICT_KIB [FRAMES]]  median ns of one site key at DEPTH (60) Python frames (of the FRAMES
            innermost: a capture's first key reads 12), each after reading
            EVICT_KIB (0) KiB of other memory
"""
import ctypes
import os
import sys
import threading

lib = ctypes.CDLL(os.environ["PYPROBE"])
lib.pyprobe_capture.argtypes = [ctypes.c_char_p, ctypes.c_int]
lib.pyprobe_version.restype = ctypes.c_char_p
lib.pyprobe_bench.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
lib.pyprobe_bench.restype = ctypes.c_double
lib.pyprobe_capture_timed.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int)
buf = ctypes.create_string_buffer(1 << 16)


def frames():
    return [line.split("|") for line in buf.value.decode().splitlines()]


def interpreter_view(frame):
    """The same stack as the interpreter reports it: file|qualname|line, innermost first."""
    out = []
    while frame is not None:
        out.append([frame.f_code.co_filename, frame.f_code.co_qualname, str(frame.f_lineno)])
        frame = frame.f_back
    return out


class Holder:
    def method(self):
        # The interpreter's view is taken on the same line: a live frame's f_lineno moves on.
        n = lib.pyprobe_capture(buf, len(buf)); want = interpreter_view(sys._getframe())  # MARK:capture
        got = frames()
        assert n == len(got), (n, got)
        for f in got:
            print("|".join(f))
        print("SAME" if [f[:3] for f in got] == want else f"DIFF {want}")


def info_mode():
    pass


def stack_mode():
    Holder().method()


def compare_here():
    """SAME when the capture made here matches the interpreter's view of the caller's stack."""
    lib.pyprobe_capture(buf, len(buf)); want = interpreter_view(sys._getframe())
    return "SAME" if [f[:3] for f in frames()] == want else f"DIFF {frames()} {want}"


def generator():
    yield compare_here()


async def coroutine():
    return compare_here()


def generators_mode():
    for result in generator():
        print(result)
    try:
        coroutine().send(None)
    except StopIteration as done:
        print(done.value)


def inner():
    lib.pyprobe_capture(buf, len(buf))
    print(" ".join(f"{f[1]}:{f[3]}" for f in frames()))
    return 0


def outer():
    return lib.pyprobe_call(CALLBACK(inner))


def callback_mode():
    outer()


def threads_mode():
    stop = False

    def spin():  # holds the GIL except at the interpreter's switch interval
        x = 0
        while not stop:
            x += 1

    seen = []

    def python_thread():
        lib.pyprobe_capture(buf, len(buf))
        seen.append(frames()[0][1])

    spinner = threading.Thread(target=spin)
    spinner.start()
    native = lib.pyprobe_capture_on_native_thread()
    mine = lib.pyprobe_capture(buf, len(buf))
    t = threading.Thread(target=python_thread)
    t.start()
    t.join()
    stop = True
    spinner.join()
    print(f"native={native} main={'yes' if mine > 0 else 'no'} thread={seen[0] if seen else '-'}")


def count_in_callback():
    print(f"callback={lib.pyprobe_count_eval_loops()}")
    return 0


def evalloops_mode():
    print(f"symbol={lib.pyprobe_count_eval_loops()}")  # the symbol's range alone
    lib.pyprobe_learn_eval_loop()
    print(f"direct={lib.pyprobe_count_eval_loops()}")
    lib.pyprobe_call(CALLBACK(count_in_callback))


def recurse(depth):
    if depth > 1:
        return recurse(depth - 1)
    seen = ctypes.c_int(0)
    ns = lib.pyprobe_bench(20000, ctypes.byref(seen))
    print(f"frames={seen.value} median_ns={ns:.0f}")


def bench_mode():
    recurse(30 - 2)  # with bench_mode and <module>, 30 Python frames


lib.pyprobe_site_key_bench.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_ulonglong)]
lib.pyprobe_site_key_bench.restype = ctypes.c_double


def site_key(rounds=1, evict_kib=0, frames=-1):
    key = ctypes.c_ulonglong(0)
    ns = lib.pyprobe_site_key_bench(rounds, evict_kib, frames, ctypes.byref(key))
    return key.value, ns


def key_at_depth(depth, line):
    """The site key `depth` Python calls down from here, taken on one of two lines of this frame."""
    if depth > 1:
        return key_at_depth(depth - 1, line)
    if line == "a":
        return site_key()[0]
    return site_key()[0]


def key_from(caller, depth):
    """The same 30 inner frames, called from one of two lines of the outermost one."""
    if caller == "a":
        return key_at_depth(depth, "a")
    return key_at_depth(depth, "a")


def key_by_path(path):
    """The site key at the end of `path`: each "x" a call through step_x, each "y" through step_y, so
    that "xy" and "yx" give the very same frames (function and line) in another order."""
    if not path:
        return site_key()[0]
    if path[0] == "x":
        return step_x(path[1:])
    return step_y(path[1:])


def step_x(path):
    return key_by_path(path)


def step_y(path):
    return key_by_path(path)


def keys_mode():
    """Site keys: the same stack twice gives one key; a stack that differs only in the instruction of
    the innermost frame, or of a frame 30 calls out, or in its depth, or only in the order of its
    frames, gives another. (Each list below makes its calls from one instruction of this frame.)"""
    same = [key_from("a", 30) for _ in range(2)]
    inner = [key_at_depth(30, line) for line in "ab"]
    outer = [key_from(caller, 30) for caller in "ab"]
    depth = [key_from("a", d) for d in (30, 31)]
    order = [key_by_path(path) for path in ("xy", "yx")]
    print(f"same={same[0] == same[1]} inner_line={inner[0] != inner[1]} outer_line={outer[0] != outer[1]} "
          f"depth={depth[0] != depth[1]} order={order[0] != order[1]}")


def keybench_mode(depth="60", evict_kib="0", frames="-1"):
    """Median ns of one site key at `depth` Python frames, each after reading evict_kib KiB: the whole
    stack's key, or that of its `frames` innermost frames (a capture's first key reads 12)."""
    def down(n):
        if n > 1:
            return down(n - 1)
        return site_key(20000, int(evict_kib), int(frames))[1]
    print(f"frames={depth} evict_kib={evict_kib} median_ns={down(int(depth) - 2):.0f} key_frames={frames}")


def long_function(calls):
    """A long function (as torch.nn.functional's are: hundreds of lines) that captures from `calls`
    of its lines in turn, 400 lines in: each line is found far into its code object's line table."""
    source = "def long_function(capture, buf, elapsed, view, rounds):\n" + "    x = 0\n" * 400 + \
        "    for _ in range(rounds):\n" + \
        "        capture(buf, len(buf), elapsed); view(sys._getframe())\n" * calls + "    return x\n"
    scope = {"sys": sys}
    exec(compile(source, "<long_function>", "exec"), scope)
    return scope["long_function"]


def lines_mode(calls=8, rounds=50):
    ns, results = [], []
    elapsed = ctypes.c_double(0)

    def view(frame):  # called on the capture's line: the frame's f_lineno is that line
        ns.append(elapsed.value)
        got = [f[:3] for f in frames()]
        results.append(got == interpreter_view(frame) and got[0][1] == "long_function")

    long_function(int(calls))(lib.pyprobe_capture_timed, buf, ctypes.byref(elapsed), view, int(rounds))
    ns.sort()
    print(f"{'SAME' if all(results) else 'DIFF'} {len(results)} median_ns={ns[len(ns) // 2]:.0f}")


if __name__ == "__main__":
    print(f"available={lib.pyprobe_available()} version={lib.pyprobe_version().decode()}")
    mode = globals()[sys.argv[1] + "_mode"]
    # A plain call: CPython 3.11 runs a call with *args in an eval loop of its own, which would
    # change what the callback and evalloops modes see.
    mode(*sys.argv[2:]) if len(sys.argv) > 2 else mode()
