#!/usr/bin/env bash
# `make soak`: hours of random device-memory traffic under the sanitizers, run by hand (not in CI).
# Builds the shim, the command, the test driver and the soak programs with ASan+UBSan in SOAK_BUILD
# (its own folder: never mixed with the plain build), then runs tests/soak/soak.cpp, which prints a
# summary table and exits 1 on any failure. Settings (environment):
#   SOAK_MINUTES=120        how long
#   SOAK_PROCS=6            worker processes, each restarted whenever it dies
#   SOAK_THREADS=4          threads per worker
#   SOAK_LIMIT=1GiB         the shared limit (allocations go up to a quarter of it)
#   SOAK_KILL_EVERY=3       mean seconds between stops of a random worker (3 SIGKILL : 1 SIGTERM)
#   SOAK_SIGNAL_EVERY=2     mean seconds between report signals (SIGUSR2) to a random worker
#   SOAK_NAMESPACES=1       one worker in four in a PID namespace of its own, where root may unshare (0: none)
#   SOAK_SEED=<time>        the random seed, printed so that a failing run can be repeated
#   SOAK_BUILD=build-soak   the sanitizer build folder
#   SOAK_KEEP=1             keep the work folder (ledger, truth, journals, sanitizer logs) after a pass
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
SOAK_BUILD=${SOAK_BUILD:-build-soak}
export SOAK_SEED=${SOAK_SEED:-$(date +%s)}
jobs=$(nproc 2>/dev/null || echo 2)
echo "soak: building the ASan+UBSan shim in $SOAK_BUILD"
make -s -j"$jobs" BUILD="$SOAK_BUILD" SANITIZE=address,undefined soak-bin || exit 2
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuguard-soak.XXXXXX")
echo "soak: seed $SOAK_SEED, work folder $work"

# The sanitizer runtimes must come first in a program that was not built with them: the shim is
# preloaded after libasan (and libubsan, which the shim needs too). Every report goes to a file in
# the work folder, where the supervisor looks; halt_on_error makes UBSan's findings fatal as ASan's
# are, exit code 66 tells them from other failures, handle_abort prints the stack of a stalled worker.
asan=$(gcc -print-file-name=libasan.so) ubsan=$(gcc -print-file-name=libubsan.so)
export SOAK_PRELOAD="$asan $ubsan $root/$SOAK_BUILD/libgpuguard.so"
export SOAK_LIBRARY_PATH="$root/$SOAK_BUILD/fake"
export SOAK_BIN="$root/$SOAK_BUILD/tests/soak" SOAK_CLI="$root/$SOAK_BUILD/gpuguard"
# symbolize=0: symbolizing inside a worker runs llvm-symbolizer under the same preload and can take
# longer than the stall timeout; the logs are symbolized here afterwards, with addr2line.
# fast_unwind_on_fatal: frame pointers (the sanitizer build keeps them) instead of the unwinder, which
# takes the loader's locks that a faulting thread may hold.
export ASAN_OPTIONS="log_path=$work/sanitizer:exitcode=66:handle_abort=1:detect_leaks=1:symbolize=0:fast_unwind_on_fatal=1"
export UBSAN_OPTIONS="log_path=$work/sanitizer:exitcode=66:halt_on_error=1:print_stacktrace=1:symbolize=0"
export LSAN_OPTIONS="exitcode=66"
"$root/$SOAK_BUILD/tests/soak/soak" "$work"
rc=$?
# "#3 0x7f.. (/path/lib.so+0x1a2b)" -> "#3 function at file:line (lib.so+0x1a2b)"
for log in "$work"/sanitizer.*; do
  [[ -f $log ]] || continue
  while IFS= read -r line; do
    if [[ $line =~ ^(\ *#[0-9]+)\ 0x[0-9a-f]+\ +\((.+)\+(0x[0-9a-f]+)\)$ ]]; then
      where=$(addr2line -f -C -i -p -e "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}" 2>/dev/null | head -1)
      echo "${BASH_REMATCH[1]} ${where:-?} ($(basename "${BASH_REMATCH[2]}")+${BASH_REMATCH[3]})"
    else
      echo "$line"
    fi
  done < "$log" > "$log.txt"
  echo "soak: sanitizer report $log.txt:"; sed -n '1,40p' "$log.txt" | sed 's/^/    /'
done
if ((rc == 0)) && [[ ${SOAK_KEEP:-0} != 1 ]]; then rm -rf "$work"; else echo "soak: work folder kept: $work"; fi
exit $rc
