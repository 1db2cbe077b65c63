# Issue 18: a hostile environment. Each check names the defect of the issue it proves fixed: a request
# that wraps the admission's sum, a full /dev/shm, racing replacements of an idle ledger, PID
# namespaces sharing one ledger, a kill while a slot is claimed, limits the ledger would mangle, typos
# that meant no limit, hostile report files, a FIFO at the ledger path, terminal escapes, secrets in
# reports, a bad driver path, memory charged after exec. Checks that need what this machine may not
# allow (mounting a tmpfs, unshare) say why they are skipped.
MIB=1048576
SIZE_MAX=18446744073709551615

# 1: SIZE_MAX (a negative size cast to size_t) while 200 MiB are held under 300 MiB: refused by the
# quota, and the rollback takes nothing else off the ledger.
huge_request() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=300MiB FAKE_CUDA_TRUTH=$TMP/truth
  local out; out=$(shimmed timeout 30 "$BIN/drv_linked" linked alloc $((200*MIB)) alloc $SIZE_MAX \
    alloc $((SIZE_MAX - 200*MIB + 1)) info alloc $((300*MIB)) alloc $((100*MIB)) 2>err)
  expect_contains "$out" "alloc $SIZE_MAX -> CUDA_ERROR_OUT_OF_MEMORY" "SIZE_MAX refused" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((100*MIB)) total=$((300*MIB))" "the 200 MiB still counted" &&
  expect_contains "$out" "alloc $((300*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "no room for 300 MiB more" &&
  expect_contains "$out" "alloc $((100*MIB)) -> CUDA_SUCCESS" "what fits still fits" &&
  expect_contains err "refused cuMemAlloc_v2 of 16.00 EiB" "a quota refusal, before the driver" &&
  expect_contains err "the container holds 200.00 MiB" "the message says what is held" &&
  expect_not_contains err "holds 0 B" "the message"
}
check "defect 1: a SIZE_MAX request is refused and its rollback takes nothing else off the ledger" huge_request

# Starts `shimmed PROG ARGS... wait` in the background with its stdin on a FIFO, and waits for its
# "ready": it holds what it allocated until release_holder (or a kill). Sets HOLDER_PID (the
# subshell's) and HOLDER_FD.
hold() {
  local fifo=$1; shift
  mkfifo "$fifo"
  ( shimmed "$@" < "$fifo" > "$fifo.out" 2>"$fifo.err" ) &
  HOLDER_PID=$!
  exec {HOLDER_FD}>"$fifo"
  for _ in $(seq 200); do grep -q ready "$fifo.out" 2>/dev/null && break; sleep 0.05; done
  grep -q ready "$fifo.out" || { echo "holder did not start"; cat "$fifo.out" "$fifo.err"; return 1; }
}
release_holder() { exec {HOLDER_FD}>&-; wait "$HOLDER_PID" 2>/dev/null; }

# Whether this machine lets us make PID namespaces (root, or unprivileged user namespaces).
can_unshare_pid() { unshare --pid --fork --mount-proc true 2>/dev/null; }

# 4: two clients in PID namespaces of their own (Kubernetes containers sharing /dev/shm, a metrics
# sidecar): each sees the other's pid as dead, or as another process. The one in the second
# namespace is started through a shell so that the two pids differ (both would be 1 otherwise).
namespaces() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=500MiB
  hold "$TMP/h" unshare --pid --fork --mount-proc sh -c '"$@"; exit $?' sh "$BIN/drv_linked" linked alloc $((400*MIB)) wait || return 1
  local out; out=$(shimmed timeout 30 unshare --pid --fork --mount-proc "$BIN/drv_linked" linked alloc $((400*MIB)) info 2>err)
  local top; top=$("$CLI" top --json --ledger "$TMP/ledger")
  release_holder
  expect_contains "$out" "alloc $((400*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "the second namespace's 400 MiB refused" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((100*MIB)) total=$((500*MIB))" "the first one's bytes still counted" &&
  expect_eq "$(python3 -c 'import json,sys; d=json.load(sys.stdin); print([(p["state"], p["pid_namespace"]) for p in d["processes"] if p["bytes"]])' <<<"$top")" "[('alive', 'other')]" "the holder, alive in another namespace, in gpuguard top"
}
if can_unshare_pid; then
  check "defect 4: clients in two PID namespaces on one ledger never reclaim each other's live bytes" namespaces
else
  skip "defect 4: clients in two PID namespaces on one ledger" "unshare --pid is not allowed here (needs root or user namespaces)"
fi

# Issue 29, 1: processes that are pid 1 of their own PID namespaces, starting on a new ledger. Its
# temporary file was named by pid, so a second pid 1 found the first one's (EEXIST) and went on with a
# quota of its own: two quotas, twice the limit held. A temporary file left by a pid 1 killed while
# creating the ledger made every later pid 1 do so, every time.
one_admitted() {  # how many of the outputs $TMP/out.* say their 200 MiB were admitted
  grep -l "alloc $((200*MIB)) -> CUDA_SUCCESS" "$TMP"/out.* 2>/dev/null | wc -l
}
namespaces_stale_temp() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=300MiB
  : > "$TMP/ledger.tmp.1"  # left by a pid 1 killed while it created the ledger
  local out; out=$(shimmed timeout 30 unshare --pid --fork --mount-proc "$BIN/drv_linked" linked alloc $((200*MIB)) 2>err)
  expect_not_contains "$(cat err)" "the quota applies to this process alone" "a private quota" &&
    expect_contains "$out" "alloc $((200*MIB)) -> CUDA_SUCCESS" "admitted under the shared ledger" &&
    expect_eq "$(ls "$TMP"/ledger 2>&1)" "$TMP/ledger" "the shared ledger made"
}
namespaces_create_race() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=300MiB GPUGUARD_MAX_REPORTS=0
  local trial p bad=0
  for trial in 1 2 3 4 5 6; do
    rm -f "$TMP"/ledger* "$TMP"/out.* "$TMP"/err.*
    for p in 1 2 3 4 5 6 7 8; do  # each pid 1 in a namespace of its own, all started at once
      shimmed timeout 30 unshare --pid --fork --mount-proc "$BIN/drv_linked" linked alloc $((200*MIB)) sleep 1500 \
        > "$TMP/out.$p" 2> "$TMP/err.$p" &
    done
    wait
    if grep -q "the quota applies to this process alone" "$TMP"/err.* || (($(one_admitted) != 1)); then
      bad=$((bad + 1)); echo "trial $trial: $(one_admitted) of 8 admitted 200 MiB under 300 MiB"; grep -h gpuguard "$TMP"/err.* | sort | uniq -c
    fi
  done
  expect_eq "$bad" 0 "trials in which a namespace had a quota of its own" &&
    expect_eq "$(ls "$TMP"/ledger.tmp* 2>/dev/null)" "" "temporary files left"
}
if can_unshare_pid; then
  check "issue 29: a temporary file left by a pid 1 does not give the next pid 1 a quota of its own" namespaces_stale_temp
  check "issue 29: 8 processes, each pid 1 of its own PID namespace, start on a new ledger: one quota (6 trials)" namespaces_create_race
else
  skip "issue 29: pid-1 processes creating one ledger" "unshare --pid is not allowed here (needs root or user namespaces)"
fi

# 5: 512 claimers SIGKILLed while claiming a slot (taken, not yet live) leave every slot in that state:
# what each such kill leaves, written at once. The slots are seen (gpuguard top), reclaimed, and an
# allocation succeeds, with a limit or without.
killed_claimers() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger
  unset GPUGUARD_MEM_LIMIT
  shimmed timeout 30 "$BIN/drv_linked" linked alloc $MIB > /dev/null 2>&1 || return 1
  "$BIN/ledger_poke" "$TMP/ledger" claiming-all 999999 || return 1
  local top; top=$("$CLI" top --json --ledger "$TMP/ledger")
  expect_eq "$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(p["state"]=="dead" for p in d["processes"]))' <<<"$top")" 512 "gpuguard top shows the 512 dead claimers" || return 1
  local out; out=$(shimmed timeout 30 "$BIN/drv_linked" linked alloc $((100*MIB)) 2>err)
  expect_eq "$out" "alloc $((100*MIB)) -> CUDA_SUCCESS" "an allocation with no limit" &&
  expect_eq "$(cat err)" "" "no line" &&
  expect_contains "$("$BIN/ledger_poke" "$TMP/ledger" states)" "claiming=0" "no slot left claiming" || return 1
  "$BIN/ledger_poke" "$TMP/ledger" claiming-all 999999 || return 1
  out=$(GPUGUARD_MEM_LIMIT=1GiB shimmed timeout 30 "$BIN/drv_linked" linked alloc $((100*MIB)) 2>err)
  expect_eq "$out" "alloc $((100*MIB)) -> CUDA_SUCCESS" "an allocation under a limit"
}
check "defect 5: slots left by claimers killed while claiming are seen and reclaimed" killed_claimers

# 5, the message: with every slot held by a live process (not leaked: that is above), a newcomer is
# refused the ledger in one line and keeps a quota of its own; a child forked by the process that
# took the last slot finds none, and under a limit its allocations are refused by a line that says
# so (it said the container would hold its bytes of the limit, which was not the reason); without
# a limit they go to the driver. One process stands for 511 or 512 live ones (ledger_poke hold-slots).
slots_all_held() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  shimmed timeout 30 "$BIN/drv_linked" linked alloc $MIB > /dev/null || return 1
  hold "$TMP/h1" "$BIN/ledger_poke" "$TMP/ledger" hold-slots 1 512 || return 1
  local out rc
  out=$(shimmed timeout 30 "$BIN/hammer_linked" fork $((100*MIB)) $MIB < /dev/null 2>err); rc=$?
  release_holder
  expect_eq "$rc" 3 "hammer's exit status (the child's allocation refused)" &&
  expect_contains err "hammer: child cuMemAlloc: 2" "the child's allocation" &&
  expect_eq "$(grep -c '^gpuguard:' err)" 1 "lines from the shim" &&
  expect_contains err "this process has no slot in the ledger $TMP/ledger (all 512 are held by live processes)" "the line" &&
  expect_not_contains err "would hold" "the line" || return 1
  hold "$TMP/h2" "$BIN/ledger_poke" "$TMP/ledger" hold-slots 0 512 || return 1
  out=$(shimmed timeout 30 "$BIN/drv_linked" linked alloc $((2048*MIB)) alloc $((100*MIB)) 2>err)
  release_holder
  expect_eq "$out" "alloc $((2048*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY
alloc $((100*MIB)) -> CUDA_SUCCESS" "a newcomer: its own quota of 1 GiB" &&
  expect_contains err "all 512 slots are held by live processes; the quota applies to this process alone" "the newcomer's line" || return 1
  # No limit: the child's allocation goes to the driver, without a word.
  export GPUGUARD_LEDGER=$TMP/ledger2
  unset GPUGUARD_MEM_LIMIT
  shimmed timeout 30 "$BIN/drv_linked" linked alloc $MIB > /dev/null || return 1
  hold "$TMP/h3" "$BIN/ledger_poke" "$TMP/ledger2" hold-slots 1 512 || return 1
  out=$(shimmed timeout 30 "$BIN/hammer_linked" fork $((100*MIB)) $MIB < /dev/null 2>err); rc=$?
  release_holder
  expect_eq "$rc" 0 "hammer's exit status without a limit" &&
  expect_contains "$out" "child exit=0" "the child, without a limit" &&
  expect_eq "$(grep -c '^gpuguard:' err)" 0 "lines from the shim without a limit"
}
check "defect 5: every slot held by a live process: a newcomer keeps its own quota, a forked child is told why" slots_all_held

# 13: a process that allocated and then exec'd (a shell wrapper, a launcher): the new image has none of
# that memory, so a newcomer is admitted; and a process that exited without freeing counts nothing in
# gpuguard top, although nobody has allocated since.
after_exec() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=300MiB
  hold "$TMP/h" "$BIN/drv_linked" linked alloc $((200*MIB)) exec sh -c 'echo ready; cat > /dev/null' || return 1
  local out; out=$(shimmed timeout 30 "$BIN/drv_linked" linked alloc $((200*MIB)) 2>err)
  release_holder
  expect_eq "$out" "alloc $((200*MIB)) -> CUDA_SUCCESS" "the newcomer admitted while the exec'd image runs" || return 1
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger
  shimmed timeout 30 "$BIN/drv_linked" linked alloc $((100*MIB)) > /dev/null || return 1
  local used; used=$("$CLI" top --json --ledger "$TMP/ledger" | python3 -c 'import json,sys; print(json.load(sys.stdin)["devices"][0]["used_bytes"])')
  expect_eq "$used" 0 "bytes gpuguard top shows as used after a clean exit without frees"
}
check "defect 13: bytes of an exec'd image are free for a newcomer; a clean exit shows 0 used in top" after_exec

# 3: processes that start together over an idle ledger with another limit (left by an earlier run)
# each replace it; all must end on one file. Two limits that differ, and two equal ones over a stale
# ledger: in each trial both ask for 200 MiB under 300 or 350 MiB, so that one file admits one of them.
replace_race() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MAX_REPORTS=0
  local trial both=0 a b
  for trial in $(seq 30); do
    "$CLI" run --ledger "$TMP/ledger" --limit 100MiB true || return 1
    if ((trial % 2)); then a=300MiB b=350MiB; else a=300MiB b=300MiB; fi
    GPUGUARD_MEM_LIMIT=$a shimmed timeout 30 "$BIN/drv_linked" linked alloc $((200*MIB)) sleep 400 > "$TMP/a" 2>/dev/null &
    GPUGUARD_MEM_LIMIT=$b shimmed timeout 30 "$BIN/drv_linked" linked alloc $((200*MIB)) sleep 400 > "$TMP/b" 2>/dev/null &
    wait
    if grep -q SUCCESS "$TMP/a" && grep -q SUCCESS "$TMP/b"; then both=$((both + 1)); echo "trial $trial ($a, $b): both admitted"; fi
  done
  expect_eq "$both" 0 "trials where the two processes ended on two ledgers (400 MiB held under 300)"
}
check "defect 3: processes racing to replace an idle ledger end on one file (30 trials)" replace_race

# A tmpfs of SIZE KiB at $TMP/shm for one check (mounting needs root: can_mount says whether).
can_mount() {
  mkdir -p "$TMP/probe" && mount -t tmpfs -o size=64k tmpfs "$TMP/probe" 2>/dev/null && umount "$TMP/probe"
}
# Unmounted when the check's subshell exits.
small_tmpfs() {
  mkdir -p "$TMP/shm" && mount -t tmpfs -o "size=$1k" tmpfs "$TMP/shm" || return 1
  SHM_KIB=$1
  trap 'umount -l "$TMP/shm" 2>/dev/null' EXIT
}
# Fills the small tmpfs; never more than its size, and nothing at all unless it is mounted.
fill() {
  mountpoint -q "$TMP/shm" || { echo "fill: $TMP/shm is not mounted"; return 1; }
  dd if=/dev/zero of="$TMP/shm/fill" bs=4k count=$((SHM_KIB / 4 + 1)) 2>/dev/null
  true
}

# 2: a full /dev/shm. The ledger's pages were not reserved: writing its header at creation, or a slot
# on a page never touched before when joining, raised SIGBUS and killed the program.
full_shm() {
  fresh
  small_tmpfs 2048 || return 1
  export GPUGUARD_MAX_REPORTS=0
  fill || return 1
  local out rc
  out=$("$CLI" run --ledger "$TMP/shm/ledger" --limit 1GiB -- env LD_LIBRARY_PATH="$FAKE" "$BIN/drv_linked" linked alloc $((100*MIB)) alloc $((2048*MIB)) 2>err); rc=$?
  expect_eq "$rc" 0 "gpuguard run's exit status (135: SIGBUS)" &&
  expect_contains "$out" "alloc $((100*MIB)) -> CUDA_SUCCESS" "the program runs" &&
  expect_contains "$out" "alloc $((2048*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "under a quota of its own" &&
  expect_eq "$(grep -c 'No space left on device' err)" 1 "lines saying why" &&
  expect_eq "$(ls "$TMP/shm" | grep -c tmp)" 0 "temporary files left in /dev/shm" || { cat err; return 1; }
  # The shim on its own: the same.
  out=$(GPUGUARD_LEDGER=$TMP/shm/ledger GPUGUARD_MEM_LIMIT=1GiB shimmed timeout 30 "$BIN/drv_linked" linked alloc $((2048*MIB)) alloc $MIB 2>err); rc=$?
  expect_eq "$rc" 0 "the program's exit status" &&
  expect_eq "$out" "alloc $((2048*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY
alloc $MIB -> CUDA_SUCCESS" "the quota, per process" &&
  expect_contains err "the quota applies to this process alone" "one line" || return 1
  # Joining: a ledger made while there was room, then the disk fills; a second process joins, in a
  # slot on a page nobody touched yet (the slots before it said live).
  rm -f "$TMP/shm/fill"
  export GPUGUARD_LEDGER=$TMP/shm/ledger GPUGUARD_MEM_LIMIT=1GiB
  hold "$TMP/h" "$BIN/drv_linked" linked alloc $((100*MIB)) wait || return 1
  "$BIN/ledger_poke" "$TMP/shm/ledger" live-to-new-page $$ > /dev/null || return 1
  fill || return 1
  out=$(shimmed timeout 30 "$BIN/drv_linked" linked alloc $((1000*MIB)) alloc $((900*MIB)) 2>err); rc=$?
  release_holder
  expect_eq "$rc" 0 "the joiner's exit status (135: SIGBUS)" &&
  expect_eq "$out" "alloc $((1000*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY
alloc $((900*MIB)) -> CUDA_SUCCESS" "the shared quota holds"
}
if can_mount; then
  check "defect 2: a full /dev/shm: no signal, one line, a per-process quota, no temporary file left" full_shm
else
  skip "defect 2: a full /dev/shm" "mounting a small tmpfs needs root (CAP_SYS_ADMIN)"
fi

# 9: a FIFO at the ledger path (another user can make one at /dev/shm/gpuguard-<uid>.ledger) hung top
# and doctor in open(); and top --once, which mapped the file, died of SIGBUS when it was rewritten in
# place while top read it.
fifo_ledger() {
  fresh
  mkfifo "$TMP/ledger"
  local out rc
  out=$(timeout 10 "$CLI" top --once --ledger "$TMP/ledger" 2>&1); rc=$?
  expect_eq "$rc" 2 "top's exit status (124: hung)" &&
  expect_contains "$out" "is not a regular file" "top's line" || return 1
  out=$(GPUGUARD_LEDGER=$TMP/ledger timeout 20 "$CLI" doctor 2>&1); rc=$?
  expect_eq "$rc" 1 "doctor's exit status (124: hung)" &&
  expect_contains "$out" "is not a regular file" "doctor's FAIL line" || return 1
  out=$(GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB shimmed timeout 10 "$BIN/drv_linked" linked alloc $((2048*MIB)) 2>&1); rc=$?
  expect_eq "$rc" 0 "the program's exit status" &&
  expect_contains "$out" "is not a regular file; the quota applies to this process alone" "the shim's line"
}
check "defect 9: a FIFO at the ledger path: top, doctor and the shim refuse it at once" fifo_ledger

rewritten_ledger() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger
  GPUGUARD_MEM_LIMIT=1GiB shimmed timeout 30 "$BIN/drv_linked" linked alloc $MIB > /dev/null || return 1
  cp "$TMP/ledger" "$TMP/copy"
  # Rewritten in place, over and over: emptied, then written back.
  python3 - "$TMP/ledger" "$TMP/copy" "$TMP/stop" <<'PY' &
import os, sys, time
data = open(sys.argv[2], 'rb').read()
fd = os.open(sys.argv[1], os.O_RDWR)
while not os.path.exists(sys.argv[3]):
    os.ftruncate(fd, 0)
    time.sleep(0.0005)
    os.pwrite(fd, data, 0)
    time.sleep(0.0005)
PY
  local writer=$! i rc bus=0 shown=0
  for i in $(seq 150); do
    timeout 10 "$CLI" top --once --ledger "$TMP/ledger" > /dev/null 2>&1; rc=$?
    ((rc == 135)) && bus=$((bus + 1))
    ((rc == 0)) && shown=$((shown + 1))
  done
  touch "$TMP/stop"; wait "$writer"
  expect_eq "$bus" 0 "runs of top --once killed by SIGBUS (of 150)" &&
  ((shown > 0)) || { echo "top never showed the ledger"; return 1; }
}
check "defect 9: top --once never dies of SIGBUS while the ledger is rewritten in place" rewritten_ledger

# gpuguard doctor with the test driver, the environment as given.
doctor() { env -u LD_PRELOAD LD_LIBRARY_PATH=$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$CLI" doctor "$@"; }

# 6: limits the parser accepted but the ledger stored mangled: control bytes became '?', and specs were
# cut at 255 characters (six full-UUID entries are 282), so every allocation was refused while
# doctor said ok. Now a control byte is refused by the parser (the shim fails closed, doctor fails),
# and a spec the parser accepts fits the ledger whole.
control_in_limits() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger
  local v out rc
  for v in $'1GiB\n' $'1GiB,\t0=2GiB' $'\r1GiB' $'1G\x1b[2J'; do
    out=$(GPUGUARD_MEM_LIMIT=$v shimmed timeout 30 "$BIN/drv_linked" linked alloc $MIB 2>err)
    expect_eq "$out" "alloc $MIB -> CUDA_ERROR_OUT_OF_MEMORY" "$(printf %q "$v"): fail closed" &&
    expect_contains err "control character" "$(printf %q "$v"): the line says why" || return 1
    out=$(GPUGUARD_MEM_LIMIT=$v doctor 2>&1); rc=$?
    expect_eq "$rc" 1 "$(printf %q "$v"): doctor's exit status" &&
    expect_contains "$out" "control character" "$(printf %q "$v"): doctor's FAIL line" || return 1
    out=$("$CLI" run --limit "$v" true 2>&1); rc=$?
    expect_eq "$rc" 2 "$(printf %q "$v"): gpuguard run's exit status" || return 1
    rm -f "$TMP/ledger"
  done
}
check "defect 6: control bytes in a limit are refused alike by the shim, doctor and run" control_in_limits

# Six devices, each by its full UUID: 277 characters here (the issue's six entries were 282), more than
# the 255 the ledger kept.
long_spec() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger FAKE_CUDA_DEVICES=6
  unset GPUGUARD_MEM_LIMIT
  local out
  shimmed timeout 30 "$BIN/drv_linked" linked device 0 alloc 1 device 1 alloc 1 device 2 alloc 1 device 3 alloc 1 \
    device 4 alloc 1 device 5 alloc 1 > /dev/null || return 1
  local spec; spec=$("$CLI" top --json --ledger "$TMP/ledger" | python3 -c 'import json,sys
print(",".join(d["uuid"] + ("=300MiB" if d["index"] == 0 else "=1GiB") for d in json.load(sys.stdin)["devices"]))')
  rm -f "$TMP/ledger"
  ((${#spec} > 255)) || { echo "the spec is only ${#spec} characters: $spec"; return 1; }
  export GPUGUARD_MEM_LIMIT=$spec
  hold "$TMP/h" "$BIN/drv_linked" linked alloc $((100*MIB)) wait || return 1
  out=$(shimmed timeout 30 "$BIN/drv_linked" linked alloc $((250*MIB)) alloc $((150*MIB)) 2>err)
  release_holder
  expect_eq "$out" "alloc $((250*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY
alloc $((150*MIB)) -> CUDA_SUCCESS" "a second process under the ${#spec}-character spec, read back from the ledger" &&
  expect_eq "$(grep -c . err)" 1 "lines (the refusal's)" &&
  expect_contains err "of its 300.00 MiB limit" "the refusal"
}
check "defect 6: a spec of six full UUIDs (over 255 characters) fits the ledger whole and a second process reads it back" long_spec

# 7: typos that meant no limit, without a word: a device selector that matches no device, a relative
# ledger path (one ledger per working directory), 'none ' with a trailing space (a file so named).
typo_selectors() {
  fresh
  export GPUGUARD_LEDGER=none
  local out rc
  out=$(GPUGUARD_MEM_LIMIT=00=100MiB shimmed timeout 30 "$BIN/drv_linked" linked alloc $((200*MIB)) 2>/dev/null)
  expect_eq "$out" "alloc $((200*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "00=100MiB is device 0's limit" || return 1
  for v in 7=100MiB GPU-deadbeef=100MiB; do
    out=$(GPUGUARD_MEM_LIMIT=$v shimmed timeout 30 "$BIN/drv_linked" linked alloc $((200*MIB)) 2>err)
    expect_eq "$out" "alloc $((200*MIB)) -> CUDA_SUCCESS" "$v: no device has that limit" &&
    expect_eq "$(grep -c . err)" 1 "$v: lines" &&
    expect_contains err "selects no device" "$v: the line" || return 1
    out=$(GPUGUARD_MEM_LIMIT=$v doctor 2>&1); rc=$?
    expect_eq "$rc" 1 "$v: doctor's exit status" &&
    expect_contains "$out" "selects no device" "$v: doctor's FAIL line" || return 1
  done
  out=$(GPUGUARD_MEM_LIMIT=GPU-nonexist=100MiB shimmed timeout 30 "$BIN/drv_linked" linked alloc $((200*MIB)) 2>err)
  expect_eq "$out" "alloc $((200*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "GPU-nonexist: not a UUID, fail closed" &&
  expect_contains err "not a device" "GPU-nonexist: the line"
}
check "defect 7: a device selector that matches no device (00=, 7=, GPU-deadbeef, GPU-nonexist) is one line, doctor fails" typo_selectors

typo_relative() {
  fresh
  local out rc
  mkdir "$TMP/a" && cd "$TMP/a" || return 1
  out=$(GPUGUARD_LEDGER=rel.ledger GPUGUARD_MEM_LIMIT=1GiB shimmed timeout 30 "$BIN/drv_linked" linked alloc $MIB 2>err)
  expect_eq "$(grep -c . err)" 1 "relative ledger: lines" &&
  expect_contains err "GPUGUARD_LEDGER=rel.ledger is a relative path" "relative ledger: the line" || return 1
  out=$(GPUGUARD_LEDGER=rel.ledger doctor 2>&1); rc=$?
  expect_eq "$rc" 1 "relative ledger: doctor's exit status" &&
  expect_contains "$out" "relative path" "relative ledger: doctor's FAIL line"
}
check "defect 7: a relative GPUGUARD_LEDGER is one line, doctor fails" typo_relative

typo_space() {
  fresh
  local out rc
  mkdir "$TMP/a" && cd "$TMP/a" || return 1
  out=$(GPUGUARD_LEDGER="none " GPUGUARD_MEM_LIMIT=1GiB shimmed timeout 30 "$BIN/drv_linked" linked alloc $MIB 2>err)
  expect_eq "$(grep -c . err)" 1 "'none ': lines" &&
  expect_contains err "GPUGUARD_LEDGER='none ' has spaces at its start or end" "'none ': the line" &&
  [[ ! -e "$TMP/a/none " ]] || { echo "a file named 'none ' was created"; return 1; }
  out=$(GPUGUARD_LEDGER="none " doctor 2>&1); rc=$?
  expect_eq "$rc" 1 "'none ': doctor's exit status" &&
  expect_contains "$out" "spaces at its start or end" "'none ': doctor's FAIL line"
}
check "defect 7: GPUGUARD_LEDGER='none ' (a trailing space) is one line and no file of that name, doctor fails" typo_space

# Runs a command; prints "<exit status> <peak RSS in MiB>".
rss_of() {
  python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(r.returncode if r.returncode >= 0 else 128 - r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$@"
}

# 8: gpuguard report on hostile files: a 200 KB report nested 100,000 levels deep overflowed the stack
# (SIGSEGV) in every mode; /dev/zero ended in an uncaught bad_alloc (abort); --memory-viz of a 126 MB
# report took 4 GB.
deep_reports() {
  fresh
  python3 - "$TMP" <<'PY'
import sys
head = '{"schema": "gpuguard.report", "version": 1, "reason": "quota", "deep": '
open(sys.argv[1] + "/deep.json", "w").write(head + "[" * 100000 + "]" * 100000 + "}")
open(sys.argv[1] + "/deep_obj.json", "w").write(head + '{"a":' * 60000 + "1" + "}" * 60000 + "}")
PY
  local f mode rc out
  for f in deep deep_obj; do
    for mode in "" --json "--html $TMP/o.html" "--memory-viz $TMP/o.viz" "--folded $TMP/o.folded" \
                "--speedscope $TMP/o.ss" "--perfetto $TMP/o.pf"; do
      # shellcheck disable=SC2086
      out=$(timeout 60 "$CLI" report $mode "$TMP/$f.json" 2>&1 >/dev/null); rc=$?
      expect_eq "$rc" 2 "report ${mode:-(text)} of $f.json: exit status (139: SIGSEGV)" &&
      expect_contains "$out" "nested more than" "report ${mode:-(text)} of $f.json: the line" || return 1
    done
    out=$(timeout 60 "$CLI" report diff "$TMP/$f.json" "$TMP/$f.json" 2>&1 >/dev/null); rc=$?
    expect_eq "$rc" 2 "report diff of $f.json: exit status" || return 1
  done
}
check "defect 8: gpuguard report refuses a report nested 100,000 deep in every mode and in diff (--html: SIGSEGV)" deep_reports

# /dev/zero: read until an uncaught bad_alloc aborted the command.
endless_report() {
  fresh
  local out rc
  out=$(timeout 60 "$CLI" report /dev/zero 2>&1 >/dev/null); rc=$?
  expect_eq "$rc" 2 "report /dev/zero: exit status (134: abort)" &&
  expect_contains "$out" "larger than" "report /dev/zero: the line"
}
check "defect 8: gpuguard report /dev/zero is one line and exit 2, not an abort" endless_report

# A 126 MB report (40,000 allocations with stacks of their own): refused before it is read whole.
big_report() {
  fresh
  local rc
  python3 - "$ROOT/tests/data/pytorch_quota.json" "$TMP/big.json" <<'PY'
import copy, json, sys
d = json.load(open(sys.argv[1]))
a0, s0 = d["top_allocations"][0], next(iter(d["stacks"].values()))
d["top_allocations"] = [dict(a0, stack="x%d" % i, address=hex(0x7f0000000000 + i * 4096)) for i in range(40000)]
d["stacks"] = {"x%d" % i: s0 for i in range(40000)}
json.dump(d, open(sys.argv[2], "w"))
PY
  local rss; read -r rc rss < <(rss_of "$CLI" report --memory-viz "$TMP/o.viz" "$TMP/big.json" 2>"$TMP/err")
  expect_eq "$rc" 2 "--memory-viz of a $(($(stat -c %s "$TMP/big.json") >> 20)) MiB report: exit status" &&
  expect_contains "$TMP/err" "larger than" "the line" &&
  ((rss < 400)) || { echo "    --memory-viz of the big report took $rss MiB"; return 1; }
}
check "defect 8: --memory-viz of a 126 MB report is refused before it is read whole, in little memory" big_report

# Counts the terminal controls in a file: C0 but newline, DEL, C1 as UTF-8 (U+0080 to U+009F), and
# bytes that are not UTF-8 (a lone 0x9b is CSI to an 8-bit terminal); with a second argument, the
# SGR colour codes of our own are not counted.
controls() {
  python3 -c 'import re, sys
b = open(sys.argv[1], "rb").read()
if len(sys.argv) > 2: b = re.sub(rb"\x1b\[[0-9;]*m", b"", b)
t = b.decode("utf-8", "surrogateescape")
print(sum(1 for ch in t if (ord(ch) < 32 and ch != "\n") or 0x7f <= ord(ch) <= 0x9f or 0xdc80 <= ord(ch) <= 0xdcff))' "$@"
}

# 10: report's text output printed ESC and BEL from the program's argv raw (with --no-color too); top
# filtered C0 controls but passed C1 (U+009B, CSI: an escape sequence without ESC).
escapes() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  # The program's own name carries them: first in its command line, which the report's header clips.
  local name=$'\e]0;owned\a\xc2\x9b2J\x9b31m'
  ln -s "$BIN/drv_linked" "$TMP/$name" && cd "$TMP" || return 1
  hold "$TMP/h" "./$name" linked alloc $((2048*MIB)) alloc $MIB wait || return 1
  "$CLI" top --once --ledger "$TMP/ledger" > "$TMP/top.txt" 2>&1
  "$CLI" top --json --ledger "$TMP/ledger" > "$TMP/top.json" 2>&1
  GPUGUARD_REPORT_DIR=$'\e[31mred' doctor > "$TMP/doctor.txt" 2>&1
  release_holder
  local r; r=$(ls "$TMP"/gpuguard-quota-*.json) || return 1
  "$CLI" report --no-color "$r" > "$TMP/report.txt" 2>&1
  "$CLI" report --json "$r" > "$TMP/report.json" 2>&1
  "$CLI" report diff --no-color "$r" "$r" > "$TMP/diff.txt" 2>&1
  GPUGUARD_LEDGER=$'rel\e[2J' GPUGUARD_MEM_LIMIT=$'1G\x9b' shimmed "$BIN/drv_linked" linked alloc 1 > /dev/null 2> "$TMP/shim.txt"
  "$CLI" run --limit $'1G\e[2J' true 2> "$TMP/run.txt"
  grep -q "owned" "$TMP/report.txt" || { echo "the report does not show the command"; return 1; }
  local f
  for f in top.txt top.json doctor.txt report.txt report.json diff.txt shim.txt run.txt; do
    expect_eq "$(controls "$TMP/$f")" 0 "control characters in $f" || { od -c "$TMP/$f" | grep -E '033|007|302 233|233' | head -3; return 1; }
  done
}
check "defect 10: no C0 or C1 control reaches the terminal from report, top, doctor, run or the shim" escapes

# 11: the environment allow-list went by prefix: NVIDIA_API_KEY, or any secret named CUDA_*, NCCL_*,
# PYTORCH_* or GPUGUARD_*, was copied into reports and into the HTML page. Now exact names, and a
# value redacted for a name that looks like a key, token, secret or password; a report written before
# is shown by the same rule.
secrets() {
  fresh
  export GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=1GiB CUDA_VISIBLE_DEVICES=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  local out; out=$(NVIDIA_API_KEY=hunter2-nvidia CUDA_AUTH_TOKEN=hunter2-cuda NCCL_PASSWORD=hunter2-nccl \
    PYTORCH_SECRET=hunter2-torch GPUGUARD_API_TOKEN=hunter2-gg GPUGUARD_TOKEN=hunter2-gg2 \
    shimmed "$BIN/drv_linked" linked alloc $((2048*MIB)) 2>/dev/null)
  local r; r=$(ls "$TMP"/gpuguard-quota-*.json) || return 1
  "$CLI" report --html "$TMP/page.html" "$r" 2>/dev/null || return 1
  expect_not_contains "$r" "hunter2" "the report" &&
  expect_not_contains "$TMP/page.html" "hunter2" "the HTML page" &&
  expect_eq "$(json "$r" '[k for k in ("NVIDIA_API_KEY", "CUDA_AUTH_TOKEN", "NCCL_PASSWORD", "PYTORCH_SECRET", "GPUGUARD_API_TOKEN", "GPUGUARD_TOKEN") if k in d["process"]["env"]]')" \
    "[]" "the secrets' names in the report" &&
  expect_eq "$(json "$r" 'sorted(k for k in d["process"]["env"] if k in ("CUDA_VISIBLE_DEVICES", "GPUGUARD_MEM_LIMIT", "PYTORCH_CUDA_ALLOC_CONF"))')" \
    "['CUDA_VISIBLE_DEVICES', 'GPUGUARD_MEM_LIMIT', 'PYTORCH_CUDA_ALLOC_CONF']" "the variables carried" || return 1
  # A report written by an earlier version, with secrets in it: neither the summary nor the page shows them.
  python3 - "$ROOT/tests/data/pytorch_quota.json" "$TMP/old.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["process"]["env"].update({"NVIDIA_API_KEY": "hunter2-a", "CUDA_TOKEN": "hunter2-b", "GPUGUARD_SECRET": "hunter2-c",
                            "NCCL_PASSWORD": "hunter2-d", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
json.dump(d, open(sys.argv[2], "w"))
PY
  "$CLI" report --html "$TMP/old.html" "$TMP/old.json" 2>/dev/null || return 1
  "$CLI" report --json "$TMP/old.json" > "$TMP/old.txt" && "$CLI" report --no-color "$TMP/old.json" >> "$TMP/old.txt" || return 1
  expect_not_contains "$TMP/old.html" "hunter2" "the page of an earlier report" &&
  expect_not_contains "$TMP/old.txt" "hunter2" "the summary of an earlier report" &&
  expect_contains "$TMP/old.html" "expandable_segments" "an allowed variable still shown"
}
check "defect 11: no secret in a report's environment, in the file or in the HTML page, new or old" secrets

# 12: GPUGUARD_REAL_LIBCUDA naming the shim itself recursed until the program crashed; naming a library
# that is not a driver (libc) failed every allocation with error 500 and no word. Each is one line,
# the driver found on the search path is used instead, and doctor fails on it.
bad_driver() {
  fresh
  export GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=1GiB
  local libc; libc=$(ldd "$BIN/drv_linked" | awk '/libc.so/ {print $3}')
  local v out rc
  for v in "$LIB" "$libc"; do
    out=$(GPUGUARD_REAL_LIBCUDA=$v shimmed timeout 30 "$BIN/drv_linked" linked alloc $MIB alloc $((2048*MIB)) 2>err); rc=$?
    expect_eq "$rc" 0 "$v: the program's exit status (139: SIGSEGV)" &&
    expect_eq "$out" "alloc $MIB -> CUDA_SUCCESS
alloc $((2048*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "$v: allocations through the driver on the search path, under the limit" &&
    expect_eq "$(grep -c . err)" 2 "$v: lines (this one and the refusal's)" &&
    expect_contains err "GPUGUARD_REAL_LIBCUDA=$v " "$v: the line names it" || return 1
    out=$(GPUGUARD_REAL_LIBCUDA=$v timeout 30 env -u LD_PRELOAD LD_LIBRARY_PATH=$FAKE "$CLI" doctor 2>&1); rc=$?
    expect_eq "$rc" 1 "$v: doctor's exit status (139: SIGSEGV)" &&
    expect_contains "$out" "FAIL  driver" "$v: doctor's FAIL line" || return 1
  done
  expect_contains "$(GPUGUARD_REAL_LIBCUDA=$LIB shimmed "$BIN/drv_linked" linked alloc 1 2>&1)" "is the gpuguard shim" "the shim's line for the shim" &&
  expect_contains "$(GPUGUARD_REAL_LIBCUDA=$libc shimmed "$BIN/drv_linked" linked alloc 1 2>&1)" "is not a CUDA driver" "the shim's line for libc"
}
check "defect 12: GPUGUARD_REAL_LIBCUDA naming the shim or libc: one line, the driver on the search path, doctor fails" bad_driver
