# The test double of PyTorch's c10 libraries (tests/fake/fake_c10.cpp, fake_c10_cuda.cpp): first alone,
# where its numbers are the rules of c10's caching allocator worked out by hand; then under the shim,
# which must forward every report of a block to c10's own profiler functions and build its tensor view
# from them, which `gpuguard report --what-if` then replays exactly.
#
# The scenarios (bin/c10_app steps):
#   fragmented  440 blocks of 4 MiB (five to a 20 MiB segment: 1760 MiB), every other one freed (880 MiB
#               allocated), then 600 MiB: refused under 2 GiB, as no segment is free whole and no 20 MiB
#               page is free of live blocks, although limit - allocated is 1168 MiB
#   slack       60 blocks of 10.5, 12.5, 14.5 MiB in segments of 12, 14, 16 MiB (750 of 840 MiB used),
#               then 300 MiB: refused under 1100 MiB; with expandable segments the blocks lie back to back
#               in 38 pages of 20 MiB and 300 MiB more fits (1060 MiB)
#   carved      200 MiB freed, ten 8 MiB blocks carved out of its segment, then 300 MiB: refused under
#               400 MiB; with max_split_size_mb:128 the 200 MiB block is not carved but released
MiB=1048576
FRAGMENTED=(alloc 4Mx440 free-odd print alloc 600M)
SLACK=(); for i in $(seq 20); do SLACK+=(alloc 10752K alloc 12800K alloc 14848K); done; SLACK+=(print alloc 300M print)
CARVED=(alloc 200M free-all alloc 8Mx10 alloc 300M)

alone() { LD_LIBRARY_PATH=$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }

imports_through_plt() {
  local relocs needed defined
  relocs=$(readelf -rW "$FAKE/libc10_cuda.so"); needed=$(readelf -dW "$FAKE/libc10_cuda.so")
  defined=$(nm -D --defined-only "$FAKE/libc10.so")
  for sym in _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE _ZN3c1027reportOutOfMemoryToProfilerElmmNS_6DeviceE; do
    expect_contains "$(grep JUMP_SLOT <<<"$relocs")" "$sym" "libc10_cuda.so's PLT relocations" &&
      expect_contains "$defined" "T $sym" "libc10.so's exports" || return 1
  done
  expect_contains "$needed" "Shared library: [libc10.so]" "libc10_cuda.so's NEEDED" &&
    expect_contains "$needed" "Library soname: [libc10_cuda.so]" "its soname"
}
check "libc10_cuda.so imports c10's two profiler functions from libc10.so through its PLT, as PyTorch's does" imports_through_plt

alone_fragmented() {
  local conf out
  for conf in "" expandable_segments:True; do
    out=$(FAKE_C10_CONF=$conf FAKE_CUDA_MEM=$((2048 * MiB)) alone "$BIN/c10_app" "${FRAGMENTED[@]}") || return 1
    expect_contains "$out" "allocated=$((880 * MiB)) reserved=$((1760 * MiB)) live=220" "$conf after the frees" &&
      expect_contains "$out" "oom $((600 * MiB)) allocated=$((880 * MiB)) reserved=$((1760 * MiB))" "$conf: 600 MiB refused" &&
      expect_contains "$out" "profiler usage_calls=660 usage_sum=$((880 * MiB)) last_allocated=$((880 * MiB)) last_reserved=$((1760 * MiB)) device=1:0 oom_calls=1 oom_last_size=$((600 * MiB))" \
        "$conf: libc10.so's profiler functions" || return 1
  done
}
check "alone: 4 MiB blocks pin their segments and pages; 600 MiB is refused with or without expandable segments" alone_fragmented

alone_slack() {
  local out
  out=$(FAKE_CUDA_MEM=$((1100 * MiB)) alone "$BIN/c10_app" "${SLACK[@]}") || return 1
  expect_contains "$out" "oom $((300 * MiB)) allocated=$((750 * MiB)) reserved=$((840 * MiB))" "without expandable segments" || return 1
  out=$(FAKE_C10_CONF=expandable_segments:True FAKE_CUDA_MEM=$((1100 * MiB)) alone "$BIN/c10_app" "${SLACK[@]}" \
          free-all empty-cache print) || return 1
  expect_contains "$out" "allocated=$((750 * MiB)) reserved=$((760 * MiB)) live=60" "38 pages for 750 MiB" &&
    expect_contains "$out" "allocated=$((1050 * MiB)) reserved=$((1060 * MiB)) live=61" "15 pages more for 300 MiB" &&
    expect_eq "$(grep -c '^oom ' <<<"$out")" 0 "refusals with expandable segments" &&
    expect_contains "$out" "allocated=0 reserved=0 live=0 ooms=0" "after empty-cache: every page unmapped"
}
check "alone: slack at the end of differently sized segments; expandable segments pack the blocks and serve 300 MiB" alone_slack

alone_carved() {
  local out
  out=$(FAKE_CUDA_MEM=$((400 * MiB)) alone "$BIN/c10_app" "${CARVED[@]}") || return 1
  expect_contains "$out" "oom $((300 * MiB)) allocated=$((80 * MiB)) reserved=$((200 * MiB))" "default settings" || return 1
  out=$(FAKE_C10_CONF=max_split_size_mb:128 FAKE_CUDA_MEM=$((400 * MiB)) alone "$BIN/c10_app" "${CARVED[@]}") || return 1
  expect_contains "$out" "allocated=$((380 * MiB)) reserved=$((400 * MiB)) live=11 ooms=0" "max_split_size_mb:128"
}
check "alone: max_split_size_mb keeps a large cached block whole and releases it for a large request" alone_carved

# Under the shim: the report's tensor view is the double's, and c10's own functions still see every call.
shim_fragmented() {
  fresh
  local out mode
  for mode in "" --global; do
    out=$(GPUGUARD_MEM_LIMIT=2GiB GPUGUARD_LEDGER=none shimmed "$BIN/c10_app" $mode "${FRAGMENTED[@]}" 2>/dev/null) || return 1
    expect_contains "$out" "profiler usage_calls=660 usage_sum=$((880 * MiB)) last_allocated=$((880 * MiB)) last_reserved=$((1760 * MiB)) device=1:0 oom_calls=1 oom_last_size=$((600 * MiB)) oom_last_allocated=$((880 * MiB))" \
      "libc10.so's profiler functions under the shim (${mode:-RTLD_LOCAL})" || return 1
  done
  local report; report=$(ls gpuguard-quota-*.json | head -1)
  [[ -n $report ]] || { echo "no quota report"; return 1; }
  expect_eq "$(json "$report" 'd["tensor_view"]["source"], d["tensor_view"]["allocated_bytes"], d["tensor_view"]["reserved_bytes"]')" \
    "('c10', $((880 * MiB)), $((1760 * MiB)))" "the tensor view's totals (the double's)" &&
  expect_eq "$(json "$report" 'd["tensor_view"]["oom"]["requested_bytes"], d["tensor_view"]["blocks"]["count"]')" \
    "($((600 * MiB)), 220)" "the refused request and the live blocks" &&
  expect_eq "$(json "$report" '[sum(r[1] == a for r in d["tensor_view"]["events"]["rows"]) for a in "afoS"]')" \
    "[440, 220, 1, 87]" "the events: blocks, frees, the refusal, the segments after c10's first report" || return 1
  "$CLI" report --what-if --json "$report" > w.json || return 1
  expect_eq "$(json w.json 'd["model_check"]["trusted"], d["model_check"]["largest_difference_bytes"], d["events"]["replayed"]')" \
    "(True, 0, 661)" "the replay of the double's report" &&
  expect_eq "$(json w.json 'd["expandable_segments"]["avoids_oom"], d["smallest_budget"]["as_configured_bytes"], d["smallest_budget"]["expandable_segments_bytes"]')" \
    "(False, $((2360 * MiB)), $((2360 * MiB)))" "its answers"
}
check "under the shim: c10's own profiler sees every call; the quota report's tensor view is the double's and replays exactly" shim_fragmented

shim_expandable_at_exit() {
  fresh
  local out
  out=$(FAKE_C10_CONF=expandable_segments:True PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True GPUGUARD_REPORT_ON_EXIT=1 \
        GPUGUARD_LEDGER=none shimmed "$BIN/c10_app" "${SLACK[@]}" free-last 2>/dev/null) || return 1  # the 300 MiB block
  expect_contains "$out" "allocated=$((750 * MiB)) reserved=$((1060 * MiB)) live=60 ooms=0" "the double's totals" &&
    expect_contains "$out" "profiler usage_calls=62 " "libc10.so's profiler functions" || return 1
  local report; report=$(ls gpuguard-exit-*.json | head -1)
  [[ -n $report ]] || { echo "no exit report"; return 1; }
  expect_eq "$(json "$report" 'd["tensor_view"]["source"], d["tensor_view"]["allocator_conf"], d["tensor_view"]["allocated_bytes"], d["tensor_view"]["reserved_bytes"]')" \
    "('c10', 'expandable_segments:True', $((750 * MiB)), $((1060 * MiB)))" "the tensor view's totals" &&
  # Every page, the first included: c10 maps it before its first report (the shim once missed it).
  expect_eq "$(json "$report" 'sum(m[1] for m in d["tensor_view"]["mappings"]), len(d["tensor_view"]["mappings"])')" \
    "($((1060 * MiB)), 53)" "the mapped pages" &&
  expect_eq "$(json "$report" 'len(d["tensor_view"]["events"]["rows"]) > 62')" "True" "the events" || return 1
  "$CLI" report --what-if --json "$report" > w.json || return 1
  expect_eq "$(json w.json 'd["recorded"]["expandable_segments"], d["model_check"]["trusted"], d["model_check"]["largest_difference_bytes"]')" \
    "(True, True, 0)" "the replay of an expandable run"
}
check "under the shim at exit with expandable segments: the tensor view's totals and mapped pages are the double's, replayed exactly" shim_expandable_at_exit

# PyTorch's allocator meets a refusal, frees its cache and retries, and the retry fits: that is no
# out-of-memory of the program, so no report is written (one for every such retry would bury the
# real one: 114 of them in the H200's KV-cache run), and the exit report counts it as recovered.
shim_recovered() {
  fresh
  local out
  out=$(GPUGUARD_MEM_LIMIT=2GiB GPUGUARD_LEDGER=none GPUGUARD_REPORT_ON_EXIT=1 \
        shimmed "$BIN/c10_app" alloc 256Mx4 free-all alloc 1536M print 2>err.txt) || { cat err.txt; return 1; }
  expect_contains "$out" "allocated=$((1536 * MiB)) reserved=$((1536 * MiB)) live=1 ooms=0" \
    "the retry after the cache was freed fits" &&
  expect_eq "$(ls gpuguard-quota-*.json 2>/dev/null | wc -l)" "0" "no out-of-memory report" &&
  expect_eq "$(grep -c 'refused' err.txt)" "0" "no refusal line on stderr" || return 1
  local report; report=$(ls gpuguard-exit-*.json | head -1)
  [[ -n $report ]] || { echo "no exit report"; return 1; }
  expect_eq "$(json "$report" 'd["tensor_view"]["refusals_recovered"], d["tensor_view"]["allocated_bytes"]')" \
    "(1, $((1536 * MiB)))" "the exit report counts the recovered refusal"
}
check "under the shim: a refusal PyTorch recovers from (it frees its cache and retries) writes no report" shim_recovered

# The same with the view switched off at run time first: c10 still reports its blocks, and the refusal
# it recovered from is settled by them (held pending, it was written at exit as an out-of-memory).
shim_recovered_view_off() {
  fresh
  local out
  out=$(GPUGUARD_MEM_LIMIT=2GiB GPUGUARD_LEDGER=none GPUGUARD_REPORT_ON_EXIT=1 \
        shimmed "$BIN/c10_app" alloc 1M view-off alloc 256Mx4 free-all alloc 1536M print 2>err.txt) || { cat err.txt; return 1; }
  expect_contains "$out" "allocated=$((1536 * MiB)) reserved=$((1536 * MiB)) live=1 ooms=0" "the retry after the cache was freed fits" &&
  expect_eq "$(ls gpuguard-quota-*.json gpuguard-allocator_oom-*.json 2>/dev/null | wc -l)" "0" "no out-of-memory report" &&
  expect_eq "$(grep -c 'refused\|out of memory' err.txt)" "0" "no refusal line on stderr"
}
check "the view switched off at run time: a refusal PyTorch recovers from still writes no report" shim_recovered_view_off

# The tensor view switched at run time (gpuguard_set_tensor_view): off, nothing is recorded (the view
# stays as it was, PyTorch's totals too, until the next event once back on); back
# on, the list starts empty, so that a block freed while it was off is never listed again, and the
# blocks made before stay unlisted until freed (tensor_view.coverage says how many bytes).
report_named() {  # the request report whose message is $1
  local f
  for f in gpuguard-request-*.json; do [[ $(json "$f" 'd["message"]') == "$1" ]] && echo "$f"; done
}
view_report() {  # the request report whose message is $1: its totals, listed blocks' sizes and coverage
  local f; f=$(report_named "$1")
  [[ -n $f ]] || { echo "no report '$1'"; return; }
  json "$f" '(d["tensor_view"]["allocated_bytes"], sorted(b[1] for b in d["tensor_view"]["blocks"]["list"]), *(d["tensor_view"]["coverage"][k] for k in ("complete", "unlisted_bytes", "off", "switched_off")))'
}
shim_view_switched() {
  fresh
  local out
  # 2 MiB on; off: 4 MiB made; on: 8 MiB made, the 4 MiB (made while off) freed -> r1.
  # off: the 8 MiB (made while on) freed; still off -> r2; on, 1 MiB made -> r3; all freed -> r4.
  out=$(GPUGUARD_LEDGER=none shimmed "$BIN/c10_app" alloc 2M view-off alloc 4M view-on alloc 8M free-at 1 \
          report r1 view-off free-at 1 report r2 view-on alloc 1M report r3 free-all report r4 2>err.txt) || { cat err.txt; return 1; }
  expect_eq "$(grep -c '^view was=' <<< "$out") $(grep '^view was=' <<< "$out" | tr -d '\n')" \
    "4 view was=1view was=0view was=1view was=0" "what each switch returns (whether it was on)" &&
  expect_eq "$(view_report r1)" "($((10 * MiB)), [$((8 * MiB))], False, $((2 * MiB)), False, 1)" \
    "made while off, freed while on: never listed; the 2 MiB from before the switch unlisted" &&
  expect_eq "$(view_report r2)" "($((10 * MiB)), [$((8 * MiB))], False, $((2 * MiB)), True, 2)" \
    "off: the view as it was when switched off, totals too" &&
  expect_eq "$(view_report r3)" "($((3 * MiB)), [$((1 * MiB))], False, $((2 * MiB)), False, 2)" \
    "made while on, freed while off: not listed once back on; the totals right from the first event" &&
  expect_eq "$(view_report r4)" "(0, [], True, 0, False, 2)" "complete again once the unlisted blocks are freed" || return 1
  GPUGUARD_LEDGER=none "$CLI" report "$(report_named r3)" > text.txt 2>&1 &&
    expect_contains "$(cat text.txt)" "tensors made while the tensor view was switched off" "the summary says the view is partial"
}
check "the tensor view switched off and on at run time: no block freed while off is listed, and the report says what is unlisted" shim_view_switched

# A hostile caller of c10's profiler function: a block of INT64_MIN bytes taken back (its negation does
# not fit in an int64: UBSan reported it, and the event's size came out negative). The event says the
# largest size instead, and the report is written.
shim_hostile_size() {
  fresh
  GPUGUARD_LEDGER=none shimmed "$BIN/c10_app" alloc 1M raw 0x7f0000001000 min 0 report hostile >/dev/null 2>err.txt ||
    { cat err.txt; return 1; }
  local r; r=$(report_named hostile)
  [[ -n $r ]] || { echo "no report"; cat err.txt; return 1; }
  expect_eq "$(json "$r" '[e[3] for e in d["tensor_view"]["events"]["rows"] if e[2] == 0x7f0000001000]')" \
    "[9223372036854775807]" "the hostile free's size in the event ring"
}
check "a block of INT64_MIN bytes from a hostile c10 caller: recorded with the largest size, no overflow" shim_hostile_size

# Coverage says what the run-time switch left unlisted, and only that: a view never switched off is
# complete, even when PyTorch's total (read when the report is made) and the blocks listed (a moment
# later, as other threads allocate and free) differ. It said "partial" there (review); here a total
# larger than the blocks from a caller that says so.
shim_never_switched_complete() {
  fresh
  GPUGUARD_LEDGER=none shimmed "$BIN/c10_app" raw 0x7f0000002000 4096 1048576 report never >/dev/null 2>err.txt ||
    { cat err.txt; return 1; }
  local r; r=$(report_named never)
  [[ -n $r ]] || { echo "no report"; cat err.txt; return 1; }
  expect_eq "$(json "$r" '(lambda c: (c["complete"], c["unlisted_bytes"], c["switched_off"]))(d["tensor_view"]["coverage"])')" \
    "(True, 0, 0)" "the coverage of a view never switched off"
}
check "a view never switched off is complete, whatever PyTorch's total reads beside the blocks listed" shim_never_switched_complete

# A forked child's coverage is its own: the parent's switching (off and on again) is not its history.
shim_child_coverage() {
  fresh
  GPUGUARD_LEDGER=none shimmed "$BIN/c10_app" view-off view-on fork-report child report parent >/dev/null 2>err.txt ||
    { cat err.txt; return 1; }
  local c p; c=$(report_named child); p=$(report_named parent)
  [[ -n $c && -n $p ]] || { echo "reports: child '$c', parent '$p'"; cat err.txt; return 1; }
  expect_eq "$(json "$c" 'd["tensor_view"]["coverage"]["switched_off"]')" "0" "the child's switches" &&
    expect_eq "$(json "$p" 'd["tensor_view"]["coverage"]["switched_off"]')" "1" "the parent's"
}
check "a forked child's tensor view coverage starts afresh (the parent's switches are not its own)" shim_child_coverage

# The view's batches are applied by a thread of the shim's (shim/torch/pending.h), which does not
# cross fork: a child whose parent's thread was running starts its own, and its report lists its own
# blocks and events, every one, and none of its parent's.
shim_child_applier() {
  fresh
  GPUGUARD_LEDGER=none shimmed "$BIN/c10_app" alloc 1Kx700 fork-blocks 700 child alloc 1Kx100 report parent >/dev/null 2>err.txt ||
    { cat err.txt; return 1; }
  local c p; c=$(report_named child); p=$(report_named parent)
  [[ -n $c && -n $p ]] || { echo "reports: child '$c', parent '$p'"; cat err.txt; return 1; }
  local q='(d["tensor_view"]["blocks"]["count"], sum(r[1] == "a" for r in d["tensor_view"]["events"]["rows"]))'
  expect_eq "$(json "$c" "$q")" "(700, 700)" "the child's blocks and block events" &&
    expect_eq "$(json "$p" "$q")" "(800, 800)" "the parent's"
}
if [[ $SANITIZER == thread ]]; then
  # The child starts a thread after a fork of a process with threads, which ThreadSanitizer refuses
  # ("starting new threads after multi-threaded fork is not supported"); the plain and ASan runs check it.
  skip "a forked child applies its own blocks' events" "ThreadSanitizer cannot start threads in a forked child"
else
  check "a forked child applies its own 700 blocks' events, none of its parent's 700 before" shim_child_applier
fi

# Issue 29: at GPUGUARD_TENSOR_EVENTS's maximum the shim wrote a 107 MB report that `gpuguard report`
# refused (over its 64 MiB), and a caller's message went in whole. Now the report lists the newest
# events that fit (common/report/limits.h), counts the rest as dropped and left out, cuts the message
# with a marker, and the command reads it.
shim_full_ring_readable() {
  fresh
  local message; message=$(head -c 100000 /dev/zero | tr '\0' y)
  GPUGUARD_TENSOR_EVENTS=1048576 GPUGUARD_LEDGER=none shimmed "$BIN/c10_app" alloc 4Kx300000 free-all \
    alloc 4Kx300000 free-all rss-mark report "$message" rss-rise >out.txt 2>err.txt || { cat err.txt; return 1; }
  # The writer streams the report (shim/report/json_out.h): writing it raised the resident memory by
  # 121 MiB when the report was made whole first, by under 1 MiB now. Not under a sanitizer, whose
  # allocator keeps freed memory resident (ASan's quarantine).
  local rise; rise=$(sed -n 's/^rss_rise_kib=//p' out.txt)
  [[ -n ${SANITIZER:-} ]] || expect_eq "$((rise < 64 * 1024))" 1 "writing the report raised RSS by at most 64 MiB (${rise} KiB)" || return 1
  local r; r=$(ls "$GPUGUARD_REPORT_DIR"/gpuguard-request-*.json 2>/dev/null | head -1)
  [[ -n $r ]] || { echo "no report"; cat err.txt; return 1; }
  expect_eq "$(($(stat -c %s "$r") <= 64 * MiB))" 1 "the report's size ($(stat -c %s "$r") bytes) within 64 MiB" &&
    expect_eq "$(json "$r" '(lambda e: (e["capacity"], len(e["rows"]) + e["dropped"] == e["recorded"] > 1200000, e["left_out"] > 0, len(e["rows"]) + e["left_out"]))(d["tensor_view"]["events"])')" \
      "(1048576, True, True, 1048576)" "the ring's rows written, dropped and left out" &&
    # gpuguard_report() keeps a request's first 4 KiB (the writer would cut any message at 64 KiB).
    expect_eq "$(json "$r" '(d["message"].startswith("y" * 4096), d["message"].endswith(" [message cut: 100000 bytes in all]"))')" \
      "(True, True)" "the message cut with its marker" &&
    { "$CLI" report --no-color "$r" >out.txt 2>err.txt || { echo "gpuguard report refused it:"; cat err.txt; return 1; }; }
}
check "at GPUGUARD_TENSOR_EVENTS=1048576 and a 100 kB message the report stays within 64 MiB, its writing within 64 MiB of memory, and gpuguard report reads it" shim_full_ring_readable
