#!/usr/bin/env bash
# `make gpu-test`: the checks that need the real driver, cuDNN and PyTorch (the GPU machine).
# Builds nothing but the nvcc program; the shim comes from build/ (built on the CPU machine).
# Logs and reports go to $OUT (or ./gpu-out); a short table is printed last.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}; [[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
LIB=$BUILD/libgpuguard.so
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
W=$(mktemp -d /tmp/gpuguard-gpu.XXXXXX)
export PYTHONUNBUFFERED=1 GPUGUARD_REPORT_DIR=$W
results=()
record() { results+=("$(printf '%-58s %s' "$1" "$2")"); }
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$@"; }

echo "== environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$OUT/env.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())' 2>&1 | tee -a "$OUT/env.txt"
ldconfig -p | grep -c libunwind | sed 's/^/libunwind entries in ldconfig: /' | tee -a "$OUT/env.txt"

echo "== 1. nvcc program (static cudart), 2 GiB limit"
nvcc -O2 -o "$W/quota_check" "$ROOT/tests/gpu/quota_check.cu" 2>&1 | tail -3
GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=2GiB LD_PRELOAD=$LIB "$W/quota_check" 2>&1 | tee "$OUT/nvcc.log"
r=$(ls -t "$W"/gpuguard-quota-*.json 2>/dev/null | head -1)
record "nvcc: 2 GiB shown, context counted, blocks as free shows, refused then, allocates after free" "$(grep -q 'nvcc: PASS' "$OUT/nvcc.log" && echo PASS || echo FAIL)"
record "nvcc: report written (api, unwinder)" "$([[ -n $r ]] && json "$r" 'd["failed_request"]["api"], d["capture"]["unwinder"]' || echo FAIL)"
mkdir -p "$OUT/reports"; [[ -n $r ]] && cp "$r" "$OUT/reports/nvcc-quota.json"
rm -f "$W"/*.json

echo "== 2. PyTorch, 2 GiB limit"
GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=2GiB LD_PRELOAD=$LIB python3 "$ROOT/tests/gpu/torch_quota.py" 2>&1 | tee "$OUT/torch.log"
r=$(ls -t "$W"/gpuguard-quota-*.json 2>/dev/null | head -1)
record "torch: mem_get_info 2 GiB, OutOfMemoryError, allocates after" "$(grep -q 'torch: PASS' "$OUT/torch.log" && echo PASS || echo FAIL)"
record "torch: one report for the OOM episode" "$(ls "$W"/gpuguard-quota-*.json 2>/dev/null | wc -l) report(s)"
if [[ -n $r ]]; then
  cp "$r" "$OUT/reports/torch-quota.json"
  line=$(grep -n FILL-LINE "$ROOT/tests/gpu/torch_quota.py" | cut -d: -f1)
  record "torch: failed request names torch_quota.py:$line" "$(json "$r" "any(f.get('file','').endswith('torch_quota.py') and f.get('line')==$line for f in d['stacks'][d['failed_request']['stack']]['frames'])" 2>&1 | tail -1)"
  record "torch: api seen / driver api" "$(json "$r" "d['failed_request']['api'] + ' / ' + d['failed_request']['driver_api']" 2>&1 | tail -1)"
fi
rm -f "$W"/*.json

echo "== 3. PyTorch training loop that OOMs: who holds the memory"
GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=3GiB LD_PRELOAD=$LIB python3 "$ROOT/tests/gpu/torch_train_oom.py" 2>&1 | tee "$OUT/train.log"
r=$(ls -t "$W"/gpuguard-quota-*.json 2>/dev/null | head -1)
if [[ -n $r ]]; then
  cp "$r" "$OUT/reports/train-oom.json"
  "$BUILD/gpuguard" report "$r" > "$OUT/train-report.txt" 2>&1
  line=$(grep -n BATCH-LINE "$ROOT/tests/gpu/torch_train_oom.py" | cut -d: -f1)
  record "train: top holders name torch_train_oom.py" "$(json "$r" "sorted({(f['function'], f['line']) for b in d['by_stack'][:5] if b['stack'] for f in d['stacks'][b['stack']]['frames'] if f.get('file','').endswith('torch_train_oom.py')})[:4]" 2>&1 | tail -1)"
  record "train: torch frames present" "$(json "$r" "any('torch' in f.get('file','') or 'torch' in f.get('module','') for s in d['stacks'].values() for f in s['frames'])" 2>&1 | tail -1)"
else
  record "train: report" "FAIL (none)"
fi
rm -f "$W"/*.json

echo "== 4. two PyTorch processes on one ledger, 4 GiB"
export GPUGUARD_LEDGER=$W/ledger GPUGUARD_MEM_LIMIT=4GiB
# The quota counts each process's context too (~0.6 GiB with PyTorch): the first holds 2 GiB of
# tensors so that the second's context still fits.
LD_PRELOAD=$LIB python3 "$ROOT/tests/gpu/torch_holder.py" 2 wait > "$W/first.log" 2>&1 &
first=$!
for _ in $(seq 120); do grep -q "holder: got" "$W/first.log" && break; sleep 0.25; done
second=$(LD_PRELOAD=$LIB python3 "$ROOT/tests/gpu/torch_holder.py" 3 2>&1 | grep "holder: got")
"$BUILD/gpuguard" top --once --ledger "$W/ledger" > "$OUT/top-two.txt" 2>&1
kill -9 $first; wait $first 2>/dev/null
t0=$(date +%s%N)
third=$(LD_PRELOAD=$LIB python3 "$ROOT/tests/gpu/torch_holder.py" 3 2>&1 | grep "holder: got")
t1=$(date +%s%N)
record "ledger: first holds" "$(grep -o 'got .*' "$W/first.log")"
record "ledger: second, while the first lives (expect 768 MiB: 4 GiB - 2 GiB - two contexts)" "$second"
record "ledger: after SIGKILL of the first (expect 3072 MiB)" "$third ($(( (t1 - t0) / 1000000 )) ms incl. start)"
unset GPUGUARD_LEDGER GPUGUARD_MEM_LIMIT
cat "$OUT/top-two.txt"
rm -f "$W"/*.json

echo "== 5. cuDNN workspace cap (benchmark=True under a quota the largest workspace does not fit)"
# auto calibrates the quota itself and prints it; off runs under that same quota; noshim is the
# reference step time.
limit=""
for mode in auto off noshim; do
  rm -f "$W"/*.json
  case $mode in
    auto) GPUGUARD_LEDGER=none GPUGUARD_REPORT_ON_EXIT=1 LD_PRELOAD=$LIB timeout 150 python3 "$ROOT/tests/gpu/cudnn_check.py" > "$OUT/cudnn-$mode.log" 2>&1 ;;
    off) GPUGUARD_LEDGER=none GPUGUARD_REPORT_ON_EXIT=1 GPUGUARD_CUDNN_WORKSPACE_LIMIT=off LD_PRELOAD=$LIB \
           timeout 150 python3 "$ROOT/tests/gpu/cudnn_check.py" ${limit:+--limit $limit} > "$OUT/cudnn-$mode.log" 2>&1 ;;
    noshim) timeout 150 python3 "$ROOT/tests/gpu/cudnn_check.py" > "$OUT/cudnn-$mode.log" 2>&1 ;;
  esac
  rc=$?
  [[ $mode == auto ]] && limit=$(grep -o ' limit=[^ ]*' "$OUT/cudnn-auto.log" | tail -1 | cut -d= -f2)
  n=$(ls "$W"/gpuguard-quota-*.json "$W"/gpuguard-driver_oom-*.json 2>/dev/null | wc -l)
  e=$(ls "$W"/gpuguard-exit-*.json 2>/dev/null | head -1)
  [[ -n $e ]] && cp "$e" "$OUT/reports/cudnn-$mode-exit.json"
  record "cudnn $mode: rc, OOM reports" "rc=$rc reports=$n"
  results+=("    $(tail -1 "$OUT/cudnn-$mode.log" | cut -c1-400)")
done

echo "== 6. the tensor view: PyTorch's blocks against its own numbers, fragmentation, KV cache, DDP, what-if reruns"
unset GPUGUARD_LEDGER GPUGUARD_MEM_LIMIT
BUILD=$BUILD OUT=$OUT timeout 420 bash "$ROOT/tests/gpu/tensor_view.sh" > "$OUT/tensor_view.log" 2>&1 ||
  record "tensor view: tests/gpu/tensor_view.sh" "FAIL (rc=$?, see tensor_view.log)"
[[ -f $OUT/tensor/summary.txt ]] && mapfile -t -O "${#results[@]}" results < "$OUT/tensor/summary.txt"

echo "== 6b. --memory-viz read by PyTorch's memory_viz (trace_plot, segment_plot, trace, segsum)"
BUILD=$BUILD OUT=$OUT timeout 360 bash "$ROOT/tests/gpu/memory_viz.sh" > "$OUT/memory_viz.log" 2>&1 ||
  record "memory_viz: tests/gpu/memory_viz.sh" "FAIL (rc=$?, see memory_viz.log)"
[[ -f $OUT/memory_viz/summary.txt ]] && mapfile -t -O "${#results[@]}" results < "$OUT/memory_viz/summary.txt"

cp "$W"/*.json "$OUT/reports/" 2>/dev/null

echo "== 6. the quota against the driver's own per-process figures (tests/gpu/truth.sh)"
OUT=$OUT/truth BUILD=$BUILD timeout 320 bash "$ROOT/tests/gpu/truth.sh" > "$OUT/truth.log" 2>&1
record "truth: workloads within quota + tolerance" "$(grep -c ' PASS$' "$OUT/truth.log") pass, $(grep -c ' FAIL$' "$OUT/truth.log") fail (table: $OUT/truth.log)"

echo
echo "== gpuguard GPU checks"
printf '%s\n' "${results[@]}" | tee "$OUT/summary.txt"
