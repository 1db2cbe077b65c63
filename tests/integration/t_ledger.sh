# Issue 3: one quota for all processes of a container, through the shared ledger; dead processes'
# bytes come back; devices keyed by UUID.
GIB=1073741824
MIB=1048576

# Starts a process that allocates and then holds until its stdin closes; prints its pid.
holder() {
  local fifo=$1; shift
  mkfifo "$fifo"
  ( shimmed "$BIN/drv_linked" linked "$@" wait < "$fifo" > "$fifo.out" 2>"$fifo.err" ) &
  exec {fd}>"$fifo"   # keeps the holder's stdin open until we close fd or kill it
  for _ in $(seq 100); do grep -q ready "$fifo.out" 2>/dev/null && break; sleep 0.05; done
  grep -q ready "$fifo.out" || { echo "holder did not start"; cat "$fifo.err"; return 1; }
  HOLDER_FD=$fd
}

shared_quota() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  holder "$TMP/h1" alloc $((600*MIB)) || return 1
  local out; out=$(shimmed "$BIN/drv_linked" linked info alloc $((600*MIB)) alloc $((400*MIB)) 2>"$TMP/err")
  exec {HOLDER_FD}>&-; wait
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((424*MIB)) total=$GIB" "cuMemGetInfo shows the container's usage" &&
  expect_contains "$out" "alloc $((600*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "refused: the sibling holds 600 MiB" &&
  expect_contains "$out" "alloc $((400*MIB)) -> CUDA_SUCCESS" "what fits is admitted" &&
  local r; r=$(ls "$TMP"/gpuguard-quota-*.json) &&
  expect_eq "$(json "$r" 'len([p for p in d["ledger"]["processes"] if p["alive"] and not p["self"] and p["bytes"] == 600*2**20])')" "1" "the report shows the sibling's share"
}
check "two processes share one limit through the ledger" shared_quota

stress_processes() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB FAKE_CUDA_TRUTH=$TMP/truth GPUGUARD_MAX_REPORTS=0
  local pids=()
  for p in $(seq 8); do shimmed "$BIN/drv_linked" linked threads 8 $((90*MIB)) 150 > "$TMP/out.$p" 2>&1 & pids+=($!); done
  wait "${pids[@]}"
  local max current; read -r current max < <(awk '/^device 0/ {print $4, $6}' <(sh -c "'$BIN/fake_truth' '$TMP/truth'"))
  (( max <= GIB )) || { echo "ground truth: $max bytes handed out at once > 1 GiB"; return 1; }
  (( max > GIB / 2 )) || { echo "the stress never came near the limit ($max)"; return 1; }
  expect_eq "$current" "0" "bytes held after every process exited" &&
  cat "$TMP"/out.* | grep -q "refused=[1-9]" &&
  expect_eq "$(shimmed "$BIN/drv_linked" linked info)" "info -> CUDA_SUCCESS free=$GIB total=$GIB" "the ledger back at zero"
}
check "8 processes of 8 threads never hold more than the limit together, and usage returns to zero" stress_processes

sigkill_reclaim() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB GPUGUARD_MAX_REPORTS=0
  for round in $(seq 10); do
    holder "$TMP/h$round" alloc $((900*MIB)) || return 1
    local pid; pid=$(pgrep -f "drv_linked linked alloc $((900*MIB)) wait" | head -1)
    kill -9 "$pid"; exec {HOLDER_FD}>&-; wait 2>/dev/null
    local start=$(date +%s%N) out
    out=$(shimmed "$BIN/drv_linked" linked alloc $((900*MIB)))
    local ms=$(( ($(date +%s%N) - start) / 1000000 ))
    expect_eq "$out" "alloc $((900*MIB)) -> CUDA_SUCCESS" "round $round: the dead process's bytes are free" || return 1
    (( ms < 1000 )) || { echo "round $round took $ms ms"; return 1; }
  done
  expect_eq "$(shimmed "$BIN/drv_linked" linked info)" "info -> CUDA_SUCCESS free=$GIB total=$GIB" "no byte leaked"
}
check "a SIGKILLed process's bytes are free for the others at once, ten times over, without a leak" sigkill_reclaim

corrupt_ledger() {
  fresh
  printf 'this is not a ledger, and it must stay exactly as it is' > "$TMP/ledger"
  local before; before=$(md5sum < "$TMP/ledger")
  local out; out=$(GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB shimmed "$BIN/drv_linked" linked alloc $((2*GIB)) alloc $((512*MIB)) 2>"$TMP/err")
  expect_contains "$TMP/err" "gpuguard: ledger $TMP/ledger: " "names the file" &&
  expect_contains "$TMP/err" "the quota applies to this process alone" "says what happens instead" &&
  expect_contains "$out" "alloc $((2*GIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "the quota still holds" &&
  expect_eq "$(md5sum < "$TMP/ledger")" "$before" "the file is untouched"
}
check "a corrupt ledger is refused with a clear line, left untouched, and the quota still holds" corrupt_ledger

other_users_ledger() {
  fresh
  GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB shimmed "$BIN/drv_linked" linked alloc 1 >/dev/null 2>&1
  chown 65534:65534 "$TMP/ledger" || return 1
  GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB shimmed "$BIN/drv_linked" linked alloc 1 >/dev/null 2>"$TMP/err"
  expect_contains "$TMP/err" "ledger $TMP/ledger belongs to another user (uid 65534)" "the line"
}
check "a ledger created by another user is refused" other_users_ledger

symlinked_ledger() {
  fresh
  ln -s /etc/passwd "$TMP/ledger"
  GPUGUARD_LEDGER=$TMP/ledger shimmed "$BIN/drv_linked" linked alloc 1 >/dev/null 2>"$TMP/err"
  expect_contains "$TMP/err" "it is a symbolic link" "the line" && [[ -L $TMP/ledger ]]
}
check "a ledger path that is a symbolic link is not followed" symlinked_ledger

side_by_side() {
  fresh
  export GPUGUARD_MEM_LIMIT=1GiB
  GPUGUARD_LEDGER=$TMP/a holder "$TMP/h" alloc $((900*MIB)) || return 1
  local out; out=$(GPUGUARD_LEDGER=$TMP/b shimmed "$BIN/drv_linked" linked alloc $((900*MIB)))
  exec {HOLDER_FD}>&-; wait
  expect_eq "$out" "alloc $((900*MIB)) -> CUDA_SUCCESS" "the other ledger is not charged"
}
check "two ledgers side by side do not affect each other" side_by_side

uuid_keys() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB FAKE_CUDA_DEVICES=2
  # Physical device 1 is ordinal 0 here and ordinal 1 there: one GPU, one account.
  CUDA_VISIBLE_DEVICES=1,0 holder "$TMP/h" alloc $((700*MIB)) || return 1
  local out; out=$(CUDA_VISIBLE_DEVICES=0,1 shimmed "$BIN/drv_linked" linked device 1 alloc $((700*MIB)) device 0 alloc $((700*MIB)))
  exec {HOLDER_FD}>&-; wait
  expect_eq "$out" "alloc $((700*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY
alloc $((700*MIB)) -> CUDA_SUCCESS" "refused on the shared physical GPU, admitted on the other"
}
check "devices are keyed by UUID: different CUDA_VISIBLE_DEVICES orders charge the same GPU" uuid_keys

limit_stands() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger
  GPUGUARD_MEM_LIMIT=1GiB holder "$TMP/h" alloc 1 || return 1
  local out; out=$(GPUGUARD_MEM_LIMIT=2GiB shimmed "$BIN/drv_linked" linked alloc $((1536*MIB)) 2>"$TMP/err")
  exec {HOLDER_FD}>&-; wait
  expect_contains "$TMP/err" "the limit '2GiB' differs from the limit '1GiB' of the shared ledger $TMP/ledger, which stands" "the warning" &&
  expect_eq "$out" "alloc $((1536*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "the ledger's limit applies"
}
check "a later process asking for another limit is warned and the ledger's limit stands" limit_stands

hami_aliases() {
  fresh
  export GPUGUARD_LEDGER=none
  expect_eq "$(CUDA_DEVICE_MEMORY_LIMIT=1g shimmed "$BIN/drv_linked" linked info)" "info -> CUDA_SUCCESS free=$GIB total=$GIB" "CUDA_DEVICE_MEMORY_LIMIT=1g" &&
  expect_eq "$(CUDA_DEVICE_MEMORY_LIMIT_0=512m shimmed "$BIN/drv_linked" linked info)" "info -> CUDA_SUCCESS free=$((512*MIB)) total=$((512*MIB))" "CUDA_DEVICE_MEMORY_LIMIT_0=512m" &&
  expect_eq "$(GPUGUARD_MEM_LIMIT=2GiB CUDA_DEVICE_MEMORY_LIMIT=1g shimmed "$BIN/drv_linked" linked info)" "info -> CUDA_SUCCESS free=$((2*GIB)) total=$((2*GIB))" "GPUGUARD_MEM_LIMIT wins" &&
  unset GPUGUARD_LEDGER &&
  CUDA_DEVICE_MEMORY_SHARED_CACHE=$TMP/hami.cache CUDA_DEVICE_MEMORY_LIMIT=1g shimmed "$BIN/drv_linked" linked alloc 1 >/dev/null && [[ -f $TMP/hami.cache ]]
}
check "HAMi-core's variables are accepted as aliases, and GPUGUARD_* wins" hami_aliases

nvml_container() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB
  holder "$TMP/h" alloc $((256*MIB)) || return 1
  local out; out=$(shimmed "$BIN/nvml_client")
  exec {HOLDER_FD}>&-; wait
  expect_contains "$out" "nvml total=$GIB free=$((768*MIB)) used=$((256*MIB))" "NVML shows the container's usage"
}
check "NVML answers from the container's usage" nvml_container
