#!/usr/bin/env bash
# make bench: what the shim costs on this machine with the test driver, against the same programs
# without it, every comparison interleaved in one run (the variants take turns, round after round, in
# a rotating order, each in a fresh process). Prints markdown tables last; BENCH_WRITE=1 also puts
# them into BENCHMARKS.md (between the cpu-bench markers). Takes about 5 to 7 minutes on 2 cores.
#
#   BENCH_RUNS=21      rounds of the per-pair comparisons (each: 20k pairs per process)
#   BENCH_PAIRS=20000  pairs per process
#   BENCH_DEPTH=40     extra native frames above the C program's allocation loop, so that the
#                      unwinder walks a stack as deep as the default GPUGUARD_STACK_DEPTH (48)
#   BENCH_QUICK=1      a smoke run (3 rounds, small sizes): checks the scripts, not the numbers
#
# The test driver runs with FAKE_CUDA_BENCH=1 (addresses from one reserved region instead of an
# mmap+munmap per allocation, which would cost ten times the shim); its own cost is measured too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD="$root/$BUILD"
LIB=$BUILD/libgpuguard.so
FAKE=$BUILD/fake
BIN=$BUILD/bench/bench_alloc
RUNS=${BENCH_RUNS:-21}
PAIRS=${BENCH_PAIRS:-20000}
DEPTH=${BENCH_DEPTH:-40}
PYDEPTH=20
HOLD_SIZES=(10000 100000 1000000)
HOLD_RUNS=3
CONTENTION_RUNS=11
if [[ ${BENCH_QUICK:-0} == 1 ]]; then
  RUNS=3 PAIRS=2000 HOLD_SIZES=(1000 10000) HOLD_RUNS=1 CONTENTION_RUNS=1
fi
for f in "$LIB" "$FAKE/libcuda.so.1" "$BIN" "$BUILD/bench/bench_alloc_fp"; do
  [[ -e $f ]] || { echo "bench: $f is missing (make bench builds it)" >&2; exit 2; }
done

# Nothing from the caller's environment may change what is measured.
while read -r v; do
  case $v in GPUGUARD_* | CUDA_DEVICE_MEMORY_* | FAKE_CUDA_* | LD_PRELOAD | CUDA_VISIBLE_DEVICES) unset "$v" ;; esac
done < <(compgen -e)

W=$(mktemp -d /tmp/gpuguard-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
RES=$W/results.txt
: > "$RES"
mkdir -p "$W/reports"
export LD_LIBRARY_PATH=$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} FAKE_CUDA_BENCH=1 GPUGUARD_REPORT_DIR=$W/reports

# variant NAME CMD...: runs CMD without the shim (none) or under it in one mode. Each mode has its own
# ledger file: a ledger keeps the limit it was created with.
variant() {
  local name=$1; shift
  local shim=(LD_PRELOAD="$LIB" GPUGUARD_LEDGER="$W/ledger-$name")
  case $name in
    none) env "$@" ;;
    track) env "${shim[@]}" GPUGUARD_STACK_DEPTH=0 GPUGUARD_PYTHON_STACKS=0 "$@" ;;        # (a) no limit
    quota) env "${shim[@]}" GPUGUARD_MEM_LIMIT=8GiB GPUGUARD_STACK_DEPTH=0 GPUGUARD_PYTHON_STACKS=0 "$@" ;;  # (b)
    native) env "${shim[@]}" GPUGUARD_MEM_LIMIT=8GiB GPUGUARD_PYTHON_STACKS=0 "$@" ;;    # (c) default depth
    all) env "${shim[@]}" GPUGUARD_MEM_LIMIT=8GiB GPUGUARD_PYTHON_STACKS=1 "$@" ;;       # (d) + Python frames
    # the tensor view (c10's block reports): off, without stacks, and as by default (the native stacks)
    view-off) env "${shim[@]}" GPUGUARD_MEM_LIMIT=8GiB GPUGUARD_TENSOR_VIEW=0 "$@" ;;
    view-nostacks) env "${shim[@]}" GPUGUARD_MEM_LIMIT=8GiB GPUGUARD_STACK_DEPTH=0 GPUGUARD_PYTHON_STACKS=0 "$@" ;;
    # the same with libunwind or libgcc in place of the caching walker (the default), to compare
    native-libunwind) env "${shim[@]}" GPUGUARD_MEM_LIMIT=8GiB GPUGUARD_PYTHON_STACKS=0 GPUGUARD_UNWINDER=libunwind "$@" ;;
    native-libgcc) env "${shim[@]}" GPUGUARD_MEM_LIMIT=8GiB GPUGUARD_PYTHON_STACKS=0 GPUGUARD_UNWINDER=libgcc "$@" ;;
    all-libunwind) env "${shim[@]}" GPUGUARD_MEM_LIMIT=8GiB GPUGUARD_PYTHON_STACKS=1 GPUGUARD_UNWINDER=libunwind "$@" ;;
    *) echo "bench: unknown variant $name" >&2; return 2 ;;
  esac
}

# field KEY LINE: the value of KEY=... in a program's output line.
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<< " $2"; }

# interleave GROUP ROUNDS KEY VARIANTS... -- CMD...: each round runs every variant once, the order
# rotating by one each round, and records "GROUP VARIANT ROUND VALUE".
interleave() {
  local group=$1 rounds=$2 key=$3; shift 3
  local vs=()
  while [[ $1 != -- ]]; do vs+=("$1"); shift; done
  shift
  local n=${#vs[@]} r k out
  for ((r = 0; r < rounds; r++)); do
    for ((k = 0; k < n; k++)); do
      local v=${vs[$(((k + r) % n))]}
      out=$(variant "$v" "$@" 2>>"$W/stderr.txt") || { echo "bench: $group/$v failed:" >&2; tail -5 "$W/stderr.txt" >&2; exit 1; }
      echo "$group $v $r $(field "$key" "$out")" >> "$RES"
    done
  done
}

t_start=$SECONDS
echo "bench: per-pair cost, C program ($RUNS rounds x $PAIRS pairs, depth +$DEPTH)"
interleave pairs "$RUNS" ns_per_pair none track quota native native-libunwind native-libgcc -- "$BIN" pairs 512 "$PAIRS" "$DEPTH"
echo "bench: per-pair cost with cold caches, in-process A/B ($RUNS rounds; the test driver reads 2 MiB before each call)"
# On the GPU the driver's own call (40 to 90 µs) evicts the shim's lines, and the shim's bookkeeping
# costs 2 to 6 times what it costs with hot caches. FAKE_CUDA_EVICT_KIB reproduces that here: each
# memory call of the test driver first reads through 2 MiB (more than the L2 of the CPU machine).
for ((r = 0; r < RUNS; r++)); do
  for v in $( ((r % 2)) && echo "native quota none" || echo "none quota native"); do
    out=$(variant "$v" env FAKE_CUDA_EVICT_KIB=2048 "$BIN" ab 512 4000 100 2>>"$W/stderr.txt") ||
      { echo "bench: cold/$v failed:" >&2; tail -5 "$W/stderr.txt" >&2; exit 1; }
    echo "cold $v $r $(field extra_ns "$out")" >> "$RES"
    echo "colddriver $v $r $(field direct_ns "$out")" >> "$RES"
  done
done
echo "bench: what the shim touches per pair (valgrind lackey: instructions, cache lines and pages)"
# Exact counts, the same on every machine: after the driver's call each line and page is a likely
# miss, so these track the cold-cache cost above without its noise (tests/bench/footprint.py).
if command -v valgrind >/dev/null; then
  for v in track quota native; do
    variant "$v" valgrind --tool=lackey --trace-mem=yes --trace-redir=yes --log-file="$W/lackey-$v" \
      "$BIN" pairs 512 300 "$DEPTH" > /dev/null 2>>"$W/stderr.txt" ||
      { echo "bench: footprint/$v failed:" >&2; tail -5 "$W/stderr.txt" >&2; exit 1; }
    out=$(python3 "$here/footprint.py" "$W/lackey-$v" "$LIB")
    for k in instructions code_lines code_pages data_lines data_pages; do echo "fp_$k $v 0 $(field "$k" "$out")" >> "$RES"; done
    rm -f "$W/lackey-$v"
  done
else
  echo "bench: no valgrind: the footprint table is left out (tests/deps.sh --bench installs it)" >&2
fi
echo "bench: the test driver's own cost, with and without FAKE_CUDA_BENCH"
for ((r = 0; r < 5; r++)); do
  for fb in 0 1; do
    name=mmap; ((fb)) && name=bench
    echo "fake $name $r $(field ns_per_pair "$(FAKE_CUDA_BENCH=$fb "$BIN" pairs 512 "$PAIRS" "$DEPTH")")" >> "$RES"
  done
done

# Python: the machine's python3 and, if present, pyenv's 3.12 (the GPU machine's version).
pythons=("$(python3 -c 'import sys; print(sys.executable)')")
for p in /root/.pyenv/versions/3.12.*/bin/python3; do [[ -x $p ]] && pythons+=("$p") && break; done
for py in "${pythons[@]}"; do
  ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  echo "bench: per-pair cost, Python $ver through ctypes ($RUNS rounds, $PYDEPTH Python frames)"
  interleave "py$ver" "$RUNS" ns_per_pair none native all all-libunwind -- "$py" "$here/bench_py.py" "$PAIRS" "$PYDEPTH"
done

echo "bench: the tensor view, per c10 block report (a C loop calling c10's profiler hook from 8 sites, $RUNS rounds)"
# PyTorch's autograd threads report blocks with no Python frame on their stack: the native site key
# (shim/stacks/capture.cpp) is what they pay, and a C caller pays the same.
interleave blocks "$RUNS" ns_per_report none view-off view-nostacks native -- "$BIN" blocks "$((PAIRS * 5))" "$DEPTH" 8
echo "bench: the same with cold caches: 2 MiB read before each pair, the pair timed alone ($RUNS rounds)"
# The GPU machine's profile of llama's autograd thread (BENCHMARKS.md) is close to this one's: there
# PyTorch's work between two allocations pushes the shim's lines out of the nearer caches.
interleave blockscold "$RUNS" ns_per_report none view-off native -- "$BIN" blocks "$PAIRS" "$DEPTH" 8 2048
echo "bench: the same, the loop built with frame pointers ($RUNS rounds)"
interleave blocksfp "$RUNS" ns_per_report none view-off native -- "$BUILD/bench/bench_alloc_fp" blocks "$((PAIRS * 5))" "$DEPTH" 8
echo "bench: the tensor view, per c10 block report from Python (8 Python lines, $PYDEPTH Python frames, $RUNS rounds)"
interleave pyblocks "$RUNS" ns_per_report none view-off view-nostacks all -- python3 "$here/bench_py.py" blocks "$PAIRS" "$PYDEPTH"

echo "bench: admission under contention: 8 threads, 8 processes sharing a ledger ($CONTENTION_RUNS rounds)"
interleave threads "$CONTENTION_RUNS" pairs_per_s none quota native -- "$BIN" threads 8 512 "$PAIRS" "$DEPTH"
interleave procs "$CONTENTION_RUNS" pairs_per_s none quota native -- "$BIN" procs 8 512 "$PAIRS" "$DEPTH"

echo "bench: reports and memory with ${HOLD_SIZES[*]} live allocations ($HOLD_RUNS rounds)"
for n in "${HOLD_SIZES[@]}"; do
  for ((r = 0; r < HOLD_RUNS; r++)); do
    for v in none native; do
      rm -f "$W"/reports/*.json
      out=$(variant "$v" "$BIN" hold "$n" 512 3 2>>"$W/stderr.txt")
      echo "rss$n $v $r $(field rss_bytes_per_alloc "$out")" >> "$RES"
      if [[ $v != none ]]; then
        ms=$(field report_ms "$out")
        echo "report$n first $r ${ms%%,*}" >> "$RES"
        echo "report$n warm $r ${ms##*,}" >> "$RES"
        size=$(stat -c %s "$(ls "$W"/reports/*.json | head -1)")
        echo "reportsize$n bytes $r $size" >> "$RES"
      fi
    done
  done
done
elapsed=$((SECONDS - t_start))

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo "+local changes" || true)
machine="$(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(. /etc/os-release && echo "$PRETTY_NAME"), test driver (FAKE_CUDA_BENCH=1)"
md=$W/cpu.md
python3 "$here/report.py" cpu "$RES" --machine "$machine" --commit "$commit${dirty:+ $dirty}" \
  --command "make bench" --date "$(date -u +%Y-%m-%d)" --runs "$RUNS" --pairs "$PAIRS" --depth "$DEPTH" \
  --pydepth "$PYDEPTH" --seconds "$elapsed" --cores "$(nproc)" > "$md"
if [[ ${BENCH_WRITE:-0} == 1 ]]; then
  python3 "$here/report.py" splice cpu-bench "$root/BENCHMARKS.md" < "$md"
  echo "bench: BENCHMARKS.md updated (cpu-bench section)"
fi
[[ -n ${BENCH_KEEP:-} ]] && cp "$RES" "$BENCH_KEEP"
echo
cat "$md"
