# The test doubles themselves, without the shim: every other test trusts their answers, so the parts
# of the real driver's behaviour that the shim depends on are proved here.

fake() { LD_LIBRARY_PATH=$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }
G=1073741824

check "cuGetProcAddress: self-lookup (12000 -> _v2, 11030 -> legacy), versioned variants, not-found statuses" \
  fake "$BIN/fake_selftest" procaddr

every_export_reachable() {
  local syms
  syms=$(nm -D --defined-only "$FAKE/libcuda.so.1" | awk '$3 ~ /^cu/ {print $3}')
  expect_contains "$syms" cuMemAlloc_v2 "the fake driver's exports" &&
    fake "$BIN/fake_selftest" reachable $syms
}
check "every exported driver function is reachable through cuGetProcAddress" every_export_reachable

check "calls need cuInit and a current context, as with the real driver" fake "$BIN/fake_selftest" context

check "pitch, array, mipmap and VMM allocations charge the right bytes" fake "$BIN/fake_selftest" shapes

capacity_oom() {
  local out
  out=$(FAKE_CUDA_MEM=$G fake "$BIN/fake_selftest" alloc 600M 600M 400M)
  expect_eq "$out" $'alloc 600M -> CUDA_SUCCESS\nalloc 600M -> CUDA_ERROR_OUT_OF_MEMORY\nalloc 400M -> CUDA_SUCCESS' \
    "allocations against a 1 GiB device"
}
check "an allocation past the device's capacity fails with CUDA_ERROR_OUT_OF_MEMORY" capacity_oom

visible_devices_remap() {
  local drv nvml
  drv=$(FAKE_CUDA_DEVICES=3 FAKE_CUDA_MEM_2=$G CUDA_VISIBLE_DEVICES=2,0 fake "$BIN/fake_selftest" devices)
  nvml=$(FAKE_CUDA_DEVICES=3 FAKE_CUDA_MEM_2=$G CUDA_VISIBLE_DEVICES=2,0 fake "$BIN/fake_selftest" nvml)
  local uuid2 uuid0
  uuid2=$(awk '$1 == "index" && $2 == 2 {print $8}' <<<"$nvml")
  uuid0=$(awk '$1 == "index" && $2 == 0 {print $8}' <<<"$nvml")
  expect_contains "$drv" "count 2" "the driver's device count" &&
    expect_contains "$drv" "ordinal 0 name Fake GPU 2 uuid $uuid2 total $G" "ordinal 0 (physical 2)" &&
    expect_contains "$drv" "ordinal 1 name Fake GPU 0 uuid $uuid0 total 17179869184" "ordinal 1 (physical 0)" &&
    expect_contains "$nvml" "count 3" "NVML's count (NVML ignores CUDA_VISIBLE_DEVICES)" &&
    expect_not_contains "$nvml" FAIL "NVML checks"
}
check "CUDA_VISIBLE_DEVICES=2,0: ordinal 0 is physical 2 with its name, UUID and capacity; NVML keeps physical order" \
  visible_devices_remap

truth_counts_current_and_max() {
  local t=$TMP/truth1
  FAKE_CUDA_TRUTH=$t fake "$BIN/fake_selftest" alloc 1G 2G >/dev/null &&
    expect_eq "$("$BIN/fake_truth" "$t")" "device 0 current 0 max $((3 * G))" "truth after 1G+2G allocated and freed"
}
check "the truth file counts bytes handed out now and the most ever" truth_counts_current_and_max

processes_share_a_device() {
  local t=$TMP/truth2 out
  mkfifo "$TMP/hold_in"
  FAKE_CUDA_TRUTH=$t FAKE_CUDA_MEM=$((16 * G)) fake "$BIN/fake_selftest" hold 10G <"$TMP/hold_in" >"$TMP/hold_out" &
  local pid=$!
  exec 7>"$TMP/hold_in"
  for _ in $(seq 100); do [[ -s $TMP/hold_out ]] && break; sleep 0.05; done
  expect_eq "$(cat "$TMP/hold_out")" held "the holder's allocation" || { exec 7>&-; wait $pid; return 1; }
  out=$(FAKE_CUDA_TRUTH=$t FAKE_CUDA_MEM=$((16 * G)) fake "$BIN/fake_selftest" alloc 10G)
  local nvml
  nvml=$(FAKE_CUDA_TRUTH=$t FAKE_CUDA_MEM=$((16 * G)) fake "$BIN/fake_selftest" nvml)
  exec 7>&-
  wait $pid
  expect_eq "$out" "alloc 10G -> CUDA_ERROR_OUT_OF_MEMORY" "a second process's 10G while 10G are held" &&
    expect_contains "$nvml" "used $((10 * G))" "NVML's used bytes while 10G are held" &&
    expect_eq "$("$BIN/fake_truth" "$t")" "device 0 current 0 max $((10 * G))" "truth after the holder freed"
}
check "processes sharing a truth file share the device's capacity; NVML's used follows it" processes_share_a_device

exit_gives_back() {
  local t=$TMP/truth3
  FAKE_CUDA_TRUTH=$t fake "$BIN/fake_selftest" leak 3G >/dev/null &&
    expect_eq "$("$BIN/fake_truth" "$t")" "device 0 current 0 max $((3 * G))" "truth after a process exited holding 3G" &&
    "$BIN/fake_truth" "$t" reset &&
    expect_eq "$("$BIN/fake_truth" "$t")" "device 0 current 0 max 0" "truth after reset"
}
check "a process that exits holding memory gives it back; fake_truth reset zeroes the file" exit_gives_back

fault_injection() {
  local out
  out=$(FAKE_CUDA_FAIL_EVERY=2 fake "$BIN/fake_selftest" alloc 1M 1M 1M 1M | awk '{print $4}' | tr '\n' ' ')
  expect_eq "$out" "CUDA_SUCCESS CUDA_ERROR_OUT_OF_MEMORY CUDA_SUCCESS CUDA_ERROR_OUT_OF_MEMORY " "results with FAIL_EVERY=2"
}
check "FAKE_CUDA_FAIL_EVERY=2 fails every second allocation" fault_injection

trace_lines() {
  local err
  err=$(FAKE_CUDA_TRACE=1 fake "$BIN/fake_selftest" alloc 1M 2>&1 >/dev/null)
  expect_contains "$err" "fake_cuda: cuMemAlloc_v2 1048576 -> CUDA_SUCCESS" "the trace" &&
    expect_contains "$err" "fake_cuda: cuMemFree_v2 0x" "the trace"
}
check "FAKE_CUDA_TRACE=1 prints one line per memory call" trace_lines

cudart_through_getprocaddress() {
  local undef out err
  # No driver symbol is linked: the only way in is what dlsym and cuGetProcAddress hand out.
  undef=$(nm -D --undefined-only "$FAKE/libcudart.so.13" | awk '$2 ~ /^cu/')
  expect_eq "$undef" "" "driver symbols the fake cudart links against" || return 1
  out=$(FAKE_CUDA_TRACE=1 fake "$BIN/fake_selftest" cudart 1M 2>"$TMP/cudart_err")
  err=$(cat "$TMP/cudart_err")
  expect_contains "$out" "cudaMalloc 1M -> 0 " "cudaMalloc's result" &&
    expect_eq "$(head -1 <<<"$err")" \
      "fake_cuda: cuGetProcAddress_v2 cuGetProcAddress@12000 = cuGetProcAddress_v2 -> CUDA_SUCCESS" \
      "the runtime's first driver call (the self-lookup)" &&
    expect_contains "$err" "cuGetProcAddress_v2 cuMemAlloc@13000 = cuMemAlloc_v2 -> CUDA_SUCCESS" "the trace" &&
    expect_contains "$err" "fake_cuda: cuMemAlloc_v2 1048576 -> CUDA_SUCCESS" "the trace" &&
    expect_contains "$err" "fake_cuda: cuMemFree_v2 0x" "the trace"
}
check "the fake cudart reaches the driver only through cuGetProcAddress, after the self-lookup" \
  cudart_through_getprocaddress

cudart_oom() {
  local out
  out=$(FAKE_CUDA_MEM=1048576 fake "$BIN/fake_selftest" cudart 2M)
  expect_contains "$out" "cudaMalloc 2M -> 2 " "cudaMalloc past capacity (2 = cudaErrorMemoryAllocation)"
}
check "the fake cudart maps a driver OOM to cudaErrorMemoryAllocation" cudart_oom
