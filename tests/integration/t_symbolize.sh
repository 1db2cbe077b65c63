# gpuguard report names native frames from debug info (tools/report/symbolize.h): the C example built
# as a user builds it, run under the shim with the test driver until the quota refuses it, then read.
# With -g its frames are "main (alloc_until_oom.c:LINE)" in the summary and in every export; stripped,
# or rebuilt since the report, they stay module+offset and one gpuguard: line says why.

# A quota of this process's own: the machine's shared ledger may hold another process's limit and usage
# (a shimmed program running beside the tests took these cases' reports away once).
export GPUGUARD_LEDGER=none

SRC=$TMP/src
mkdir -p "$SRC" && cp "$ROOT/examples/c/alloc_until_oom.c" "$SRC/"
CALL_LINE=$(grep -n 'r = cuMemAlloc(&held\[n\]' "$SRC/alloc_until_oom.c" | cut -d: -f1)

# build_example OUT [compiler flags...]: linked against the test driver, as a program links libcuda.
build_example() {
  local out=$1; shift
  ${CC:-cc} "$@" -I"${CUDA_HOME:-/usr/local/cuda}/include" -o "$out" "$SRC/alloc_until_oom.c" \
    -L"$FAKE" -lcuda -Wl,-rpath,"$FAKE"
}
# oom_report PROG: runs it until the quota refuses a chunk; prints the report's path.
oom_report() {
  GPUGUARD_MEM_LIMIT=256MiB shimmed timeout 60 "$1" 64 1024 >/dev/null 2>&1
  ls "$GPUGUARD_REPORT_DIR"/gpuguard-quota-*.json
}

# expect_unnamed: the summary in ./out shows the program's frame as module+offset, with no source line.
expect_unnamed() {
  expect_contains out "native  alloc_until_oom+0x" "the failed request's stack" &&
    expect_not_contains out "alloc_until_oom.c:" "the summary"
}

names_main_in_the_summary_and_every_export() {
  fresh
  build_example "$TMP/alloc_until_oom" -g -O0 || return 1
  local report where="main (alloc_until_oom.c:$CALL_LINE)"
  report=$(oom_report "$TMP/alloc_until_oom") || return 1
  "$CLI" report --no-color "$report" >out 2>err || return 1
  expect_contains out "native  $where" "the failed request's stack" &&
    expect_contains out "100% ██████████     4×  $where" "the top holder" &&
    expect_not_contains err "alloc_until_oom" "what report said on stderr" || return 1
  "$CLI" report --folded folded.txt --speedscope speedscope.json --html page.html "$report" 2>/dev/null || return 1
  expect_contains folded.txt ";$where " "folded stacks" &&
    expect_contains speedscope.json "\"name\":\"$where\"" "speedscope frames" &&
    expect_contains page.html "\"label\":\"$where\"" "the HTML page's frames"
}
check "a program built with -g: its frame is main (alloc_until_oom.c:LINE) in the summary, folded, speedscope and HTML" names_main_in_the_summary_and_every_export

stripped_program_keeps_module_offset_and_says_why() {
  fresh
  build_example "$TMP/alloc_until_oom" -g -O0 && strip "$TMP/alloc_until_oom" || return 1
  local report; report=$(oom_report "$TMP/alloc_until_oom") || return 1
  "$CLI" report --no-color "$report" >out 2>err || return 1
  expect_unnamed && expect_contains err "gpuguard: no debug info for alloc_until_oom: its frames stay as module+offset" "stderr" &&
    expect_eq "$(grep -c alloc_until_oom err)" 1 "lines about the program on stderr"
}
check "a stripped program: module+offset, and one gpuguard: line saying there is no debug info" stripped_program_keeps_module_offset_and_says_why

separate_debug_file_found_by_build_id() {
  fresh
  build_example "$TMP/alloc_until_oom" -g -O0 || return 1
  local report id
  report=$(oom_report "$TMP/alloc_until_oom") || return 1
  id=$(json "$report" '[f["build_id"] for s in d["stacks"].values() for f in s["frames"] if f.get("module","").endswith("/alloc_until_oom")][0]')
  mkdir -p "debug/.build-id/${id:0:2}" &&
    objcopy --only-keep-debug "$TMP/alloc_until_oom" "debug/.build-id/${id:0:2}/${id:2}.debug" &&
    strip "$TMP/alloc_until_oom" || return 1
  "$CLI" report --no-color --debug-dir debug "$report" >out 2>err || return 1
  expect_contains out "native  main (alloc_until_oom.c:$CALL_LINE)" "the failed request's stack" &&
    expect_not_contains err "alloc_until_oom" "stderr"
}
check "a stripped program whose debug file is in DIR/.build-id/xx/yyyy.debug is named (--debug-dir DIR)" separate_debug_file_found_by_build_id

rebuilt_program_is_not_used() {
  fresh
  build_example "$TMP/alloc_until_oom" -g -O0 || return 1
  local report; report=$(oom_report "$TMP/alloc_until_oom") || return 1
  build_example "$TMP/alloc_until_oom" -g -O1 || return 1  # another build at the same path
  "$CLI" report --no-color "$report" >out 2>err || return 1
  expect_unnamed && expect_contains err "gpuguard: $TMP/alloc_until_oom is not the binary that wrote the report (its build id is" "stderr"
}
check "a program rebuilt since the report: its build id differs, so its frames are not named, and it says so" rebuilt_program_is_not_used

no_symbolize_keeps_the_report_as_written() {
  fresh
  build_example "$TMP/alloc_until_oom" -g -O0 || return 1
  local report; report=$(oom_report "$TMP/alloc_until_oom") || return 1
  "$CLI" report --no-color --no-symbolize "$report" >out 2>err || return 1
  expect_unnamed && expect_eq "$(cat err)" "" "stderr"
}
check "--no-symbolize leaves native frames as module+offset" no_symbolize_keeps_the_report_as_written

hostile_module_paths_are_not_opened() {
  fresh
  build_example "$TMP/alloc_until_oom" -g -O0 || return 1
  local report; report=$(oom_report "$TMP/alloc_until_oom") || return 1
  mkfifo fifo
  python3 - "$report" "$PWD/fifo" >hostile.json <<'EOF' || return 1
import json, sys
d = json.load(open(sys.argv[1]))
paths = ["/dev/zero", "/etc/shadow", sys.argv[2], "/proc/self/mem"]
frames = [f for s in d["stacks"].values() for f in s["frames"] if f.get("kind") == "native"]
for i, f in enumerate(frames):
    f["module"], f["symbol"] = paths[i % len(paths)], ""
json.dump(d, sys.stdout)
EOF
  timeout 20 "$CLI" report --no-color hostile.json >out 2>err || return 1
  expect_contains out "OUT OF MEMORY" "the summary" &&
    expect_contains err "gpuguard: cannot read /dev/zero (not a regular file)" "stderr"
}
check "a report naming /dev/zero, /etc/shadow or a FIFO as modules renders, without reading them" hostile_module_paths_are_not_opened

# Where elfutils is not installed (an image the wheel or the .deb lands in): libdw.so.1 hidden under
# /dev/null in a mount namespace of this test's own.
libdw_paths() { ldconfig -p | awk '/libdw\.so\.1 /{print $NF}' | xargs -r realpath | sort -u; }
can_hide_libdw() { [[ -n $(libdw_paths) ]] && unshare --mount true 2>/dev/null; }
without_libdw_one_line_and_module_offset() {
  fresh
  build_example "$TMP/alloc_until_oom" -g -O0 || return 1
  local report; report=$(oom_report "$TMP/alloc_until_oom") || return 1
  # shellcheck disable=SC2016
  unshare --mount sh -c 'for p in $1; do mount --bind /dev/null "$p" || exit 3; done; shift; exec "$@"' sh \
    "$(libdw_paths)" "$CLI" report --no-color "$report" >out 2>err || return 1
  expect_unnamed &&
    expect_eq "$(cat err)" "gpuguard: libdw.so.1 is not installed: native frames stay as module+offset (apt-get install libdw1 names them from debug info)" "stderr"
}
if can_hide_libdw; then
  check "without libdw.so.1 the report renders with module+offset, and one gpuguard: line says how to get names" without_libdw_one_line_and_module_offset
else
  skip "without libdw.so.1: one line, module+offset" "libdw.so.1 is not installed here, or unshare --mount is not allowed (needs root)"
fi
