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
