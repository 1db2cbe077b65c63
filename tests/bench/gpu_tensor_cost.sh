#!/usr/bin/env bash
# The tensor view's cost on the GPU machine (part of `make gpu-bench`, also run alone): PyTorch loops
# with the caching allocator (tests/bench/tensor_bench.py: a small Llama's training step, the conv
# loop, a generate() decode step), in separate processes that take turns, the order rotating each
# round: no shim / the shim with every feature on / PyTorch's own recorder
# (_record_memory_history(stacks="python")) without the shim. Between processes step times differ by
# 10 to 20% on that machine, more than the shim's cost; so the shim built with step timers
# (build-profile, PROFILE=1) also times its own share of every c10 block report inside one process
# per loop: that share times the block events of a step, over the step, is the measure the target
# is checked against. Prints a markdown table last (also $OUT/tensor_cost.md).
#
#   TENSOR_ROUNDS=3 TENSOR_STEPS=60 TENSOR_WARMUP=10
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/gpu_lib.sh"
bench_folders  # BUILD, PROFILED, OUT (absolute), root
ROUNDS=${TENSOR_ROUNDS:-3} STEPS=${TENSOR_STEPS:-60} WARMUP=${TENSOR_WARMUP:-10}
RES=$OUT/tensor_results.txt; : > "$RES"
clean_bench_env
W=$(mktemp -d /tmp/gpuguard-tcost.XXXXXX)
export PYTHONUNBUFFERED=1 GPUGUARD_REPORT_DIR=$W

variant() {
  local v=$1; shift
  case $v in
    none) "$@" ;;
    all) env LD_PRELOAD="$BUILD/libgpuguard.so" GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=100GiB "$@" ;;
    history) "$@" --history ;;
    profiled) env LD_PRELOAD="$PROFILED/libgpuguard.so" GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=100GiB "$@" ;;
  esac
}

vs=(none all history)
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < 3; k++)); do
    v=${vs[$(((k + r) % 3))]}
    out=$(variant "$v" timeout 300 python3 "$here/tensor_bench.py" --steps "$STEPS" --warmup "$WARMUP" 2>>"$OUT/tensor_stderr.txt")
    echo "$out" | sed "s/^/round $r $v: /"
    while read -r line; do
      [[ $line == tensor\ * ]] || continue
      echo "$(field loop "$line") $v $r $(field step_ms "$line") $(field blocks_per_step "$line")" >> "$RES"
    done <<< "$out"
  done
done

# The shim's own share of each c10 report, one process a loop (the timers sum over a process).
if [[ -f $PROFILED/libgpuguard.so ]]; then
  for loop in llama conv decode; do
    variant profiled timeout 300 python3 "$here/tensor_bench.py" --steps "$STEPS" --warmup "$WARMUP" --loops "$loop" \
      > "$W/prof.out" 2> "$W/prof.err"
    grep '^gpuguard: ' "$W/prof.err" > "$OUT/tensor_profile_$loop.txt"
    line=$(grep '^gpuguard: c10 block' "$W/prof.err")
    # the columns after the name: count mean median p90
    read -r count mean median p90 <<< "$(awk '{print $(NF-3), $(NF-2), $(NF-1), $NF}' <<< "$line")"
    echo "profile $loop: c10 block reports=$count mean_ns=$mean median_ns=$median p90_ns=$p90; $(cat "$W/prof.out")"
    echo "own-$loop $mean $median $p90 $count" >> "$RES"
  done
else
  echo "gpu_tensor_cost: no $PROFILED/libgpuguard.so (make PROFILE=1): the shim's own share is not measured"
fi

python3 - "$RES" "$STEPS" <<'EOF' | tee "$OUT/tensor_cost.md"
import statistics, sys
rows, own = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0].startswith("own-"):
        own[f[0][4:]] = tuple(float(x) for x in f[1:])
    else:
        loop, v, r, ms, blocks = f[0], f[1], int(f[2]), float(f[3]), float(f[4])
        rows.setdefault(loop, {}).setdefault(v, []).append((r, ms, blocks))
print("| loop | blocks a step | step, no shim | shim, all on | recorder | shim's own share a step (timers) | recorder's cost / shim's |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for loop in ("llama", "conv", "decode"):
    d = rows.get(loop, {})
    if "none" not in d: continue
    med = {v: statistics.median(ms for _, ms, _ in d[v]) for v in d}
    # paired by round: each ratio against the no-shim run of the same round
    def ratio(v):
        by_r = {r: ms for r, ms, _ in d.get("none", [])}
        rs = [ms / by_r[r] for r, ms, _ in d.get(v, []) if r in by_r]
        return statistics.median(rs) if rs else float("nan")
    blocks = statistics.median(b for _, _, b in d["none"])
    share = ""
    cost_ratio = ""
    if loop in own:
        mean_ns = own[loop][0]
        own_ms = 2 * blocks * mean_ns / 1e6  # every block is handed out and taken back
        share = f"{own_ms * 1000:.0f} µs = {100 * own_ms / med['none']:.2f}% ({mean_ns:.0f} ns a report)"
        hist_ms = med.get("history", float("nan")) - med["none"]
        if own_ms > 0 and hist_ms == hist_ms:
            cost_ratio = f"{hist_ms / own_ms:.0f}x" if hist_ms > 0 else "recorder within the noise"
    print(f"| {loop} | {blocks:.0f} | {med['none']:.2f} ms | {med.get('all', float('nan')):.2f} ms ({ratio('all'):.3f}) | "
          f"{med.get('history', float('nan')):.2f} ms ({ratio('history'):.3f}) | {share} | {cost_ratio} |")
print(f"\n{sys.argv[2]} timed steps a process; medians over rounds; ratios paired within a round against the no-shim run.")
EOF
rm -rf "$W"
