# Processes and threads around the shim (issue 8): fork without exec, clone, fork+exec, posix_spawn and
# vfork, exec of a program that never touches CUDA, threads freeing what others allocate, signals
# during allocation storms, fork from a thread while others allocate. The scenarios are
# tests/integration/hammer_linked.c; every run is bounded by `timeout`, so a deadlock fails its check
# instead of hanging the suite.
MIB=1048576
H=$BIN/hammer_linked

# The ledger as `gpuguard top --json` shows it: "pid:bytes" of each live process, sorted.
ledger_procs() {
  "$CLI" top --json --ledger "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(" ".join(sorted("%d:%d" % (p["pid"], p["bytes"]) for p in d["processes"] if p["state"] == "alive")))'
}
ledger_used() { "$CLI" top --json --ledger "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["devices"][0]["used_bytes"])'; }

# Runs `hammer fork|clone P C [steal]` until both hold, checks the ledger, then lets them finish.
family() {
  local mode=$1 steal=${2:-}
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  mkfifo go
  ( FORKS=1 shimmed timeout 60 "$H" "$mode" $((100*MIB)) $((30*MIB)) $steal < go > out 2> err ) &
  exec {fd}> go
  for _ in $(seq 200); do grep -q holding out 2>/dev/null && break; sleep 0.05; done
  local line; line=$(grep holding out) || { exec {fd}>&-; wait; echo "never held:"; cat out err; return 1; }
  local parent child; parent=$(sed -E 's/.*parent=([0-9]+).*/\1/' <<<"$line"); child=$(sed -E 's/.*child=([0-9]+).*/\1/' <<<"$line")
  local procs; procs=$(ledger_procs "$TMP/ledger")
  exec {fd}>&-; wait
  expect_eq "$procs" "$(printf '%s\n' "$parent:$((100*MIB))" "$child:$((30*MIB))" | sort | tr '\n' ' ' | sed 's/ $//')" \
    "the ledger while both hold (parent's slot and the child's own)" &&
  expect_contains out "child exit=0" "the child's exit status" &&
  expect_contains out "info -> 0 free=$((924*MIB)) total=1073741824" "the parent's view once the child has left" &&
  expect_contains out "parent free -> 0" "the parent frees its block" &&
  expect_eq "$(ledger_used "$TMP/ledger")" 0 "the ledger at the end" &&
  expect_eq "$(cat err)" "" "nothing on stderr"
}
check "fork without exec: the child charges a slot of its own, the parent's slot stays exact" family fork
check "a forked child freeing the block it inherited takes nothing from its parent's slot" family fork steal
if [[ -n $SANITIZER ]]; then
  skip "clone(2) without CLONE_VM: the child gets its own slot although no fork handler ran" \
    "the sanitizers do not support a clone(2) child on a stack of its own (ASan warns of false reports)"
else
  check "clone(2) without CLONE_VM: the child gets its own slot although no fork handler ran" family clone
fi

spawned_children() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  # FORKS=1: ThreadSanitizer runs vfork() as fork(), fork handlers included.
  local out; out=$(FORKS=1 shimmed timeout 60 "$H" spawn $((100*MIB)) "$BIN/drv_linked" linked alloc $((50*MIB)) info 2>err)
  expect_eq "$(grep -c "info -> CUDA_SUCCESS free=$((874*MIB)) total=1073741824" <<<"$out")" 2 \
    "each child (posix_spawn, then vfork+exec) sees the parent's 100 MiB and its own 50 MiB" &&
  expect_contains "$out" "posix_spawn -> 0 exit=0" "posix_spawn" &&
  expect_contains "$out" "vfork -> exit=0" "vfork" &&
  expect_contains "$out" "info -> 0 free=1073741824 total=1073741824" "the parent's view at the end: both children left, its block freed" &&
  expect_eq "$(cat err)" "" "nothing on stderr"
}
check "posix_spawn and vfork+exec: each child has its own slot, the parent's count is untouched" spawned_children

exec_untouched() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_REPORT_ON_EXIT=1
  # A program that never touches CUDA, preloaded: same output, same status, nothing written anywhere.
  local out rc
  out=$(SECRET=1 shimmed sh -c 'echo "$0 $#"; env | grep -c ^SECRET=; exit 3' arg0 a b 2>&1); rc=$?
  expect_eq "$out" $'arg0 2\n1' "its output" && expect_eq "$rc" 3 "its exit status" &&
  expect_eq "$(ls -A)" "" "no ledger, report or other file created" || return 1
  # Through exec from a CUDA program: the new image runs as it would without gpuguard.
  out=$(shimmed timeout 30 "$H" exec $MIB /bin/sh -c 'echo "exec'"'"'d: $0"' 2>&1); rc=$?
  expect_eq "$out" "exec'd: /bin/sh" "output after exec" && expect_eq "$rc" 0 "status after exec"
}
check "a program that never touches CUDA runs untouched, also when a CUDA program execs it" exec_untouched

exec_cuda_program() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  # The first image held 100 MiB; exec replaced it (the driver freed that memory) but kept the pid and
  # start time, so only the new image can tell its old slot is stale: it gives those bytes back.
  local out; out=$(shimmed timeout 30 "$H" exec $((100*MIB)) "$BIN/drv_linked" linked info alloc $((1000*MIB)) free 0 2>&1)
  expect_contains "$out" "info -> CUDA_SUCCESS free=1073741824 total=1073741824" "the new image's view" &&
  expect_contains "$out" "alloc $((1000*MIB)) -> CUDA_SUCCESS" "the whole limit is there for it" &&
  expect_eq "$(ledger_used "$TMP/ledger")" 0 "the ledger at the end"
}
check "a CUDA program that execs another: the old image's bytes leave the ledger, the new one has the limit" exec_cuda_program

handoff_exact() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=4GiB FAKE_CUDA_TRUTH=$TMP/truth
  local out; out=$(shimmed timeout 120 "$H" handoff 4 4 500 $((1*MIB)) 2>err) || { echo "$out"; cat err; return 1; }
  expect_contains "$out" "handoff allocated=2000 freed=2000 failed=0" "every block handed over and freed" &&
  expect_contains "$out" "info -> 0 free=4294967296 total=4294967296" "the ledger back at zero" &&
  expect_contains "$("$BIN/fake_truth" "$TMP/truth")" "device 0 current 0 " "the driver's own count at zero" &&
  expect_eq "$(ledger_used "$TMP/ledger")" 0 "no byte left in the ledger"
}
check "threads freeing what other threads allocate: accounting exact at the end" handoff_exact

storm_with_signals() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=64MiB GPUGUARD_MAX_REPORTS=2
  local out; out=$(shimmed timeout 120 "$H" signals 8 2000 $((4*MIB)) 2>err); local rc=$?
  expect_eq "$rc" 0 "exit status (124: hung)" || { echo "$out"; tail -5 err; return 1; }
  local delivered; delivered=$(sed -nE 's/signals delivered=([0-9]+)/\1/p' <<<"$out")
  ((delivered > 100)) || { echo "only ${delivered:-0} SIGALRMs were delivered"; return 1; }
  expect_contains "$out" "left=0" "every block freed" &&
  expect_contains "$out" "info -> 0 free=67108864 total=67108864" "the ledger back at zero"
}
check "SIGALRM every 100 us (no SA_RESTART) during an allocation storm: no deadlock, no crash, exact" storm_with_signals

report_signal_storm() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=64MiB GPUGUARD_REPORT_SIGNAL=USR2 GPUGUARD_MAX_REPORTS=1
  ( shimmed timeout 120 "$H" storm 4 6000 $((4*MIB)) > out 2> err ) &
  local runner=$!
  for _ in $(seq 200); do grep -q started out 2>/dev/null && break; sleep 0.05; done
  local pid; pid=$(pgrep -n -f "$H storm 4 6000") || { echo "no storm"; cat err; return 1; }
  for _ in $(seq 100); do kill -USR2 "$pid" 2>/dev/null; sleep 0.01; done
  wait $runner; local rc=$?
  expect_eq "$rc" 0 "exit status (124: hung)" || { cat out; tail -5 err; return 1; }
  expect_contains out "left=0" "every block freed" &&
  expect_contains out "info -> 0 free=67108864 total=67108864" "the ledger back at zero" || return 1
  local n; n=$(ls gpuguard-signal-*.json 2>/dev/null | wc -l)
  ((n >= 1)) || { echo "no signal report"; return 1; }
  # Every report is whole JSON (written to a temporary name, then renamed).
  python3 -c 'import json,sys; [json.load(open(f)) for f in sys.argv[1:]]' gpuguard-signal-*.json
}
check "GPUGUARD_REPORT_SIGNAL sent 100 times during an allocation storm: reports, no crash, exact" report_signal_storm

fork_from_thread_loop() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=256MiB GPUGUARD_MAX_REPORTS=1 GPUGUARD_REPORT_ON_EXIT=0
  local forks=40
  [[ -n $SANITIZER ]] && forks=15  # each child starts the sanitizer's runtime again: slow
  local out; out=$(FORKS=1 shimmed timeout 300 "$H" forkloop 4 $forks $MIB 2>err); local rc=$?
  expect_eq "$rc" 0 "exit status (124: the parent hung)" || { echo "$out"; tail -5 err; return 1; }
  expect_contains "$out" "forkloop forks=$forks hung=0 failed=0" "every child allocated, freed and exited" &&
  expect_contains "$out" "left=0" "the parent's threads freed everything" &&
  expect_contains "$out" "info -> 0 free=268435456 total=268435456" "the ledger back at zero"
}
if [[ $SANITIZER == address ]]; then
  # Seen here: the child waits forever on a lock of ASan's own allocator, held at fork time by a thread
  # it no longer has (GCC 12's libasan takes no allocator locks around fork; google/sanitizers#1814).
  skip "fork from a thread while 4 others allocate, in a loop; each child allocates and exits: no deadlock" \
    "AddressSanitizer's allocator is not fork-safe in a multithreaded process (the plain and TSan runs cover it)"
else
  check "fork from a thread while 4 others allocate, in a loop; each child allocates and exits: no deadlock" fork_from_thread_loop
fi

dlopen_during_report() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=64MiB GPUGUARD_MAX_REPORTS=100
  # A library whose constructor asks for more than the quota: it fails inside dlopen, with the
  # loader's lock held, while another thread's failure is writing a report (which takes that lock).
  cat > ctor.c <<'EOF'
#include <cuda.h>
__attribute__((constructor)) static void grab(void) {
  CUdeviceptr p;
  if (cuMemAlloc(&p, (size_t)1 << 40) == CUDA_SUCCESS) cuMemFree(p);
}
EOF
  cc -shared -fPIC -I"${CUDA_HOME:-/usr/local/cuda}/include" -o ctor.so ctor.c -L"$FAKE" -lcuda || return 1
  local out; out=$(shimmed timeout 120 "$H" dlrace "$TMP/ctor.so" 3000 2>err); local rc=$?
  expect_eq "$rc" 0 "exit status (124: deadlock)" || { echo "$out"; tail -3 err; return 1; }
  expect_contains "$out" "info -> 0 free=67108864" "the ledger back at zero" &&
  ls gpuguard-quota-*.json >/dev/null
}
check "an allocation failing inside dlopen (a constructor) while a report is being written: no deadlock" dlopen_during_report
