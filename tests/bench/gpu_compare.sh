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
    done <<< "$out"
  done
done
