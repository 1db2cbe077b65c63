#!/usr/bin/env bash
# `make demo`: gpuguard's main job, on the real GPU when the machine has one (nvidia-smi lists it),
# else on the test double of the driver (build/fake/libcuda.so.1, a 16 GiB "Fake GPU 0").
# DEMO_DRIVER=gpu|fake chooses. What runs is what a user runs: a program under `gpuguard run --limit`,
# the refused allocation and `gpuguard report` on its report, the C example, `gpuguard top` while
# two processes share the quota, `gpuguard doctor`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD="$root/$BUILD"
CLI=$BUILD/gpuguard
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
work=$(mktemp -d /tmp/gpuguard-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
export GPUGUARD_LEDGER=$work/ledger
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

driver=${DEMO_DRIVER:-}
if [[ -z $driver ]]; then
  driver=fake
  if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then driver=gpu; fi
fi
case $driver in
  gpu) echo "demo: on the machine's GPU ($(nvidia-smi -L 2>/dev/null | head -1))"
       link=(-L"$CUDA_HOME/lib64/stubs" -lcuda) ;;  # the stub to link; the driver's libcuda.so.1 at run time
  fake) echo "demo: no GPU here; the test driver (build/fake/libcuda.so.1) stands in for it"
        export LD_LIBRARY_PATH=$BUILD/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        link=(-L"$BUILD/fake" -lcuda -Wl,-rpath,"$BUILD/fake") ;;
  *) echo "demo: DEMO_DRIVER=$driver is not gpu or fake" >&2; exit 2 ;;
esac

cd "$work"

if [[ $driver == gpu ]] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  # A PyTorch training loop whose batch doubles until the quota stops it; the report names its lines.
  say gpuguard run --limit 2GiB --report-dir reports -- python3 examples/train.py
  "$CLI" run --limit 2GiB --report-dir reports -- python3 "$root/examples/train.py" || true
else
  # A Python "training loop" (examples/demo_without_gpu.py: ctypes into the driver, as PyTorch reaches
  # it through cudart) that grows until the quota stops it; the report names its Python lines.
  say gpuguard run --limit 1GiB --report-dir reports -- python3 examples/demo_without_gpu.py
  "$CLI" run --limit 1GiB --report-dir reports -- python3 "$root/examples/demo_without_gpu.py" || true
fi

say "gpuguard report reports/gpuguard-quota-*.json"
"$CLI" report --no-color "$(ls -t reports/gpuguard-quota-*.json | head -1)" || true

# The C example, linked the way a CUDA program links the driver.
${CC:-cc} -O2 -I"$CUDA_HOME/include" -o "$work/alloc_until_oom" "$root/examples/c/alloc_until_oom.c" "${link[@]}"
say gpuguard run --limit 512MiB --ledger c-ledger --report-dir c-reports -- ./alloc_until_oom 128
"$CLI" run --limit 512MiB --ledger c-ledger --report-dir c-reports -- ./alloc_until_oom 128 || true

# Two processes of one "container" hold memory under the same ledger; top shows both.
mkfifo hold_a hold_b
"$CLI" run --limit 1GiB -- ./alloc_until_oom 256 256 hold <hold_a >/dev/null &
a=$!
"$CLI" run --limit 1GiB -- ./alloc_until_oom 512 512 hold <hold_b >/dev/null &
b=$!
disown "$b"  # killed below on purpose: no "Killed" notice
exec 7>hold_a 8>hold_b
for _ in $(seq 50); do  # until both hold their memory (a real context takes a moment to make)
  [[ $("$CLI" top --json 2>/dev/null | grep -o '"state": *"alive"' | wc -l) -ge 2 ]] && break
  sleep 0.2
done
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
