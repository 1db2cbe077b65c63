#!/usr/bin/env bash
# `make demo`: gpuguard's main job on a machine without a GPU. The test double of the driver
# (build/fake/libcuda.so.1, a 16 GiB "Fake GPU 0") stands in for the real one; everything else is what
# a user runs: a program under `gpuguard run --limit`, the refused allocation and `gpuguard report` on
# its report, the C example, `gpuguard top` while two processes share the quota, `gpuguard doctor`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD="$root/$BUILD"
CLI=$BUILD/gpuguard
work=$(mktemp -d /tmp/gpuguard-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH=$BUILD/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GPUGUARD_LEDGER=$work/ledger
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

cd "$work"

# A Python "training loop" (examples/demo_without_gpu.py: ctypes into the driver, as PyTorch reaches it
# through cudart) that grows until the quota stops it; the report names its Python lines.
say gpuguard run --limit 1GiB --report-dir reports -- python3 examples/demo_without_gpu.py
"$CLI" run --limit 1GiB --report-dir reports -- python3 "$root/examples/demo_without_gpu.py" || true

say "gpuguard report reports/gpuguard-quota-*.json"
"$CLI" report --no-color reports/gpuguard-quota-*.json || true

# The C example, linked against the test driver the way it would be against the real one.
${CC:-cc} -O2 -I"${CUDA_HOME:-/usr/local/cuda}/include" -o "$work/alloc_until_oom" "$root/examples/c/alloc_until_oom.c" \
  -L"$BUILD/fake" -lcuda -Wl,-rpath,"$BUILD/fake"
say gpuguard run --limit 512MiB --ledger c-ledger --report-dir c-reports -- ./alloc_until_oom 128
"$CLI" run --limit 512MiB --ledger c-ledger --report-dir c-reports -- ./alloc_until_oom 128 || true

# Two processes of one "container" hold memory under the same ledger; top shows both.
mkfifo hold_a hold_b
LD_PRELOAD=$BUILD/libgpuguard.so GPUGUARD_MEM_LIMIT=1GiB "$BUILD/tests/bin/drv_linked" linked alloc 268435456 wait <hold_a >/dev/null &
a=$!
LD_PRELOAD=$BUILD/libgpuguard.so GPUGUARD_MEM_LIMIT=1GiB "$BUILD/tests/bin/drv_linked" linked alloc 536870912 wait <hold_b >/dev/null &
b=$!
disown "$b"  # killed below on purpose: no "Killed" notice
exec 7>hold_a 8>hold_b
sleep 0.3
say gpuguard top --once
"$CLI" top --once
kill -KILL "$b"
while kill -0 "$b" 2>/dev/null; do sleep 0.02; done
say "kill -KILL $b; gpuguard top --once"
"$CLI" top --once
exec 7>&- 8>&-
wait "$a" 2>/dev/null || true

say gpuguard doctor
"$CLI" doctor || true
