#!/usr/bin/env bash
# make gpu-bench: the shim's cost on a real GPU, every comparison A/B interleaved in separate
# processes that take turns (the order rotating each round), all in one command of about 5 minutes:
#   1. raw cuMemAlloc + cuMemFree of 512 B, 2 MiB, 20 MiB and 1 GiB, in-process A/B against libcuda's
#      own definitions (2000 turns a process, 5 rounds): no shim (the control) / shim with quota but
#      no stacks / shim, all features;
#   2. PyTorch training loops (tests/bench/train_bench.py: convolution and transformer-style), with
#      the caching allocator and with PYTORCH_NO_CUDA_MEMORY_CACHING=1, 3 rounds: no shim / shim,
#      all features / torch.cuda.memory._record_memory_history() without the shim / no shim again
#      (the control: how far two processes of the same program differ); with no caching, also the
#      shim built with step timers (build-profile, when there), whose hooks time the shim's own
#      share of every call: a measure of its cost that the between-process spread cannot blur;
#   3. in that training loop: a report on demand, and the time from a failing request to torch's
#      OutOfMemoryError with and without the shim (which writes its report inside that call).
# Builds only a small C program (gcc, the machine's cuda.h and libcuda); uses build/libgpuguard.so
# as carried (and build/libunwind.so.8 beside it), and build-profile/libgpuguard.so (make PROFILE=1;
# $PROFILED) when carried too. Logs, results and the shim's reports go to $OUT
# (default build/gpu-bench); the markdown tables for BENCHMARKS.md are printed last and written to
# $OUT/gpu_bench.md (tests/bench/report.py splice gpu-bench BENCHMARKS.md < that file).
#
#   GPU_BENCH_SECONDS=420  rounds not started by then are skipped (the tables say how many ran)
#   GPU_BENCH_LIBCUDA=PATH the driver library to link the raw benchmark with (default: found)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD="$root/$BUILD"
OUT=${OUT:-$BUILD/gpu-bench}
mkdir -p "$OUT/reports"
DEADLINE=${GPU_BENCH_SECONDS:-420}
LIB=$BUILD/libgpuguard.so
PROFILED=${PROFILED:-$root/build-profile}
[[ $PROFILED = /* ]] || PROFILED="$root/$PROFILED"
RES=$OUT/results.txt
: > "$RES"
W=$(mktemp -d /tmp/gpuguard-gpubench.XXXXXX)
trap 'rm -rf "$W"' EXIT
RAW_ROUNDS=4 RAW_PAIRS=2000 RAW_SIZES=512,2097152,20971520,1073741824
TRAIN_ROUNDS=3 TRAIN_STEPS=150 TRAIN_WARMUP=30
LIMIT=100GiB  # every shim run has a quota (admission on); 1 GiB blocks fit, a 200 GiB request does not

source "$here/gpu_lib.sh"
clean_bench_env
export GPUGUARD_REPORT_DIR=$OUT/reports

main() {
echo "== machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } |
  head -1 | tee "$OUT/gpu.txt"
{ python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' \
  2>/dev/null || echo "python3 without torch"; } | tee -a "$OUT/gpu.txt"
[[ -f $LIB ]] || { echo "gpu-bench: $LIB is missing: build it (make) and carry build/"; exit 2; }

echo "== build the raw allocation benchmark against this machine's driver"
build_raw_bench "$W" || exit 2

# variant NAME CMD...: no shim (none, control, history), or the shim with a quota and no stacks
# (quota), or with every feature on (all: quota, native stacks at the default depth, Python frames;
# profiled: the same with step timers).
variant() {
  local name=$1; shift
  case $name in
    none | control | history) env "$@" ;;
    quota) env LD_PRELOAD="$LIB" GPUGUARD_LEDGER="$W/ledger-quota" GPUGUARD_MEM_LIMIT=$LIMIT GPUGUARD_STACK_DEPTH=0 \
      GPUGUARD_PYTHON_STACKS=0 "$@" ;;
    all) env LD_PRELOAD="$LIB" GPUGUARD_LEDGER="$W/ledger-all" GPUGUARD_MEM_LIMIT=$LIMIT GPUGUARD_PYTHON_STACKS=1 "$@" ;;
    profiled) env LD_PRELOAD="$PROFILED/libgpuguard.so" GPUGUARD_LEDGER="$W/ledger-profiled" GPUGUARD_MEM_LIMIT=$LIMIT \
      GPUGUARD_PYTHON_STACKS=1 "$@" ;;
  esac
}
late() { ((SECONDS >= DEADLINE)) && { echo "gpu-bench: past ${DEADLINE}s, skipping the rest of $1"; return 0; }; return 1; }

echo "== does the shim load? (a report on demand from a program holding 10 allocations)"
probe=$(variant all "$BA" hold 10 512 1 2>&1)
echo "$probe"
if [[ $probe != *report_ms=* ]]; then
  echo "gpu-bench: THE SHIM DID NOT LOAD (LD_PRELOAD=$LIB); ldd says:"
  ldd "$LIB"
  exit 3
fi
rm -f "$OUT"/reports/*.json

echo "== raw cuMemAlloc + cuMemFree, in-process A/B ($RAW_ROUNDS rounds x $RAW_PAIRS turns a size)"
# bench_alloc ab: in one process, pairs through the exported symbols (the shim's hooks when preloaded)
# take turns with pairs straight into libcuda's own definitions; extra_ns is the median difference.
# Between processes the driver's own time varies by 15%, far more than the shim's cost (see
# tests/bench/gpu_profile.sh); within one process both paths share it. "none" is the control.
vs=(none quota all)
for ((r = 0; r < RAW_ROUNDS; r++)); do
  late "raw" && break
  for ((k = 0; k < 3; k++)); do
    v=${vs[$(((k + r) % 3))]}
    out=$(variant "$v" timeout 200 "$BA" ab "$RAW_SIZES" "$RAW_PAIRS" 50 2>>"$OUT/stderr.txt") ||
      { echo "raw $v failed"; tail -3 "$OUT/stderr.txt"; continue; }
    while read -r line; do
      size=$(field size "$line")
      echo "rawextra$size $v $r $(field extra_ns "$line")" >> "$RES"
      echo "rawdirect$size $v $r $(field direct_ns "$line")" >> "$RES"
    done <<< "$out"
    echo "round $r $v: $(tr '\n' ' ' <<< "$out" | sed 's/ab //g' | cut -c1-240)"
  done
done

echo "== PyTorch training loops ($TRAIN_ROUNDS rounds, $TRAIN_STEPS steps after $TRAIN_WARMUP)"
[[ -f $PROFILED/libgpuguard.so ]] || echo "gpu-bench: no $PROFILED/libgpuguard.so (make PROFILE=1): the shim's own time a step is not measured"
vs=(none all history control)
for ((r = 0; r < TRAIN_ROUNDS; r++)); do
  for alloc in caching nocache; do
    late "training" && break 2
    if [[ $alloc == nocache && -f $PROFILED/libgpuguard.so ]]; then
      # One process a model: the timers sum over the whole process.
      for m in conv xfmr; do
        variant profiled PYTORCH_NO_CUDA_MEMORY_CACHING=1 GPUGUARD_REPORT_ON_EXIT=0 timeout 150 python3 "$here/train_bench.py" \
          --steps "$TRAIN_STEPS" --warmup "$TRAIN_WARMUP" --models "$m" > "$W/prof-out" 2> "$W/prof-err" ||
          { echo "train nocache profiled $m failed"; tail -5 "$W/prof-err"; continue; }
        grep '^gpuguard: ' "$W/prof-err" > "$OUT/profile-nocache-$m-round$r.txt"  # the step table, kept
        read -r own calls <<< "$(own_cost_per_step $((TRAIN_STEPS + TRAIN_WARMUP)) "$W/prof-err")"
        echo "round $r nocache profiled: $(cat "$W/prof-out") own_ms_per_step=$own driver_allocs_per_step=$calls"
        [[ -n $own ]] && echo "ownms-nocache-$m profiled $r $own" >> "$RES" && echo "calls-nocache-$m profiled $r $calls" >> "$RES"
      done
    fi
    for ((k = 0; k < ${#vs[@]}; k++)); do
      v=${vs[$(((k + r) % ${#vs[@]}))]}
      args=(--steps "$TRAIN_STEPS" --warmup "$TRAIN_WARMUP")
      [[ $v == history ]] && args+=(--history)
      [[ $r == 0 && $alloc == caching && $v != history ]] && args+=(--oom)
      nc=()
      [[ $alloc == nocache ]] && nc=(PYTORCH_NO_CUDA_MEMORY_CACHING=1)
      out=$(variant "$v" "${nc[@]}" timeout 150 python3 "$here/train_bench.py" "${args[@]}" 2>>"$OUT/stderr.txt") ||
        { echo "train $alloc $v failed"; tail -5 "$OUT/stderr.txt"; }
      echo "$out" | sed "s/^/round $r $alloc $v: /"
      while read -r line; do
        case $line in
          train\ *)
            m=$(field model "$line")
            echo "train-$alloc-$m $v $r $(field step_ms "$line")" >> "$RES"
            calls=$(field allocs_per_step "$line")  # -1 where PyTorch does not count them (no cache)
            [[ $v == none && -n $calls && $calls != -* ]] && echo "calls-$alloc-$m $v $r $calls" >> "$RES"
            ev=$(field history_events "$line")
            [[ -n $ev ]] && echo "histev-$alloc-$m $v $r $ev" >> "$RES"
            ;;
          report\ *) echo "gpureport $v $r $(field ms "$line")" >> "$RES" ;;
          oom\ ms=*)
            IFS=, read -ra t <<< "$(field ms "$line")"
            for i in "${!t[@]}"; do echo "oom $v $i ${t[$i]}" >> "$RES"; done
            ;;
          oom_report\ *)
            for key in files bytes stacks live names_script; do echo "oomfile $key 0 $(field $key "$line")" >> "$RES"; done
            ;;
        esac
      done <<< "$out"
    done
  done
done

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || cat "$root/.git-commit" 2>/dev/null || echo unknown)
machine="$(head -1 "$OUT/gpu.txt"), $(nproc) cores; $(sed -n 2p "$OUT/gpu.txt")"
python3 "$here/report.py" gpu "$RES" --machine "$machine" --commit "$commit" --command "make gpu-bench" \
  --date "$(date -u +%Y-%m-%d)" --seconds "$SECONDS" --runs "$TRAIN_ROUNDS" --pairs "$RAW_PAIRS" \
  --steps "$TRAIN_STEPS" > "$OUT/gpu_bench.md" 2>>"$OUT/stderr.txt" || echo "gpu-bench: report.py failed (see stderr.txt)"
echo
echo "== results ($SECONDS s; logs, results.txt and the shim's reports are in \$OUT)"
cat "$OUT/gpu_bench.md"
}

main 2>&1 | tee "$OUT/gpu_bench.log"
exit "${PIPESTATUS[0]}"
