# `gpuguard top`: the ledger's view of devices and processes, as a table, as JSON and live; a missing
# or corrupt ledger.

L=$TMP/ledger
# Starts a process that allocates BYTES under the shim on ledger $L and holds them until its input
# closes. Sets HOLDER_PID; the input is kept open on file descriptor $2.
start_holder() {
  local bytes=$1 fd=$2
  mkfifo "$TMP/in_$fd"
  GPUGUARD_MEM_LIMIT=1GiB GPUGUARD_LEDGER=$L LD_PRELOAD=$PRELOAD LD_LIBRARY_PATH=$FAKE \
    "$BIN/drv_linked" linked alloc "$bytes" wait <"$TMP/in_$fd" >"$TMP/out_$fd" &
  HOLDER_PID=$!
  disown "$HOLDER_PID"  # killed on purpose below: no "Killed" notice from the shell
  eval "exec $fd>\"$TMP/in_$fd\""
  for _ in $(seq 200); do grep -q ready "$TMP/out_$fd" 2>/dev/null && return 0; sleep 0.02; done
  echo "    the holder of $bytes bytes never got ready" >&2
  return 1
}

start_holder 1048576 7 && A=$HOLDER_PID
start_holder 3145728 8 && B=$HOLDER_PID

table_shows_both() {
  local out
  out=$("$CLI" top --ledger "$L" --once) || return 1
  expect_contains "$out" "Fake GPU 0" "the device row" &&
    expect_contains "$out" "1.00 GiB" "the device's limit" &&
    expect_contains "$out" "4.00 MiB" "the device's usage (1 MiB + 3 MiB)" &&
    grep -Eq "^ *$A +alive +0 +1.00 MiB" <<<"$out" &&
    grep -Eq "^ *$B +alive +0 +3.00 MiB" <<<"$out" || { echo "$out" | sed 's/^/      /' >&2; return 1; }
}
check "--once: the device (limit, used) and both processes with their bytes" table_shows_both

json_shows_both() {
  "$CLI" top --ledger "$L" --json >"$TMP/top.json" || return 1
  expect_eq "$(json "$TMP/top.json" 'd["devices"][0]["used_bytes"]')" 4194304 "used_bytes" &&
    expect_eq "$(json "$TMP/top.json" 'd["devices"][0]["limit_bytes"]')" 1073741824 "limit_bytes" &&
    expect_eq "$(json "$TMP/top.json" 'd["devices"][0]["name"]')" "Fake GPU 0" "name" &&
    expect_eq "$(json "$TMP/top.json" 'sorted((p["pid"], p["bytes"], p["state"]) for p in d["processes"])')" \
      "$(python3 -c "print(sorted([($A, 1048576, 'alive'), ($B, 3145728, 'alive')]))")" "the processes"
}
check "--json: one document with the device's bytes and both processes" json_shows_both

killed_is_dead_then_reclaimed() {
  kill -KILL "$B"
  while kill -0 "$B" 2>/dev/null; do sleep 0.02; done
  local out
  out=$("$CLI" top --ledger "$L" --once)
  grep -Eq "^ *$B +dead +0 +3.00 MiB" <<<"$out" || { echo "    after SIGKILL:" >&2; echo "$out" | sed 's/^/      /' >&2; return 1; }
  # The next allocation in the container reclaims the dead process's bytes (at most every 500 ms).
  sleep 0.6
  # It frees what it took and asks cuMemGetInfo, which reclaims every dead slot, its own excepted:
  # a clean exit leaves its bytes to be reclaimed like a killed process's (the driver frees them
  # only after atexit), so it holds none at its exit here.
  GPUGUARD_MEM_LIMIT=1GiB GPUGUARD_LEDGER=$L LD_PRELOAD=$PRELOAD "$BIN/drv_linked" linked alloc 4096 free 0 info >/dev/null || return 1
  "$CLI" top --ledger "$L" --json >"$TMP/top2.json"
  expect_eq "$(json "$TMP/top2.json" '[p["state"] for p in d["processes"] if p["pid"] == '"$B"']')" "['reclaimed']" \
    "the killed process's state after another process allocated" &&
    expect_eq "$(json "$TMP/top2.json" 'd["devices"][0]["used_bytes"]')" 1048576 "used_bytes (the survivor's 1 MiB)"
}
check "a SIGKILLed holder shows as dead with its bytes, then reclaimed once another process allocates" \
  killed_is_dead_then_reclaimed

live_view() {
  local out
  # A terminal (script(1) gives one): the view draws on the alternate screen, q quits and the
  # terminal is restored.
  out=$( (sleep 0.8; printf q) | script -qfec "$CLI top --ledger $L --interval 0.2" /dev/null | cat -v)
  expect_contains "$out" "^[[?1049h" "the start of the live view (alternate screen)" &&
    expect_contains "$out" "alive" "the live view" &&
    expect_contains "$out" "^[[?25h^[[?1049l" "the end of the live view (cursor and screen restored)"
}
if command -v script >/dev/null; then
  check "live on a terminal: redraws, quits on q, restores the terminal" live_view
fi

exec 7>&- 8>&-
for _ in $(seq 100); do kill -0 "$A" 2>/dev/null || break; sleep 0.02; done

missing_ledger() {
  local err rc
  err=$("$CLI" top --ledger "$TMP/none_here" --once 2>&1); rc=$?
  expect_eq "$rc" 1 "the exit status" &&
    expect_contains "$err" "gpuguard: no ledger at $TMP/none_here" "the message"
}
check "a missing ledger: one line, exit 1" missing_ledger

# A version no gpuguard writes (far from the current one, which grows).
corrupt_ledger() {
  local err rc
  { printf 'GPUGLEDG\xff\x00\x00\x00'; head -c 4096 /dev/zero; } >"$TMP/bad1"
  err=$("$CLI" top --ledger "$TMP/bad1" --once 2>&1); rc=$?
  expect_eq "$rc" 2 "the exit status (another layout version)" &&
    expect_contains "$err" "gpuguard: ledger $TMP/bad1: ledger layout version 255" "the message" || return 1
  head -c 100000 /dev/urandom >"$TMP/bad2"
  err=$("$CLI" top --ledger "$TMP/bad2" --json 2>&1); rc=$?
  expect_eq "$rc" 2 "the exit status (random bytes)" &&
    expect_eq "$err" "gpuguard: ledger $TMP/bad2: not a gpuguard ledger (bad magic)" "the message"
}
check "a corrupt ledger: the validation message, exit 2" corrupt_ledger

usage() {
  local rc
  "$CLI" top --interval 0 --once 2>/dev/null; rc=$?
  expect_eq "$rc" 2 "the exit status for --interval 0" || return 1
  "$CLI" top --help | grep -q '"processes"' || { echo "    --help does not document the JSON fields" >&2; return 1; }
}
check "--help documents the JSON; a bad option is exit 2" usage
