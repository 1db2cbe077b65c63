# Issue 19: the quota bounds what the driver really takes for a process: its contexts and modules,
# code loaded lazily, CUDA graphs' memory and what stream-ordered pools keep. The test driver charges
# each of them to its ground truth (FAKE_CUDA_TRUTH), which the fake NVML lists per process; every
# check compares the ledger with that truth.
MIB=1048576
GIB=1073741824
U="$BIN/usage_linked"

# One ledger and truth per check; a context costs 300 MiB unless the check says otherwise.
usage_env() {
  fresh
  export GPUGUARD_LEDGER=$TMP/ledger GPUGUARD_MEM_LIMIT=1GiB FAKE_CUDA_TRUTH=$TMP/truth FAKE_CUDA_CTX_BYTES=$((300*MIB))
}
# The truth's bytes now and at most on device 0.
truth_now() { "$BIN/fake_truth" "$TMP/truth" | awk '/^device 0/ {print $4}'; }
truth_max() { "$BIN/fake_truth" "$TMP/truth" | awk '/^device 0/ {print $6}'; }
# Starts `usage_linked OPS... sleep MS` in the background and waits for its first line.
background() {
  local out=$1; shift
  shimmed "$U" "$@" >"$out" 2>"$out.err" &
  for _ in $(seq 100); do [[ -s $out ]] && break; sleep 0.05; done
}

context_counted() {
  usage_env
  local out r
  out=$(GPUGUARD_REPORT_ON_EXIT=1 shimmed "$U" ctx info alloc $((100*MIB)) info 2>"$TMP/err")
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((724*MIB)) total=$GIB" "cuMemGetInfo: the context is counted" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((624*MIB)) total=$GIB" "and the allocation beside it" &&
  r=$(ls "$TMP"/gpuguard-exit-*.json) &&
  expect_eq "$(json "$r" 'd["usage"]["process_by_kind"]')" \
    "{'allocations': $((100*MIB)), 'context_and_modules': $((300*MIB)), 'graphs': 0, 'pool_reserve': 0}" "the report's split" &&
  expect_eq "$(json "$r" 'd["usage"]["context_cost"]')" "{'bytes': $((300*MIB)), 'source': 'own_process'}" \
    "the context's cost, measured from NVML's figure of the process" &&
  expect_eq "$(json "$r" 'd["usage"]["quota_counts"]')" "everything" "what the quota counts" &&
  expect_eq "$(json "$r" 'd["usage"]["self_view"]')" "nvml" "the process found itself in NVML's list"
}
check "a context's cost is measured and charged; cuMemGetInfo and the report show the split" context_counted

# Threads retaining the primary context at once, each allocating as soon as it has it: the driver
# makes the others wait for the one that makes it, and so does the shim until it measured it. Before,
# another thread's retain could make it before the measuring thread's first reading, or its
# allocation land in the window: the cost went unmeasured and the context uncounted.
context_threads() {
  local mode r
  for mode in listed hidden; do
    usage_env
    GPUGUARD_REPORT_ON_EXIT=1 FAKE_NVML_PIDS=$([[ $mode == hidden ]] && echo hidden) \
      shimmed "$U" ctx_threads 4 >/dev/null 2>"$TMP/err" || { cat "$TMP/err"; return 1; }
    r=$(ls "$TMP"/gpuguard-exit-*.json) &&
    expect_eq "$(json "$r" 'd["usage"]["context_cost"]["bytes"]')" $((300*MIB)) "the cost measured (NVML $mode)" &&
    expect_eq "$(json "$r" 'd["usage"]["process_by_kind"]')" \
      "{'allocations': $((4*MIB)), 'context_and_modules': $((300*MIB)), 'graphs': 0, 'pool_reserve': 0}" \
      "the context charged once, beside the threads' allocations (NVML $mode)" || return 1
  done
}
check "threads retaining the primary context at once: its cost is measured and charged once" context_threads

# A process that cannot measure its context (no NVML at all) while no cost is known makes it
# uncounted; once another process of the ledger measured the cost, its next reconciliation (here a
# memory query) charges it. Before, it stayed uncounted for the process's life.
context_counted_once_known() {
  usage_env
  mkdir -p "$TMP/no_nvml"
  local lib
  for lib in "$FAKE"/*; do [[ $lib == *nvidia-ml* ]] || ln -sf "$lib" "$TMP/no_nvml/"; done
  FAKE=$TMP/no_nvml background "$TMP/a" ctx info sleep 1500 info
  expect_contains "$(cat "$TMP/a")" "info -> CUDA_SUCCESS free=$GIB total=$GIB" "unmeasured, the context is not counted yet" &&
  shimmed "$U" ctx >/dev/null 2>"$TMP/err" &&
  wait &&
  expect_contains "$(cat "$TMP/a")" "info -> CUDA_SUCCESS free=$((724*MIB)) total=$GIB" \
    "counted once another process measured the cost" || { cat "$TMP/a" "$TMP/a.err"; return 1; }
}
check "a context made while no cost was known is charged once another process measures it" context_counted_once_known

# NVML's figure of the process read twice, agreeing, while an allocation of 100 MiB is charged and
# not yet in the driver (the test driver takes a second to make it): the reconciliation took the
# figure as a context 100 MiB cheaper, and once the allocation landed the truth was 100 MiB above
# the ledger. The contexts' measured cost is now a floor for it.
context_floor() {
  usage_env
  local out
  out=$(FAKE_CUDA_ALLOC_DELAY_US=1000000 shimmed "$U" ctx alloc_bg $((100*MIB)) sleep 50 info sleep 300 info join info \
    2>"$TMP/err")
  expect_contains "$out" "join -> CUDA_SUCCESS" "the background allocation made" &&
  expect_eq "$(echo "$out" | grep '^info' | tail -1)" "info -> CUDA_SUCCESS free=$((624*MIB)) total=$GIB" \
    "the context still counted whole beside the allocation" || { echo "$out"; cat "$TMP/err"; return 1; }
}
check "NVML's figure read while an allocation is in flight does not lower the context below its measured cost" context_floor

# In a container NVML may list nothing, or the host's pids: the context is then measured as the
# device's used memory before and after, less what the ledger's processes charged meanwhile.
context_in_container() {
  local mode r
  for mode in hidden host; do
    usage_env
    GPUGUARD_REPORT_ON_EXIT=1 FAKE_NVML_PIDS=$mode shimmed "$U" ctx alloc $((10*MIB)) >/dev/null 2>"$TMP/err" || return 1
    r=$(ls "$TMP"/gpuguard-exit-*.json) &&
    expect_eq "$(json "$r" 'd["usage"]["context_cost"]')" "{'bytes': $((300*MIB)), 'source': 'device_delta'}" \
      "the cost with NVML's pids $mode" &&
    expect_eq "$(json "$r" 'd["usage"]["process_by_kind"]["context_and_modules"]')" $((300*MIB)) "charged ($mode)" &&
    expect_eq "$(json "$r" 'd["usage"]["self_view"] != "nvml"')" "True" "NVML's view not trusted ($mode)" || return 1
  done
}
check "in a container whose NVML shows no pids, or the host's: the context is measured on the device" context_in_container

# Once the cost is known (the first process measured it), a context that no longer fits is refused,
# with a report, as a full GPU refuses one; the truth never passes the limit.
context_refused() {
  usage_env
  export FAKE_CUDA_CTX_BYTES=$((400*MIB))
  background "$TMP/a" ctx info sleep 3000
  background "$TMP/b" ctx info sleep 3000
  local out r
  out=$(shimmed "$U" ctx 2>"$TMP/err")
  expect_contains "$out" "ctx -> CUDA_ERROR_OUT_OF_MEMORY" "the third context" &&
  expect_contains "$TMP/err" "gpuguard: refused a CUDA context: cuDevicePrimaryCtxRetain of 400.00 MiB on device 0" "the line" &&
  r=$(ls "$TMP"/gpuguard-quota-*.json) &&
  expect_eq "$(json "$r" 'd["failed_request"]["api"]')" "cuDevicePrimaryCtxRetain" "the report's request" &&
  expect_eq "$(json "$r" 'd["ledger"]["devices"][0]["by_kind"]["context_and_modules"]')" $((800*MIB)) "the siblings' contexts" &&
  (( $(truth_max) <= GIB )) || { echo "truth max $(truth_max) > limit"; return 1; }
  wait
}
check "a context that no longer fits the quota is refused with CUDA_ERROR_OUT_OF_MEMORY and a report" context_refused

modules_counted() {
  usage_env
  local out
  out=$(FAKE_CUDA_MODULE_BYTES=$((64*MIB)) shimmed "$U" ctx module module info unload info unload info 2>"$TMP/err")
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((596*MIB))" "two modules loaded" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((660*MIB))" "one unloaded" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((724*MIB))" "both unloaded"
}
check "module and library loads are measured around the load and given back at unload" modules_counted

# Code the driver loads at a kernel's first launch passes no hook: NVML's figure of the process counts it,
# at its first reading (what is in flight makes a reading low, never high: a rise is a floor).
lazy_code_counted() {
  usage_env
  local out
  out=$(FAKE_CUDA_LAZY_BYTES=$((32*MIB)) shimmed "$U" ctx launch_kernel info sleep 250 info 2>"$TMP/err")
  expect_eq "$(grep -o 'free=[0-9]*' <<<"$out" | tr '\n' ' ')" "free=$((692*MIB)) free=$((692*MIB)) " \
    "lazily loaded code, from NVML's view of the process, at the first reading"
}
check "code loaded lazily at a kernel's first launch is counted from NVML's figure of the process" lazy_code_counted

# A driver may take memory and give it back within a call: one reading of NVML's figure then runs
# high. The soak's test driver showed it 57 MB high, normal again a read later; counted at once, the
# kind rose by it and the ledger passed its limit. Here one list call of NVML, whichever of the
# readings it falls on, adds 100 MiB: never counted.
nvml_spike_not_counted() {
  usage_env
  local call out
  for call in 4 5 6 7; do
    out=$(FAKE_NVML_SPIKE=$call:$((100*MIB)) shimmed "$U" ctx info sleep 150 info sleep 150 info 2>"$TMP/err")
    expect_eq "$(grep -o 'free=[0-9]*' <<<"$out" | tr '\n' ' ')" "free=$((724*MIB)) free=$((724*MIB)) free=$((724*MIB)) " \
      "the spike on NVML's call $call" || return 1
  done
}
check "memory NVML's figure shows for one reading only is not counted" nvml_spike_not_counted

# A fall counts when a second reading 200 ms later shows one too, to the higher of the two, though the
# two differ: under traffic they rarely agree within 2 MiB, and with rises counted at once the kind
# would stay at the highest figure it reached. Here NVML's figure runs 100 MiB high for two readings
# (a rise), then reads normal and 10 MiB high in turn.
nvml_fall_counted() {
  usage_env
  local out
  # NVML's calls: three for the context, then one a reading (and one more straight after for a rise).
  out=$(FAKE_NVML_SPIKE=4:$((100*MIB)),5:$((100*MIB)),7:$((10*MIB)) shimmed "$U" ctx info sleep 250 \
    info sleep 250 info sleep 250 info 2>"$TMP/err")
  expect_eq "$(grep -o 'free=[0-9]*' <<<"$out" | tr '\n' ' ')" \
    "free=$((624*MIB)) free=$((624*MIB)) free=$((714*MIB)) free=$((714*MIB)) " \
    "the rise, then the fall to the higher of two readings that differ"
}
check "NVML's figure falling counts once two readings 200 ms apart show it, though they differ" nvml_fall_counted

# Near the limit the allocation path reads NVML's view every 10 ms, not once a second: code loaded
# lazily between two allocations is counted before the next is admitted. PyTorch's DDP loaded 264 MiB
# of code within a second and allocated on top: the container went 108 MiB over its limit. Here a
# context of 300 MiB, 1 MiB (the first reading), 100 MiB of code loaded lazily, 500 MiB (over 3/4 of
# the 1 GiB limit) and 200 MiB more, which fit the ledger only without the code.
lazy_code_near_limit() {
  usage_env
  local out
  out=$(FAKE_CUDA_LAZY_BYTES=$((100*MIB)) shimmed "$U" ctx alloc $MIB launch_kernel sleep 20 alloc $((500*MIB)) \
    sleep 20 alloc $((200*MIB)) 2>"$TMP/err")
  expect_contains "$out" "alloc -> CUDA_ERROR_OUT_OF_MEMORY" "the last allocation is refused" &&
  (( $(truth_max) <= GIB )) || { echo "truth max $(truth_max) > 1 GiB: $out"; return 1; }
}
check "near the limit, code loaded lazily is counted before the next allocation is admitted" lazy_code_near_limit

graphs_counted() {
  usage_env
  local out
  out=$(shimmed "$U" ctx capture $((256*MIB)) info glaunch info glaunch gdestroy info gtrim info \
        node $((128*MIB)) gupload info glaunch info 2>"$TMP/err")
  expect_eq "$(grep -o 'free=[0-9]*' <<<"$out" | tr '\n' ' ')" \
    "free=$((724*MIB)) free=$((468*MIB)) free=$((468*MIB)) free=$((724*MIB)) free=$((596*MIB)) free=$((596*MIB)) " \
    "capture takes nothing; the launch maps it; it stays after the graph is destroyed until trimmed; an upload maps" &&
  expect_eq "$(grep -c CUDA_SUCCESS <<<"$out")" 15 "every call succeeded" &&
  expect_eq "$(cat "$TMP/err")" "" "stderr"
}
check "graph memory nodes are charged when a graph is launched or uploaded, and until the graph pool is trimmed" graphs_counted

# Programs built before CUDA 12 instantiate with the five-argument cuGraphInstantiate (CUDA 10) or
# cuGraphInstantiate_v2 (CUDA 11), which the driver still exports and cuGetProcAddress hands out
# below cudaVersion 12000: their graphs are charged as CUDA 12's are.
graphs_old_instantiate() {
  local how out
  for how in capture_v1 capture_v2 capture_gpa11; do
    usage_env
    out=$(shimmed "$U" ctx $how $((256*MIB)) info glaunch info gdestroy gtrim info 2>"$TMP/err")
    expect_eq "$(grep -o 'free=[0-9]*' <<<"$out" | tr '\n' ' ')" "free=$((724*MIB)) free=$((468*MIB)) free=$((724*MIB)) " \
      "$how: the launch maps the graph's memory, the trim gives it back" &&
    expect_eq "$(grep -c CUDA_SUCCESS <<<"$out")" 8 "$how: every call succeeded" &&
    expect_eq "$(cat "$TMP/err")" "" "$how: stderr" || return 1
  done
}
check "graphs instantiated by the cuGraphInstantiate of CUDA 10 and 11 are charged as CUDA 12's are" graphs_old_instantiate

graph_refused() {
  usage_env
  local out r
  out=$(shimmed "$U" ctx alloc $((200*MIB)) capture $((600*MIB)) glaunch free glaunch info 2>"$TMP/err")
  expect_contains "$out" "glaunch -> CUDA_ERROR_OUT_OF_MEMORY" "the launch that would pass the quota" &&
  expect_contains "$TMP/err" "gpuguard: refused a CUDA graph's memory: cuGraphLaunch of 600.00 MiB on device 0" "the line" &&
  r=$(ls "$TMP"/gpuguard-quota-*.json) &&
  expect_eq "$(json "$r" 'd["failed_request"]["api"]')" "cuGraphLaunch" "the report's request" &&
  expect_eq "$(grep -A1 '^free' <<<"$out" | tail -1)" "glaunch -> CUDA_SUCCESS" "it fits once the allocation is freed" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((124*MIB))" "then it is charged" &&
  (( $(truth_max) <= GIB )) || { echo "truth max $(truth_max) > limit"; return 1; }
}
check "a graph launch whose memory would pass the quota is refused with CUDA_ERROR_OUT_OF_MEMORY and a report" graph_refused

# PyTorch's cudaMallocAsync backend: the pool keeps everything it frees (release threshold UINT64_MAX).
pools_counted() {
  usage_env
  local out
  background "$TMP/a" ctx threshold async $((256*MIB)) free_async sync info sleep 3000
  out=$(shimmed "$U" ctx info alloc $((200*MIB)) 2>"$TMP/err")
  expect_contains "$TMP/a" "info -> CUDA_SUCCESS free=$((468*MIB))" "the pool's reserve stays charged after the free" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((168*MIB))" "a sibling sees it taken" &&
  expect_contains "$out" "alloc -> CUDA_ERROR_OUT_OF_MEMORY" "and cannot have it" &&
  (( $(truth_max) <= GIB )) || { echo "truth max $(truth_max) > limit"; return 1; }
  wait
}
check "memory a stream-ordered pool keeps beyond its allocations is charged, so a sibling cannot have it" pools_counted

pool_trimmed_on_refusal() {
  usage_env
  local out
  out=$(FAKE_CUDA_TRACE=1 shimmed "$U" ctx threshold async $((256*MIB)) async $((100*MIB)) free_async free_async info \
        alloc $((500*MIB)) info 2>"$TMP/err")
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((368*MIB))" "the pool keeps 356 MiB" &&
  expect_contains "$out" "alloc -> CUDA_SUCCESS" "the allocation that needs it" &&
  expect_contains "$TMP/err" "cuMemPoolTrimTo 0 -> reserved 0" "the shim trimmed its own pool first" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((224*MIB))" "and the reserve is no longer charged" &&
  expect_eq "$(ls "$TMP"/gpuguard-*.json 2>/dev/null)" "" "no report: nothing was refused" &&
  (( $(truth_max) <= GIB )) || { echo "truth max $(truth_max) > limit"; return 1; }
}
check "before refusing, the shim trims its own pools (cuMemPoolTrimTo) and retries" pool_trimmed_on_refusal

async_alloc_from_reserve() {
  usage_env
  local out
  out=$(shimmed "$U" ctx threshold async $((256*MIB)) free_async async $((200*MIB)) info free_async info 2>"$TMP/err")
  expect_eq "$(grep -o 'free=[0-9]*' <<<"$out" | tr '\n' ' ')" "free=$((468*MIB)) free=$((468*MIB)) " \
    "an allocation the pool serves from its reserve takes nothing more, its free gives it back to the pool"
}
check "an async allocation served from the pool's reserve is not charged twice" async_alloc_from_reserve

# Async allocations and frees on four threads while a fifth reads the pools (cuMemGetInfo) without
# pause; the test driver takes 200 us before and after each change of a pool, so that readings fall
# inside calls. A reading between a free's driver call and its move of the bytes to the reserve
# counted them twice; one between an allocation's charge of its chunk and the driver's growth
# dropped the chunk while the pool grew by it (the truth over the limit). With nothing reading any
# more, the ledger must hold exactly what the driver holds, and nothing after the exit.
pool_race() {
  usage_env
  export FAKE_CUDA_CTX_BYTES=0 FAKE_NVML_PIDS=hidden FAKE_CUDA_POOL_DELAY_US=200 GPUGUARD_MEM_LIMIT=128MiB \
    GPUGUARD_MAX_REPORTS=0
  local round used truth
  for round in 1 2 3; do
    shimmed "$BIN/pool_race_linked" 4 1500 $((6*MIB)) 3000 >"$TMP/race" 2>"$TMP/race.err" &
    # A round takes 4.5 s of the test driver's sleeps alone; on a loaded machine (CI's two cores) its
    # 200 us sleeps stretch, and a 10 s wait once read nothing. Its last line comes before it sleeps 3 s.
    for _ in $(seq 1200); do [[ -s $TMP/race ]] && break; sleep 0.05; done
    expect_contains "$(cat "$TMP/race")" "errors=0" "round $round: no error but the quota's" || { cat "$TMP/race.err"; return 1; }
    used=$("$CLI" top --ledger "$TMP/ledger" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["devices"][0]["used_bytes"])')
    truth=$(truth_now)
    expect_eq "$used" "$truth" "round $round: the ledger counts what the driver holds (reserve only: all freed)" ||
      { cat "$TMP/race" "$TMP/race.err"; return 1; }
    wait
    (( $(truth_max) <= 128 * MIB )) || { echo "round $round: truth max $(truth_max) > 128 MiB"; return 1; }
    expect_eq "$(truth_now)" 0 "round $round: nothing held after exit" || return 1
  done
}
check "async allocations and frees racing readings of the pools: the ledger stays exact and the truth within the limit" pool_race

# The graph pool maps a memory node in 2 MiB chunks: a node of 3 MiB takes 4. Admitted for its 3 MiB
# beside 4.5 MiB of allocations under an 8 MiB limit, its launch took the truth to 8.5 MiB until the
# pool's figure was read after the call; charged by the chunk, it is refused.
graph_chunks() {
  usage_env
  export FAKE_CUDA_CTX_BYTES=0 GPUGUARD_MEM_LIMIT=8MiB GPUGUARD_MAX_REPORTS=0
  local out
  out=$(shimmed "$U" ctx alloc $((4*MIB + 512*1024)) node $((3*MIB)) glaunch 2>"$TMP/err")
  expect_contains "$out" "glaunch -> CUDA_ERROR_OUT_OF_MEMORY" "the launch is refused: 4 MiB do not fit" &&
  (( $(truth_max) <= 8 * MIB )) || { echo "truth max $(truth_max) > 8 MiB: $out"; return 1; }
}
check "a graph's memory nodes are charged by the chunks the graph pool maps them in" graph_chunks

# graph_race_linked, three times: four threads' graphs of 6 MiB under a 12 MiB limit, the test driver
# taking 200 us before and after each mapping; the truth stays within the limit.
#   graph_race_runs ROUNDS [trim]
graph_race_runs() {
  usage_env
  export FAKE_CUDA_CTX_BYTES=0 FAKE_NVML_PIDS=hidden FAKE_CUDA_POOL_DELAY_US=200 GPUGUARD_MEM_LIMIT=12MiB \
    GPUGUARD_MAX_REPORTS=0
  local round out
  for round in 1 2 3; do
    out=$(shimmed "$BIN/graph_race_linked" 4 "$1" $((6*MIB)) ${2:+"$2"} 2>"$TMP/race.err")
    expect_contains "$out" "errors=0" "round $round: no error but the quota's" || { cat "$TMP/race.err"; return 1; }
    (( $(truth_max) <= 12 * MIB )) || { echo "round $round: truth max $(truth_max) > 12 MiB ($out)"; return 1; }
    expect_eq "$(truth_now)" 0 "round $round: nothing held after exit" || return 1
  done
}

# First launches of graphs at once, two of which the limit holds, while a fifth thread reads the
# pools. Two launches at once each counted on the same free memory of the graph pool, and a reading
# between one's charge and its mapping set the graphs' kind below what the pool then held: the truth
# passed the limit.
graph_race() { graph_race_runs 200; }
check "first launches of graphs racing each other and readings of the graph pool: the truth stays within the limit" graph_race

# Launches of uploaded (mapped) graphs while another thread trims the graph pool: a trim unmaps graphs
# not running, so their next launch maps them again and is a first launch. A launch that found its
# graph mapped before the trim and reached the driver after it mapped the memory uncharged: the truth
# passed the limit until the pool was read again (the soak: 46 MiB over for a moment).
graph_trim_race() { graph_race_runs 100 trim; }
check "launches of mapped graphs racing trims of the graph pool: the truth stays within the limit" graph_trim_race

# The same while the reader trims the pool (cuMemPoolTrimTo), or synchronizes the context with the
# pool keeping nothing (the driver gives back what the pool holds free at a synchronization): an
# allocation drawing on free memory that was given back meanwhile grows the pool again, within what
# the ledger still charges as reserve until its next reading (pools.h says why that holds).
pool_trim_race() {
  usage_env
  export FAKE_CUDA_CTX_BYTES=0 FAKE_NVML_PIDS=hidden FAKE_CUDA_POOL_DELAY_US=200 GPUGUARD_MEM_LIMIT=128MiB \
    GPUGUARD_MAX_REPORTS=0
  local mode round out
  for mode in trim sync; do
    for round in 1 2; do
      out=$(shimmed "$BIN/pool_race_linked" 4 1500 $((6*MIB)) 0 $mode 2>"$TMP/race.err")
      expect_contains "$out" "errors=0" "$mode, round $round: no error but the quota's" || { cat "$TMP/race.err"; return 1; }
      (( $(truth_max) <= 128 * MIB )) || { echo "$mode, round $round: truth max $(truth_max) > 128 MiB ($out)"; return 1; }
      expect_eq "$(truth_now)" 0 "$mode, round $round: nothing held after exit" || return 1
    done
  done
}
check "async allocations racing trims and synchronizations of their pool: the truth stays within the limit" pool_trim_race

# A request within a chunk of 2^64: rounded up to the pool's chunk, it wrapped to nothing, and the
# quota let the driver have it (the driver's own refusal saved the day).
async_huge_refused() {
  usage_env
  local n out
  for n in 18446744073709551615 18446744073709551000; do
    out=$(shimmed "$U" ctx async $n 2>&1)
    expect_contains "$out" "async -> CUDA_ERROR_OUT_OF_MEMORY" "$n: refused" &&
    expect_contains "$out" "gpuguard: refused cuMemAllocAsync" "$n: by the quota, before the driver" || return 1
  done
}
check "an async allocation of nearly 2^64 bytes is refused by the quota, not handed to the driver" async_huge_refused

old_meaning() {
  usage_env
  local out r
  out=$(GPUGUARD_COUNT_CONTEXT=0 GPUGUARD_REPORT_ON_EXIT=1 FAKE_CUDA_MODULE_BYTES=$((64*MIB)) shimmed "$U" ctx module \
        capture $((256*MIB)) glaunch threshold async $((64*MIB)) free_async info 2>"$TMP/err")
  expect_contains "$out" "info -> CUDA_SUCCESS free=$GIB" "only allocations count, and none is live" &&
  r=$(ls "$TMP"/gpuguard-exit-*.json) &&
  expect_eq "$(json "$r" 'd["usage"]["quota_counts"]')" "allocations" "the report says so"
}
check "GPUGUARD_COUNT_CONTEXT=0 keeps the old meaning: allocations only" old_meaning

# Four processes started together on one fresh ledger, as four PyTorch ranks: one measures the
# context while the others wait for its figure and are admitted with it, so the driver never holds
# more than the quota.
four_processes() {
  usage_env
  export GPUGUARD_MEM_LIMIT=2GiB GPUGUARD_MAX_REPORTS=0
  local p
  for p in 1 2 3 4; do
    shimmed "$U" ctx threshold async $((200*MIB)) free_async alloc $((150*MIB)) capture $((100*MIB)) glaunch \
      sleep 300 >"$TMP/out.$p" 2>&1 &
  done
  wait
  (( $(truth_max) <= 2 * GIB )) || { echo "truth max $(truth_max) > 2 GiB"; cat "$TMP"/out.*; return 1; }
  (( $(truth_max) > GIB + GIB / 2 )) || { echo "never near the limit: $(truth_max)"; return 1; }
  # A process's first failure is the quota's (a refused context makes the calls after it fail too).
  expect_eq "$(for p in 1 2 3 4; do grep ' -> ' "$TMP/out.$p" | grep -v -m1 CUDA_SUCCESS; done | grep -v -c OUT_OF_MEMORY)" 0 \
    "failures that are not the quota's" &&
  expect_eq "$(truth_now)" 0 "nothing held after exit"
}
check "four processes with contexts, pools and graphs under one 2 GiB ledger: the truth stays within it" four_processes

top_and_doctor_show_it() {
  usage_env
  background "$TMP/a" ctx alloc $((100*MIB)) threshold async $((50*MIB)) free_async capture $((64*MIB)) glaunch info sleep 3000
  "$CLI" top --ledger "$TMP/ledger" --json >"$TMP/top.json" &&
  expect_eq "$(json "$TMP/top.json" 'd["devices"][0]["by_kind"]')" \
    "{'allocations': $((100*MIB)), 'context_and_modules': $((300*MIB)), 'graphs': $((64*MIB)), 'pool_reserve': $((50*MIB))}" \
    "top's split" &&
  expect_contains "$("$CLI" top --ledger "$TMP/ledger" --once)" "contexts and modules 300.00 MiB" "top's table" || return 1
  local out rc
  # NVML's v2 memory info says the contexts apart, as "reserved" (what the driver holds for itself).
  out=$(shimmed "$BIN/nvml_client")
  expect_contains "$out" "nvml_v2 total=$GIB free=$((510*MIB)) used=$((214*MIB)) reserved=$((300*MIB))" "NVML's split" || return 1
  out=$(LD_LIBRARY_PATH=$FAKE "$CLI" doctor --truth --ledger "$TMP/ledger"); rc=$?
  expect_eq "$rc" 0 "doctor --truth's status" &&
  expect_contains "$out" "+0 B" "no difference between the ledger and the driver" &&
  out=$(FAKE_NVML_PIDS=hidden LD_LIBRARY_PATH=$FAKE "$CLI" doctor --truth --ledger "$TMP/ledger") &&
  expect_contains "$out" "NVML lists none of the ledger's processes" "a container's NVML"
  wait
}
check "gpuguard top and NVML split the usage by kind; doctor --truth finds the ledger equal to the driver's view" top_and_doctor_show_it
