"""`python -m gpuguard ARGS` is `gpuguard ARGS`: the command the wheel carries (run, report, top,
doctor, exporter, help). It is also the wheel's `gpuguard` script."""
import os
import sys

from gpuguard import _native


def main():
    cmd = _native.command()
    if cmd is None:
        sys.stderr.write("gpuguard: the gpuguard command is not in this package nor on PATH\n")
        return 127
    os.execv(cmd, [cmd] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
