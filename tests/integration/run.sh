#!/usr/bin/env bash
# Runs every tests/integration/t_*.sh (or those named as arguments) and prints one closing line.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export BUILD=${BUILD:-build}
[[ $BUILD = /* ]] || BUILD="$root/$BUILD"
export BIN=$BUILD/tests/bin LIB=$BUILD/libgpuguard.so FAKE=$BUILD/fake CLI=$BUILD/gpuguard ROOT=$root
source "$root/tests/sanitize_env.sh"
source "$here/lib.sh"
[[ -z $SANITIZER ]] || echo "sanitizer: $SANITIZER_NAME (runtime $SAN_RT preloaded; reports in $SAN_LOG_DIR)"
total_pass=0; total_fail=0; total_skip=0; failures=()
files=("$@"); ((${#files[@]})) || files=("$here"/t_*.sh)
for f in "${files[@]}"; do
  # A name may come bare (t_stacks) or as a path; one that names no file is a failure, not 0 of 0.
  [[ -f $f ]] || f="$here/${f%.sh}.sh"
  CURRENT_FILE=$(basename "$f")
  echo "$CURRENT_FILE"
  if [[ ! -f $f ]]; then
    total_fail=$((total_fail + 1)); failures+=("$CURRENT_FILE: no such test file"); continue
  fi
  TMP=$(mktemp -d /tmp/gpuguard-test.XXXXXX)
  results=$(mktemp)
  # Each file runs in a subshell from its own folder, so that its cd, variables and traps stay local.
  ( PASSED=0; FAILED=0; SKIPPED=0; FAILED_NAMES=()
    cd "$TMP" && source "$f"
    echo "$PASSED $FAILED $SKIPPED" > "$results"
    ((${#FAILED_NAMES[@]})) && printf '%s\n' "${FAILED_NAMES[@]}" >> "$results" )
  if [[ -s $results ]]; then
    read -r p fl sk < "$results"
    total_pass=$((total_pass + p)); total_fail=$((total_fail + fl)); total_skip=$((total_skip + sk))
    mapfile -t -O "${#failures[@]}" failures < <(tail -n +2 "$results")
  else
    total_fail=$((total_fail + 1)); failures+=("$CURRENT_FILE: the file itself failed to run")
  fi
  rm -rf "$TMP" "$results"
done
# Reports from processes that outlived their check (a background holder, say) count too.
if ! late=$(sanitizer_reports); then
  echo "$late"; total_fail=$((total_fail + 1)); failures+=("sanitizer reports after the last check")
fi
for n in "${failures[@]}"; do echo "failed: $n"; done
skipped=; ((total_skip == 0)) || skipped=", $total_skip skipped"
echo "integration: $total_pass passed, $total_fail failed$skipped"
((total_fail == 0))
