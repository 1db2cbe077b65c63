# Issue 4: who holds the memory. Native stacks by function, Python frames by file and line, exact
# totals by stack, reports on request / at exit / on a signal / at a usage mark.
MIB=1048576
export GPUGUARD_LEDGER=none

alpha_beta() {
  fresh
  local out; out=$(shimmed "$BIN/stacks_app_linked" report 2>"$TMP/err")
  expect_eq "$out" "report -> 0" "gpuguard_report_now" || return 1
  local r; r=$(ls "$TMP"/gpuguard-request-*.json)
  # The innermost frame outside the shim and the driver names the allocating function.
  local best='lambda st: next(f["symbol"] for f in d["stacks"][st]["frames"] if f.get("symbol") in ("alpha", "beta"))'
  expect_eq "$(json "$r" "sorted(((lambda st: next((f['symbol'] for f in d['stacks'][st]['frames'] if f.get('symbol') in ('alpha','beta')), '?'))(b['stack']), b['bytes'], b['count']) for b in d['by_stack'])")" \
    "[('alpha', $((192*MIB)), 3), ('beta', $((32*MIB)), 1)]" "bytes by stack, exact" &&
  expect_eq "$(json "$r" "[(a['bytes'], next((f['symbol'] for f in d['stacks'][a['stack']]['frames'] if f.get('symbol') in ('alpha','beta')), '?')) for a in d['top_allocations']][-1]")" \
    "($((32*MIB)), 'beta')" "the top allocations carry their stacks" &&
  expect_eq "$(json "$r" "all(f['module'] and f['offset'].startswith('0x') and 'build_id' in f for s in d['stacks'].values() for f in s['frames'] if f['kind']=='native')")" "True" "module, offset and build id on every native frame" &&
  expect_eq "$(json "$r" "any('libgpuguard' in f['module'] for s in d['stacks'].values() for f in s['frames'])")" "False" "the shim's own frames are left out"
}
check "a C++ program's report names alpha() and beta() with exact totals by stack" alpha_beta

failed_request_stack() {
  fresh
  GPUGUARD_MEM_LIMIT=200MiB shimmed "$BIN/stacks_app_linked" oom >/dev/null 2>"$TMP/err"
  local r; r=$(ls "$TMP"/gpuguard-quota-*.json) || return 1
  expect_eq "$(json "$r" "[f.get('symbol') for f in d['stacks'][d['failed_request']['stack']]['frames']][0]")" "alpha" "the failed request's stack starts at its caller" &&
  expect_eq "$(json "$r" "d['peak']['bytes'] == 192*2**20 and d['peak']['by_stack'][0]['bytes'] == 128*2**20")" "True" "the peak and its bytes by stack" &&
  expect_eq "$(json "$r" "len(d['timeline']['points']) >= 1 and max(p[1] for p in d['timeline']['points']) == 192*2**20")" "True" "the timeline"
}
check "the failed request has its own stack, and the peak and timeline are in the report" failed_request_stack

python_frames() {
  fresh
  local py=$1
  GPUGUARD_MEM_LIMIT=512MiB shimmed "$py" "$ROOT/tests/integration/py_alloc.py" >"$TMP/out" 2>"$TMP/err"
  expect_contains "$TMP/out" "alloc -> 2" "refused" || return 1
  local line; line=$(grep -n "LINE-OF-ALLOC" "$ROOT/tests/integration/py_alloc.py" | cut -d: -f1)
  local r; r=$(ls "$TMP"/gpuguard-quota-*.json)
  expect_eq "$(json "$r" "[(f['file'].split('/')[-1], f['function'], f['line']) for f in d['stacks'][d['failed_request']['stack']]['frames'] if f['kind']=='python'][:3]")" \
    "[('py_alloc.py', 'Model.grow_activations', $line), ('py_alloc.py', 'train_step', $((line + 4))), ('py_alloc.py', 'main', $(grep -n 'print("alloc ->"' "$ROOT/tests/integration/py_alloc.py" | cut -d: -f1))]" "Python frames, innermost first"
}
check "Python frames name the .py file, the function and the line (CPython 3.11, GIL released by ctypes)" python_frames python3
if [[ -x /root/.pyenv/versions/3.12.1/bin/python3 ]]; then
  check "Python frames under CPython 3.12" python_frames /root/.pyenv/versions/3.12.1/bin/python3
fi

# The library of tests/integration/src/native_thread.c, built into $TMP/native.so.
# -O0: the checks count call sites, which an optimiser may split or turn into jumps.
native_lib() {
  cc -O0 -shared -fPIC -I/usr/local/cuda/include -o "$TMP/native.so" "$ROOT/tests/integration/src/native_thread.c" -L"$FAKE" -lcuda -lpthread -ldl
}

no_python_thread() {
  fresh
  native_lib || return 1
  local out; out=$(timeout 60 env GPUGUARD_REPORT_ON_EXIT=1 LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH=$FAKE python3 "$ROOT/tests/integration/py_alloc.py" with-gil-holder "$TMP/native.so" 2>"$TMP/err")
  expect_contains "$out" "native thread -> 0" "allocated without deadlock" &&
  local r; r=$(ls "$TMP"/gpuguard-exit-*.json) &&
  expect_eq "$(json "$r" "[s for s in d['stacks'].values() if any(f['kind']=='native' for f in s['frames'])] != []")" "True" "a native stack"
}
check "a thread without Python allocates while another holds the GIL: no deadlock, native stack" no_python_thread

# A thread with a Python thread state and no Python frame (PyTorch's autograd threads keep one): its
# native site's allocations share one stack, without Python frames, and the one allocation it makes
# while running Python (a callback, halfway) gets its Python frames.
thread_state_without_frames() {
  fresh
  native_lib || return 1
  local out; out=$(timeout 60 env GPUGUARD_REPORT_ON_EXIT=1 GPUGUARD_MEM_LIMIT=512MiB LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH=$FAKE \
    python3 "$ROOT/tests/integration/py_alloc.py" autograd-like "$TMP/native.so" 2>"$TMP/err")
  expect_contains "$out" "autograd-like -> 0" "allocated" || return 1
  local r; r=$(ls "$TMP"/gpuguard-exit-*.json) || return 1
  # Each holder: its bytes, whether the native site is among its frames, and its Python frames' functions.
  expect_eq "$(json "$r" "sorted((b['bytes'], any(f.get('symbol') == 'autograd_like_site' for f in d['stacks'][b['stack']]['frames']), [f['function'] for f in d['stacks'][b['stack']]['frames'] if f['kind'] == 'python'][:1]) for b in d['by_stack'])")" \
    "[($((2 << 20)), False, ['main.<locals>.python_callback']), ($((8 << 20)), True, [])]" \
    "8 MiB at the native site under one stack without Python frames; 2 MiB under the callback's"
}
check "a thread with a Python thread state and no Python frame: one native stack at its site, its Python callback's frames kept" thread_state_without_frames

# The same thread kind, whose walks stop at a function without unwind information (no_unwind_info_call,
# its frame put at one address from every caller): a walk that stops there says nothing of the frames
# outside it, so a recalled one must not answer for the Python callback's allocation (counted as
# whole, such a walk put the callback's 2 MiB under the native stack).
walk_stopped_short() {
  fresh
  native_lib || return 1
  local out; out=$(timeout 60 env GPUGUARD_REPORT_ON_EXIT=1 GPUGUARD_MEM_LIMIT=512MiB LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH=$FAKE \
    python3 "$ROOT/tests/integration/py_alloc.py" no-unwind-info "$TMP/native.so" 2>"$TMP/err")
  expect_contains "$out" "no-unwind-info -> 0" "allocated" || return 1
  local r; r=$(ls "$TMP"/gpuguard-exit-*.json) || return 1
  expect_eq "$(json "$r" "sorted((b['bytes'], [f['function'] for f in d['stacks'][b['stack']]['frames'] if f['kind'] == 'python'][:1]) for b in d['by_stack'])")" \
    "[($((2 << 20)), ['main.<locals>.python_callback']), ($((4 << 20)), [])]" "4 MiB native, the callback's 2 MiB with its Python frames"
}
check "a walk stopped at code without unwind information does not answer for a Python callback on the same thread" walk_stopped_short

# py_alloc_report [VAR=VALUE...] -- ARG...: py_alloc.py ARG... under the shim; the exit report's path.
py_alloc_report() {
  local vars=(); while [[ $1 != -- ]]; do vars+=("$1"); shift; done; shift
  env GPUGUARD_REPORT_ON_EXIT=1 "${vars[@]}" LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH=$FAKE timeout 60 \
    python3 "$ROOT/tests/integration/py_alloc.py" "$@" >"$TMP/out" 2>"$TMP/err" || return 1
  ls "$TMP"/gpuguard-exit-*.json
}
# The line of py_alloc.py that carries MARK.
line_of() { grep -n "$1" "$ROOT/tests/integration/py_alloc.py" | cut -d: -f1; }

# paths N PATTERN [VAR=VALUE...]: py_alloc.py's paths mode under the shim; the exit report's path.
paths_report() {
  local n=$1 pattern=$2; shift 2
  cc -shared -fPIC -O2 -I"${CUDA_HOME:-/usr/local/cuda}/include" -o two_paths.so "$ROOT/tests/integration/src/two_paths.c" \
    -L"$FAKE" -lcuda || return 1
  py_alloc_report "$@" -- paths "$TMP/two_paths.so" "$n" "$pattern"
}
# Bytes by stack for path_a and path_b, as "[(name, bytes, count), ...]".
BY_PATH="sorted(((lambda st: next((f['symbol'] for f in d['stacks'][st]['frames'] if f.get('symbol') in ('path_a','path_b','path_c')), '?'))(b['stack']), b['bytes'], b['count']) for b in d['by_stack'] if b['bytes'])"

stack_reused() {
  fresh
  local r; r=$(paths_report 200 a) || { cat "$TMP/err"; return 1; }
  local line; line=$(line_of LINE-OF-PATHS)
  expect_eq "$(json "$r" "$BY_PATH")" "[('path_a', $((200 * MIB)), 200)]" "all 200 under path_a" &&
  expect_eq "$(json "$r" "[(f['function'], f['line']) for f in d['stacks'][d['by_stack'][0]['stack']]['frames'] if f['kind']=='python'][:1]")" \
    "[('paths', $line)]" "with the Python line" &&
  # A check compares the native frames up to the eval loop (a walk the memo recalls): the site is
  # unwound in full once, at first sight, and never again while its checks find the same frames.
  expect_eq "$(json "$r" "(lambda u: (u['on'], u['reused'] >= 150, u['checks'] >= 7, u['unwound'], u['unstable_sites']))(d['capture']['stack_reuse'])")" \
    "(True, True, True, 1, 0)" "reused for most of the 200 (each of the 1st, 2nd, 4th ... checked, none unwound again), never unstable" || return 1
  rm -f "$TMP"/gpuguard-exit-*.json
  r=$(paths_report 200 a GPUGUARD_STACK_REUSE=0) || return 1
  expect_eq "$(json "$r" "(d['capture']['stack_reuse']['on'], d['capture']['stack_reuse']['reused'])")" "(False, 0)" "GPUGUARD_STACK_REUSE=0"
}
check "a Python call site's stack is unwound once and reused, checked at the 1st, 2nd, 4th ... reuse by its native frames" stack_reused

stack_reuse_two_paths() {
  fresh
  local r; r=$(paths_report 40 ab) || { cat "$TMP/err"; return 1; }
  # One Python line, two native paths at the same depth: every check sees the other path (which
  # replaces the cached one) and the third change ends reuse, so every allocation keeps its own stack.
  expect_eq "$(json "$r" "$BY_PATH")" "[('path_a', $((20 * MIB)), 20), ('path_b', $((40 * MIB)), 20)]" \
    "bytes by native path, exact" &&
  expect_eq "$(json "$r" "d['capture']['stack_reuse']['unstable_sites'] >= 1")" "True" "the site was found unstable"
}
check "one Python line reaching the driver through two native paths at the same depth: each keeps its own stack" stack_reuse_two_paths

stack_reuse_two_paths_extended() {
  fresh
  local r; r=$(paths_report 200 ab) || { cat "$TMP/err"; return 1; }
  # Once the site is unstable, its key takes in where the stack stands, which is the same for both paths
  # (unstable too), then the innermost native return addresses: each path is a site of its own, and is
  # reused from then on (it used to be unwound at every allocation).
  expect_eq "$(json "$r" "$BY_PATH")" "[('path_a', $((100 * MIB)), 100), ('path_b', $((200 * MIB)), 100)]" \
    "bytes by native path, exact" &&
  expect_eq "$(json "$r" "(lambda u: (u['unstable_sites'], u['reused'] >= 150))(d['capture']['stack_reuse'])")" "(2, True)" \
    "the Python site and its key with the stack's depth unstable, its two native paths reused"
}
check "an unstable Python site is told apart by its native frames: each path reused with its own stack" stack_reuse_two_paths_extended

stack_reuse_two_paths_deep() {
  fresh
  local r; r=$(paths_report 200 ab-deep) || { cat "$TMP/err"; return 1; }
  # The two paths part 21 frames above the allocation: the extended key takes in every native frame up
  # to the innermost eval loop, not a fixed few, so each path is still a site of its own (with the 12
  # innermost frames they were one key, unstable too, and every allocation was unwound).
  local by_path="${BY_PATH//path_a/deep_path_a}"; by_path="${by_path//path_b/deep_path_b}"
  expect_eq "$(json "$r" "$by_path")" "[('deep_path_a', $((100 * MIB)), 100), ('deep_path_b', $((200 * MIB)), 100)]" \
    "bytes by native path, exact" &&
  expect_eq "$(json "$r" "(lambda u: (u['unstable_sites'], u['reused'] >= 150))(d['capture']['stack_reuse'])")" "(2, True)" \
    "the Python site and its key with the stack's depth unstable, its two native paths reused"
}
check "an unstable Python site whose native paths part far from the allocation: each path still reused" stack_reuse_two_paths_deep

stack_reuse_two_depths() {
  fresh
  local r; r=$(paths_report 200 ab-depth) || { cat "$TMP/err"; return 1; }
  # Two native paths at two stack depths (generate()'s first token against the next ones): once the
  # Python site is unstable, where the stack stands tells them apart, and no allocation walks its native
  # frames for a key (that walk cost about 800 ns on the GPU machine). Walks are left for the checks and
  # the first captures: far fewer than the 200 allocations (each allocation walked before).
  expect_eq "$(json "$r" "$BY_PATH")" "[('path_a', $((100 * MIB)), 100), ('path_c', $((200 * MIB)), 100)]" \
    "bytes by native path, exact" &&
  expect_eq "$(json "$r" "(lambda u, w: (u['unstable_sites'], u['reused'] >= 150, w['walks'] < 60))(d['capture']['stack_reuse'], d['capture']['walker'])")" \
    "(1, True, True)" "the Python site unstable, its key with the stack's depth not: both paths reused, few walks"
}
check "an unstable Python site whose native paths stand at two depths: told apart by the depth, without a walk each" stack_reuse_two_depths

stack_reuse_moving_depth() {
  fresh
  local r; r=$(paths_report 200 ab-varying) || { cat "$TMP/err"; return 1; }
  # One of the two paths runs below a frame sized at run time, a new depth at each call: keyed by the
  # depth, nearly every allocation would be a new key, unwound in full. After a few keys not found the
  # site is keyed by its native frames, and both paths are reused.
  expect_eq "$(json "$r" "sorted((b['bytes'], b['count']) for b in d['by_stack'] if b['bytes'])")" \
    "[($((100 * MIB)), 100), ($((200 * MIB)), 100)]" "bytes by native path, exact" &&
  expect_eq "$(json "$r" "(lambda u: (u['unwound'] < 40, u['reused'] >= 150))(d['capture']['stack_reuse'])")" "(True, True)" \
    "few captures unwound, most reused"
}
check "an unstable Python site whose depth moves at every call on one path: keyed by its native frames after a few misses" stack_reuse_moving_depth

# Blocks by the line of deep() each stack names, as "[(line, bytes, count), ...]".
BY_CALLER="sorted((next(f['line'] for f in d['stacks'][b['stack']]['frames'] if f['kind'] == 'python' and f['function'] == 'deep'), b['bytes'], b['count']) for b in d['by_stack'] if b['bytes'])"

# deep_callers PATTERN MARK-A MARK-B COUNTS EXPECTED WHAT: 200 allocations of py_alloc.py's deep mode,
# alternating between the callers on the lines marked A (1 MiB) and B (2 MiB); their bytes must be
# exact, and COUNTS (Python, of `u`, the report's stack_reuse) must equal EXPECTED.
deep_callers() {
  fresh
  local r; r=$(py_alloc_report -- deep 200 "$1") || { cat "$TMP/err"; return 1; }
  local a b; a=$(line_of "$2") b=$(line_of "$3")
  expect_eq "$(json "$r" "$BY_CALLER")" "[($b, $((200 * MIB)), 100), ($a, $((100 * MIB)), 100)]" \
    "bytes by caller, exact" &&
  expect_eq "$(json "$r" "(lambda u: $4)(d['capture']['stack_reuse'])")" "$5" "$6"
}

# The two callers share the 16 innermost frames (a site key reads 12): the first reuse's deep check
# finds the other whole stack. Both call from one frame, so the Python stack stands at one height under
# the innermost frames: the key extended by it covers both as well; its checks take the other caller's
# stack twice, the third change marks it deep, and from then on the site is keyed by every frame.
deep_callers_told_apart() {
  deep_callers ab LINE-OF-DEEP-A LINE-OF-DEEP-B "(u['deep_sites'], u['reused'] >= 150, u['whole_keys'] >= 150)" \
    "(2, True, True)" "the site and its extended key found deep, then reused by the whole key"
}
check "two callers 16 Python frames out, alternating: each keeps its own stack (the deep check)" deep_callers_told_apart

# As above, but B calls through one frame more: under the 12 innermost frames the Python stack stands
# at another height for each caller, and the site's key extended by it tells them apart. The whole
# stack is walked only at misses and at the extended keys' checks (the 1st, 2nd, 4th ... 64th).
deep_callers_at_two_heights() {
  deep_callers ab-heights LINE-OF-DEEP-A LINE-OF-HIGH-B "(u['deep_sites'], u['reused'] >= 150, u['whole_keys'] < 40)" \
    "(1, True, True)" "found deep once, then told apart by where the Python stack stands, few walks of every frame"
}
check "two callers 16 Python frames out at two heights, alternating: told apart without a walk of every frame" deep_callers_at_two_heights

# The first frame beyond the 12 innermost is a generator's, which lives in the generator: a new
# address at every call, so a key extended by it would be new at every allocation and unwound in full.
# After 16 such keys not found, the site is keyed by every frame.
deep_callers_below_new_generators() {
  deep_callers ab-generators LINE-OF-GEN-A LINE-OF-GEN-B "(u['deep_sites'], u['unwound'] < 40, u['reused'] >= 150)" \
    "(1, True, True)" "the extended keys given up after 16 misses: few unwound"
}
check "two callers below a new generator's frame each time: the extended keys given up after a few misses" deep_callers_below_new_generators

deep_warm_up_line_left() {
  fresh
  local r; r=$(py_alloc_report -- deep 200 w-then-ah) || { cat "$TMP/err"; return 1; }
  local w a h; w=$(line_of LINE-OF-WAH-W) a=$(line_of LINE-OF-WAH-A) h=$(line_of LINE-OF-WAH-H)
  # H stands higher than W and A, which stand at one height: H's first allocation finds the site deep,
  # and the key extended by the height tells H from W. W's key takes its 9th hit at A's first
  # allocation; A's allocations up to its 16th hit, the next check, take W's stack (7 of them), and that
  # check gives the key A's stack for good. Keyed by every frame instead, each of A's allocations would
  # walk every frame.
  expect_eq "$(json "$r" "$BY_CALLER")" "[($h, $((200 * MIB)), 100), ($w, $((47 * MIB)), 17), ($a, $((83 * MIB)), 83)]" \
    "bytes by caller: 7 of A's in W's until the check" &&
  expect_eq "$(json "$r" "(lambda u: (u['deep_sites'], u['whole_keys'] < 40))(d['capture']['stack_reuse'])")" "(1, True)" \
    "the extended key not deep: few walks of every frame"
}
check "a caller at one height leaves its warm-up line for another: the key extended by the height takes the new stack" deep_warm_up_line_left

deep_callers_in_step_with_the_checks() {
  fresh
  local r; r=$(py_alloc_report -- deep 600 h-a-then-ab) || { cat "$TMP/err"; return 1; }
  local h a b; h=$(line_of LINE-OF-HAB-H) a=$(line_of LINE-OF-HAB-A) b=$(line_of LINE-OF-HAB-B)
  # H's first allocation makes the site deep at once; A's key (by the height) then serves A alone for 147
  # hits, and from the 149th A and B take turns, B at every odd hit. A check at every 64th hit would
  # always land on A's, and all 225 of B's would take A's stack. The checks' places move: the one at
  # the 185th hit is B's, so 18 of B's take A's stack before it; then A's and B's turns change the key
  # three times, and from then on the site is keyed by every frame.
  expect_eq "$(json "$r" "$BY_CALLER")" "[($h, $((4 * MIB)), 1), ($a, $((410 * MIB)), 392), ($b, $((414 * MIB)), 207)]" \
    "18 of B's in A's until the check at the 185th hit, then exact" &&
  expect_eq "$(json "$r" "d['capture']['stack_reuse']['deep_sites']")" "2" "the site and A's height found deep"
}
check "two callers at one height take turns in step with a fixed check schedule: the moving checks find them" deep_callers_in_step_with_the_checks

deep_change_found_by_the_check() {
  fresh
  local r; r=$(py_alloc_report -- deep 520 a-then-b) || { cat "$TMP/err"; return 1; }
  local a b; a=$(line_of LINE-OF-DEEP-A) b=$(line_of LINE-OF-DEEP-B)
  # 260 from A, then 260 from B. The site is stored at the first allocation, so B's first is its 260th
  # reuse; the next deep check is the 265th (past 64, one in each 32 hits: in the 256th to 287th, the
  # 10th of them), so B's 5 allocations before it take A's stack and every later one is B's own.
  expect_eq "$(json "$r" "[(l, c) for l, _, c in $BY_CALLER]")" "[($b, 255), ($a, 265)]" \
    "5 of B's taken as A's, then B's own" &&
  expect_eq "$(json "$r" "d['capture']['stack_reuse']['deep_sites']")" "1" "the change found"
}
check "a site's callers change 16 Python frames out: found by the next deep check, within 62 reuses" deep_change_found_by_the_check

signal_report() {
  fresh
  # env execs the program, so $! is its pid.
  env GPUGUARD_REPORT_SIGNAL=USR2 LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH=$FAKE "$BIN/drv_linked" linked alloc $MIB wait < <(sleep 2) > "$TMP/out" 2>"$TMP/err" &
  local pid=$!
  for _ in $(seq 40); do grep -q ready "$TMP/out" 2>/dev/null && break; sleep 0.05; done
  kill -USR2 $pid; sleep 0.5
  wait $pid
  local r; r=$(ls "$TMP"/gpuguard-signal-*.json) &&
  expect_eq "$(json "$r" 'd["usage"]["process_bytes"]')" "$MIB" "usage in the signal report"
}
check "GPUGUARD_REPORT_SIGNAL=USR2 writes a report on the signal" signal_report

no_handler_unless_asked() {
  fresh
  env LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH=$FAKE "$BIN/drv_linked" linked alloc 1 wait < <(sleep 1) > "$TMP/out" 2>&1 &
  local pid=$!
  for _ in $(seq 40); do grep -q ready "$TMP/out" 2>/dev/null && break; sleep 0.05; done
  expect_eq "$(awk '/SigCgt/ {print $2}' /proc/$pid/status)" "0000000000000000" "no signal handler installed"
  wait $pid
}
check "no signal handler is installed unless asked" no_handler_unless_asked

warn_at() {
  fresh
  GPUGUARD_WARN_AT=0.9 GPUGUARD_MEM_LIMIT=100MiB shimmed "$BIN/drv_linked" linked alloc $((50*MIB)) alloc $((45*MIB)) free 1 alloc $((45*MIB)) >/dev/null 2>"$TMP/err"
  expect_eq "$(ls "$TMP"/gpuguard-warn_at-*.json | wc -l)" "2" "one report per upward crossing"
}
check "GPUGUARD_WARN_AT writes a report each time usage crosses the mark going up" warn_at

stack_knobs() {
  fresh
  GPUGUARD_STACK_MIN_BYTES=48MiB shimmed "$BIN/stacks_app_linked" report >/dev/null 2>&1
  local r; r=$(ls "$TMP"/gpuguard-request-*.json)
  expect_eq "$(json "$r" "sorted((b['stack'] is None, b['bytes']) for b in d['by_stack'])")" "[(False, $((192*MIB))), (True, $((32*MIB)))]" "only allocations of 48 MiB or more have stacks"
}
check "GPUGUARD_STACK_MIN_BYTES leaves small allocations without stacks" stack_knobs

# The caching walker (shim/stacks/cfi_walker.h) against libunwind on the stacks of a real interpreter:
# without Python frames, the native walk goes through libpython, ctypes and libffi to the thread's
# start, and both unwinders must give the same frames (module and offset), frame for frame. (Against
# libgcc's under ThreadSanitizer, where libunwind is not used: shim/stacks/unwind.cpp says why.)
walker_matches_libunwind() {
  fresh
  local u frames=() ref=libunwind
  [[ $SANITIZER == thread ]] && ref=libgcc
  for u in cfi $ref; do
    rm -f "$TMP"/gpuguard-quota-*.json
    GPUGUARD_UNWINDER=$u GPUGUARD_PYTHON_STACKS=0 GPUGUARD_STACK_REUSE=0 GPUGUARD_STACK_DEPTH=128 GPUGUARD_MEM_LIMIT=512MiB \
      shimmed python3 "$ROOT/tests/integration/py_alloc.py" >"$TMP/out" 2>"$TMP/err"
    local r; r=$(ls "$TMP"/gpuguard-quota-*.json) || { cat "$TMP/err"; return 1; }
    expect_eq "$(json "$r" "d['capture']['unwinder']")" "$u" "unwinder $u" || return 1
    frames+=("$(json "$r" "[(f['module'].split('/')[-1], f['offset']) for f in d['stacks'][d['failed_request']['stack']]['frames']]")")
    [[ $u == cfi ]] && { expect_eq "$(json "$r" "(lambda w: (w['walks'] > 0, w['fallbacks']))(d['capture']['walker'])")" "(True, 0)" \
      "walked, nothing handed to the fallback" || return 1; }
  done
  expect_eq "$(python3 -c "import ast,sys; print(len(ast.literal_eval(sys.argv[1])) > 10)" "${frames[0]}")" "True" "a deep native stack" &&
  expect_eq "${frames[0]}" "${frames[1]}" "the same frames as $ref's"
}
check "the caching walker gives libunwind's native frames through libpython, ctypes and libffi" walker_matches_libunwind
