# Holders a reader can tell apart (tools/report/analysis/holders.h), on the demo's own program
# (examples/demo_without_gpu.py): its three stacks all allocate in device_alloc, and only the one
# under Model.forward leaks. The summary's holders, "At the peak" and `report diff` go on through the
# callers until the lines differ.

DEMO=$ROOT/examples/demo_without_gpu.py

# demo LIMIT DIR: the demo under the shim with the test driver, its report in DIR.
demo() {
  mkdir -p "$2" &&
    GPUGUARD_MEM_LIMIT=$1 GPUGUARD_LEDGER=$(mktemp -u "$TMP/ledger.XXXXXX") GPUGUARD_REPORT_DIR=$2 \
      shimmed timeout 120 python3 "$DEMO" > "$2.out" 2>&1 || { cat "$2.out"; return 1; }
  expect_contains "$2.out" "out of memory at step" "the demo's output"
}

# The lines of a section of the summary, from its heading to the empty line after it.
section() { sed -n "/^$1/,/^\$/p"; }

# The holders of a section from their frame on (bytes, shares and counts cut), each with the callers'
# lines under it joined to it: one holder a line.
holders_of() { sed 1d | sed -e 's/^.*device_alloc/device_alloc/' -e 's/^ *← / ← /' | sed -e ':a;N;$!ba;s/\n ← / ← /g' | grep -v '^$'; }

holders_told_apart() {
  fresh && demo 1GiB reports || return 1
  local out; out=$("$CLI" report --no-color reports) || return 1
  local name
  for name in "Top holders" "At the peak"; do
    local rows; rows=$(section "$name" <<<"$out" | holders_of)
    expect_eq "$(grep -c 'device_alloc (examples/demo_without_gpu.py:13)' <<<"$rows")" 3 "$name: rows in device_alloc" &&
      expect_eq "$(sort -u <<<"$rows" | wc -l)" 3 "$name: distinct rows" &&
      expect_contains "$rows" "← Model.forward" "$name: the leaking caller" &&
      expect_contains "$rows" "(examples/demo_without_gpu.py:25)" "$name: the leaking line" ||
      { echo "$out" >&2; return 1; }
  done
}
check "the demo's three holders in device_alloc are told apart by their callers, in the holders and at the peak" \
  holders_told_apart

diff_told_apart() {
  fresh && demo 1GiB small && demo 4GiB large || return 1
  local a b; a=$(ls small/gpuguard-quota-*.json) && b=$(ls large/gpuguard-quota-*.json) || return 1
  local out; out=$("$CLI" report diff --no-color "$a" "$b") || return 1
  expect_contains "$(section Grew <<<"$out")" "device_alloc (examples/demo_without_gpu.py:13) ← Model.forward" \
    "the stack that grew, with its caller" || return 1
  "$CLI" report diff --json "$a" "$b" > d.json || return 1
  python3 - d.json <<'PY'
import json, sys
wheres = [s["where"] for s in json.load(open(sys.argv[1]))["stacks"]]
assert len(wheres) == 3 and len(set(wheres)) == 3, wheres
assert all(w.startswith("device_alloc (examples/demo_without_gpu.py:13) ← ") for w in wheres), wheres
PY
}
check "report diff tells the demo's stacks in device_alloc apart by their callers" diff_told_apart
