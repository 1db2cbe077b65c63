# Python frames read without the GIL (shim/python/frames.cpp), inside real interpreters: each supported
# CPython found on this machine runs tests/integration/pyframes_driver.py, which calls the probe
# library (tests/integration/pyprobe) through ctypes, so the GIL is released during the capture.

PROBE=$BUILD/tests/libpyprobe.so
DRIVER=$ROOT/tests/integration/pyframes_driver.py
CALL_LINE=$(grep -n 'MARK:capture' "$DRIVER" | cut -d: -f1)

# drive PYTHON "MODE [ARGS]": the driver's output; a hang (a deadlock) fails by the timeout, not a stuck run.
# Under a sanitizer its runtime must be loaded before libc (tests/sanitize_env.sh), and ThreadSanitizer
# starts only with an instrumented library loaded at start: both are preloaded, the probe after it.
# 180 s: a hang guard only; under ThreadSanitizer on a loaded 2-core machine "lines 6000 2" took over 60.
drive() { env ${SAN_RT:+"LD_PRELOAD=$SAN_RT:$PROBE"} "PYPROBE=$PROBE" timeout 180 "$1" "$DRIVER" $2 2>&1; }

names_the_call_site() {
  local out; out=$(drive "$1" stack) || { echo "$out" >&2; return 1; }
  expect_eq "$(echo "$out" | sed -n 2p)" "$DRIVER|Holder.method|$CALL_LINE|0" "the innermost frame" &&
  expect_contains "$out" "$DRIVER|stack_mode|" "the caller" &&
  expect_contains "$out" "|<module>|" "the outermost frame" &&
  expect_contains "$out" "SAME" "the comparison with the interpreter's own view of the stack"
}
walks_generator_frames() {
  expect_eq "$(drive "$1" generators | tail -2 | tr '\n' ' ')" "SAME SAME " "generator and coroutine stacks"
}
marks_entry_frames() {
  # Python -> C -> Python -> C: inner() was entered from C (a ctypes callback), <module> from
  # Py_RunMain; outer() and callback_mode() ran inside <module>'s eval loop.
  expect_eq "$(drive "$1" callback | tail -1)" "inner:1 outer:0 callback_mode:0 <module>:1" "function:entry"
}
threads_see_their_own_frames() {
  expect_eq "$(drive "$1" threads | tail -1)" "native=0 main=yes thread=threads_mode.<locals>.python_thread" \
    "frames per thread while a Python thread spins holding the GIL"
}
finds_the_eval_loop() {
  # One _PyEval_EvalFrameDefault activation under a direct ctypes call, two under a callback, once the
  # capture has learned the loop's code outside the symbol where a build puts it there (Debian's 3.14
  # and 3.15 print symbol=0 before: shim/stacks/eval_loop.cpp).
  expect_eq "$(drive "$1" evalloops | tail -2 | tr '\n' ' ')" "direct=1 callback=2 " "eval-loop native frames"
}
lines_of_a_long_function() {
  # Calls 400 lines into one function, in turn: each line is looked up in the location table once,
  # then remembered (shim/python/frames.cpp, LineEntry); every capture must still name its own line. 8
  # calls in 50 rounds, and 6000 calls in 2 rounds, more than the table of lines holds.
  local out; out=$(drive "$1" lines) || { echo "$out" >&2; return 1; }
  expect_eq "$(echo "$out" | tail -1 | cut -d' ' -f1-2)" "SAME 400" "8 calls: captures matching the interpreter's view" &&
  out=$(drive "$1" "lines 6000 2") || { echo "$out" >&2; return 1; }
  expect_eq "$(echo "$out" | tail -1 | cut -d' ' -f1-2)" "SAME 12000" "6000 calls: captures matching the interpreter's view"
}
site_keys_tell_stacks_apart() {
  # A site key is the sum of each frame's own part (shim/python/frames.cpp, frame_part): it must still
  # change with the innermost frame's instruction, with a frame's 30 calls out, with the depth, and with
  # the order of the same frames (a sum of parts that ignored where each frame stood would not).
  expect_eq "$(drive "$1" keys | tail -1)" "same=True inner_line=True outer_line=True depth=True order=True" "site keys"
}
# Under the shim, a refused allocation's stack as the report gives it: the native frames from the hook out to
# the eval loop, the Python frames, then the eval loop's own frame, before which the merge placed them (the
# loop found by its symbol, or learned from the stack: shim/stacks/eval_loop.cpp). A loop not found leaves
# the interpreter's frames before the Python ones, and the Python frames last.
merges_at_the_eval_loop() {
  local dir out r
  dir=$(mktemp -d "$TMP/merge.XXXXXX")
  out=$(GPUGUARD_REPORT_DIR=$dir GPUGUARD_LEDGER=none GPUGUARD_MEM_LIMIT=512MiB shimmed "$1" "$ROOT/tests/integration/py_alloc.py" 2>&1)
  expect_contains "$out" "alloc -> 2" "the allocation over the limit refused" || return 1
  r=$(ls "$dir"/gpuguard-quota-*.json) || return 1
  expect_eq "$(json "$r" "''.join('n' if f['kind'] == 'native' else 'p' for f in d['stacks'][d['failed_request']['stack']]['frames']).lstrip('n')")" \
    "ppppn" "the frames from the innermost Python frame out (p Python, n native)"
}
off_by_environment() {
  local out; out=$(GPUGUARD_PYTHON_STACKS=0 drive "$1" stack)
  expect_contains "$out" "available=0" "availability" && expect_not_contains "$out" "|Holder.method|" "the frames"
}

# CPython releases newer than this machine's, from the Debian root of tests/pyroot/make_root.sh (make
# pyroot): each runs every check below inside the root (a private mount namespace binds this tree and
# /proc into it, then chroot), through a wrapper that stands for its python. Their headers are there
# too: layout.c, built against each, must print the row shim/python/layout.h has for it.
PYROOT=${GPUGUARD_PYROOT:-/var/tmp/gpuguard-pyroot}
add_pythons_in_root() {
  local why=""
  if [[ ! -f $PYROOT/.gpuguard-pyroot-complete ]]; then why="no root at $PYROOT (make pyroot makes it)"
  elif [[ $(id -u) != 0 ]] || ! command -v unshare > /dev/null; then why="needs root and unshare"
  elif [[ -n $SANITIZER ]]; then why="the sanitizer's runtime is not in the root"
  fi
  if [[ -n $why ]]; then
    skip "CPython 3.14 and later, in a Debian root" "$why"
    return
  fi
  local py binds=("$ROOT" "$TMP") wrapper inner
  [[ $BUILD == "$ROOT"/* ]] || binds+=("$BUILD")
  for py in "$PYROOT"/usr/bin/python3.1[4-9]; do
    [[ -x $py ]] || continue
    wrapper=$TMP/root-$(basename "$py")
    # Each path quoted for the inner shell (printf %q): a tree whose path has spaces binds as it is.
    inner="root=$(printf %q "$PYROOT"); for d in$(printf ' %q' "${binds[@]}"); do"
    inner+=' mkdir -p "$root$d" && mount --bind "$d" "$root$d" || exit 125; done;'
    inner+=" mount --rbind /proc \"\$root/proc\" && exec chroot \"\$root\" $(printf %q "/usr/bin/${py##*/}") \"\$@\""
    printf '#!/usr/bin/env bash\nexec unshare -m bash -c %q python "$@"\n' "$inner" > "$wrapper"
    chmod +x "$wrapper"
    pythons+=("$wrapper")
  done
}

# layout.c built against a release's headers in the root prints shim/python/layout.h's row for it.
layout_matches_headers() {
  local v=$1 inc="$TMP/include-$1" row
  mkdir -p "$inc/x86_64-linux-gnu"
  # pyconfig.h includes its multiarch twin by that path; the root's other headers are its libc's.
  ln -sfn "$PYROOT/usr/include/x86_64-linux-gnu/python$v" "$inc/x86_64-linux-gnu/python$v"
  cc -w -I"$PYROOT/usr/include/python$v" -I"$inc" "$ROOT/tests/pyroot/layout.c" -o "$TMP/layout-$v" || return 1
  row=$("$TMP/layout-$v") || return 1
  expect_contains "$(cat "$ROOT/shim/python/layout.h")" "$(echo "$row" | head -1)" "layout.h's row for $v" &&
    expect_eq "$(echo "$row" | tail -1)" "entry frame owner 3" "the entry frame's owner (kOwnedByCStack)"
}

if [[ ! -f $PROBE ]]; then
  check "the probe library is built (make $PROBE)" false
else
  pythons=(python3)
  for v in 3.11.7 3.12.1 3.13.0; do
    p=/root/.pyenv/versions/$v/bin/python3
    [[ -x $p ]] && pythons+=("$p")
  done
  add_pythons_in_root
  declare -A seen=()
  for py in "${pythons[@]}"; do
    ver=$(drive "$py" info 2>/dev/null | sed -n 's/^available=1 version=//p')
    # The root holds only releases the shim must read: one it does not is a failure, not a skip.
    [[ $py == "$TMP"/root-* && -z $ver ]] && check "reads the frames of the root's ${py##*/root-}" false
    [[ -z $ver || -n ${seen[$ver]:-} ]] && continue  # unsupported, or this version already ran
    seen[$ver]=1
    check "names the file, qualified name and line of a ctypes call, then its callers ($ver)" names_the_call_site "$py"
    check "reads frames of generators and coroutines ($ver)" walks_generator_frames "$py"
    check "marks the frames C entered through a Python -> C -> Python -> C chain ($ver)" marks_entry_frames "$py"
    check "a native thread has no frames, a Python thread its own, with the GIL held elsewhere ($ver)" \
      threads_see_their_own_frames "$py"
    check "tells the eval loop's native frames from the others ($ver)" finds_the_eval_loop "$py"
    check "names the line of each of 8 calls in a long function, every time ($ver)" lines_of_a_long_function "$py"
    check "site keys: one stack one key; another instruction inside or 30 frames out, depth or order, another ($ver)" \
      site_keys_tell_stacks_apart "$py"
    check "GPUGUARD_PYTHON_STACKS=0 turns Python frames off ($ver)" off_by_environment "$py"
    check "under the shim, a stack's Python frames stand at the eval loop's native frame ($ver)" merges_at_the_eval_loop "$py"
    [[ $py == "$TMP"/root-* && ${ver#3.} -ge 14 ]] &&
      check "layout.h's offsets for $ver are those of its headers (offsetof)" layout_matches_headers "$ver"
    echo "       capture cost ($ver): $(drive "$py" bench | tail -1); 3 frames, 400 lines into a function:" \
      "$(drive "$py" lines | tail -1 | cut -d' ' -f3); site key at 60 frames: $(drive "$py" "keybench 60 0" | tail -1 | cut -d' ' -f3)"
  done
  check "ran under at least CPython 3.11 or 3.12" test "${#seen[@]}" -gt 0
  # The root's mount point for this run's folder, empty once its namespaces are gone.
  [[ -d $PYROOT$TMP ]] && rmdir "$PYROOT$TMP" 2> /dev/null
fi
