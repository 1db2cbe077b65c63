# Shared by the GPU benchmark scripts (gpu_run.sh, gpu_profile.sh, gpu_tensor_cost.sh, gpu_tensor_inproc.sh): finding this machine's driver
# and CUDA headers, and building the raw allocation benchmark against them. Sourced; needs $here
# (tests/bench) and $BUILD.

# bench_folders: the repository root, and BUILD, PROFILED and OUT (build, build-profile and
# $BUILD/gpu-bench unless set) as absolute paths, OUT made.
bench_folders() {
  root=$(cd "$here/../.." && pwd)
  BUILD=${BUILD:-build}; [[ $BUILD = /* ]] || BUILD=$root/$BUILD
  PROFILED=${PROFILED:-$root/build-profile}; [[ $PROFILED = /* ]] || PROFILED=$root/$PROFILED
  OUT=${OUT:-$BUILD/gpu-bench}; mkdir -p "$OUT"
}

# build_raw_bench DIR: builds bench_alloc into DIR and sets BA to it (or to the carried
# $BUILD/bench/bench_alloc when it cannot be built here); sets LIBCUDA and CUDA_INC. Status 2 when
# there is neither.
build_raw_bench() {
  local dir=$1
  LIBCUDA=${GPU_BENCH_LIBCUDA:-}
  [[ -n $LIBCUDA ]] || for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [[ -e $d/libcuda.so.1 ]] && { LIBCUDA=$d/libcuda.so.1; break; }
  done
  [[ -n $LIBCUDA ]] || LIBCUDA=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
  CUDA_INC=""
  for d in "${CUDA_HOME:-/usr/local/cuda}/include" /usr/local/cuda/include "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")/../include"; do
    [[ -f $d/cuda.h ]] && { CUDA_INC=$d; break; }
  done
  BA=$dir/bench_alloc
  if [[ -n $LIBCUDA && -n $CUDA_INC ]] &&
    gcc -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -I"$CUDA_INC" -I"$here/../../include" "$here/bench_alloc.c" -o "$BA" \
      "$LIBCUDA" -Wl,-rpath,"$(dirname "$LIBCUDA")" -ldl -pthread; then
    echo "built with $CUDA_INC/cuda.h, linked to $LIBCUDA"
  elif [[ -x $BUILD/bench/bench_alloc ]]; then
    BA=$BUILD/bench/bench_alloc
    [[ -n $LIBCUDA ]] && export LD_LIBRARY_PATH=$(dirname "$LIBCUDA")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "could not build here (cuda.h: ${CUDA_INC:-none}, libcuda: ${LIBCUDA:-none}); using the carried $BA"
  else
    echo "gpu-bench: cannot build tests/bench/bench_alloc.c (cuda.h: ${CUDA_INC:-none}, libcuda: ${LIBCUDA:-none})"
    return 2
  fi
}

# Drops every variable that would change what a benchmark run measures.
clean_bench_env() {
  local v
  while read -r v; do
    case $v in GPUGUARD_* | CUDA_DEVICE_MEMORY_* | LD_PRELOAD | PYTORCH_NO_CUDA_MEMORY_CACHING) unset "$v" ;; esac
  done < <(compgen -e)
}

# own_cost_per_step STEPS STDERR: from the step timers the profiled shim prints at exit, the time its
# hooks spent beside the driver's calls (whole hook minus the driver's call, allocations and frees),
# in ms a step, and the driver allocations a step, over STEPS steps (warm-up included, as the timers
# count every call). The timers' own cost is included: an upper bound.
own_cost_per_step() {
  awk -v steps="$1" '
    /^gpuguard: alloc: whole hook/ { na = $(NF-3); wa = $(NF-2) }
    /^gpuguard: +driver.s cuMemAlloc/ { da = $(NF-2) }
    /^gpuguard: free: whole hook/ { nf = $(NF-3); wf = $(NF-2) }
    /^gpuguard: +driver.s cuMemFree/ { df = $(NF-2) }
    END { if (na > 0 && steps > 0) printf "%.4f %.1f\n", (na * (wa - da) + nf * (wf - df)) / steps / 1e6, na / steps }' "$2"
}

# field KEY LINE: the value of KEY=value in a line of key=value pairs.
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<< " $2"; }
