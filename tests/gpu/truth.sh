#!/usr/bin/env bash
# Issue 19's check on the GPU: does the quota bound what the GPU really gives? Runs the issue's
# workloads (tests/gpu/truth_workloads.py), each under a quota on a fresh ledger, and samples while
# they run (about 4 times a second) the driver's own figure of each process
# (nvidia-smi --query-compute-apps, as without the shim; where it lists nobody, as in a container
# whose pids NVML cannot show, the device's used memory above what it used before the workload),
# and the ledger's (gpuguard top --json). A workload passes when the most the driver ever held for
# its processes, summed, stays within quota + max(64 MiB, 2% of the quota).
#
#   BUILD=build OUT=/tmp/out bash tests/gpu/truth.sh       (make gpu-test runs it too)
# Variables: BUILD (the shim's build folder, default build), OUT (logs and the table, default
# gpu-out/truth), TRUTH_GPU (the physical GPU, default 0), TRUTH_COUNT_CONTEXT=0 to run the same
# under GPUGUARD_COUNT_CONTEXT=0 (allocations only: the "before" of the issue), TRUTH_ONLY="graph
# pool" to run some workloads. Within 300 s: a workload that would start after 240 s is skipped.
# Writes $OUT/truth.log as it goes, per workload its processes' logs, samples and
# `gpuguard doctor --truth` at the peak; prints the table last (also $OUT/table.txt).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}; [[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
LIB=$BUILD/libgpuguard.so CLI=$BUILD/gpuguard
OUT=${OUT:-$ROOT/gpu-out/truth}; mkdir -p "$OUT"
W=$(mktemp -d /tmp/gpuguard-truth.XXXXXX)
P=$ROOT/tests/gpu/truth_workloads.py
GPU=${TRUTH_GPU:-0}
export PYTHONUNBUFFERED=1 GPUGUARD_REPORT_DIR=$W CUDA_VISIBLE_DEVICES=$GPU NCCL_NVLS_ENABLE=0
export GPUGUARD_COUNT_CONTEXT=${TRUTH_COUNT_CONTEXT:-1}
START=$(date +%s)
exec > >(tee -a "$OUT/truth.log") 2>&1
[[ -f $LIB && -x $CLI ]] || { echo "truth: no $LIB or $CLI (build first, or set BUILD)"; exit 2; }

echo "== truth.sh $(date -u +%FT%TZ), GPU $GPU, GPUGUARD_COUNT_CONTEXT=$GPUGUARD_COUNT_CONTEXT"
nvidia-smi -i "$GPU" --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1
BASE_USED=$(nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits | tr -d ' ')
echo "device used before any workload: ${BASE_USED} MiB"
# Every process the driver lists on the GPU is counted as the workload's: the GPU must be idle.
others=$(nvidia-smi -i "$GPU" --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null)
[[ -z $others ]] || echo "WARNING: the GPU is not idle; these processes will be counted in every workload: $others"
ROWS=()

# Samples until $W/done.NAME exists: time, device used (MiB), the ledger's used bytes, then "pid,MiB"
# for each process the driver lists.
sampler() {
  local name=$1 ledger=$2 apps used led
  while [[ ! -e $W/done.$name ]]; do
    apps=$(nvidia-smi -i "$GPU" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
           tr -d ' ' | grep -E '^[0-9]+,[0-9]+$' | tr '\n' ' ')
    used=$(nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | tr -d ' ')
    led=$("$CLI" top --ledger "$ledger" --json 2>/dev/null |
          python3 -c 'import json,sys; print(max([d["used_bytes"] for d in json.load(sys.stdin)["devices"]] or [0]))' 2>/dev/null)
    echo "$(date +%s.%N) ${used:-0} ${led:-0} $apps" >> "$OUT/$name.samples"
    sleep 0.2
  done
}

# start NAME I ENV... -- ARGS: one process of the workload, under the shim, on the workload's ledger.
start() {
  local name=$1 i=$2; shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" GPUGUARD_LEDGER="$W/ledger.$name" GPUGUARD_MEM_LIMIT="$QUOTA" TRUTH_STOP="$W/stop.$name" \
    LD_PRELOAD="$LIB" timeout 120 python3 "$P" "$@" > "$OUT/$name.$i.log" 2>&1 &
  PIDS+=($!)
}
# Waits (at most 90 s) until every log of the workload so far says PEAK or SKIP, or its process ended.
wait_peaks() {
  local name=$1 n=$2 k done_n
  for _ in $(seq 450); do
    done_n=0
    for ((k = 1; k <= n; k++)); do
      grep -qE '^(PEAK|SKIP)' "$OUT/$name.$k.log" 2>/dev/null && { done_n=$((done_n + 1)); continue; }
      kill -0 "${PIDS[$((k - 1))]}" 2>/dev/null || done_n=$((done_n + 1))
    done
    ((done_n == n)) && return 0
    sleep 0.2
  done
}

# The row of a workload from its samples.
row() {
  local name=$1
  python3 - "$OUT/$name.samples" "$QUOTA_MIB" "$BASE_USED" "$name" "$OUT" <<'EOF'
import glob, os, sys
path, quota, base, name, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
best = None  # (sum MiB, per-process text)
ledger_max, device_max, listed = 0, 0, False
for line in open(path) if os.path.exists(path) else []:
    f = line.split()
    if len(f) < 3:
        continue
    ledger_max = max(ledger_max, int(f[2]))
    device_max = max(device_max, int(f[1]) - base)
    apps = [tuple(int(x) for x in a.split(",")) for a in f[3:]]
    if apps:
        listed = True
        s = sum(m for _, m in apps)
        if best is None or s > best[0]:
            best = (s, "+".join(str(m) for _, m in sorted(apps, key=lambda a: -a[1])))
logs = [open(p).read() for p in sorted(glob.glob(f"{out}/{name}.*.log"))]
peaks = sum(1 for l in logs if "\nPEAK" in "\n" + l)
tol = max(64, quota * 2 // 100)
if any(l.startswith("SKIP") for l in logs) and not peaks:
    verdict, driver, per, over = "SKIP", "-", next(l for l in logs if l.startswith("SKIP")).splitlines()[0][:28], "-"
elif not peaks:  # no process got as far as its peak: the workload itself failed (see its logs)
    verdict, driver, per, over = "ERROR", "-", "(no process reached its peak)", "-"
elif best is None and device_max <= 0:
    verdict, driver, per, over = "NO DATA", "-", "-", "-"
else:
    total = best[0] if listed else device_max
    per = best[1] if listed else "(not listed; device used)"
    driver, over = f"{total}", f"{total - quota:+d}"
    verdict = "PASS" if total <= quota + tol else "FAIL"
print(f"{name:<10} {quota:>6} {ledger_max >> 20:>7} {driver:>7} {over:>7} {tol:>4} {peaks:>2}/{len(logs):<2} {per:<28} {verdict}")
EOF
}

# workload NAME QUOTA_GIB: runs the body given as the function body_NAME.
workload() {
  local name=$1
  QUOTA=${2}GiB QUOTA_MIB=$(( $2 * 1024 ))
  if [[ -n ${TRUTH_ONLY:-} && " $TRUTH_ONLY " != *" $name "* ]]; then return; fi
  if (( $(date +%s) - START > 240 )); then
    ROWS+=("$(printf '%-10s %6s %7s %7s %7s %4s %5s %-28s %s' "$name" "$QUOTA_MIB" - - - - - "(out of time)" SKIP)"); return
  fi
  echo "== $name under $QUOTA ($(( $(date +%s) - START )) s)"
  PIDS=()
  rm -f "$OUT/$name".*
  sampler "$name" "$W/ledger.$name" & local sp=$!
  "body_$name"
  sleep 2  # the hold, sampled (and NVML's figure of each process read again by its shim)
  LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} "$CLI" doctor --truth --ledger "$W/ledger.$name" > "$OUT/$name.doctor.txt" 2>&1
  touch "$W/stop.$name"
  wait "${PIDS[@]}" 2>/dev/null
  touch "$W/done.$name"; wait $sp
  grep -h -E '^(PEAK|SKIP)|Error|error' "$OUT/$name".*.log | head -8 | sed 's/^/    /'
  ls "$W"/gpuguard-quota-*.json >/dev/null 2>&1 && mkdir -p "$OUT/reports" && mv "$W"/gpuguard-*.json "$OUT/reports/" 2>/dev/null
  ROWS+=("$(row "$name")")
  echo "    ${ROWS[-1]}"
}

# Four PyTorch processes on one ledger, started together, each asking for 2 GiB of tensors.
body_torch4() {
  local i
  for i in 1 2 3 4; do start torch4 $i -- hold 2; done
  wait_peaks torch4 4
}
# A CUDA graph with a 768 MiB memory node under the cudaMallocAsync backend, beside 1 GiB of tensors.
body_graph() {
  start graph 1 PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- graph
  wait_peaks graph 1
}
# The cudaMallocAsync backend keeps 1.5 GiB in its pool; a sibling then takes what it can.
body_pool() {
  start pool 1 PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- pool 1.5
  wait_peaks pool 1
  start pool 2 -- hold 3
  wait_peaks pool 2
}
# DDP with NCCL, one rank.
body_ddp() {
  start ddp 1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 -- ddp
  wait_peaks ddp 1
}
body_cupy() {
  start cupy 1 -- cupy
  wait_peaks cupy 1
}
# JAX preallocates a fraction of what cuMemGetInfo calls total (the quota under the shim).
body_jax() {
  start jax 1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 -- jax
  wait_peaks jax 1
}

workload torch4 4
workload graph 2
workload pool 3
workload ddp 2
workload cupy 2
workload jax 2

{
  echo
  echo "== the quota against the driver's view (MiB; ledger = the most the ledger counted; driver = the most"
  echo "   its processes held at once, summed, per process at that moment; over = driver - quota; tolerance"
  echo "   max(64 MiB, 2%); peaks = processes that reached their peak (a refused context does not);"
  echo "   GPUGUARD_COUNT_CONTEXT=$GPUGUARD_COUNT_CONTEXT; $(( $(date +%s) - START )) s)"
  printf '%-10s %6s %7s %7s %7s %4s %5s %-28s %s\n' workload quota ledger driver over tol peaks "driver per process" verdict
  printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/table.txt"
