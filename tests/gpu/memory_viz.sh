#!/usr/bin/env bash
# `gpuguard report --memory-viz` against PyTorch's own memory_viz on the GPU machine (part of
# `make gpu-test`, also run alone): a PyTorch program runs under the shim until its caching allocator
# runs out (tests/gpu/tensor_view.py frag: 4 MiB tensors, every other freed, then 600 MiB under 2 GiB),
# its report becomes a snapshot, and tests/gpu/memory_viz.py reads the snapshot with
# torch.cuda._memory_viz (trace_plot, segment_plot, trace, segsum) and compares its trace entries with
# those of a snapshot PyTorch makes itself. Files go to $OUT/memory_viz/; prints "check  result" rows
# (the caller's table) and writes them to $OUT/memory_viz/summary.txt.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}; [[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
LIB=$BUILD/libgpuguard.so CLI=$BUILD/gpuguard
OUT=${OUT:-$ROOT/gpu-out}; M=$OUT/memory_viz; mkdir -p "$M"
W=$(mktemp -d /tmp/gpuguard-memviz.XXXXXX)
export PYTHONUNBUFFERED=1
fail() { printf '%-62s %s\n' "$1" "FAIL ($2)" | tee "$M/summary.txt"; rm -rf "$W"; exit 1; }

echo "== memory_viz: a run until PyTorch's allocator runs out, under 2 GiB"
# As tests/gpu/tensor_view.sh runs it: the context left out of the quota, which PyTorch's numbers leave out too.
env GPUGUARD_COUNT_CONTEXT=0 GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=2GiB GPUGUARD_REPORT_DIR="$W" LD_PRELOAD="$LIB" \
  timeout 300 python3 "$ROOT/tests/gpu/tensor_view.py" frag > "$M/frag.log" 2>&1
r=$(ls -t "$W"/gpuguard-*.json 2>/dev/null | head -1)
[[ -n $r ]] || fail "memory_viz: a report of the run" "none; see $M/frag.log"
cp "$r" "$M/frag.json"
"$CLI" report --memory-viz "$M/frag.pickle" "$M/frag.json" 2> "$M/report.err" || fail "memory_viz: gpuguard report --memory-viz" "$(head -1 "$M/report.err")"

echo "== memory_viz: the snapshot read by torch.cuda._memory_viz"
python3 "$ROOT/tests/gpu/memory_viz.py" "$M/frag.pickle" "$M/frag.json" "$M" > "$M/summary.txt" 2> "$M/check.err"
rc=$?
cat "$M/summary.txt"
rm -rf "$W"
# Everything in one file: what comes back from the GPU machine is a few files at most.
tar -C "$OUT" -czf "$OUT/memory_viz.tgz" memory_viz
exit $rc
