#!/usr/bin/env bash
# Two builds of the shim on the raw pair, for a change meant to make the hot path cheaper: processes
# alternate between build A and build B, each measuring its own extra cost in-process (bench_alloc
# ab: the exported symbols against libcuda's own definitions, quota on, no stacks). A process's cost
# follows where it runs (BENCHMARKS.md: the driver's own pair moves by 40% between processes, the
# shim's bookkeeping with it), so each line gives the process's driver pair beside its extra.
#
#   tests/bench/gpu_compare.sh LIB_A LIB_B [ROUNDS] [SIZES] [PAIRS]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
A=$1 B=$2 ROUNDS=${3:-5} SIZES=${4:-512,2097152} PAIRS=${5:-2000}
W=$(mktemp -d /tmp/gpuguard-compare.XXXXXX)
trap 'rm -rf "$W"' EXIT
source "$here/gpu_lib.sh"
clean_bench_env
build_raw_bench "$W" || exit 2
printf '%-6s %5s %10s %14s %10s\n' build round size "driver pair" extra
for ((r = 0; r < ROUNDS; r++)); do
  for lib in $( ((r % 2)) && echo "B A" || echo "A B"); do
    path=$A; [[ $lib == B ]] && path=$B
    out=$(env LD_PRELOAD="$path" GPUGUARD_LEDGER="$W/ledger-$lib" GPUGUARD_MEM_LIMIT=100GiB GPUGUARD_STACK_DEPTH=0 \
      GPUGUARD_PYTHON_STACKS=0 GPUGUARD_REPORT_ON_EXIT=0 timeout 120 "$BA" ab "$SIZES" "$PAIRS" 50 2>"$W/err") ||
      { echo "build $lib, round $r failed:"; tail -3 "$W/err"; continue; }
    while read -r line; do
      printf '%-6s %5d %10s %11s ns %7s ns\n' "$lib" "$r" "$(field size "$line")" "$(field direct_ns "$line")" "$(field extra_ns "$line")"
      echo "$lib $(field direct_ns "$line") $(field extra_ns "$line")" >> "$W/lines"
    done <<< "$out"
  done
done
# Last, the table: per build, the median extra and share over its lines (one per process and size),
# and apart for processes whose driver pair was fast and slow (the shim's misses cost more there).
[[ -s $W/lines ]] && python3 - "$W/lines" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
fast = 85000
print("\n%-6s %5s %13s %13s %22s %22s" % ("build", "lines", "median extra", "median share", "driver pair < 85 us", ">= 85 us"))
for b in ("A", "B"):
    mine = [(float(d), float(x)) for k, d, x in rows if k == b]
    if not mine:
        continue
    def med(sel):
        v = [x for d, x in mine if sel(d)]
        return "%.0f ns (%d lines)" % (statistics.median(v), len(v)) if v else "-"
    share = statistics.median(100 * x / d for d, x in mine)
    print("%-6s %5d %10.0f ns %12.2f%% %22s %22s" % (b, len(mine), statistics.median(x for d, x in mine), share,
                                                  med(lambda d: d < fast), med(lambda d: d >= fast)))
PY
