"""gpuguard from Python: the container's GPU memory quota, its usage, and reports on request.

Works with or without the shim preloaded (`python -m gpuguard run ...`, or LD_PRELOAD=libgpuguard.so):
status() says which. Usage and limits are read from the container's shared ledger, as `gpuguard top`
reads them, so they are there even in a process that runs without the shim.

    import gpuguard
    gpuguard.status()          # 'gpuguard: the shim is loaded (...)' or why not
    gpuguard.usage()           # this process and the container, per device
    gpuguard.limit()           # the quota per device, in bytes (None: no limit)
    with gpuguard.phase("eval"):
        ...                    # a report this thread writes in here names the phase
    with gpuguard.tensor_view(False):
        ...                    # PyTorch's blocks are not tracked in here (no cost)
    gpuguard.report("after epoch 3")

In Jupyter: `%load_ext gpuguard`, then `%gpuguard` (gpuguard/jupyter.py).
"""
import contextlib
import ctypes
import json
import os
import re
import subprocess
import sys
import threading

from gpuguard import _native

__version__ = "0.1.0"
__all__ = ["loaded", "status", "report", "usage", "limit", "phase", "tensor_view", "load_ipython_extension"]


def loaded():
    """Whether libgpuguard.so is loaded in this process (then allocations are counted and guarded)."""
    return _native.loaded_from() is not None


def status():
    """One line: whether the shim is loaded in this process, and from where."""
    where = _native.loaded_from()
    if where:
        return "gpuguard: the shim is loaded in this process (%s): the quota and reports apply" % where
    return ("gpuguard: the shim is not loaded in this process: no quota and no reports here; usage is "
            "read from the ledger. Start it under `python -m gpuguard run -- ...` (or LD_PRELOAD=%s)"
            % (_native.library() or "libgpuguard.so"))


def report(reason="requested from Python"):
    """Writes a report now (reason "request", with REASON as its message) into GPUGUARD_REPORT_DIR.
    True when written, False when the shim could not write it (it says why on stderr), None when the
    shim is not loaded in this process (nothing is written; a line on stderr says so).

    REASON is text: bytes are read as UTF-8, anything else through str(). What a C string cannot
    carry (NUL) and what is not Unicode (a lone surrogate) become U+FFFD; the shim keeps the first
    4 KiB and marks the cut."""
    fn = _native.function("gpuguard_report")
    if fn is None:
        sys.stderr.write(status() + "\n")
        return None
    fn.argtypes, fn.restype = [ctypes.c_char_p], ctypes.c_int
    return fn(_c_string(reason)) == 0


# What a C string cannot carry (NUL ends it) and what UTF-8 cannot encode (a lone surrogate, as
# os.fsdecode leaves for undecodable bytes): replaced, not refused, as the shim's writer replaces
# bytes that are not UTF-8. A report is asked for when something is already wrong.
_SURROGATES = re.compile("[\ud800-\udfff]")


def _c_string(value):
    """VALUE (str, bytes or anything str() takes) as UTF-8 for the shim's C API."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        text = bytes(value).decode("utf-8", "replace")
    else:
        text = str(value)
    if not text.isascii():  # O(1) in CPython; an ASCII text holds no surrogate, and skips the scan
        text = _SURROGATES.sub("\ufffd", text)
    return text.replace("\x00", "\ufffd").encode("utf-8")


def _top():
    cmd = _native.command()
    if cmd is None:
        return None, "the gpuguard command is not in this package nor on PATH"
    p = subprocess.run([cmd, "top", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    return json.loads(p.stdout), ""


def usage():
    """This process and the container, per device, from the ledger (no driver call):

    {"shim": bool, "ledger": path or None, "note": "" or why there is no ledger,
     "devices": {index: {"uuid", "name", "limit" (bytes or None), "used" (the container's bytes),
                         "peak", "total" (physical), "process" (this process's bytes), "process_peak"}}}

    index is the ledger's index of the device (the same in every process), not a CUDA ordinal:
    match devices by uuid. "process" is 0 where the shim is not loaded."""
    data, why = _top()
    out = {"shim": loaded(), "ledger": None, "note": why, "devices": {}}
    if data is None:
        return out
    out["ledger"] = data.get("ledger")
    for d in data.get("devices", []):
        out["devices"][d["index"]] = {
            "uuid": d.get("uuid"), "name": d.get("name"), "limit": d.get("limit_bytes"),
            "used": d.get("used_bytes", 0), "peak": d.get("peak_bytes", 0),
            "total": d.get("physical_total_bytes", 0), "process": 0, "process_peak": 0}
    me = os.getpid()
    for p in data.get("processes", []):
        if p.get("pid") != me or p.get("state") != "alive":
            continue
        for pd in p.get("devices", []):
            dev = out["devices"].get(pd["index"])
            if dev is not None:
                dev["process"], dev["process_peak"] = pd.get("bytes", 0), pd.get("peak_bytes", 0)
    return out


def limit():
    """The quota per device (the ledger's index) in bytes, None for a device without one. Before any
    process of the container has used a GPU under gpuguard, the ledger has no device: then, with the
    shim loaded, the quota as configured, {"*": bytes or None} for every device; {} where it cannot
    be told before CUDA has the devices (a share of a device's memory, entries per device) or
    without the shim."""
    devices = usage()["devices"]
    if devices:
        return {i: d["limit"] for i, d in devices.items()}
    return _configured_limit()


def _configured_limit():
    fn = _native.function("gpuguard_configured_limit")
    if fn is None:
        return {}
    fn.argtypes, fn.restype = [ctypes.POINTER(ctypes.c_ulonglong)], ctypes.c_int
    bytes_ = ctypes.c_ulonglong()
    known = fn(ctypes.byref(bytes_))
    if known < 0:
        return {}
    return {"*": bytes_.value if known == 1 else None}


@contextlib.contextmanager
def phase(name):
    """Tags a phase of the calling thread: a report this thread writes inside the block (its OOM,
    report()) names it ("phase" in the report, and in its summary); other threads' reports name
    their own phases. Phases nest; the innermost is named. Without the shim it does nothing."""
    fn = _native.function("gpuguard_phase")
    if fn is None:
        yield
        return
    fn.argtypes, fn.restype = [ctypes.c_char_p], ctypes.c_int
    phases = _thread_phases()
    phases.append(_c_string(name))
    fn(phases[-1])
    try:
        yield
    finally:
        phases.pop()
        fn(phases[-1] if phases else None)


_local = threading.local()


def _thread_phases():
    if not hasattr(_local, "phases"):
        _local.phases = []
    return _local.phases


class tensor_view:
    """Switches the tensor view (every block PyTorch's caching allocator hands out, with its stack) on
    or off now, as PyTorch's `_record_memory_history(enabled=None)` stops its recorder:

        gpuguard.tensor_view(False)          # off from here on
        with gpuguard.tensor_view(False):    # off inside the block, as it was after it
            ...

    Off, a block costs what it costs with GPUGUARD_TENSOR_VIEW=0. Back on, the blocks made while it
    was off are not listed until they are freed: reports say so (`tensor_view.coverage`, and
    "partial" in the summary), with the bytes left unlisted. `previous` is whether it was on before
    (None without the shim, where this does nothing)."""

    def __init__(self, on):
        fn = _native.function("gpuguard_set_tensor_view")
        self.previous = None
        if fn is None:
            return
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
        self._set = fn
        self.previous = fn(1 if on else 0) == 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            self._set(1 if self.previous else 0)
        return False


def load_ipython_extension(ipython):
    """`%load_ext gpuguard`: registers the %gpuguard magic (gpuguard/jupyter.py)."""
    from gpuguard import jupyter
    jupyter.register(ipython)
