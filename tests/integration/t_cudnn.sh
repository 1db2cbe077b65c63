# Issue 5: cuDNN workspaces. The test cuDNN (tests/fake/fake_cudnn.h) has cuDNN 9's shape: a
# dispatcher libcudnn.so.9 that dlopens libcudnn_graph.so.9 (backend API) and libcudnn_cnn.so.9
# (legacy convolution API). cudnn_linked links it as PyTorch does; cudnn_dlopen loads it late,
# RTLD_LOCAL, and takes its functions from dlsym (tests/integration/cudnn_app.h lists the operations).
export GPUGUARD_LEDGER=none
# Engines 0..3 need 8 GiB, 4 GiB, 2 GiB, 64 MiB; legacy algorithms 0..3 need 2 GiB, 0, 512 MiB, 0.
export FAKE_CUDNN_PLAN_WORKSPACES=8G,4G,2G,64M FAKE_CUDNN_ALGO_WORKSPACES=2G,0,512M,0
G=1073741824
MIB=1048576

fake_only() { LD_LIBRARY_PATH=$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 20 "$@"; }
under_quota() { GPUGUARD_MEM_LIMIT=1GiB shimmed timeout 20 "$@"; }
# The report's cudnn section as a Python expression's value.
cudnn_field() { json "$1" "d['cudnn']$2"; }
no_file() { ! compgen -G "$1" >/dev/null || { echo "    unexpected: $(ls $1)" >&2; return 1; }; }

test_double_alone() {
  local out
  out=$(FAKE_CUDNN_TRACE=1 fake_only "$BIN/cudnn_linked" plan 0 plan 3 plan 4 get_v7 fwd 4 whois cudnnBackendFinalize 2>"$TMP/err")
  expect_eq "$out" "plan 0 -> ok workspace $((8 * G))
plan 3 -> ok workspace $((64 * MIB))
plan 4 -> not_supported workspace -1
get_v7 fwd -> ok 0:ok:$((2 * G)) 1:ok:0 2:ok:$((512 * MIB)) 3:ok:0
whois cudnnBackendFinalize -> libcudnn.so.9" "the test cuDNN's answers" &&
    expect_contains "$TMP/err" "dispatch cudnnBackendFinalize -> libcudnn_graph.so.9" "the dispatcher's table" &&
    expect_contains "$TMP/err" "dispatch cudnnGetConvolutionForwardAlgorithm_v7 -> libcudnn_cnn.so.9" "the dispatcher's table" &&
    expect_contains "$(nm -D "$BIN/cudnn_linked")" "U cudnnBackendFinalize@libcudnn.so.9" "the program's versioned reference"
}
check "the test cuDNN alone: a dispatcher into two sub-libraries, versioned exports, the configured workspaces" test_double_alone

cap_through() {
  fresh
  local prog=$1 out
  # get_v7 first: libcudnn_cnn is not loaded yet, so the hook calls the dispatcher, which loads it and
  # looks the function up through our dlsym. Later calls go to libcudnn_cnn's function directly.
  out=$(FAKE_CUDNN_TRACE=1 under_quota "$BIN/$prog" get_v7 fwd 1 plan 0 plan 2 plan 3 whois cudnnBackendFinalize \
    2>"$TMP/err")
  expect_eq "$out" "get_v7 fwd -> ok 0:not_supported:$((2 * G))
plan 0 -> not_supported workspace -1
plan 2 -> not_supported workspace -1
plan 3 -> ok workspace $((64 * MIB))
whois cudnnBackendFinalize -> libgpuguard.so" "plans under a 1 GiB quota" &&
    # Our dlsym hands the dispatcher the sub-library's function, never a hook: no bounce back to us.
    expect_contains "$TMP/err" "dispatch cudnnGetConvolutionForwardAlgorithm_v7 -> libcudnn_cnn.so.9" "the dispatcher's table" &&
    expect_not_contains "$TMP/err" "-> libgpuguard.so" "the dispatcher's table"
}
check "linked like PyTorch (versioned references): a plan over the remaining quota fails finalize with NOT_SUPPORTED" \
  cap_through cudnn_linked
check "loaded late with dlopen(RTLD_LOCAL) + dlsym: dlsym hands out the hooks, the dispatcher keeps the real functions" \
  cap_through cudnn_dlopen

legacy_marked() {
  fresh
  local out
  out=$(under_quota "$BIN/cudnn_linked" get_v7 fwd 4 get_v7 bwd_data 4 get_v7 bwd_filter 4 findex fwd 4 $((512 * MIB)) \
    find fwd 4 wssize fwd 0 2>"$TMP/err")
  # 2 GiB does not fit 1 GiB: marked and moved last; the order of the others is cuDNN's.
  expect_eq "$out" "get_v7 fwd -> ok 1:ok:0 2:ok:$((512 * MIB)) 3:ok:0 0:not_supported:$((2 * G))
get_v7 bwd_data -> ok 1:ok:0 2:ok:$((512 * MIB)) 3:ok:0 0:not_supported:$((2 * G))
get_v7 bwd_filter -> ok 1:ok:0 2:ok:$((512 * MIB)) 3:ok:0 0:not_supported:$((2 * G))
findex fwd -> ok 1:ok:0 2:ok:$((512 * MIB)) 3:ok:0 0:alloc_failed:$((2 * G))
find fwd -> ok 1:ok:0 2:ok:$((512 * MIB)) 3:ok:0 0:alloc_failed:$((2 * G))
wssize fwd 0 -> ok $((2 * G))" "legacy results under a 1 GiB quota"
}
check "legacy Get_v7 / FindEx / Find: results over the cap are marked NOT_SUPPORTED and moved behind those that fit" \
  legacy_marked

cap_in_bytes() {
  fresh
  local out
  out=$(GPUGUARD_CUDNN_WORKSPACE_LIMIT=3GiB shimmed timeout 20 "$BIN/cudnn_linked" plan 1 plan 2 get_v7 fwd 2)
  expect_eq "$out" "plan 1 -> not_supported workspace -1
plan 2 -> ok workspace $((2 * G))
get_v7 fwd -> ok 0:ok:$((2 * G)) 1:ok:0" "plans and algorithms under a 3 GiB cap and no quota"
}
check "GPUGUARD_CUDNN_WORKSPACE_LIMIT=3GiB caps at 3 GiB, with no quota at all" cap_in_bytes

cap_off() {
  fresh
  local out
  out=$(GPUGUARD_CUDNN_WORKSPACE_LIMIT=off under_quota "$BIN/cudnn_linked" plan 0 get_v7 fwd 2 report)
  expect_eq "$out" "plan 0 -> ok workspace $((8 * G))
get_v7 fwd -> ok 0:ok:$((2 * G)) 1:ok:0
report -> 0" "plans and algorithms with the cap off" &&
    local r && r=$(ls gpuguard-request-*.json) &&
    expect_eq "$(cudnn_field "$r" "['workspace_cap'], d['cudnn']['workspace_cap_bytes'], d['cudnn']['plans_rejected']")" \
      "('off', None, 0)" "the report's cap"
}
check "GPUGUARD_CUDNN_WORKSPACE_LIMIT=off: cuDNN's answers pass unchanged under a quota" cap_off

probing() {
  fresh
  local out
  out=$(GPUGUARD_REPORT_ON_EXIT=1 under_quota "$BIN/cudnn_linked" probe 4 2>"$TMP/err")
  expect_eq "$out" "probe engine 0 -> finalize not_supported
probe engine 1 -> finalize not_supported
probe engine 2 -> finalize not_supported
probe -> engine 3" "a probe with the cap" &&
    no_file "gpuguard-quota-*.json" &&
    local r && r=$(ls gpuguard-exit-*.json) &&
    expect_eq "$(json "$r" "sum(c['failures'] for c in d['counts_by_api'].values())")" "0" "failed allocations with the cap" &&
    expect_eq "$(cudnn_field "$r" "['plans_rejected']")" "3" "plans rejected"
}
check "probing plans under the cap: the framework takes the plan that fits, no allocation fails, no report" probing

probing_off() {
  fresh
  local out
  out=$(GPUGUARD_CUDNN_WORKSPACE_LIMIT=off GPUGUARD_REPORT_ON_EXIT=1 under_quota "$BIN/cudnn_linked" probe 4 2>"$TMP/err")
  expect_eq "$out" "probe engine 0 -> alloc 2
probe engine 1 -> alloc 2
probe engine 2 -> alloc 2
probe -> engine 3" "a probe with the cap off" &&
    expect_eq "$(ls gpuguard-quota-*.json | wc -l)" "1" "reports of the failed probes" &&
    local r && r=$(ls gpuguard-exit-*.json) &&
    expect_eq "$(json "$r" "sum(c['failures'] for c in d['counts_by_api'].values())")" "3" "failed allocations"
}
check "probing plans with the cap off: three failed workspace allocations are one episode and one report" probing_off

report_section() {
  fresh
  local out
  out=$(GPUGUARD_REPORT_ON_EXIT=1 under_quota "$BIN/cudnn_linked" plan 0 plan 3 get_v7 fwd 4 conv fwd 2 $((512 * MIB)) \
    hold $((16 * MIB)) execute 3)
  expect_contains "$out" "execute 3 -> ok" "the execute" || return 1
  local r && r=$(ls gpuguard-exit-*.json) || return 1
  expect_eq "$(cudnn_field "$r" "['workspace_cap'], d['cudnn']['workspace_cap_bytes'] <= $G")" "('auto', True)" "the cap" &&
    expect_eq "$(cudnn_field "$r" "['largest_workspace_requested_bytes'], d['cudnn']['largest_rejected_bytes']")" \
      "($((8 * G)), $((8 * G)))" "largest asked for, largest rejected" &&
    expect_eq "$(cudnn_field "$r" "['plans_rejected'], d['cudnn']['algorithms_rejected']")" "(1, 1)" "rejections" &&
    expect_eq "$(cudnn_field "$r" "['workspace_in_use_bytes'], d['cudnn']['workspace_in_use_peak_bytes']")" \
      "(0, $((512 * MIB)))" "workspace in use now and at most" &&
    expect_eq "$(cudnn_field "$r" "['library'].endswith('/fake/libcudnn.so.9')")" "True" "the library the program loaded" &&
    # By call site: the plan op's Finalize (8 GiB, then 64 MiB), its GetAttribute, Get_v7, execute's Finalize.
    expect_eq "$(json "$r" "[(s['largest_bytes'], s['count'] >= 2) for s in d['cudnn']['requests_by_stack']][:2]")" \
      "[($((8 * G)), True), ($((2 * G)), False)]" "the largest call sites, largest first" &&
    expect_eq "$(json "$r" "all(d['stacks'][s['stack']]['frames'][0]['module'].endswith('/cudnn_linked') for s in d['cudnn']['requests_by_stack'])")" \
      "True" "each call site's stack starts in the program"
}
check "the report's cudnn section: cap, sizes asked for and rejected, in use, by call site with stacks" report_section

workspace_tag() {
  fresh
  GPUGUARD_REPORT_ON_EXIT=1 under_quota "$BIN/cudnn_dlopen" hold $((16 * MIB)) execute 3 >/dev/null || return 1
  local r && r=$(ls gpuguard-exit-*.json) || return 1
  expect_eq "$(json "$r" "sorted((a['bytes'], a['api'], a['tag']) for a in d['top_allocations'])")" \
    "[($((16 * MIB)), 'cuMemAlloc_v2', None), ($((64 * MIB)), 'cudnnBackendExecute', 'cudnn_workspace')]" \
    "the program's allocation and cuDNN's scratch"
}
check "memory cuDNN allocates inside a call is tagged cudnn_workspace and named after the call; the program's is not" \
  workspace_tag

requests_total() { json "$1" "sum(s['count'] for s in d['cudnn']['requests_by_stack'])"; }
callbacks() {
  fresh
  mkdir -p "$TMP/plain" "$TMP/back"
  GPUGUARD_REPORT_DIR=$TMP/plain under_quota "$BIN/cudnn_linked" plan 0 plan 3 find fwd 4 report >"$TMP/plain.out" 2>/dev/null
  FAKE_CUDNN_CALLBACK=1 GPUGUARD_REPORT_DIR=$TMP/back under_quota "$BIN/cudnn_linked" plan 0 plan 3 find fwd 4 report \
    >"$TMP/back.out" 2>/dev/null
  expect_eq "$(cat "$TMP/back.out")" "$(cat "$TMP/plain.out")" "answers with and without the callbacks" &&
    expect_eq "$(requests_total "$(ls "$TMP"/back/gpuguard-request-*.json)")" \
      "$(requests_total "$(ls "$TMP"/plain/gpuguard-request-*.json)")" "requests counted"
}
check "cuDNN calling its own public API from inside a call passes straight through: same answers, nothing counted twice" \
  callbacks

hostile_dispatcher() {
  fresh
  local expected out
  # The first legacy call arrives before the dispatcher has loaded libcudnn_cnn: the hook goes through
  # the dispatcher, whose table (global lookup) holds the hook, which is entered again from inside.
  expected=$(FAKE_CUDNN_DISPATCH=global fake_only "$BIN/cudnn_dlopen" get_v7 fwd 2 plan 3) || return 1
  expect_eq "$expected" "get_v7 fwd -> ok 0:ok:$((2 * G)) 1:ok:0
plan 3 -> ok workspace $((64 * MIB))" "without the shim" || return 1
  out=$(FAKE_CUDNN_DISPATCH=global FAKE_CUDNN_TRACE=1 under_quota "$BIN/cudnn_dlopen" get_v7 fwd 2 get_v7 fwd 2 plan 3 report \
    2>"$TMP/err") || { echo "    exit status $? (124: it hung)" >&2; return 1; }
  expect_contains "$TMP/err" "dispatch cudnnGetConvolutionForwardAlgorithm_v7 -> libgpuguard.so" "the hostile table" &&
    expect_eq "$out" "get_v7 fwd -> ok 1:ok:0 0:not_supported:$((2 * G))
get_v7 fwd -> ok 1:ok:0 0:not_supported:$((2 * G))
plan 3 -> ok workspace $((64 * MIB))
report -> 0" "under the shim" &&
    expect_eq "$(json "$(ls gpuguard-request-*.json)" "d['cudnn']['algorithms_rejected']")" "2" "one rejection per call"
}
check "a dispatcher whose table holds the hooks: the re-entered hook calls the sub-library, no loop, counted once" \
  hostile_dispatcher

without_cudnn() {
  fresh
  local out
  out=$(shimmed timeout 20 "$BIN/cudnn_dlopen" nocudnn absent cudnnBackendExecute absent cudnnBackendFinalize report)
  expect_eq "$out" "absent cudnnBackendExecute -> not_initialized
absent cudnnBackendFinalize -> not_initialized
report -> 0" "hooks called with no cuDNN in the process" &&
    expect_eq "$(json "$(ls gpuguard-request-*.json)" "'cudnn' in d")" "False" "a cudnn section without cuDNN"
}
check "no cuDNN in the process: a hook reached anyway answers NOT_INITIALIZED (never a null call), no cudnn section" \
  without_cudnn
