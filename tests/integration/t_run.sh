# `gpuguard run`: the environment it gives the command, the ledger it creates, its errors, and its
# supervision of the command as PID 1 would (tested with --init, since these tests are not PID 1).

passes_exit_code() {
  "$CLI" run --ledger "$TMP/l_exit" -- sh -c 'exit 7'
  expect_eq "$?" 7 "the exit status of 'sh -c \"exit 7\"' under run"
}
check "passes the command's exit status through (exit 7 -> 7)" passes_exit_code

preload_first_and_kept() {
  local other=/lib/x86_64-linux-gnu/libm.so.6 out
  [[ -f $other ]] || other=$(ls /lib*/libm.so.6 /usr/lib*/libm.so.6 2>/dev/null | head -1)
  # A sanitized build's CLI adds its runtime after what was there (tests/sanitize_env.sh).
  local kept=${SAN_RT:+$SAN_RT:}$other
  out=$(LD_PRELOAD="$other" "$CLI" run --ledger "$TMP/l_pre" -- sh -c 'echo "$LD_PRELOAD"')
  expect_eq "$out" "$LIB:$kept" "LD_PRELOAD in the command" || return 1
  # Another copy of the shim already in LD_PRELOAD is dropped: two shims would count everything twice.
  out=$(LD_PRELOAD="/elsewhere/libgpuguard.so $other" "$CLI" run --ledger "$TMP/l_pre" -- sh -c 'echo "$LD_PRELOAD"')
  expect_eq "$out" "$LIB:$kept" "LD_PRELOAD with a second libgpuguard.so before"
}
check "puts libgpuguard.so first in LD_PRELOAD, keeps what was there, drops another copy of itself" preload_first_and_kept

sets_environment() {
  local out
  mkdir -p "$TMP/work" && cd "$TMP/work" || return 1
  out=$("$CLI" run --limit 3GiB --ledger led --report-dir reports/sub --cudnn-workspace 256MiB -- env)
  cd "$TMP" || return 1
  expect_contains "$out" "GPUGUARD_MEM_LIMIT=3GiB" "the command's environment" &&
    expect_contains "$out" "GPUGUARD_LEDGER=$TMP/work/led" "the command's environment (an absolute ledger path)" &&
    expect_contains "$out" "GPUGUARD_REPORT_DIR=$TMP/work/reports/sub" "the command's environment (an absolute report folder)" &&
    expect_contains "$out" "GPUGUARD_CUDNN_WORKSPACE_LIMIT=256MiB" "the command's environment" &&
    [[ -d $TMP/work/reports/sub ]] || { echo "    the report folder was not created" >&2; return 1; }
}
check "sets GPUGUARD_MEM_LIMIT, _LEDGER, _REPORT_DIR, _CUDNN_WORKSPACE_LIMIT (paths absolute, report folder created)" \
  sets_environment

creates_ledger_with_limit() {
  GPUGUARD_MEM_LIMIT=2GiB "$CLI" run --ledger "$TMP/l_env" -- true || return 1
  expect_eq "$(json <("$CLI" top --ledger "$TMP/l_env" --json) 'd["limit_spec"]')" 2GiB "the ledger's limit (from GPUGUARD_MEM_LIMIT)" &&
    expect_eq "$(stat -c %a "$TMP/l_env")" 600 "the ledger's mode"
}
check "creates the ledger with the limit, falling back to GPUGUARD_MEM_LIMIT" creates_ledger_with_limit

enforces_through_run() {
  local out
  out=$("$CLI" run --limit 2MiB --ledger "$TMP/l_enf" --report-dir "$TMP/rep" -- \
    "$BIN/drv_linked" linked alloc 1048576 alloc 2097152 2>"$TMP/enf_err")
  expect_eq "$out" $'alloc 1048576 -> CUDA_SUCCESS\nalloc 2097152 -> CUDA_ERROR_OUT_OF_MEMORY' "allocations under --limit 2MiB" &&
    compgen -G "$TMP/rep/*.json" >/dev/null || { echo "    no report in $TMP/rep" >&2; cat "$TMP/enf_err" >&2; return 1; }
}
check "the quota is enforced in the command and the OOM report lands in --report-dir" enforces_through_run

# Issue 29, 6: GPUGUARD_LIBRARY naming a file that is not the shim (another library, or no library at
# all): the program ran with no quota, 64 MiB given under --limit 1MiB, exit 0 and no message. It is
# not started now: exit 127 and one line.
fails_closed_on_a_foreign_library() {
  fresh
  local zlib err rc
  zlib=$(ldconfig -p | sed -n 's/.*libz\.so\.1 (libc6,x86-64) => //p' | head -1)
  [[ -n $zlib ]] || zlib=/lib/x86_64-linux-gnu/libz.so.1
  for lib in "$zlib" /etc/passwd; do
    err=$(GPUGUARD_LIBRARY=$lib LD_LIBRARY_PATH=$FAKE "$CLI" run --limit 1MiB -- "$BIN/drv_linked" linked alloc 67108864 2>&1); rc=$?
    expect_eq "$rc" 127 "the exit status under $lib" &&
      expect_not_contains "$err" "CUDA_SUCCESS" "the program not run under $lib" &&
      expect_contains "$err" "the program was not started (it would run with no quota)" "the message for $lib" || return 1
  done
  expect_contains "$(GPUGUARD_LIBRARY=$zlib "$CLI" run -- true 2>&1)" "$zlib is not gpuguard's library" "what is wrong with libz"
}
check "GPUGUARD_LIBRARY naming another library or no library: the program is not started (fails closed)" fails_closed_on_a_foreign_library

# What makes a library gpuguard's is gpuguard_report, which every version of the shim exports: one
# without the newer calls (gpuguard_tensor_view) is still the shim. It was refused as not gpuguard's.
accepts_a_library_with_gpuguard_report() {
  fresh
  printf 'int gpuguard_report(const char *m) { (void)m; return 0; }\n' > old.c
  cc -shared -fPIC -o "$TMP/libold.so" old.c || return 1
  local err rc
  err=$(GPUGUARD_LIBRARY=$TMP/libold.so "$CLI" run -- sh -c 'echo ran' 2>&1); rc=$?
  expect_eq "$rc" 0 "the exit status" && expect_contains "$err" "ran" "the program run"
}
if [[ -z ${SANITIZER:-} ]]; then
  check "a library exporting gpuguard_report (an older shim) is taken for gpuguard's" accepts_a_library_with_gpuguard_report
else  # the test library is no sanitizer build, and run would put it ahead of the sanitizer's runtime
  skip "a library exporting gpuguard_report (an older shim) is taken for gpuguard's" "a plain library under SANITIZE=$SANITIZER"
fi

bad_limit() {
  local err rc
  err=$("$CLI" run --limit 12parsecs -- true 2>&1); rc=$?
  expect_eq "$rc" 2 "the exit status for --limit 12parsecs" &&
    expect_eq "$(wc -l <<<"$err")" 1 "lines of error" &&
    expect_contains "$err" "gpuguard: --limit 12parsecs is not a valid limit" "the message" || return 1
  err=$(GPUGUARD_MEM_LIMIT=lots "$CLI" run -- true 2>&1); rc=$?
  expect_eq "$rc" 2 "the exit status for GPUGUARD_MEM_LIMIT=lots" &&
    expect_contains "$err" "gpuguard: GPUGUARD_MEM_LIMIT=lots is not a valid limit" "the message"
}
check "a bad limit (option or variable) is one line naming it, exit 2" bad_limit

# Issue 20: 8GB was taken as 8 GiB without a word. It still is (one rule: every unit is 1024-based),
# and run says so, for the option and for the variable.
si_spelling_is_said() {
  local err
  err=$("$CLI" run --limit 8GB --ledger "$TMP/l_si" -- true 2>&1 >/dev/null) || return 1
  expect_contains "$err" "gpuguard: note: --limit 8GB is read as 8.00 GiB (8589934592 bytes): units are 1024-based" "run's note" || return 1
  err=$(GPUGUARD_MEM_LIMIT=0=2GiB,1=512MB "$CLI" run --ledger "$TMP/l_si2" -- true 2>&1 >/dev/null) || return 1
  expect_contains "$err" "GPUGUARD_MEM_LIMIT: 512MB is read as 512.00 MiB" "the variable's note" || return 1
  err=$("$CLI" run --limit 8XB --ledger "$TMP/l_si3" -- true 2>&1)
  expect_contains "$err" "M, MiB or MB; G, GiB or GB" "the error lists every spelling"
}
check "an SI spelling (8GB) is 1024-based, and run says so; the error text lists every unit" si_spelling_is_said

bad_inputs() {
  local err rc
  err=$("$CLI" run --limit 1GiB -- no-such-command-here 2>&1); rc=$?
  expect_eq "$rc" 127 "the exit status for a missing command" &&
    expect_eq "$err" "gpuguard: command not found: no-such-command-here" "the message" || return 1
  touch "$TMP/not_exec"
  err=$("$CLI" run -- "$TMP/not_exec" 2>&1); rc=$?
  expect_eq "$rc" 126 "the exit status for a file that is not executable" &&
    expect_contains "$err" "gpuguard: cannot execute $TMP/not_exec" "the message" || return 1
  err=$(GPUGUARD_LIBRARY=$TMP/nope.so "$CLI" run -- true 2>&1); rc=$?
  expect_eq "$rc" 127 "the exit status for a missing library" &&
    expect_contains "$err" "gpuguard: GPUGUARD_LIBRARY=$TMP/nope.so: no such file" "the message" || return 1
  err=$("$CLI" run --report-dir /proc/self/nope -- true 2>&1); rc=$?
  expect_eq "$rc" 2 "the exit status for a report folder that cannot be created" &&
    expect_contains "$err" "gpuguard: report directory: cannot create /proc/self/nope" "the message" || return 1
  err=$("$CLI" run --limit 1GiB 2>&1); rc=$?
  expect_eq "$rc" 2 "the exit status with no command" &&
    expect_contains "$err" "gpuguard: run: no command given" "the message" || return 1
  head -c 4096 /dev/urandom >"$TMP/l_bad"
  err=$("$CLI" run --ledger "$TMP/l_bad" -- true 2>&1); rc=$?
  expect_eq "$rc" 2 "the exit status for a corrupt ledger" &&
    expect_contains "$err" "gpuguard: ledger $TMP/l_bad: not a gpuguard ledger" "the message"
}
check "missing command 127, not executable 126, missing library 127, bad report folder / no command / corrupt ledger 2" \
  bad_inputs

# Issue 30, item 7: a mistyped option names the closest known one; `--limit 8 GB` unquoted (GB taken
# for the command) says the limit and its unit must be one word.
typo_and_split_limit() {
  local err rc
  err=$("$CLI" run --limt 1GiB -- true 2>&1); rc=$?
  expect_eq "$rc" 2 "the exit status for --limt" &&
    expect_eq "$err" "gpuguard: run: unknown option '--limt' (did you mean --limit?)" "the message" || return 1
  err=$("$CLI" run --xyzzy -- true 2>&1)
  expect_not_contains "$err" "did you mean" "an option far from every known one (no guess)" || return 1
  err=$("$CLI" run --limit 8 gb -- true 2>&1); rc=$?
  expect_eq "$rc" 2 "the exit status for --limit 8 gb" &&
    expect_eq "$err" "gpuguard: --limit 8 gb: the limit and its unit must be one word: --limit 8gb" "the message" || return 1
  err=$("$CLI" run --limit 8GiB --ledger "$TMP/l_b" B 2>&1); rc=$?
  expect_eq "$rc" 127 "a command named B after a limit with its unit (run as a command)"
}
check "a mistyped option gets the closest known one; --limit 8 GB (a space) is refused with the fix, exit 2" \
  typo_and_split_limit

# Issue 30, item 7: the option made a relative ledger absolute without a word, where the variable
# printed one line; both now print the same note, with the path passed on.
relative_ledger_is_said() {
  local err
  mkdir -p "$TMP/rel" && cd "$TMP/rel" || return 1
  err=$("$CLI" run --ledger rel.ledger -- true 2>&1 >/dev/null)
  expect_eq "$err" "gpuguard: note: --ledger rel.ledger is a relative path: each working directory gets a ledger of its own, so processes started in another one do not share the quota (use an absolute path); run passes on $TMP/rel/rel.ledger" "the option's note" || { cd "$TMP"; return 1; }
  err=$(GPUGUARD_LEDGER=rel.ledger "$CLI" run -- true 2>&1 >/dev/null)
  cd "$TMP" || return 1
  expect_contains "$err" "gpuguard: note: GPUGUARD_LEDGER=rel.ledger is a relative path: each working directory" "the variable's note" &&
    expect_eq "$(wc -l <<<"$err")" 1 "lines for the variable" || return 1
  err=$("$CLI" run --ledger "$TMP/rel/abs.ledger" -- true 2>&1 >/dev/null)
  expect_eq "$err" "" "an absolute ledger: no note"
}
check "a relative ledger (option or variable) is one note naming the absolute path run passes on" relative_ledger_is_said

# Issue 30, item 7: in a virtual environment without a kernelspec of its own, a notebook's kernel can
# be another Python, where `%load_ext gpuguard` finds no module; run says so when it starts Jupyter.
venv_kernel_note() {
  local err
  mkdir -p "$TMP/venv/bin" && printf '#!/bin/sh\nexit 0\n' > "$TMP/venv/bin/jupyter-lab" && chmod +x "$TMP/venv/bin/jupyter-lab"
  err=$(VIRTUAL_ENV=$TMP/venv "$CLI" run --ledger none -- "$TMP/venv/bin/jupyter-lab" 2>&1) || return 1
  expect_contains "$err" "gpuguard: note: the virtual environment $TMP/venv has no Jupyter kernel of its own" "the note" &&
    expect_contains "$err" "python -m ipykernel install --sys-prefix" "the fix" || return 1
  mkdir -p "$TMP/venv/share/jupyter/kernels/python3" && echo '{}' > "$TMP/venv/share/jupyter/kernels/python3/kernel.json"
  err=$(VIRTUAL_ENV=$TMP/venv "$CLI" run --ledger none -- "$TMP/venv/bin/jupyter-lab" 2>&1) || return 1
  expect_eq "$err" "" "with the kernelspec installed" || return 1
  err=$(VIRTUAL_ENV=$TMP/venv-none "$CLI" run --ledger none -- true 2>&1) || return 1
  expect_eq "$err" "" "a command that is not Jupyter"
}
check "run starting Jupyter in a virtual environment without its own kernel says how to add one" venv_kernel_note

options_then_command_options() {
  # The first word that is not an option is the command; what follows is its own.
  local out
  out=$("$CLI" run --ledger "$TMP/l_opt" echo --limit x --help)
  expect_eq "$out" "--limit x --help" "echo's output"
}
check "options end at the command: the command's own --options are left alone" options_then_command_options

limit_of_busy_ledger_stands() {
  local out err
  mkfifo "$TMP/busy_in"
  GPUGUARD_MEM_LIMIT=1GiB GPUGUARD_LEDGER=$TMP/l_busy LD_PRELOAD=$PRELOAD \
    "$BIN/drv_linked" linked alloc 1048576 wait <"$TMP/busy_in" >"$TMP/busy_out" &
  local pid=$!
  exec 7>"$TMP/busy_in"
  for _ in $(seq 100); do grep -q ready "$TMP/busy_out" 2>/dev/null && break; sleep 0.05; done
  err=$("$CLI" run --limit 2GiB --ledger "$TMP/l_busy" -- true 2>&1)
  out=$(json <("$CLI" top --ledger "$TMP/l_busy" --json) 'd["limit_spec"]')
  exec 7>&-
  wait $pid
  expect_contains "$err" "gpuguard: warning: the limit '2GiB' differs from the limit '1GiB'" "run's warning" &&
    expect_eq "$out" 1GiB "the ledger's limit while the other process lives"
}
check "a ledger that live processes use keeps its limit; run warns that --limit waits for them" limit_of_busy_ledger_stands

wait_for_file() { for _ in $(seq 200); do [[ -s $1 ]] && return 0; sleep 0.02; done; echo "    $1 never appeared" >&2; return 1; }

init_forwards_sigterm() {
  "$CLI" run --init --ledger "$TMP/l_init" -- sh -c 'trap "echo got-term > '"$TMP"'/term; exit 3" TERM; echo up > '"$TMP"'/up; while :; do sleep 0.05; done' &
  local pid=$!
  wait_for_file "$TMP/up" || { kill -KILL $pid; return 1; }
  kill -TERM $pid
  wait $pid
  local rc=$?
  expect_eq "$rc" 3 "run's exit status (the child's trap exits 3)" &&
    expect_eq "$(cat "$TMP/term" 2>/dev/null)" got-term "what the child's TERM trap wrote"
}
check "--init forwards SIGTERM to the command and exits with its status" init_forwards_sigterm

init_exit_on_signal() {
  "$CLI" run --init --ledger "$TMP/l_init" -- sh -c 'echo up > '"$TMP"'/up2; exec sleep 30' &
  local pid=$!
  wait_for_file "$TMP/up2" || { kill -KILL $pid; return 1; }
  sleep 0.1
  kill -TERM $pid
  wait $pid
  expect_eq "$?" 143 "run's exit status when the command died of SIGTERM (128+15)"
}
check "--init exits 128+15 when the command dies of SIGTERM" init_exit_on_signal

init_reaps_orphans() {
  # The subshell starts a sleeper and exits at once: the sleeper is orphaned and re-parented to run
  # (a subreaper), which must reap it when it exits while the command still runs.
  "$CLI" run --init --ledger "$TMP/l_init" -- sh -c '(sleep 0.3 & echo $! > '"$TMP"'/orphan); sleep 1.5' &
  local pid=$! orphan ppid state
  wait_for_file "$TMP/orphan" || { kill -KILL $pid; return 1; }
  orphan=$(cat "$TMP/orphan")
  sleep 0.1
  ppid=$(awk '{print $4}' "/proc/$orphan/stat" 2>/dev/null)
  sleep 0.6
  state=$(awk '{print $3}' "/proc/$orphan/stat" 2>/dev/null)
  wait $pid
  local rc=$?
  expect_eq "$ppid" "$pid" "the orphan's parent after its own parent exited" &&
    expect_eq "${state:-gone}" gone "the orphan's state after it exited (Z would be a zombie left unreaped)" &&
    expect_eq "$rc" 0 "run's exit status"
}
check "--init adopts and reaps an orphaned grandchild" init_reaps_orphans

as_pid1() {
  # A real PID 1, in a PID namespace of its own: run supervises without being asked (no --init).
  unshare -pf --mount-proc "$CLI" run --ledger "$TMP/l_pid1" -- \
    sh -c 'echo "$$ $PPID" > '"$TMP"'/pid1; exec sleep 30' &
  local outer=$! inner
  wait_for_file "$TMP/pid1" || { kill -KILL $outer; return 1; }
  # Its parent is run, pid 1 (its own pid is 3: run's check of the library was pid 2).
  expect_eq "$(awk '{print ($1 > 1 ? "child" : "pid 1"), $2}' "$TMP/pid1")" "child 1" \
    "the command's place and parent inside the namespace" || { kill -KILL $outer; return 1; }
  inner=$(cat "/proc/$outer/task/$outer/children")  # run, as seen from outside the namespace
  sleep 0.1
  kill -TERM $inner
  wait $outer
  expect_eq "$?" 143 "the exit status when the command died of the SIGTERM sent to PID 1 (128+15)"
}
if unshare -pf --mount-proc true 2>/dev/null; then
  check "as PID 1 of a PID namespace: supervises by itself, forwards SIGTERM, exits 128+15" as_pid1
fi

help_and_usage() {
  local out
  out=$("$CLI" run --help) || return 1
  expect_contains "$out" "usage: gpuguard run" "run --help" &&
    expect_contains "$out" "Exit status" "run --help"
}
check "run --help prints the usage and exits 0" help_and_usage
