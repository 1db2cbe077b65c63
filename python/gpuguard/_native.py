"""Where gpuguard's native parts are, and whether the shim is loaded in this process.

The wheel carries the command and the shim in gpuguard/_native/ (the command finds libgpuguard.so
beside itself, and the shim its libunwind.so.8). Installed otherwise (the .deb, `make install`, a
source build), the command is the one on PATH."""
import ctypes
import os
import shutil

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")


def command():
    """The path of the gpuguard command: the wheel's own, else the one on PATH, else None."""
    own = os.path.join(HERE, "gpuguard")
    if os.access(own, os.X_OK):
        return own
    return shutil.which("gpuguard")


def library():
    """The path of the libgpuguard.so this package would preload (the wheel's), else None."""
    own = os.path.join(HERE, "libgpuguard.so")
    return own if os.path.isfile(own) else None


def _process():
    return ctypes.CDLL(None)


def function(name):
    """The shim's exported function NAME, when the shim is loaded in this process; else None."""
    try:
        return getattr(_process(), name)
    except (AttributeError, OSError):
        return None


def loaded_from():
    """The path of the libgpuguard.so mapped into this process, or None when it is not loaded."""
    if function("gpuguard_report") is None:
        return None
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip()
                if path.endswith("/libgpuguard.so"):
                    return path
    except OSError:
        pass
    return "libgpuguard.so"
