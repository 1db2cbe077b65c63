#!/usr/bin/env bash
# The tensor view's cost in one process (part of `make gpu-bench`, also run alone): each loop of
# tests/bench/tensor_bench.py (a small Llama's training step, the conv loop, a generate() decode step)
# in blocks of steps with the view switched on and off at run time (tests/bench/tensor_inproc.py),
# under the shim with its defaults; then PyTorch's recorder switched the same way in a process without
# the shim. Then, where the profiling build is carried (build-profile, make PROFILE=1), one process a
# loop under it, whose timers split the cost of a block event into its parts (Python frames, native
# unwinding, the live-block table, totals and timeline, the event ring) and whose census says which
# stacks were unwound and under how many keys. Prints a markdown table last (also $OUT/tensor_inproc.md).
#
#   INPROC_ROUNDS=150 INPROC_BLOCK=1 INPROC_WARMUP=5 INPROC_LOOPS=llama,conv,decode PROFILE_STEPS=30
#   INPROC_HISTORY=0 leaves PyTorch's recorder out (comparing two builds of the shim)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/gpu_lib.sh"
bench_folders  # BUILD, PROFILED, OUT (absolute), root
ROUNDS=${INPROC_ROUNDS:-150} BLOCK=${INPROC_BLOCK:-1} WARMUP=${INPROC_WARMUP:-5} LOOPS=${INPROC_LOOPS:-llama,conv,decode}
PROFILE_STEPS=${PROFILE_STEPS:-30}
clean_bench_env
W=$(mktemp -d /tmp/gpuguard-inproc.XXXXXX)
trap 'rm -rf "$W"' EXIT
export PYTHONUNBUFFERED=1 GPUGUARD_REPORT_DIR=$W PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
RES=$OUT/inproc_results.txt; : > "$RES"
inproc=(python3 "$here/tensor_inproc.py" --loops "$LOOPS" --rounds "$ROUNDS" --block "$BLOCK" --warmup "$WARMUP")

echo "== in one process: the shim, the view switched on and off"
env LD_PRELOAD="$BUILD/libgpuguard.so" GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=100GiB timeout 400 "${inproc[@]}" --mode shim \
  2>>"$OUT/inproc_stderr.txt" | tee -a "$RES"
if [[ ${INPROC_HISTORY:-1} != 0 ]]; then
  echo "== in one process: PyTorch's recorder switched on and off, no shim"
  timeout 400 "${inproc[@]}" --mode history 2>>"$OUT/inproc_stderr.txt" | tee -a "$RES"
fi

if [[ -f $PROFILED/libgpuguard.so ]]; then
  for loop in ${LOOPS//,/ }; do
    echo "== the profiling build, $loop"
    env LD_PRELOAD="$PROFILED/libgpuguard.so" GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=100GiB timeout 300 \
      python3 "$here/tensor_bench.py" --steps "$PROFILE_STEPS" --warmup 10 --loops "$loop" > "$W/prof.out" 2> "$W/prof.err"
    cat "$W/prof.out"
    grep '^gpuguard: ' "$W/prof.err" | tee "$OUT/inproc_profile_$loop.txt"
  done
else
  echo "gpu_tensor_inproc: no $PROFILED/libgpuguard.so (make PROFILE=1): no split of the cost"
fi

python3 - "$RES" "$OUT" <<'EOF' | tee "$OUT/tensor_inproc.md"
import glob, os, re, sys
rows = {}
for line in open(sys.argv[1]):
    if not line.startswith("inproc "): continue
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    rows[(f["loop"], f["mode"])] = f
print("| loop | blocks a step | step, view off | view on | on / off: median [95% interval] (p25 to p75) | recorder on / off | recorder's cost / the view's |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for loop in ("llama", "conv", "decode"):
    s, h = rows.get((loop, "shim")), rows.get((loop, "history"))
    if not s: continue
    view = float(s["ratio"]) - 1
    ci = lambda f: f" [{f['ci_lo']} to {f['ci_hi']}]" if "ci_lo" in f else ""
    rec = f"{float(h['ratio']):.4f}{ci(h)} ({h['p25']} to {h['p75']})" if h else "not run"
    times = f"{(float(h['ratio']) - 1) / view:.0f}x" if h and view > 0 else "the view within the noise" if h else ""
    print(f"| {loop} | {float(s['blocks_per_step']):.0f} | {s['off_ms']} ms | {s['on_ms']} ms | "
          f"{s['ratio']}{ci(s)} ({s['p25']} to {s['p75']}) | {rec} | {times} |")
any_row = next(iter(rows.values()), None)
if any_row:
    print(f"\n{any_row['rounds']} rounds a loop, each a block of {any_row['block']} step(s) with the view on and one with it off, "
          "the order alternating; the ratio is on / off within a round: its median over rounds, a distribution-free 95% "
          "interval for that median (sign test), and the quartiles.")
names = {"c10 block: the tensor view's share": "whole", "block: stack (capture)": "stack", "stack: Python site key": "python key",
         "stack: Python frames": "python frames", "stack: native site key": "native key", "stack: native unwind": "native unwind",
         "stack: intern": "intern", "stack: check by native frames": "check", "block: pending log (append)": "log",
         "block: apply a batch (table, totals, ring)": "apply (a batch)"}
prof = sorted(glob.glob(os.path.join(sys.argv[2], "inproc_profile_*.txt")))
if prof:
    print("\nWhere a block event's time goes (the profiling build, one process a loop; mean ns a call, calls a step in brackets):\n")
    cols = list(names.values())
    print("| loop | " + " | ".join(cols) + " |")
    print("| --- |" + " --- |" * len(cols))
    for p in prof:
        loop = p.rsplit("_", 1)[1][:-4]
        cell = {}
        for line in open(p):
            m = re.match(r"gpuguard: +(.+?) +(\d+) +(\d+) +(\d+) +(\d+)$", line.strip())
            if m and m.group(1) in names: cell[names[m.group(1)]] = f"{m.group(3)} ({m.group(2)})"
        print(f"| {loop} | " + " | ".join(cell.get(c, "") for c in cols) + " |")
EOF
