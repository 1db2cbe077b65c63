#!/usr/bin/env bash
# Where the shim's time goes on the GPU machine (which has no perf). Two parts, variants taking turns
# in separate processes (the order rotating each round):
#   1. raw cuMemAlloc + cuMemFree, in-process A/B (bench_alloc ab: through the exported symbols vs
#      straight into libcuda, in one process): none (the control: extra is noise), quota (ledger and
#      limit, no stacks), native (+ native stacks), profile (quota with the step-timed shim);
#   2. the transformer training loop with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (every tensor a driver
#      call: the worst case): none, quota, native (+ native stacks), all (+ Python frames), and
#      profile (all, step-timed).
# The profiled runs print per-step histograms (shim/base/profile.h) after the tables.
# Needs build/libgpuguard.so (+ libunwind.so.8) and build-profile/libgpuguard.so (make PROFILE=1).
#
#   PROFILE_ROUNDS=4 PROFILE_PAIRS=2000 PROFILE_SIZES=512,2097152,20971520,1073741824
#   PROFILE_TRAIN_ROUNDS=3 PROFILE_PARTS="raw train"
#   PROFILE_TRAIN_VARIANTS="none quota native all profile-all profile-libunwind" (also:
#     profile-native, profile-libunwind-native, profile-libgcc, profile-libgcc-native, profile-d16)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD="$root/$BUILD"
PROFILED=${PROFILED:-$root/build-profile}
OUT=${OUT:-$BUILD/gpu-profile}
mkdir -p "$OUT"
ROUNDS=${PROFILE_ROUNDS:-4} PAIRS=${PROFILE_PAIRS:-2000} SIZES=${PROFILE_SIZES:-512,2097152,20971520,1073741824}
TRAIN_ROUNDS=${PROFILE_TRAIN_ROUNDS:-3} PARTS=${PROFILE_PARTS:-raw train}
TRAIN_VARIANTS=${PROFILE_TRAIN_VARIANTS:-none quota native all profile-all profile-libunwind}
W=$(mktemp -d /tmp/gpuguard-gpuprofile.XXXXXX)
trap 'rm -rf "$W"' EXIT
source "$here/gpu_lib.sh"
clean_bench_env
mkdir -p "$W/reports"
export GPUGUARD_REPORT_DIR=$W/reports GPUGUARD_REPORT_ON_EXIT=0

variant() {
  local name=$1; shift
  local quota=(GPUGUARD_LEDGER="$W/ledger-$name" GPUGUARD_MEM_LIMIT=100GiB)
  case $name in
    none) env "$@" ;;
    quota) env LD_PRELOAD="$BUILD/libgpuguard.so" "${quota[@]}" GPUGUARD_STACK_DEPTH=0 GPUGUARD_PYTHON_STACKS=0 "$@" ;;
    native) env LD_PRELOAD="$BUILD/libgpuguard.so" "${quota[@]}" GPUGUARD_PYTHON_STACKS=0 "$@" ;;
    all) env LD_PRELOAD="$BUILD/libgpuguard.so" "${quota[@]}" "$@" ;;
    profile) env LD_PRELOAD="$PROFILED/libgpuguard.so" "${quota[@]}" GPUGUARD_STACK_DEPTH=0 GPUGUARD_PYTHON_STACKS=0 "$@" ;;
    profile-all) env LD_PRELOAD="$PROFILED/libgpuguard.so" "${quota[@]}" "$@" ;;
    # the unwinders compared, step-timed: libunwind's or libgcc's instead of the caching walker (the
    # default), with and without Python frames; native depth 16 (of 48)
    profile-native) env LD_PRELOAD="$PROFILED/libgpuguard.so" "${quota[@]}" GPUGUARD_PYTHON_STACKS=0 "$@" ;;
    profile-libunwind) env LD_PRELOAD="$PROFILED/libgpuguard.so" "${quota[@]}" GPUGUARD_UNWINDER=libunwind "$@" ;;
    profile-libunwind-native) env LD_PRELOAD="$PROFILED/libgpuguard.so" "${quota[@]}" GPUGUARD_UNWINDER=libunwind \
      GPUGUARD_PYTHON_STACKS=0 "$@" ;;
    profile-libgcc) env LD_PRELOAD="$PROFILED/libgpuguard.so" "${quota[@]}" GPUGUARD_UNWINDER=libgcc "$@" ;;
    profile-libgcc-native) env LD_PRELOAD="$PROFILED/libgpuguard.so" "${quota[@]}" GPUGUARD_UNWINDER=libgcc \
      GPUGUARD_PYTHON_STACKS=0 "$@" ;;
    profile-d16) env LD_PRELOAD="$PROFILED/libgpuguard.so" "${quota[@]}" GPUGUARD_STACK_DEPTH=16 "$@" ;;
  esac
}

# rotate ROUND VARIANT...: the variants, the order rotated by ROUND.
rotate() {
  local r=$1; shift
  local vs=("$@") k
  for ((k = 0; k < ${#vs[@]}; k++)); do echo "${vs[$(((k + r) % ${#vs[@]}))]}"; done
}

raw_part() {
  local res=$OUT/raw_ab.txt r v out line
  : > "$res"
  for ((r = 0; r < ROUNDS; r++)); do
    for v in $(rotate "$r" none quota native profile); do
      out=$(variant "$v" timeout 200 "$BA" ab "$SIZES" "$PAIRS" 50 2>"$W/err") || { echo "raw $v failed:"; tail -3 "$W/err"; continue; }
      while read -r line; do
        echo "$v $(field size "$line") $r $(field direct_ns "$line") $(field hooked_ns "$line") $(field extra_ns "$line")" >> "$res"
      done <<< "$out"
      [[ $v == profile && $r == $((ROUNDS - 1)) ]] && grep '^gpuguard: ' "$W/err" > "$OUT/raw_profile_steps.txt"
    done
    echo "raw round $r done ($SECONDS s)"
  done
  echo
  echo "== raw cuMemAlloc + cuMemFree, in-process A/B: median over $ROUNDS rounds (each the median of $PAIRS turns)"
  python3 - "$res" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    v, size, r, d, h, x = line.split()
    rows[(v, int(size))].append((int(d), int(h), int(x)))
variants = ["none", "quota", "native", "profile"]
print("| size | driver pair µs | " + " | ".join(f"{v}: extra ns (%)" for v in variants) + " |")
print("| --- | --- |" + " --- |" * len(variants))
for s in sorted({s for _, s in rows}):
    base = statistics.median(x[0] for v in variants for x in rows.get((v, s), []))
    cells = []
    for v in variants:
        xs = rows.get((v, s))
        if not xs:
            cells.append("—"); continue
        extra = statistics.median(x[2] for x in xs)
        cells.append(f"{extra:.0f} ({100 * extra / base:.2f}%)")
    print(f"| {s} | {base / 1000:.1f} | " + " | ".join(cells) + " |")
PY
  echo
  echo "== per-step times inside the profiled shim, raw, last round, all sizes together (ns)"
  cat "$OUT/raw_profile_steps.txt"
}

train_part() {
  local res=$OUT/train.txt r v out
  : > "$res"
  : > "$OUT/train_profile_steps.txt"
  : > "$OUT/train_reuse.txt"
  for ((r = 0; r < TRAIN_ROUNDS; r++)); do
    for v in $(rotate "$r" $TRAIN_VARIANTS); do
      out=$(variant "$v" PYTORCH_NO_CUDA_MEMORY_CACHING=1 GPUGUARD_REPORT_ON_EXIT=$([[ $v == all ]] && echo 1 || echo 0) timeout 200 python3 "$here/train_bench.py" --models xfmr \
        --steps 100 --warmup 20 2>"$W/err") || { echo "train $v failed:"; tail -3 "$W/err"; continue; }
      echo "$v $r $(field step_ms "$out") $(field allocs_per_step "$out")" >> "$res"
      # The shim's own account of its stacks (a report on demand at the end of each shimmed run).
      [[ $v == all ]] && ls -t "$W"/reports/gpuguard-exit-*.json 2>/dev/null | head -1 | xargs -r python3 -c \
        'import json,sys; c = json.load(open(sys.argv[1]))["capture"]; print("all, round '"$r"': unwinder", c.get("unwinder"), "walker", c.get("walker"), "stack reuse", c.get("stack_reuse"))' \
        >> "$OUT/train_reuse.txt"
      [[ $v == profile* && $r == $((TRAIN_ROUNDS - 1)) ]] && { echo "== $v"; grep '^gpuguard: ' "$W/err"; } >> "$OUT/train_profile_steps.txt"
    done
    echo "train round $r done ($SECONDS s)"
  done
  echo
  echo "== transformer, PYTORCH_NO_CUDA_MEMORY_CACHING=1: median step ms over $TRAIN_ROUNDS rounds"
  python3 - "$res" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    v, r, ms, allocs = line.split()
    rows[v].append((float(ms), float(allocs)))
base = statistics.median(x[0] for x in rows["none"]) if rows["none"] else float("nan")
print("| variant | step ms (each round) | ratio to none | driver allocations a step |")
print("| --- | --- | --- | --- |")
for v in sorted(rows, key=lambda v: (v != "none", v)):
    xs = rows.get(v)
    if xs:
        m = statistics.median(x[0] for x in xs)
        allocs = statistics.median(x[1] for x in xs)
        allocs = f"{allocs:.0f}" if allocs >= 0 else "not counted (see the profiled hook counts)"
        print(f"| {v} | {m:.3f} ({', '.join(f'{x[0]:.2f}' for x in xs)}) | {m / base:.3f} | {allocs} |")
PY
  echo
  cat "$OUT/train_reuse.txt"
  echo
  echo "== per-step times inside the profiled shim, training, last round (ns)"
  cat "$OUT/train_profile_steps.txt"
}

main() {
  build_raw_bench "$W" || exit 2
  [[ $PARTS == *raw* ]] && raw_part
  [[ $PARTS == *train* ]] && train_part
  return 0
}

main 2>&1 | tee "$OUT/gpu_profile.log"
exit "${PIPESTATUS[0]}"
