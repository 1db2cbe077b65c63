# Helpers for the integration tests: each tests/integration/t_*.sh is sourced by run.sh with these
# defined, and calls `check` once per behaviour it proves.
#
#   check "refuses the allocation over the limit" some_command args...   # passes when it exits 0
#   expect_eq ACTUAL EXPECTED "what"          # inside a function used with check
#   expect_contains FILE_OR_TEXT NEEDLE "what"
#
# BUILD, BIN (test programs), LIB (the shim), FAKE (test doubles) and TMP (a fresh folder per file) are set;
# PRELOAD is what to put in LD_PRELOAD to run a program under the shim (the shim, after the sanitizer
# runtime in a sanitized build: tests/sanitize_env.sh), SANITIZER is "", "address" or "thread".

expect_eq() {
  if [[ "$1" != "$2" ]]; then echo "    expected $3 = '$2', got '$1'" >&2; return 1; fi
}
expect_contains() {
  local hay=$1
  [[ -f $hay ]] && hay=$(cat "$hay")
  if [[ "$hay" != *"$2"* ]]; then echo "    expected $3 to contain '$2'; it was:" >&2; echo "$hay" | head -20 | sed 's/^/      /' >&2; return 1; fi
}
expect_not_contains() {
  local hay=$1
  [[ -f $hay ]] && hay=$(cat "$hay")
  if [[ "$hay" == *"$2"* ]]; then echo "    expected $3 not to contain '$2'" >&2; return 1; fi
}
# Runs a program under the shim with the test driver in place of libcuda (`shimmed timeout N prog ...`
# bounds it). Under ASan, leak detection is on for the programs this project builds (python3 and the
# shell leak by design). A test whose program forks
# after its first CUDA call sets FORKS=1: the shim's fork handler then holds one lock per table shard
# (about 70), past the 64 that ThreadSanitizer's lock-order checker can track for one thread (it
# stops with a CHECK failure), so that checker is off there; races are still detected.
shimmed() {
  local asan=${ASAN_OPTIONS:-} tsan=${TSAN_OPTIONS:-} prog=$1
  [[ $1 == timeout ]] && prog=$3
  [[ $SANITIZER == address && $prog == "$BUILD"/* ]] && asan+=:detect_leaks=1
  [[ $SANITIZER == thread && ${FORKS:-0} == 1 ]] && tsan+=:detect_deadlocks=0
  ASAN_OPTIONS=$asan TSAN_OPTIONS=$tsan LD_PRELOAD=$PRELOAD LD_LIBRARY_PATH=$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"
}
# Skips a check with its reason printed (never silently): `skip "name" "why"`.
skip() { SKIPPED=$((SKIPPED + 1)); echo "  SKIP $1: $2"; }
# jq-like field access without jq: python3 is on every machine this runs on.
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$@"; }

check() {
  local name=$1; shift
  local out rc san
  out=$("$@" 2>&1); rc=$?
  # A sanitizer report written during the check fails it, even when the check's own asserts passed
  # (a report may come from a process whose stderr the test discards).
  san=$(sanitizer_reports) || rc=1
  if ((rc == 0)); then
    PASSED=$((PASSED + 1)); echo "  ok   $name"
  else
    FAILED=$((FAILED + 1)); FAILED_NAMES+=("$CURRENT_FILE: $name"); echo "  FAIL $name"
    echo "$out" | tail -30 | sed 's/^/       /'
    [[ -z $san ]] || echo "$san"
  fi
}
# Starts a test in a folder of its own (reports and files of one test never meet another's):
# call first inside a function given to `check`, which runs it in a subshell.
fresh() {
  TMP=$(mktemp -d "$TMP/t.XXXXXX") && cd "$TMP" && export GPUGUARD_REPORT_DIR=$TMP
}
