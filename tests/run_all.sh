#!/usr/bin/env bash
# `make test`: unit tests, then integration tests; prints one closing line with the totals.
set -u
BUILD=${BUILD:-build}
status=0
"$BUILD/tests/unit" 2>&1 | tee /tmp/gpuguard-unit.$$ || status=1
unit_line=$(grep -E '^\[doctest\] test cases:' /tmp/gpuguard-unit.$$ | tail -1); rm -f /tmp/gpuguard-unit.$$
unit_pass=$(sed -E 's/.*\|[ ]*([0-9]+) passed.*/\1/' <<<"$unit_line"); unit_fail=$(sed -E 's/.*\|[ ]*([0-9]+) failed.*/\1/' <<<"$unit_line")
BUILD=$BUILD tests/integration/run.sh 2>&1 | tee /tmp/gpuguard-integ.$$ || status=1
integ_line=$(grep -E '^integration: ' /tmp/gpuguard-integ.$$ | tail -1); rm -f /tmp/gpuguard-integ.$$
integ_pass=$(sed -E 's/integration: ([0-9]+) passed.*/\1/' <<<"$integ_line"); integ_fail=$(sed -E 's/.*, ([0-9]+) failed/\1/' <<<"$integ_line")
echo
echo "test: $((${unit_pass:-0} + ${integ_pass:-0})) passed, $((${unit_fail:-1} + ${integ_fail:-1})) failed"
exit $status
