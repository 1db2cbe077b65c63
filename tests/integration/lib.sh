# Helpers for the integration tests: each tests/integration/t_*.sh is sourced by run.sh with these
# defined, and calls `check` once per behaviour it proves.
#
#   check "refuses the allocation over the limit" some_command args...   # passes when it exits 0
#   expect_eq ACTUAL EXPECTED "what"          # inside a function used with check
#   expect_contains FILE_OR_TEXT NEEDLE "what"
#
# BUILD, BIN (test programs), LIB (the shim), FAKE (test doubles) and TMP (a fresh folder per file) are set.

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
# Runs a program under the shim with the test driver in place of libcuda.
shimmed() { LD_PRELOAD=$LIB LD_LIBRARY_PATH=$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }
# jq-like field access without jq: python3 is on every machine this runs on.
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$@"; }

check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then
    PASSED=$((PASSED + 1)); echo "  ok   $name"
  else
    FAILED=$((FAILED + 1)); FAILED_NAMES+=("$CURRENT_FILE: $name"); echo "  FAIL $name"
    echo "$out" | tail -30 | sed 's/^/       /'
  fi
}
# Starts a test in a folder of its own (reports and files of one test never meet another's):
# call first inside a function given to `check`, which runs it in a subshell.
fresh() {
  TMP=$(mktemp -d "$TMP/t.XXXXXX") && cd "$TMP" && export GPUGUARD_REPORT_DIR=$TMP
}
