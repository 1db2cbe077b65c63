# Fault injection (issue 8): the test driver failing allocations, frees, cuGetProcAddress and device
# queries; a report folder that is missing or full; the ledger truncated or overwritten while a
# process uses it; the program dlclosing and dlopening the driver. In each case: no crash, no hang
# (every run is bounded by `timeout`), accounting back at zero, and one clear line.
MIB=1048576
H=$BIN/hammer_linked

faulty_storm() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=64MiB GPUGUARD_MAX_REPORTS=100 FAKE_CUDA_TRUTH=$TMP/truth
  export FAKE_CUDA_FAIL_EVERY=7 FAKE_CUDA_FAIL_FREE_EVERY=5
  local out; out=$(shimmed timeout 120 "$H" storm 8 1500 $((4*MIB)) 2>err); local rc=$?
  expect_eq "$rc" 0 "exit status (124: hung)" || { echo "$out"; tail -5 err; return 1; }
  local oom frees; oom=$(sed -nE 's/.* oom=([0-9]+).*/\1/p' <<<"$out"); frees=$(sed -nE 's/.*free_failures=([0-9]+).*/\1/p' <<<"$out")
  ((oom > 0 && frees > 0)) || { echo "the faults did not happen: $out"; return 1; }
  expect_contains "$out" "left=0" "every block freed in the end" &&
  expect_contains "$out" "info -> 0 free=67108864 total=67108864" "the quota's view back at zero" &&
  expect_contains "$("$BIN/fake_truth" "$TMP/truth")" "device 0 current 0 " "the driver's own count at zero" || return 1
  # The failures came without a pause of a second: one episode, so one report and one line.
  local reports; reports=$(ls gpuguard-*.json | wc -l)
  expect_eq "$reports" 1 "reports of the one episode" &&
  expect_eq "$(grep -cE 'could not allocate|refused' err)" 1 "lines on stderr" &&
  expect_eq "$(json gpuguard-*.json 'd["episode"]["id"]')" 1 "the report's episode"
}
check "allocations and frees failing at random under 8 threads: no crash or hang, zero at the end, one report" faulty_storm

failed_free_keeps_bytes() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB FAKE_CUDA_FAIL_FREE_EVERY=2
  # Free calls 1 and 3 succeed, call 2 fails: the block it did not free stays charged until call 3.
  local out; out=$(shimmed timeout 30 "$BIN/drv_linked" linked alloc $((100*MIB)) alloc $((50*MIB)) free 0 free 1 info free 1 info)
  expect_contains "$out" "free 1 -> CUDA_ERROR_OTHER" "the driver's error, passed through" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((974*MIB)) total=1073741824" "the block the driver kept is still counted" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=1073741824 total=1073741824" "and given back when a later free succeeds"
}
check "a free the driver fails keeps its bytes charged; the retry that succeeds gives them back" failed_free_keeps_bytes

procaddress_fails() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  local name bare shimmed_out
  for name in cuMemAlloc cuGetProcAddress '*'; do
    # What the program sees is exactly what it sees without the shim: the driver's error, no crash.
    bare=$(FAKE_CUDA_FAIL_GPA=$name LD_LIBRARY_PATH=$FAKE timeout 30 "$BIN/rt_client" 1000 2>&1; echo "rc=$?")
    shimmed_out=$(FAKE_CUDA_FAIL_GPA=$name shimmed timeout 30 "$BIN/rt_client" 1000 2>&1; echo "rc=$?")
    expect_eq "$shimmed_out" "$bare" "cudart when cuGetProcAddress($name) fails" || return 1
    bare=$(FAKE_CUDA_FAIL_GPA=$name LD_LIBRARY_PATH=$FAKE timeout 30 "$BIN/drv_linked" gpa alloc 1000 2>&1; echo "rc=$?")
    shimmed_out=$(FAKE_CUDA_FAIL_GPA=$name shimmed timeout 30 "$BIN/drv_linked" gpa alloc 1000 2>&1; echo "rc=$?")
    expect_eq "$shimmed_out" "$bare" "a program resolving through cuGetProcAddress($name)" || return 1
  done
  expect_contains "$shimmed_out" "rc=3" "the program saw the failure (and exited on its own)"
}
check "cuGetProcAddress failing (one name, the self-lookup, every name): the program sees the driver's error" procaddress_fails

device_queries_fail() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB FAKE_CUDA_FAIL_QUERY=uuid,name,total
  local out; out=$(shimmed timeout 30 "$BIN/drv_linked" linked alloc $((100*MIB)) info total alloc $((2*1024*MIB)) 2>err)
  expect_contains err "gpuguard: cannot read the UUID of device 0; it is keyed by ordinal in the ledger" "the UUID line" &&
  expect_contains err "gpuguard: cannot read the name of device 0 (CUDA error 999)" "the name line" &&
  expect_contains err "gpuguard: cannot read the memory size of device 0 (CUDA error 999)" "the size line" &&
  expect_contains "$out" "alloc $((100*MIB)) -> CUDA_SUCCESS" "allocations go on" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((924*MIB)) total=1073741824" "and are accounted against the limit" &&
  expect_contains "$out" "total -> CUDA_ERROR_OTHER" "the program's own query gets the driver's error" &&
  expect_contains "$out" "alloc $((2*1024*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "the limit holds" &&
  local r; r=$(ls gpuguard-quota-*.json) && expect_eq "$(json "$r" 'd["device"]["uuid"]')" "ordinal-0" "the report's device" || return 1
  # A limit that is a share of the device cannot be computed without its size: it fails closed.
  out=$(GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=50% shimmed timeout 30 "$BIN/drv_linked" linked alloc $MIB 2>err)
  expect_contains err "its limit is a share of that size, so every allocation on it is refused" "the share line" &&
  expect_contains "$out" "alloc $MIB -> CUDA_ERROR_OUT_OF_MEMORY" "refused"
}
check "device queries failing (UUID, name, size): a clear line each, still accounted, the limit holds" device_queries_fail

# One episode whose report cannot be written: the program goes on, one line names the folder.
report_write_fails() {
  local dir=$1 why=$2
  local out; out=$(GPUGUARD_REPORT_DIR=$dir shimmed timeout 30 "$BIN/drv_linked" linked alloc $((2*1024*MIB)) alloc $MIB info 2>err); local rc=$?
  expect_eq "$rc" 0 "exit status" &&
  expect_contains "$out" "alloc $((2*1024*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "refused" &&
  expect_contains "$out" "alloc $MIB -> CUDA_SUCCESS" "the program goes on" &&
  expect_eq "$(grep -c "report" err)" 1 "lines about the report" &&
  expect_contains err "$why" "the line says why" &&
  expect_contains err "$dir" "and names the folder"
}

report_dir_missing() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  report_write_fails "$TMP/no/such/dir" "No such file or directory" || return 1
  echo "a file" > notadir
  report_write_fails "$TMP/notadir" "Not a directory"
}
check "a report folder that does not exist (or is a file): one clear line, the program goes on" report_dir_missing

report_dir_full() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  mkdir full
  if mount -t tmpfs -o size=64k tmpfs full 2>/dev/null; then
    head -c 1M /dev/zero > full/filler 2>/dev/null  # fills it to the last byte
    report_write_fails "$TMP/full" "No space left on device"; local rc=$?
    expect_eq "$(ls -A full)" "filler" "no partial report or temporary file left" || rc=1
    umount full
    return $rc
  fi
  # Without the right to mount a small file system, the same path (a write that fails half-way)
  # through the file size limit: EFBIG instead of ENOSPC.
  echo "    (no tmpfs mount here: the full disk is simulated with ulimit -f, EFBIG)"
  ( trap '' XFSZ; ulimit -f 1; report_write_fails "$TMP/full" "File too large" ) || return 1
  expect_eq "$(ls -A full)" "" "no partial report or temporary file left"
}
check "a full report folder (ENOSPC): one clear line, nothing partial left, the program goes on" report_dir_full

ledger_truncated() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  mkfifo go
  ( shimmed timeout 60 "$BIN/drv_linked" linked alloc $((100*MIB)) wait alloc $((50*MIB)) info free 0 info free 1 info \
      alloc $((2*1024*MIB)) < go > out 2> err ) &
  exec {fd}> go
  for _ in $(seq 200); do grep -q ready out 2>/dev/null && break; sleep 0.05; done
  truncate -s 0 "$TMP/ledger"
  exec {fd}>&-; wait $!; local rc=$?
  expect_eq "$rc" 0 "exit status (135: killed by SIGBUS)" || { cat out err; return 1; }
  expect_contains err "gpuguard: the ledger $TMP/ledger was truncated under this process; it goes on with a private copy" "the line" &&
  expect_eq "$(grep -c truncated err)" 1 "lines about it" &&
  expect_contains out "info -> CUDA_SUCCESS free=$((874*MIB)) total=1073741824" "its own 150 MiB still counted after the loss" &&
  expect_contains out "info -> CUDA_SUCCESS free=$((974*MIB)) total=1073741824" "frees given back" &&
  expect_contains out "info -> CUDA_SUCCESS free=1073741824 total=1073741824" "back at zero" &&
  expect_contains out "alloc $((2*1024*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "its limit stands"
}
check "the ledger truncated while a process holds memory: no SIGBUS death, one line, its quota stands, exact" ledger_truncated

ledger_overwritten() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  mkfifo go
  ( shimmed timeout 60 "$BIN/drv_linked" linked alloc $((100*MIB)) wait alloc $((50*MIB)) info free 0 info \
      < go > out 2> err ) &
  exec {fd}> go
  for _ in $(seq 200); do grep -q ready out 2>/dev/null && break; sleep 0.05; done
  # Garbage over every byte, same size: counters, limits and names are nonsense now (the 50 MiB
  # may be refused or not), but nothing in the file is trusted as an index or a length, so the
  # process goes on, and a report about it is still written.
  head -c "$(stat -c %s "$TMP/ledger")" /dev/urandom | dd of="$TMP/ledger" conv=notrunc status=none
  exec {fd}>&-; wait $!; local rc=$?
  expect_eq "$rc" 0 "exit status" || { cat out err; return 1; }
  expect_contains out "free 0 -> CUDA_SUCCESS" "the process ran to its end" &&
  expect_not_contains err "cannot assemble a report" "stderr" || return 1
  local f
  for f in gpuguard-*.json; do [[ -e $f ]] && { json "$f" 'd["reason"]' >/dev/null || return 1; }; done
  # A process that starts now refuses the file with a clear line, and keeps a quota of its own.
  local out2; out2=$(shimmed timeout 30 "$BIN/drv_linked" linked alloc $((2*1024*MIB)) 2>err2)
  expect_contains err2 "gpuguard: ledger $TMP/ledger: " "the newcomer names the file" &&
  expect_contains "$out2" "CUDA_ERROR_OUT_OF_MEMORY" "and its own quota holds"
}
check "the ledger overwritten with garbage while a process runs: no crash; a newcomer refuses it" ledger_overwritten

own_sigbus_untouched() {
  local mode=$1
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  # The program's own SIGBUS (a page of a file it truncated) still reaches the program: its handler,
  # installed before the shim's, runs; with none, the process dies of SIGBUS as it would without us.
  cat > bus.c <<'EOF'
#include <cuda.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static void caught(int sig) { static const char m[] = "own handler\n"; write(1, m, sizeof m - 1); _exit(sig == SIGBUS ? 0 : 1); }
int main(int argc, char **argv) {
  if (argc > 1) signal(SIGBUS, caught);
  CUdevice d; CUcontext c; CUdeviceptr p;
  if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c) || cuMemAlloc(&p, 4096)) return 3;
  int fd = open("own.file", O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, 8192)) return 3;
  volatile char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED || ftruncate(fd, 0)) return 3;
  m[100] = 1;
  return 4;
}
EOF
  cc -I"${CUDA_HOME:-/usr/local/cuda}/include" -o bus bus.c -L"$FAKE" -lcuda -Wl,-rpath,"$FAKE" || return 1
  if [[ $mode == handler ]]; then
    local out; out=$(shimmed timeout 30 ./bus handler 2>&1); local rc=$?
    expect_eq "$out" "own handler" "the program's handler ran" && expect_eq "$rc" 0 "its exit"
  else
    shimmed timeout 30 ./bus 2>/dev/null
    expect_eq "$?" 135 "without a handler: killed by SIGBUS (128+7)"
  fi
}
check "a SIGBUS of the program's own reaches the handler it installed, as without the shim" own_sigbus_untouched handler
if [[ -n $SANITIZER ]]; then
  skip "a SIGBUS of the program's own, with no handler, kills it as without the shim" \
    "the sanitizer's own SIGBUS handler (handle_sigbus) reports and exits instead"
else
  check "a SIGBUS of the program's own, with no handler, kills it as without the shim" own_sigbus_untouched default
fi

driver_dlclosed() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  local mode out
  for mode in dlsym gpa; do
    out=$(shimmed timeout 60 "$BIN/dlcycle" $mode 50 $((10*MIB)) 2>&1)
    expect_contains "$out" "dlcycle rounds=50 failures=0" "$mode: every round allocated and freed" &&
    expect_contains "$out" "info -> 0 free=1073741824 total=1073741824" "$mode: the ledger back at zero" || return 1
  done
}
check "the program dlopens and dlcloses the driver 50 times (dlsym and cuGetProcAddress): exact, no crash" driver_dlclosed

report_holds_no_secrets() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  # Exactly this environment (and the sanitizer's options, when there is one).
  env -i HOME=/home/someone PATH="$PATH:/opt/secret-bin" AWS_SECRET_ACCESS_KEY=hunter2-aws GITHUB_TOKEN=hunter2-gh \
    MY_PASSWORD=hunter2-pw CUDA_VISIBLE_DEVICES=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    GPUGUARD_LEDGER="$GPUGUARD_LEDGER" GPUGUARD_MEM_LIMIT=1GiB GPUGUARD_REPORT_DIR="$TMP" \
    ${ASAN_OPTIONS:+ASAN_OPTIONS=$ASAN_OPTIONS} ${UBSAN_OPTIONS:+UBSAN_OPTIONS=$UBSAN_OPTIONS} ${TSAN_OPTIONS:+TSAN_OPTIONS=$TSAN_OPTIONS} \
    LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$FAKE" timeout 30 "$BIN/drv_linked" linked alloc $((2*1024*MIB)) 2>/dev/null >/dev/null
  local r; r=$(ls gpuguard-quota-*.json) || return 1
  expect_not_contains "$r" "hunter2" "the report" &&
  expect_not_contains "$r" "/home/someone" "the report" &&
  expect_not_contains "$r" "secret-bin" "the report" &&
  expect_eq "$(json "$r" 'sorted(d["process"]["env"])')" \
    "['CUDA_VISIBLE_DEVICES', 'GPUGUARD_LEDGER', 'GPUGUARD_MEM_LIMIT', 'GPUGUARD_REPORT_DIR', 'LD_PRELOAD', 'PYTORCH_CUDA_ALLOC_CONF']" \
    "the environment in the report: the allow-list only" &&
  expect_eq "$(json "$r" 'd["process"]["command"][1:]')" "['linked', 'alloc', '$((2*1024*MIB))']" "the command line" &&
  expect_eq "$(stat -c %a "$r")" 640 "the report's mode (not readable by others)"
}
check "a report holds the command line and the allow-listed environment only: no PATH, HOME or secrets" report_holds_no_secrets

planted_symlink_not_followed() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  echo "precious" > victim
  # The shell plants links at the temporary names the report of its own pid will use in the next
  # seconds, then becomes the program (exec keeps the pid).
  local host; host=$(hostname | tr './' '--' | cut -c1-63)
  timeout 30 sh -c 'now=$(date +%s); for t in $(seq $now $((now + 5))); do ln -s "$1/victim" "$1/.gpuguard-quota-$t-$2-$$-1.json.tmp"; done
         shift 2; exec "$@"' _ "$TMP" "$host" \
    env LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$FAKE" "$BIN/drv_linked" linked alloc $((2*1024*MIB)) >/dev/null 2>err
  local r; r=$(ls gpuguard-quota-*.json) || return 1
  [[ -L .$r.tmp ]] || { echo "no link was planted at the report's own temporary name .$r.tmp"; ls -A; return 1; }
  expect_eq "$(cat victim)" "precious" "the file the links point to" &&
  expect_eq "$(find . -maxdepth 1 -name '.gpuguard-quota-*' -type l | wc -l)" 6 "the planted links, left alone" &&
  expect_eq "$(ls gpuguard-quota-*.json | wc -l)" 1 "the report, written under a fresh temporary name" &&
  json gpuguard-quota-*.json 'd["reason"]' >/dev/null &&
  expect_eq "$(find . -maxdepth 1 -name '.gpuguard-*.tmp' -type f | wc -l)" 0 "temporary files left"
}
check "a link planted at a report's temporary name is never followed; the report is still written" planted_symlink_not_followed

non_utf8_command_line() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  # drv_linked stops at the unknown last argument, after the refusal that writes the report.
  shimmed timeout 30 "$BIN/drv_linked" linked alloc $((2*1024*MIB)) $'caf\xe9' >/dev/null 2>err
  expect_not_contains err "cannot assemble" "stderr" &&
  expect_eq "$(json gpuguard-quota-*.json 'd["process"]["command"][-1]')" "caf"$'\xef\xbf\xbd' "the argument, its bad byte replaced"
}
check "a command line that is not UTF-8 (Latin-1 argument): the report is written, the byte replaced" non_utf8_command_line
