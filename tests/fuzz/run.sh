#!/usr/bin/env bash
# `make fuzz`: runs each fuzz target (built by the Makefile into $FUZZ_BUILD) for FUZZ_SECONDS from
# its seed corpus, one after the other, and prints one line per target and a closing line.
#   tests/fuzz/run.sh [fuzz_NAME...]        (default: every built target)
#
# Seeds stay read-only in tests/fuzz/corpus/<name>/ (and tests/data for the report target); what
# libFuzzer finds new goes to $FUZZ_BUILD/corpus/<name>/ (kept between runs, so a longer run starts
# where the last one ended).
# A crash, a leak, undefined behaviour, a broken promise (abort) or a unit slower than
# FUZZ_UNIT_TIMEOUT seconds leaves its input in $FUZZ_BUILD/artifacts/<name>/: once the code is fixed,
# add that file to the target's seed corpus as a regression seed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
[[ $FUZZ_BUILD = /* ]] || FUZZ_BUILD="$root/$FUZZ_BUILD"
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_UNIT_TIMEOUT=${FUZZ_UNIT_TIMEOUT:-10}
targets=("$@")
if ((${#targets[@]} == 0)); then
  for b in "$FUZZ_BUILD"/fuzz_*; do [[ -x $b ]] && targets+=("$(basename "$b")"); done
fi
failed=()
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  seeds="$here/corpus/$name" work="$FUZZ_BUILD/corpus/$name" art="$FUZZ_BUILD/artifacts/$name"
  mkdir -p "$work" "$art"
  log="$FUZZ_BUILD/$t.log"
  start=$(date +%s)
  # -close_fd_mask=3: the code under test prints a line per bad value; libFuzzer and the sanitizers
  # keep their own output. Seeds are run first, so a regression seed fails at once.
  dict=(); [[ -f $here/$name.dict ]] && dict=(-dict="$here/$name.dict")
  # The report target also starts from the test fixtures (tests/data: real reports and broken ones).
  extra=(); [[ $name == report ]] && extra=("$root/tests/data")
  "$FUZZ_BUILD/$t" "${dict[@]}" -max_total_time="$FUZZ_SECONDS" -timeout="$FUZZ_UNIT_TIMEOUT" -close_fd_mask=3 \
    -print_final_stats=1 -artifact_prefix="$art/" "$work" "$seeds" "${extra[@]}" > "$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
  if ((rc == 0)); then
    printf '  ok   %-18s %3ss  %s runs, %s\n' "$t" "$(( $(date +%s) - start ))" "${runs:-?}" "${cov:-cov: ?}"
  else
    failed+=("$t")
    printf '  FAIL %-18s exit %d; input in %s, log %s\n' "$t" "$rc" "$art" "$log"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|Test unit written|.*deadly signal|.*timeout)' "$log" | head -8 | sed 's/^/       /'
  fi
done
echo "fuzz: $(( ${#targets[@]} - ${#failed[@]} )) passed, ${#failed[@]} failed (${FUZZ_SECONDS}s each)"
((${#failed[@]} == 0))
