#!/usr/bin/env bash
# `make test`: unit tests, then integration tests; prints one closing line with the totals.
# A sanitized build (make test SANITIZE=... BUILD=...) runs under tests/sanitize_env.sh's environment.
set -u
# A failing test binary must fail `make test` even though its output is piped into tee.
set -o pipefail
BUILD=${BUILD:-build}
LIB=$BUILD/libgpuguard.so
source "$(dirname "$0")/sanitize_env.sh"
status=0
# The unit tests are our own program: leaks count there.
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1 "$BUILD/tests/unit" 2>&1 | tee /tmp/gpuguard-unit.$$ || status=1
sanitizer_reports || status=1
unit_line=$(grep -E '^\[doctest\] test cases:' /tmp/gpuguard-unit.$$ | tail -1); rm -f /tmp/gpuguard-unit.$$
unit_pass=$(sed -E 's/.*\|[ ]*([0-9]+) passed.*/\1/' <<<"$unit_line"); unit_fail=$(sed -E 's/.*\|[ ]*([0-9]+) failed.*/\1/' <<<"$unit_line")
BUILD=$BUILD tests/integration/run.sh 2>&1 | tee /tmp/gpuguard-integ.$$ || status=1
integ_line=$(grep -E '^integration: ' /tmp/gpuguard-integ.$$ | tail -1); rm -f /tmp/gpuguard-integ.$$
integ_pass=$(sed -E 's/integration: ([0-9]+) passed.*/\1/' <<<"$integ_line"); integ_fail=$(sed -E 's/.*, ([0-9]+) failed.*/\1/' <<<"$integ_line")
integ_skip=$(sed -nE 's/.*, ([0-9]+) skipped.*/\1/p' <<<"$integ_line")
# Kept after a failure: the reports printed above are also under $SAN_LOG_DIR/seen.
[[ -z ${SAN_LOG_DIR:-} || $status != 0 ]] || rm -rf "$SAN_LOG_DIR"
echo
echo "test${SANITIZER:+ (SANITIZE=$SANITIZER_NAME)}: $((${unit_pass:-0} + ${integ_pass:-0})) passed, $((${unit_fail:-1} + ${integ_fail:-1})) failed${integ_skip:+, $integ_skip skipped}"
exit $status
