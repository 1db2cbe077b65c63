#!/usr/bin/env python3
"""`make wheel`: dist/gpuguard-<version>-py3-none-manylinux2014_x86_64.whl, written directly (a wheel
is a zip with a RECORD; no setuptools, no network).

It holds the Python package (python/gpuguard), and in gpuguard/_native/ the command, the shim and
its libunwind, stripped of debug information. The tag is true: the three load on glibc 2.17 and newer
(packaging/check_floor.sh, t_floor.sh) and link libstdc++ and libgcc statically, which is
manylinux2014's rule. The command is the wheel's `gpuguard` script (a console entry point that
execs gpuguard/_native/gpuguard, which finds the shim beside itself).

usage: build.py BUILD_DIR OUT_DIR VERSION"""
import base64
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

TAG = "py3-none-manylinux2014_x86_64"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def metadata(version):
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    return ("Metadata-Version: 2.1\nName: gpuguard\nVersion: %s\n"
            "Summary: A GPU memory quota inside a container, and an explanation of every CUDA out-of-memory\n"
            "License: Apache-2.0\nRequires-Python: >=3.6\n"
            "Classifier: License :: OSI Approved :: Apache Software License\n"
            "Classifier: Operating System :: POSIX :: Linux\n"
            "Classifier: Framework :: Jupyter\n"
            "Description-Content-Type: text/markdown\n\n%s" % (version, readme))


def main():
    build, out, version = sys.argv[1:4]
    files = []  # (name in the wheel, bytes, executable)
    pkg = os.path.join(ROOT, "python", "gpuguard")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            files.append(("gpuguard/" + name, open(os.path.join(pkg, name), "rb").read(), False))
    with tempfile.TemporaryDirectory() as tmp:
        for name, mode in (("gpuguard", True), ("libgpuguard.so", True), ("libunwind.so.8", False)):
            dst = os.path.join(tmp, name)
            subprocess.check_call(["strip", "--strip-debug", "-o", dst, os.path.join(build, name)])
            files.append(("gpuguard/_native/" + name, open(dst, "rb").read(), mode))
    info = "gpuguard-%s.dist-info/" % version
    files.append((info + "METADATA", metadata(version).encode(), False))
    files.append((info + "WHEEL", ("Wheel-Version: 1.0\nGenerator: gpuguard packaging/wheel/build.py\n"
                                   "Root-Is-Purelib: false\nTag: %s\n" % TAG).encode(), False))
    files.append((info + "entry_points.txt", b"[console_scripts]\ngpuguard = gpuguard.__main__:main\n", False))
    for name in ("LICENSE", "NOTICE"):
        files.append((info + name, open(os.path.join(ROOT, name), "rb").read(), False))
    record = []
    for name, data, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(info + "RECORD,,")
    files.append((info + "RECORD", ("\n".join(record) + "\n").encode(), False))

    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "gpuguard-%s-%s.whl" % (version, TAG))
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, executable in files:
            zi = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100755 if executable else 0o100644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(path + ".tmp", path)
    print(path)


if __name__ == "__main__":
    main()
