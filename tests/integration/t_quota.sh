# Issue 2: every way to the driver is intercepted, the per-process quota is enforced, the memory
# queries show it, and a failed allocation writes one report.
GIB=1073741824
MIB=1048576
export GPUGUARD_LEDGER=none   # a per-process quota here; t_ledger.sh tests the shared one
export GPUGUARD_REPORT_DIR=$TMP

quota_path() {
  fresh
  local mode=$1 out
  out=$(GPUGUARD_MEM_LIMIT=1GiB shimmed "$BIN/drv_linked" $mode alloc $((512*MIB)) alloc $((512*MIB)) alloc 1 info free 0 alloc $((256*MIB)) info total 2>"$TMP/err")
  expect_eq "$(sed -n 1,3p <<<"$out" | awk '{print $4}' | tr '\n' ' ')" "CUDA_SUCCESS CUDA_SUCCESS CUDA_ERROR_OUT_OF_MEMORY " "results through $mode" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=0 total=$GIB" "cuMemGetInfo at the limit" &&
  expect_contains "$out" "alloc 268435456 -> CUDA_SUCCESS" "allocation after a free" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((256*MIB)) total=$GIB" "cuMemGetInfo after the free" &&
  expect_contains "$out" "total -> CUDA_SUCCESS total=$GIB" "cuDeviceTotalMem" &&
  expect_contains "$TMP/err" "gpuguard: refused cuMemAlloc_v2 of 1 B on device 0" "the stderr line"
}
check "refuses past the limit when the program links libcuda directly" quota_path linked

# Issue 20: a refusal just over the limit reads "2.00 GiB of its 2.00 GiB limit" when rounded; the line
# then gives both in bytes, so that the excess shows.
refusal_shows_the_excess() {
  fresh
  GPUGUARD_MEM_LIMIT=2GiB shimmed "$BIN/drv_linked" linked alloc $((2*GIB)) alloc 256 >/dev/null 2>"$TMP/err"
  expect_contains "$TMP/err" "would hold 2.00 GiB (2147483904 bytes) of its 2.00 GiB (2147483648 bytes) limit" "the stderr line"
}
check "a refusal that rounding would hide gives the sum and the limit in bytes" refusal_shows_the_excess
check "refuses past the limit through dlopen + dlsym" quota_path dlsym
check "refuses past the limit through cuGetProcAddress_v2 and its self-lookup (cudart's way)" quota_path gpa
check "refuses past the limit through the legacy cuGetProcAddress (cudaVersion 11030)" quota_path gpa_legacy

# With one device the shim does not ask the driver which device the current context is on (a call
# per allocation): an allocation made with no current context is charged to device 0, refused by the
# driver, and released again.
no_context_one_device() {
  fresh
  local out
  out=$(GPUGUARD_MEM_LIMIT=1MiB shimmed "$BIN/drv_linked" linked alloc 4096 nocontext alloc 4096 alloc $((2*MIB)) \
        device 0 alloc $((MIB - 4096)) alloc 1 2>"$TMP/err")
  expect_eq "$(awk '{print $1, $2, $4}' <<<"$out" | tr '\n' ';')" \
    "alloc 4096 CUDA_SUCCESS;nocontext -> ;alloc 4096 CUDA_ERROR_INVALID_CONTEXT;alloc 2097152 CUDA_ERROR_OUT_OF_MEMORY;alloc 1044480 CUDA_SUCCESS;alloc 1 CUDA_ERROR_OUT_OF_MEMORY;" \
    "the driver's error without a context (the quota's when over it), then exactly the limit fits"
}
check "one device, no current context: the driver's error, and nothing stays charged" no_context_one_device

no_limit_tracks() {
  fresh
  local out
  out=$(GPUGUARD_REPORT_ON_EXIT=1 shimmed "$BIN/drv_linked" linked alloc $((3*GIB)) info 2>"$TMP/err")
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((13*GIB)) total=$((16*GIB))" "the physical numbers, untouched" &&
  local r; r=$(ls "$TMP"/gpuguard-exit-*.json) &&
  expect_eq "$(json "$r" 'd["limit"]')" "None" "limit" &&
  expect_eq "$(json "$r" 'd["usage"]["process_bytes"]')" "$((3*GIB))" "tracked bytes"
}
check "without a limit nothing is refused and everything is still tracked" no_limit_tracks

every_api_counted() {
  fresh
  # Each allocation API once, then the report at exit says what is live.
  local out r
  out=$(GPUGUARD_REPORT_ON_EXIT=1 shimmed "$BIN/drv_linked" linked alloc $MIB pitch 1000 10 managed $MIB async $MIB async_ptsz $MIB \
        create $((2*MIB)) array 256 256 array3d 64 64 4 mipmap 64 64 3 2>"$TMP/err")
  [[ $(grep -c CUDA_SUCCESS <<<"$out") == 9 ]] || { echo "$out"; return 1; }
  r=$(ls "$TMP"/gpuguard-exit-*.json)
  local counts; counts=$(json "$r" '" ".join(sorted(k+"="+str(v["live_bytes"]) for k,v in d["counts_by_api"].items()))')
  # pitch: 1000 bytes rounded to a 512-byte pitch = 1024 x 10 rows; arrays: float x 1 channel.
  expect_eq "$counts" "cuArray3DCreate_v2=65536 cuArrayCreate_v2=262144 cuMemAllocAsync=1048576 cuMemAllocAsync_ptsz=1048576 cuMemAllocManaged=1048576 cuMemAllocPitch_v2=10240 cuMemAlloc_v2=1048576 cuMemCreate=2097152 cuMipmappedArrayCreate=21504" "live bytes by API"
}
check "every allocation API is counted once, with its true size" every_api_counted

frees_return_to_zero() {
  fresh
  local out r
  # Allocations only: counting everything, the stream-ordered pool keeps its 2 MiB chunk after the
  # async free until a synchronization, and the quota counts it (t_usage.sh).
  out=$(GPUGUARD_COUNT_CONTEXT=0 GPUGUARD_MEM_LIMIT=64MiB GPUGUARD_REPORT_ON_EXIT=1 shimmed "$BIN/drv_linked" linked alloc $MIB pitch 1000 10 managed $MIB async $MIB \
        create $((2*MIB)) array 256 256 array3d 64 64 4 mipmap 64 64 3 \
        free 0 free 1 free 2 free_async 3 release 4 destroy 5 destroy 6 destroy 7 info 2>"$TMP/err")
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((64*MIB)) total=$((64*MIB))" "the whole quota free again" &&
  r=$(ls "$TMP"/gpuguard-exit-*.json) &&
  expect_eq "$(json "$r" 'd["usage"]["process_bytes"]')" "0" "bytes held at exit" &&
  expect_eq "$(json "$r" 'd["usage"]["live_allocations"]')" "0" "live allocations"
}
check "each free API gives its bytes back" frees_return_to_zero

runtime_names_api() {
  fresh
  local out r
  out=$(GPUGUARD_MEM_LIMIT=100MiB shimmed "$BIN/rt_client" $((60*MIB)) $((60*MIB)) 2>"$TMP/err")
  expect_contains "$out" "cudaMalloc $((60*MIB)) -> 0" "first cudaMalloc" &&
  expect_contains "$out" "cudaMalloc $((60*MIB)) -> 2" "second cudaMalloc refused (cudaErrorMemoryAllocation)" &&
  r=$(ls "$TMP"/gpuguard-quota-*.json) &&
  expect_eq "$(json "$r" 'd["failed_request"]["api"]')" "cudaMalloc" "the API the program called" &&
  expect_eq "$(json "$r" 'd["failed_request"]["driver_api"]')" "cuMemAlloc_v2" "the driver call" &&
  expect_eq "$(json "$r" 'd["counts_by_api"]["cudaMalloc"]["allocs"]')" "1" "counted once, under cudaMalloc" &&
  expect_eq "$(json "$r" '"cuMemAlloc_v2" in d["counts_by_api"]')" "False" "not counted twice"
}
check "cudart's cudaMalloc is counted once, at the driver, and reported under its own name" runtime_names_api

threads_race() {
  fresh
  # 16 threads allocate 100 MiB at once against a 1 GiB limit; the fake driver's ground truth
  # records the most ever handed out.
  local out
  FAKE_CUDA_TRUTH=$TMP/truth GPUGUARD_MAX_REPORTS=0 GPUGUARD_MEM_LIMIT=1GiB shimmed "$BIN/drv_linked" linked threads 16 $((100*MIB)) 300 >"$TMP/out" 2>"$TMP/err"
  out=$("$BIN/fake_truth" "$TMP/truth")
  local max; max=$(awk '/^device 0/ {print $6}' <<<"$out")
  (( max <= GIB )) || { echo "max handed out $max > limit"; return 1; }
  (( max > GIB / 2 )) || { echo "the race never came near the limit ($max)"; return 1; }
  grep -q "refused=[1-9]" "$TMP/out" || { cat "$TMP/out"; return 1; }
}
check "threads racing at the limit never hold more than the limit together" threads_race

malformed() {
  fresh
  local value=$1 out
  out=$(GPUGUARD_MEM_LIMIT="$value" shimmed "$BIN/drv_linked" linked alloc 1 2>"$TMP/err")
  expect_contains "$out" "alloc 1 -> CUDA_ERROR_OUT_OF_MEMORY" "every allocation refused" &&
  expect_contains "$TMP/err" "GPUGUARD_MEM_LIMIT=$value is not a valid limit" "the line naming variable and value" &&
  [[ $(grep -c "is not a valid limit" "$TMP/err") == 1 ]]
}
for v in lots 0= -5G 150%; do check "GPUGUARD_MEM_LIMIT=$v: one clear line, and the shim fails closed" malformed "$v"; done

percent_and_per_device() {
  fresh
  local out
  out=$(FAKE_CUDA_DEVICES=2 GPUGUARD_MEM_LIMIT="50%,1=1GiB" shimmed "$BIN/drv_linked" linked info device 1 info alloc $((2*GIB)) 2>/dev/null)
  expect_contains "$out" "info -> CUDA_SUCCESS free=$((8*GIB)) total=$((8*GIB))" "device 0: half of 16 GiB" &&
  expect_contains "$out" "info -> CUDA_SUCCESS free=$GIB total=$GIB" "device 1: its own limit" &&
  expect_contains "$out" "alloc $((2*GIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "refused on the device it overflows"
}
check "a percentage of the device and a per-device limit" percent_and_per_device

report_fields() {
  fresh
  GPUGUARD_MEM_LIMIT=1GiB shimmed "$BIN/drv_linked" linked alloc $((700*MIB)) alloc $((400*MIB)) >/dev/null 2>"$TMP/err"
  local r; r=$(ls "$TMP"/gpuguard-quota-*.json)
  [[ $(ls "$TMP"/gpuguard-quota-*.json | wc -l) == 1 ]] &&
  expect_contains "$TMP/err" "report: $r" "stderr names the report" &&
  expect_eq "$(json "$r" 'd["schema"], d["version"], d["reason"]')" "('gpuguard.report', 1, 'quota')" "schema and reason" &&
  expect_eq "$(json "$r" 'd["failed_request"]["bytes"], d["failed_request"]["device"]')" "($((400*MIB)), 0)" "failed request" &&
  expect_eq "$(json "$r" 'd["limit"]["bytes"], d["usage"]["process_bytes"]')" "($GIB, $((700*MIB)))" "limit and usage" &&
  expect_eq "$(json "$r" 'd["device"]["uuid"].startswith("GPU-"), d["device"]["name"], d["device"]["total_bytes"]')" "(True, 'Fake GPU 0', $((16*GIB)))" "device" &&
  expect_eq "$(json "$r" 'd["top_allocations"][0]["bytes"], d["top_allocations"][0]["api"]')" "($((700*MIB)), 'cuMemAlloc_v2')" "top allocation" &&
  expect_eq "$(json "$r" 'd["process"]["pid"] > 0, d["process"]["command"][1:3]')" "(True, ['linked', 'alloc'])" "process" &&
  expect_eq "$(json "$r" '"PATH" in d["process"]["env"], d["process"]["env"].get("GPUGUARD_MEM_LIMIT")')" "(False, '1GiB')" "environment allow-list" &&
  expect_eq "$(stat -c %a "$r")" "640" "file mode"
}
check "the report holds what the issue asks, written atomically with a unique name" report_fields

driver_oom() {
  fresh
  FAKE_CUDA_MEM=$GIB shimmed "$BIN/drv_linked" linked alloc $((800*MIB)) alloc $((800*MIB)) >"$TMP/out" 2>"$TMP/err"
  expect_contains "$TMP/out" "alloc $((800*MIB)) -> CUDA_ERROR_OUT_OF_MEMORY" "the driver's own OOM passed through" &&
  local r; r=$(ls "$TMP"/gpuguard-driver_oom-*.json) &&
  expect_eq "$(json "$r" 'd["reason"], d["failed_request"]["driver_result"]')" "('driver_oom', 2)" "reason"
}
check "an out-of-memory from the driver itself is reported as driver_oom" driver_oom

one_report_per_episode() {
  fresh
  # PyTorch's caching allocator retries after freeing its cache: several failures, one OOM.
  GPUGUARD_MEM_LIMIT=100MiB shimmed "$BIN/drv_linked" linked alloc $((90*MIB)) alloc $((20*MIB)) alloc $((20*MIB)) alloc $((20*MIB)) \
      sleep 1200 alloc $((20*MIB)) >/dev/null 2>"$TMP/err"
  expect_eq "$(ls "$TMP"/gpuguard-quota-*.json | wc -l)" "2" "reports for two episodes" &&
  expect_eq "$(grep -c 'refused' "$TMP/err")" "2" "stderr lines"
}
check "failures less than a second apart are one episode and one report" one_report_per_episode

report_cap() {
  fresh
  GPUGUARD_MAX_REPORTS=2 GPUGUARD_MEM_LIMIT=10MiB shimmed "$BIN/drv_linked" linked alloc $((20*MIB)) sleep 1100 alloc $((20*MIB)) sleep 1100 alloc $((20*MIB)) >/dev/null 2>"$TMP/err"
  expect_eq "$(ls "$TMP"/gpuguard-quota-*.json | wc -l)" "2" "reports written" &&
  expect_contains "$TMP/err" "GPUGUARD_MAX_REPORTS=2 reached" "the cap is said once"
}
check "GPUGUARD_MAX_REPORTS caps reports per process" report_cap

unwritable_dir() {
  fresh
  local out
  out=$(GPUGUARD_REPORT_DIR=/nonexistent/dir GPUGUARD_MEM_LIMIT=10MiB shimmed "$BIN/drv_linked" linked alloc $((20*MIB)) alloc $MIB 2>"$TMP/err")
  expect_contains "$out" "alloc $MIB -> CUDA_SUCCESS" "the program goes on" &&
  expect_contains "$TMP/err" "gpuguard: cannot write a report in GPUGUARD_REPORT_DIR=/nonexistent/dir: No such file or directory" "the line"
}
check "an unwritable report directory gets one clear line and the program goes on" unwritable_dir

unknown_free() {
  fresh
  local out
  out=$(FAKE_CUDA_TRACE=1 shimmed "$BIN/drv_linked" linked freeptr 0x1234 2>"$TMP/err")
  expect_contains "$out" "freeptr -> CUDA_ERROR_INVALID_VALUE" "the driver's own answer" &&
  expect_contains "$TMP/err" "fake_cuda: cuMemFree_v2 0x1234" "passed to the driver unchanged"
}
check "a free of a pointer the shim does not know goes to the driver unchanged" unknown_free

rtld_next_kept() {
  fresh
  # libA's dlsym(RTLD_NEXT, "gg_which") must find libB's, the next after libA, not the next after
  # gpuguard (a peer shim's dlsym wrapper broke OpenMP's tool loading that way).
  cat > a.c <<'C'
#include <dlfcn.h>
const char *gg_which(void) { return "A"; }
const char *call_next(void) { const char *(*f)(void) = (const char *(*)(void))dlsym(RTLD_NEXT, "gg_which"); return f ? f() : "none"; }
C
  echo 'const char *gg_which(void) { return "B"; }' > b.c
  cat > main.c <<'C'
#include <stdio.h>
const char *call_next(void);
int main(void) { printf("%s\n", call_next()); return 0; }
C
  cc -shared -fPIC -o libA.so a.c -ldl && cc -shared -fPIC -o libB.so b.c && cc -o main main.c -Wl,--no-as-needed -L. -lA -lB -Wl,-rpath,"$PWD" || return 1
  expect_eq "$(./main)" "B" "without the shim" &&
  expect_eq "$(LD_PRELOAD=$PRELOAD ./main)" "B" "with the shim"
}
check "our dlsym keeps RTLD_NEXT relative to the caller" rtld_next_kept

no_cuda_no_effect() {
  fresh
  expect_eq "$(LD_PRELOAD=$PRELOAD /bin/echo hello 2>&1)" "hello" "a program that never touches CUDA"
}
check "a program without CUDA runs untouched and silent" no_cuda_no_effect

nvml_agrees() {
  fresh
  local out
  out=$(GPUGUARD_MEM_LIMIT=1GiB shimmed "$BIN/nvml_client" 2>&1)
  expect_contains "$out" "nvml total=$GIB free=$GIB used=0" "nvmlDeviceGetMemoryInfo" &&
  expect_contains "$out" "nvml_v2 total=$GIB free=$GIB used=0" "nvmlDeviceGetMemoryInfo_v2"
}
check "NVML's memory info agrees with the quota" nvml_agrees
