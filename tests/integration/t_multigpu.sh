# Issue 9, what the CPU machine can run of it: several GPUs (the test driver with FAKE_CUDA_DEVICES=2,
# 16 GiB each) under per-device limits and one ledger, as two ranks of a data-parallel job would use
# them. The runs on two real GPUs wait for a multi-GPU machine (tests/gpu/ has none of them yet).
GIB=1073741824
MIB=1048576
export FAKE_CUDA_DEVICES=2

per_device_limits() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT="0=4GiB,1=2GiB"
  local out; out=$(shimmed "$BIN/drv_linked" linked info alloc $((3*GIB)) device 1 info alloc $((1536*MIB)) \
    alloc $GIB device 0 alloc $((512*MIB)) 2>"$TMP/err")
  expect_eq "$out" "info -> CUDA_SUCCESS free=$((4*GIB)) total=$((4*GIB))
alloc $((3*GIB)) -> CUDA_SUCCESS
info -> CUDA_SUCCESS free=$((2*GIB)) total=$((2*GIB))
alloc $((1536*MIB)) -> CUDA_SUCCESS
alloc $GIB -> CUDA_ERROR_OUT_OF_MEMORY
alloc $((512*MIB)) -> CUDA_SUCCESS" \
    "each device sees its own limit; refused on device 1, which it overflows, and not on device 0" || return 1
  local r; r=$(ls "$TMP"/gpuguard-quota-*.json) || return 1
  expect_eq "$(json "$r" "(d['device']['ordinal'], d['limit']['bytes'], d['failed_request']['bytes'])")" \
    "(1, $((2*GIB)), $GIB)" "the report names device 1, its limit and the refused request" &&
  expect_eq "$(json "$r" "d['device']['uuid'] != ''")" "True" "and the device's UUID"
}
check "GPUGUARD_MEM_LIMIT=\"0=4GiB,1=2GiB\": each device held to its own limit, refused only where it overflows" per_device_limits

# Two ranks of one job, each on its own GPU (as torchrun sets CUDA_VISIBLE_DEVICES or the device per
# rank), under `gpuguard run --limit 8GiB`: both show in `gpuguard top`, each on its device; rank 0's
# memory from cuMemCreate (how NCCL maps its buffers) is counted; rank 1's OOM report names its device.
two_ranks() {
  fresh
  local L=$TMP/ledger
  mkfifo "$TMP/rank0_in"
  GPUGUARD_REPORT_DIR=$TMP "$CLI" run --ledger "$L" --limit 8GiB -- \
    env LD_LIBRARY_PATH=$FAKE "$BIN/drv_linked" linked alloc $((6*GIB)) create $((512*MIB)) wait \
    <"$TMP/rank0_in" >"$TMP/rank0_out" 2>"$TMP/rank0_err" &
  local rank0=$!
  exec {in}>"$TMP/rank0_in"
  for _ in $(seq 200); do grep -q ready "$TMP/rank0_out" 2>/dev/null && break; sleep 0.05; done
  grep -q ready "$TMP/rank0_out" || { exec {in}>&-; wait; cat "$TMP/rank0_err"; return 1; }
  local out; out=$(GPUGUARD_REPORT_DIR=$TMP "$CLI" run --ledger "$L" --limit 8GiB -- \
    env LD_LIBRARY_PATH=$FAKE "$BIN/drv_linked" linked device 1 alloc $((6*GIB)) alloc $((3*GIB)) 2>"$TMP/rank1_err")
  "$CLI" top --ledger "$L" --json >"$TMP/top.json"
  exec {in}>&-; wait "$rank0"
  expect_eq "$out" "alloc $((6*GIB)) -> CUDA_SUCCESS
alloc $((3*GIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "rank 1: 6 GiB fit its GPU's 8 GiB, 3 GiB more do not" || return 1
  # Devices by ledger index, matched by UUID: rank 0 holds 6.5 GiB of one, rank 1 6 GiB of the other.
  expect_eq "$(json "$TMP/top.json" "sorted(sum(x['bytes'] for x in p['devices']) for p in d['processes'])")" \
    "[$((6*GIB)), $((6*GIB + 512*MIB))]" "top: both ranks, with cuMemCreate's 512 MiB counted for rank 0" &&
  expect_eq "$(json "$TMP/top.json" "sorted(len(p['devices']) for p in d['processes']) == [1, 1] and len({p['devices'][0]['index'] for p in d['processes']}) == 2")" \
    "True" "top: each rank on its own device" &&
  # Rank 1 has exited (without freeing: its driver gave the memory back), so its device's usage is 0
  # although its slot still shows its bytes until a process of the ledger reclaims it (issue 18).
  expect_eq "$(json "$TMP/top.json" "sorted((x['limit_bytes'], x['used_bytes']) for x in d['devices'])")" \
    "[($((8*GIB)), 0), ($((8*GIB)), $((6*GIB + 512*MIB)))]" "top: each device's limit and usage" &&
  expect_eq "$(json "$TMP/top.json" "sorted(p['state'] for p in d['processes'])")" "['alive', 'dead']" \
    "top: rank 0 alive, rank 1 exited" || return 1
  local r; r=$(ls "$TMP"/gpuguard-quota-*.json) || return 1
  expect_eq "$(json "$r" "(d['device']['ordinal'], d['failed_request']['bytes'])")" "(1, $((3*GIB)))" \
    "rank 1's report names its device (ordinal 1) and the request"
}
check "two ranks on two GPUs under gpuguard run --limit 8GiB: top shows both, cuMemCreate counted, the OOM report names the device" two_ranks
