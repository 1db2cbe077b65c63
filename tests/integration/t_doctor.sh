# `gpuguard doctor` with the test driver: what it finds, what it flags, and whether the shim really
# loads into a given command.

# The fake driver and NVML, and a private ledger.
doctor() {
  env -u LD_PRELOAD GPUGUARD_LEDGER="${GPUGUARD_LEDGER:-$TMP/ledger}" \
    LD_LIBRARY_PATH=$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$CLI" doctor "$@"
}

reports_fake_gpu_and_shim_in_command() {
  local out rc
  out=$(doctor -- sleep 1 2>&1); rc=$?
  expect_contains "$out" "ok    driver        CUDA 13.0 driver API, $FAKE/libcuda.so.1" "the driver line" &&
    expect_contains "$out" "ok    gpu 0         Fake GPU 0, 16.00 GiB, GPU-66616b65" "the GPU line" &&
    expect_contains "$out" "ok    nvml          driver 580.159.04" "the NVML line" &&
    expect_contains "$out" "ok    library       $LIB loads as a preload" "the library line" &&
    expect_contains "$out" "ok    libunwind" "the libunwind line" &&
    expect_contains "$out" "ok    preload       libgpuguard.so is loaded in sleep (pid" "the command's line" &&
    expect_eq "$rc" 0 "doctor's exit status" || { echo "$out" | sed 's/^/      /' >&2; return 1; }
}
check "with the fake driver: the GPU, the driver version, and the shim loaded in 'doctor -- sleep 1'" \
  reports_fake_gpu_and_shim_in_command

python_command() {
  local out
  out=$(doctor -- python3 -c "import time; time.sleep(1)" 2>&1) || { echo "$out" | sed 's/^/      /' >&2; return 1; }
  expect_contains "$out" "ok    preload       libgpuguard.so is loaded in python3" "the command's line"
}
check "doctor -- python3 -c 'import time; time.sleep(1)': the shim is loaded in python" python_command

static_command() {
  printf '#include <unistd.h>\nint main(void) { sleep(1); return 0; }\n' >"$TMP/st.c"
  if ! cc -static -o "$TMP/st" "$TMP/st.c" 2>/dev/null; then echo "    (no static C library here: skipped)"; return 0; fi
  local out rc
  out=$(doctor -- "$TMP/st" 2>&1); rc=$?
  expect_eq "$rc" 1 "doctor's exit status" &&
    expect_contains "$out" "FAIL  preload       $TMP/st is statically linked, so LD_PRELOAD cannot load anything into it; fix:" \
      "the command's line"
}
check "a static program: says the preload cannot reach it, exit 1" static_command

flags_bad_variables() {
  local out rc
  out=$(GPUGUARD_WARN_AT=2 GPUGUARD_MEM_LIMIT=8 GPUGUARD_STACK_DEPTH=deep GPUGUARD_TYPO=1 doctor 2>&1); rc=$?
  expect_eq "$rc" 1 "doctor's exit status" &&
    expect_contains "$out" "FAIL  variable      GPUGUARD_WARN_AT=2: not a fraction of the limit like 0.9 or 90%; fix: correct or unset GPUGUARD_WARN_AT" "the line" &&
    expect_contains "$out" "FAIL  variable      GPUGUARD_STACK_DEPTH=deep: not a whole number from 0 to 128" "the line" &&
    expect_contains "$out" "ok    variable      GPUGUARD_MEM_LIMIT=8" "the line (8 bytes is a valid limit)" &&
    expect_contains "$out" "warn  variable      GPUGUARD_TYPO=1: not a variable gpuguard reads (a typo?)" "the line"
}
check "malformed GPUGUARD_* values are FAIL lines with a fix; an unknown name is a warning" flags_bad_variables

# Issue 31: the limit has one check (common/settings/, check_limit). doctor said "is not valid" and
# "GPUGUARD_MEM_LIMIT= is empty" where the shim and `gpuguard run` said "is not a valid limit" and
# "is set but empty": now all three name the problem in the same words.
limit_problem_in_one_set_of_words() {
  local out shim run problem
  out=$(GPUGUARD_MEM_LIMIT=lots doctor 2>&1)
  shim=$(GPUGUARD_MEM_LIMIT=lots GPUGUARD_LEDGER=none shimmed "$BIN/drv_linked" linked alloc 1 2>&1 >/dev/null)
  run=$(GPUGUARD_MEM_LIMIT=lots "$CLI" run -- true 2>&1)
  problem=$(sed -n 's/^gpuguard: \(GPUGUARD_MEM_LIMIT=lots is not a valid limit: .*\)$/\1/p' <<<"$run")
  expect_contains "$problem" "GPUGUARD_MEM_LIMIT=lots is not a valid limit: " "run's line" &&
    expect_contains "$out" "FAIL  limit         $problem; every device allocation is refused" "doctor's line" &&
    expect_contains "$shim" "gpuguard: $problem; refusing every device allocation" "the shim's line" || return 1
  out=$(GPUGUARD_MEM_LIMIT= doctor 2>&1)
  shim=$(GPUGUARD_MEM_LIMIT= GPUGUARD_LEDGER=none shimmed "$BIN/drv_linked" linked alloc 1 2>&1 >/dev/null)
  run=$(GPUGUARD_MEM_LIMIT= "$CLI" run -- true 2>&1)
  problem="GPUGUARD_MEM_LIMIT is set but empty (unset it for no limit)"
  expect_contains "$run" "gpuguard: $problem" "run's line for an empty limit" &&
    expect_contains "$out" "FAIL  limit         $problem; every device allocation is refused" "doctor's line for it" &&
    expect_contains "$shim" "gpuguard: $problem; refusing every device allocation" "the shim's line for it"
}
check "a malformed or empty limit: doctor, run and the shim name it in the same words" limit_problem_in_one_set_of_words

# The shim and doctor read every variable through one table (common/settings/): doctor once rejected
# GPUGUARD_UNWINDER=cfi, the shim's default, because it kept a list of its own.
unwinder_values() {
  local out
  out=$(GPUGUARD_UNWINDER=cfi doctor 2>&1)
  expect_contains "$out" "ok    variable      GPUGUARD_UNWINDER=cfi" "doctor on the default walker" || return 1
  out=$(GPUGUARD_UNWINDER=bogus doctor 2>&1)
  expect_contains "$out" "FAIL  variable      GPUGUARD_UNWINDER=bogus: not cfi, libunwind, libgcc or none" "doctor on a typo"
}
check "doctor accepts GPUGUARD_UNWINDER=cfi (the shim's default) and flags a typo" unwinder_values

same_words_as_the_shim() {
  local out err
  out=$(GPUGUARD_MAX_REPORTS=many GPUGUARD_UNWINDER=bogus doctor 2>&1)
  GPUGUARD_LEDGER=none GPUGUARD_MAX_REPORTS=many GPUGUARD_UNWINDER=bogus \
    shimmed "$BIN/drv_linked" linked alloc 4096 >/dev/null 2>"$TMP/err"
  err=$(cat "$TMP/err")
  expect_contains "$out" "GPUGUARD_MAX_REPORTS=many: not a whole number from 0 to 100000" "doctor's line" &&
    expect_contains "$err" "gpuguard: GPUGUARD_MAX_REPORTS=many is not a whole number from 0 to 100000; using 8" "the shim's line" &&
    expect_contains "$err" "gpuguard: GPUGUARD_UNWINDER=bogus is not cfi, libunwind, libgcc or none; using the default order" \
      "the shim's line"
}
check "a malformed value: doctor and the shim name the same problem" same_words_as_the_shim

limit_resolved() {
  local out
  out=$(GPUGUARD_MEM_LIMIT=25% doctor 2>&1)
  expect_contains "$out" "ok    limit         25% from GPUGUARD_MEM_LIMIT, gpu 0: 4.00 GiB" "the limit line"
}
check "the limit is shown resolved per GPU" limit_resolved

no_driver() {
  local out rc
  out=$(GPUGUARD_REAL_LIBCUDA=$TMP/no-libcuda.so doctor 2>&1); rc=$?
  expect_eq "$rc" 1 "doctor's exit status" &&
    expect_contains "$out" "FAIL  driver        cannot load $TMP/no-libcuda.so" "the driver line"
}
check "no driver: a FAIL line and exit 1" no_driver

library_does_not_load() {
  local out rc
  echo "not a library" >"$TMP/libgpuguard.so"
  out=$(GPUGUARD_LIBRARY=$TMP/libgpuguard.so doctor -- sleep 1 2>&1); rc=$?
  expect_eq "$rc" 1 "doctor's exit status" &&
    expect_contains "$out" "FAIL  library       $TMP/libgpuguard.so does not load:" "the library line" &&
    expect_contains "$out" "FAIL  preload       not tried: the library does not load" "the command's line"
}
check "a library that does not load: FAIL with the loader's reason; the command is not tried" library_does_not_load

ledger_and_reports() {
  local out rc
  head -c 5000 /dev/urandom >"$TMP/bad_ledger"
  out=$(GPUGUARD_LEDGER=$TMP/bad_ledger GPUGUARD_REPORT_DIR=/proc/nope doctor 2>&1); rc=$?
  expect_eq "$rc" 1 "doctor's exit status" &&
    expect_contains "$out" "FAIL  ledger        ledger $TMP/bad_ledger: not a gpuguard ledger (bad magic); fix: remove" "the ledger line" &&
    expect_contains "$out" "FAIL  reports       reports cannot be written: /proc/nope" "the reports line"
}
check "a corrupt ledger and an unwritable report folder are FAIL lines" ledger_and_reports

missing_command() {
  local out rc
  out=$(doctor -- no-such-command-here 2>&1); rc=$?
  expect_eq "$rc" 1 "doctor's exit status" &&
    expect_contains "$out" "FAIL  command       command not found: no-such-command-here" "the line"
}
check "doctor -- a missing command: FAIL, exit 1" missing_command
