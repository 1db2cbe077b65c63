# gpuguard report: the summary, each export format, diff, and the errors on files that are not
# readable reports. Reads the fixtures in tests/data (docs/report-schema.md, hand-written).
DATA=$ROOT/tests/data
PT=$DATA/pytorch_quota.json

# ---- the text summary --------------------------------------------------------------------------

summary_of_pytorch_quota_oom() {
  local out; out=$("$CLI" report --no-color "$PT") || return 1
  expect_contains "$out" "OUT OF MEMORY (quota): cudaMalloc of 1.00 GiB on device 0 was refused" "headline" &&
  expect_contains "$out" "the container limit is 8.00 GiB (GPUGUARD_MEM_LIMIT=8GiB)" "limit line" &&
  expect_contains "$out" "a sibling process holds most of it: pid 4300" "sibling" &&
  expect_contains "$out" "container     7.50 GiB" "container usage" &&
  expect_contains "$out" "peak          3.50 GiB" "peak" &&
  expect_contains "$out" "cuDNN  largest workspace requested 4.00 GiB" "cudnn section"
}
check "summary says what failed, the limit, the usage, and that a sibling process holds most" summary_of_pytorch_quota_oom

failed_stack_python_first() {
  local out py nat
  out=$("$CLI" report --no-color "$PT" | sed -n '/^Failed request/,/^$/p')
  expect_contains "$out" "cudaMalloc 1.00 GiB  (driver cuMemAlloc_v2, CUDA_ERROR_OUT_OF_MEMORY, thread 4242)" "request line" || return 1
  py=$(grep -n "python  _conv_forward (torch/nn/modules/conv.py:549)" <<<"$out" | cut -d: -f1)
  nat=$(grep -n "native  c10::cuda::CUDACachingAllocator" <<<"$out" | cut -d: -f1)
  [[ -n $py && -n $nat && $py -lt $nat ]] || { echo "python frames ($py) should come before native ones ($nat):"; echo "$out"; return 1; }
  expect_not_contains "$out" "libgpuguard" "failed stack (the shim's own frames are hidden)"
}
check "the failed request's stack lists Python frames first, then the nearest native frames" failed_stack_python_first

holders_largest_first() {
  local out; out=$("$CLI" report --no-color "$PT" | sed -n '/^Top holders/,/^$/p')
  local first second
  first=$(sed -n 2p <<<"$out"); second=$(sed -n 4p <<<"$out")
  expect_contains "$first" "1.25 GiB  42%" "first holder" && expect_contains "$first" "_init_group (torch/optim/adam.py:157)" "first holder's best frame" &&
  expect_contains "$out" "← train_step (work/train.py:61)" "the program's own frame under a library frame" &&
  expect_contains "$second" "1.00 GiB  33%" "second holder" &&
  # a stack without Python frames is named by its first native frame past the allocator machinery
  expect_contains "$out" "torch::autograd::generated::ConvolutionBackward0::apply" "native-only holder"
}
check "top holders are listed largest first, each with its best frame" holders_largest_first

advice_follows_the_data() {
  local out; out=$("$CLI" report --no-color "$PT")
  expect_contains "$out" "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" "caching allocator advice" &&
  expect_contains "$out" "The optimizer step holds 1.25 GiB" "phase advice" &&
  expect_contains "$out" "GPUGUARD_CUDNN_WORKSPACE_LIMIT=512MiB" "cudnn advice" &&
  expect_contains "$out" "Another process of this container holds most of its GPU memory" "sibling advice" &&
  expect_not_contains "$out" "raise GPUGUARD_MEM_LIMIT" "advice (the limit is not what is short here)" || return 1
  out=$("$CLI" report --no-color "$DATA/driver_oom.json")
  expect_contains "$out" "OUT OF MEMORY (physical memory): cuMemAlloc_v2 of 4.00 GiB on device 0 failed in the driver" "driver_oom headline" &&
  expect_contains "$out" "alloc_matrix (matmul)" "native best frame" &&
  expect_not_contains "$out" "Advice" "driver_oom summary (nothing in its data calls for advice)" &&
  expect_not_contains "$out" "PYTORCH" "driver_oom summary" || return 1
  out=$("$CLI" report --no-color "$DATA/exit_report.json")
  expect_contains "$out" "Report at exit: no allocation failed" "exit headline" &&
  expect_not_contains "$out" "forward pass" "exit summary (CuPy has no PyTorch phases)"
}
check "advice is given only where the data supports it" advice_follows_the_data

limit_below_peak() {
  python3 - "$PT" small.json <<'PY' || return 1
import json, sys
d = json.load(open(sys.argv[1]))
d["limit"]["bytes"] = 3 << 30; d["limit"]["spec"] = "3GiB"
d["ledger"]["processes"] = [p for p in d["ledger"]["processes"] if p["self"]]
d["usage"]["container_bytes"] = d["usage"]["process_bytes"]
json.dump(d, open(sys.argv[2], "w"))
PY
  local out; out=$("$CLI" report --no-color small.json | tr -s ' \n' '  ')
  expect_contains "$out" "The limit is smaller than this program needs" "advice" &&
  expect_contains "$out" "held 3.00 GiB and asked for 1.00 GiB more (4.00 GiB), and held 3.50 GiB at its peak" "numbers" &&
  expect_contains "$out" "raise GPUGUARD_MEM_LIMIT to at least 4GiB" "suggested limit" &&
  expect_not_contains "$out" "sibling" "summary without siblings" || return 1
  out=$("$CLI" report --json small.json)
  expect_eq "$(python3 -c 'import json,sys; print(",".join(a["id"] for a in json.load(sys.stdin)["analysis"]["advice"]))' <<<"$out")" \
    "raise-limit,caching-allocator,optimizer,cudnn-workspace" "advice ids of --json"
}
check "a limit below what the program holds at its peak is named, with a limit that would do" limit_below_peak

plain_when_piped() {
  local out; out=$("$CLI" report "$PT" | cat)
  [[ $out != *$'\033'* ]] || { echo "escape codes in piped output"; return 1; }
  out=$(script -qec "$CLI report --no-color $PT" /dev/null 2>/dev/null || "$CLI" report --no-color "$PT")
  [[ $out != *$'\033['* ]] || { echo "escape codes despite --no-color"; return 1; }
}
check "no colour when the output is not a terminal, nor with --no-color" plain_when_piped

top_n() {
  local n; n=$("$CLI" report --no-color --top 2 "$PT" | sed -n '/^Top holders/,/^$/p' | grep -c '×')
  expect_eq "$n" 2 "holders listed with --top 2" &&
  expect_contains "$("$CLI" report --no-color --top 2 "$PT")" "in 3 more stacks (--top N shows more)" "the rest"
}
check "--top N limits the holders listed" top_n

# ---- export formats ----------------------------------------------------------------------------

folded_format() {
  "$CLI" report --folded out.folded "$PT" 2>/dev/null || return 1
  python3 - out.folded <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 5, lines
total = 0
for l in lines:
    m = re.fullmatch(r'([^;\n]+(?:;[^;\n]+)*) ([0-9]+)', l)
    assert m, "malformed folded line: %r" % l
    total += int(m.group(2))
assert total == 3 << 30, total
first = lines[0].split(';')
assert first[0] == '<module> (work/train.py:118)', first[0]          # outermost first
assert first[-1] == 'cudaMalloc (libcudart.so.12)', first[-1]       # the shim's own frame is dropped
PY
  "$CLI" report --folded - --peak "$PT" | grep -q '^<module> (work/train.py:118);.* 1610612736$' || { echo "--peak to stdout"; return 1; }
}
check "--folded writes 'outer;...;inner bytes' lines, outermost first, summing to live bytes" folded_format

speedscope_format() {
  "$CLI" report --speedscope out.speedscope.json "$PT" 2>/dev/null || return 1
  python3 - out.speedscope.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
# Required by https://www.speedscope.app/file-format-schema.json (FileFormat.File, SampledProfile, Frame)
assert d["$schema"] == "https://www.speedscope.app/file-format-schema.json"
frames = d["shared"]["frames"]
assert all(isinstance(f["name"], str) for f in frames)
assert all(isinstance(f.get("line", 0), (int, float)) and isinstance(f.get("file", ""), str) for f in frames)
assert len(d["profiles"]) == 2
for p in d["profiles"]:
    assert p["type"] == "sampled" and p["unit"] == "bytes" and isinstance(p["name"], str)
    assert len(p["samples"]) == len(p["weights"]) > 0
    assert all(0 <= i < len(frames) for s in p["samples"] for i in s)
    assert p["startValue"] == 0 and p["endValue"] == sum(p["weights"])
assert d["profiles"][0]["endValue"] == 3 << 30
top = d["profiles"][0]["samples"][0]
assert frames[top[0]]["name"] == "<module> (work/train.py:118)"     # samples run from the root
assert isinstance(d["activeProfileIndex"], int) and d["exporter"].startswith("gpuguard")
PY
}
check "--speedscope writes speedscope's file format: shared frames, sampled byte profiles" speedscope_format

perfetto_format() {
  "$CLI" report --perfetto out.trace.json "$PT" 2>/dev/null || return 1
  python3 - out.trace.json "$PT" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2]))
ev = d["traceEvents"]
for e in ev:
    assert isinstance(e["ph"], str) and isinstance(e["name"], str) and isinstance(e["pid"], int), e
    if e["ph"] != "M":
        assert isinstance(e["ts"], (int, float)), e
counters = [e for e in ev if e["ph"] == "C" and e["name"] == "GPU memory (live bytes)"]
assert len(counters) >= len(r["timeline"]["points"]), len(counters)
ts = [e["ts"] for e in counters]
assert ts == sorted(ts)
assert all(isinstance(e["args"]["bytes"], int) for e in counters)
limit = [e for e in ev if e["ph"] == "C" and e["name"] == "GPU memory limit"]
assert limit and limit[0]["args"]["bytes"] == 8 << 30
oom = [e for e in ev if e["ph"] == "i" and e["name"].startswith("OOM")]
assert len(oom) == 1 and oom[0]["s"] in ("g", "p", "t") and oom[0]["args"]["bytes"] == 1 << 30
assert abs(oom[0]["ts"] - (r["time_unix_ns"] - r["timeline"]["t0_unix_ns"]) / 1000) < 1
assert any(e["ph"] == "M" and e["name"] == "process_name" for e in ev)
PY
}
check "--perfetto writes trace events: a counter track for the timeline, an instant for the failure" perfetto_format

memory_viz_format() {
  "$CLI" report --memory-viz out.pickle "$PT" 2>/dev/null || return 1
  python3 - out.pickle "$PT" <<'PY'
import json, pickle, sys
raw = open(sys.argv[1], "rb").read()
assert raw[:2] == b"\x80\x02", raw[:2]                  # protocol 2, which MemoryViz.js's unpickler reads
# Only opcodes that the unpickler in torch/utils/viz/MemoryViz.js (pytorch.org/memory_viz) handles.
import pickletools
viz = {"PROTO", "EMPTY_DICT", "EMPTY_LIST", "MARK", "SETITEMS", "SETITEM", "APPENDS", "APPEND", "BINUNICODE",
       "SHORT_BINUNICODE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "NONE", "NEWTRUE", "NEWFALSE",
       "STOP", "MEMOIZE", "BINPUT", "BINGET", "FRAME", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"}
used = {op.name for op, _, _ in pickletools.genops(raw)}
assert used <= viz, used - viz
s = pickle.loads(raw); r = json.load(open(sys.argv[2]))
assert set(s) >= {"segments", "device_traces"}
live = 0
for seg in s["segments"]:
    for k in ("device", "address", "total_size", "allocated_size", "stream", "blocks"):
        assert k in seg, k
    # the invariant torch.cuda._memory_viz.segsum asserts: blocks tile the segment
    assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
    for b in seg["blocks"]:
        assert b["state"] == "active_allocated" and b["requested_size"] <= b["size"]
        assert all(set(f) == {"filename", "line", "name"} for f in b["frames"])
        live += b["size"]
    assert seg["address"] < 2 ** 53                     # exact as a JavaScript number
assert live == r["usage"]["process_bytes"], live
addr = {seg["address"] for seg in s["segments"]}
assert 0x7f09a0000000 in addr                           # real allocations keep their address
oom = s["device_traces"][0][-1]
assert oom["action"] == "oom" and oom["size"] == 1 << 30 and oom["device_free"] == (8 << 30) - 7680 * (1 << 20)
# Python frames first (what memory_viz shows first), then the native ones down to the driver call.
py = [f["filename"].endswith(".py") for f in oom["frames"]]
assert py[0] and py == sorted(py, reverse=True), oom["frames"]
assert any(f["name"].startswith("cudaMalloc") or f["filename"].endswith("libcudart.so.12") for f in oom["frames"])
PY
}
check "--memory-viz writes a pickled PyTorch snapshot: segments tiled by blocks, an oom trace event" memory_viz_format

# With a tensor view, the snapshot is PyTorch's own: every segment with the live blocks in it, the gaps
# free. The checks decode the pickle as MemoryViz.js does (a block's address is its segment's address
# plus the sizes before it) and compare each segment with the fixture's blocks.
TV=$DATA/tensor_fragmentation.json
check_tensor_snapshot() {  # PICKLE REPORT [expandable]
  python3 - "$@" <<'PY'
import json, pickle, pickletools, sys
raw = open(sys.argv[1], "rb").read(); r = json.load(open(sys.argv[2])); expandable = len(sys.argv) > 3
viz = {"PROTO", "EMPTY_DICT", "EMPTY_LIST", "MARK", "SETITEMS", "APPENDS", "BINUNICODE", "BININT", "BININT1",
       "BININT2", "LONG1", "NONE", "NEWTRUE", "NEWFALSE", "STOP", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET"}
used = {op.name for op, _, _ in pickletools.genops(raw)}
assert used <= viz, used - viz
s = pickle.loads(raw); tv = r["tensor_view"]; MiB = 1 << 20
live = {b[0]: b for b in tv["blocks"]["list"]}
torch_segs = [seg for seg in s["segments"] if seg["blocks"][0]["frames"][:1] != [] and
              seg["blocks"][0]["frames"][0]["filename"] == "gpuguard"]
assert len(torch_segs) == 1, [hex(x["address"]) for x in torch_segs]        # NCCL's, outside the caching allocator
nccl = torch_segs[0]
assert nccl["address"] == 0x7F29F0000000 and nccl["total_size"] == 64 * MiB and nccl["allocated_size"] == 64 * MiB
assert "outside PyTorch's caching allocator" in nccl["blocks"][0]["frames"][0]["name"]
segs = [seg for seg in s["segments"] if seg is not nccl]
assert len(segs) == 86, len(segs)
seen = set()
for seg in segs:
    assert seg["total_size"] == 20 * MiB and seg["segment_type"] == "large" and seg["is_expandable"] == expandable, seg
    addr, allocated = seg["address"], 0
    for b in seg["blocks"]:
        assert b["address"] == addr, (hex(b["address"]), hex(addr))   # MemoryViz.js derives it this way
        if b["state"] == "active_allocated":
            want = live[addr]
            assert b["size"] == want[1] == b["requested_size"], b
            names = [f["filename"] + ":" + str(f["line"]) + ":" + f["name"] for f in b["frames"]]
            assert not any("libgpuguard" in n for n in names), names
            assert any(n.endswith("/work/model.py:41:forward") or n.endswith("/work/train.py:57:log_metrics") for n in names), names
            allocated += b["size"]; seen.add(addr)
        else:
            assert b["state"] == "inactive" and b["frames"] == [] and b["size"] > 0, b
            assert addr not in live
        addr += b["size"]
    assert addr == seg["address"] + seg["total_size"]                  # the blocks tile the segment
    assert allocated == seg["allocated_size"] == seg["active_size"]
    assert not any(x["state"] == y["state"] == "inactive" for x, y in zip(seg["blocks"], seg["blocks"][1:]))
assert seen == set(live), len(seen)                                    # every live block, once
assert sum(seg["allocated_size"] for seg in segs) == tv["allocated_bytes"] == 880 * MiB
assert sum(seg["total_size"] for seg in segs) == tv["reserved_bytes"]
three = next(seg for seg in segs if seg["address"] == 0x7F2A00000000)  # blocks at 0, 8, 16 MiB: two 4 MiB holes
assert [(b["address"] - three["address"]) // MiB for b in three["blocks"]] == [0, 4, 8, 12, 16]
assert [b["state"][0] for b in three["blocks"]] == ["a", "i", "a", "i", "a"]
oom = s["device_traces"][0][-1]
assert oom["action"] == "oom" and oom["size"] == 600 * MiB and oom["device_free"] == 2048 * MiB - 1784 * MiB, oom
assert oom["time_us"] == tv["oom"]["time_unix_ns"] // 1000
PY
}
memory_viz_tensor_view() {
  "$CLI" report --memory-viz tv.pickle "$TV" 2>/dev/null || return 1
  check_tensor_snapshot tv.pickle "$TV"
}
check "--memory-viz with a tensor view: each segment holds its live blocks with their frames, the gaps inactive" memory_viz_tensor_view

memory_viz_expandable() {
  # The same memory as expandable segments: no driver allocation per segment, each 20 MiB range mapped
  # as two 10 MiB pages; adjacent pages are one segment, as in PyTorch's snapshot.
  python3 - "$TV" exp.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); tv = d["tensor_view"]; MiB = 1 << 20
tv["allocator_conf"] = "expandable_segments:True"
tv["mappings"] = [[a + half, 10 * MiB] for a, size, _, _ in tv["segments"] if size == 20 * MiB for half in (0, 10 * MiB)]
tv["segments"] = [s for s in tv["segments"] if s[1] != 20 * MiB]
json.dump(d, open(sys.argv[2], "w"))
PY
  "$CLI" report --memory-viz exp.pickle exp.json 2>/dev/null || return 1
  check_tensor_snapshot exp.pickle exp.json expandable
}
check "--memory-viz with expandable segments: adjacent mapped ranges are one segment with its blocks" memory_viz_expandable

memory_viz_many_strings() {
  # Past 256 distinct strings the pickle's memo takes 4-byte indices (LONG_BINPUT, LONG_BINGET).
  python3 - "$TV" many.json <<'PY'
import copy, json, sys
d = json.load(open(sys.argv[1])); tv = d["tensor_view"]
for i, b in enumerate(tv["blocks"]["list"]):  # two blocks a stack: 220 new strings, each written twice
    st = copy.deepcopy(d["stacks"][b[2]]); st["frames"][-1]["function"] = "f%d" % (i // 2)
    st["frames"][-1]["file"] = "/work/g%d.py" % (i // 2)
    d["stacks"]["x%d" % i] = st; b[2] = "x%d" % i
json.dump(d, open(sys.argv[2], "w"))
PY
  "$CLI" report --memory-viz many.pickle many.json 2>/dev/null || return 1
  python3 - many.pickle many.json <<'PY'
import json, pickle, pickletools, sys
raw = open(sys.argv[1], "rb").read(); d = json.load(open(sys.argv[2]))
assert {"LONG_BINPUT", "LONG_BINGET"} <= {op.name for op, _, _ in pickletools.genops(raw)}
s = pickle.loads(raw)
names = {b["address"]: [f["name"] for f in b["frames"] if f["filename"].endswith(".py")][-1] for seg in s["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"}
for i, b in enumerate(d["tensor_view"]["blocks"]["list"]):
    assert names[b[0]] == "f%d" % (i // 2), (names[b[0]], i)
PY
}
check "--memory-viz writes each string once and refers to it after, past 256 strings too" memory_viz_many_strings

several_outputs_at_once() {
  "$CLI" report --html a.html --folded a.folded --speedscope a.ss.json --perfetto a.trace.json --memory-viz a.pickle "$PT" 2>err.txt || return 1
  for f in a.html a.folded a.ss.json a.trace.json a.pickle; do [[ -s $f ]] || { echo "$f missing"; return 1; }; done
  expect_eq "$(grep -c '^gpuguard: wrote ' err.txt)" 5 "'wrote' lines on stderr"
}
check "several outputs can be written in one run" several_outputs_at_once

html_self_contained() {
  "$CLI" report --html page.html "$PT" 2>/dev/null || return 1
  grep -Eiq '(src|href)="(https?:)?//' page.html && { echo "the page loads something from the network"; return 1; }
  grep -q '@import' page.html && { echo "the page imports a stylesheet"; return 1; }
  grep -q '<script type="application/json" id="gg-data">' page.html || { echo "no embedded data"; return 1; }
  python3 - page.html <<'PY'
import json, re, sys
html = open(sys.argv[1]).read()
data = re.search(r'<script type="application/json" id="gg-data">(.*?)</script>', html, re.S).group(1)
d = json.loads(data)
assert d["report"]["schema"] == "gpuguard.report" and d["analysis"]["failure"] is True
assert "s1" in d["view"]["stacks"]
assert "{{" not in html, "a template placeholder was left"
PY
}
check "--html writes one self-contained page with the data embedded as JSON" html_self_contained

# The reader reads a report's arrays of rows as it parses them and keeps them in the document only for
# --html, which embeds it (tools/report/streamed_rows.h): the page holds every row of the file, the
# summary and --json read the same events. A crafted 4 MB report (tests/data/adversarial_report.py),
# 52,500 events replayed among others of another device.
html_embeds_every_row() {
  fresh
  python3 "$DATA/adversarial_report.py" --fragments 20000 --holes 5000 --rounds 5000 --bytes 4000000 crafted.json || return 1
  "$CLI" report --html page.html crafted.json 2>/dev/null || return 1
  "$CLI" report --json crafted.json >summary.json 2>/dev/null || return 1
  python3 - page.html crafted.json summary.json <<'PY'
import json, re, sys
html = open(sys.argv[1]).read()
page = json.loads(re.search(r'<script type="application/json" id="gg-data">(.*?)</script>', html, re.S).group(1))
report = json.load(open(sys.argv[2]))
rows = report["tensor_view"]["events"]["rows"]
assert page["report"]["tensor_view"]["events"]["rows"] == rows, "the page's rows are not the file's"
assert page["report"]["tensor_view"]["blocks"] == report["tensor_view"]["blocks"]
replayed = json.load(open(sys.argv[3]))["analysis"]["what_if"]["events"]["replayed"]
assert replayed == page["analysis"]["what_if"]["events"]["replayed"] == 52500, replayed
PY
}
check "--html embeds every row of the report; the summary reads the same events" html_embeds_every_row

html_escapes_script_end() {
  python3 - "$PT" hostile.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["process"]["command"] = ["python3", "</script><script>document.title='pwned'</script><!--", "{{DATA}}"]
d["stacks"]["s1"]["frames"][-1]["function"] = "</SCRIPT>&amp;<b>"
json.dump(d, open(sys.argv[2], "w"))
PY
  "$CLI" report --html hostile.html hostile.json 2>/dev/null || return 1
  grep -q "<script>document.title='pwned'" hostile.html && { echo "report text ended the data block"; return 1; }
  grep -qi '</SCRIPT>&amp;' hostile.html && { echo "report text unescaped"; return 1; }
  python3 -c '
import json, re, sys
html = open(sys.argv[1]).read()
d = json.loads(re.search(r"id=\"gg-data\">(.*?)</script>", html, re.S).group(1))
assert d["report"]["process"]["command"][1].startswith("</script>")
' hostile.html
}
check "--html escapes '</' in the embedded data, so report strings cannot end the script" html_escapes_script_end

minimal_report_renders() {
  echo '{"schema": "gpuguard.report", "version": 1, "reason": "request", "future_field": {"x": 1}}' > minimal.json
  "$CLI" report --no-color minimal.json > out.txt || return 1
  expect_contains out.txt "Report requested by the program" "summary of a minimal report" || return 1
  "$CLI" report --html m.html --folded m.folded --speedscope m.ss --perfetto m.trace --memory-viz m.pickle minimal.json 2>/dev/null || return 1
  python3 -c 'import json,pickle,sys; json.load(open("m.ss")); json.load(open("m.trace")); pickle.load(open("m.pickle","rb"))'
}
check "a report with only schema and version (unknown fields, none of the sections) still renders" minimal_report_renders

# ---- errors -------------------------------------------------------------------------------------

broken_input() {
  local file=$1 needle=$2 err rc
  err=$("$CLI" report "$DATA/$file" 2>&1 >/dev/null); rc=$?
  expect_eq "$rc" 2 "exit status for $file" &&
  expect_eq "$(wc -l <<<"$err")" 1 "lines on stderr for $file" &&
  expect_contains "$err" "gpuguard: $DATA/$file: " "message naming the file" &&
  expect_contains "$err" "$needle" "message for $file"
}
check "a truncated report: exit 2 and one line naming the file" broken_input broken_truncated.json "truncated or malformed JSON"
check "a file that is not JSON: exit 2 and one line naming the file" broken_input broken_not_json.json "not JSON, not a gpuguard report"
check "a foreign JSON file: exit 2, 'not a gpuguard report (schema ...)'" broken_input broken_foreign.json "not a gpuguard report (schema 'memray.snapshot'"
check "an unknown version: exit 2, naming the version" broken_input broken_version99.json "version 99 is not supported"

usage_errors() {
  local rc
  "$CLI" report 2>/dev/null; expect_eq "$?" 2 "status without a file" || return 1
  "$CLI" report --frobnicate "$PT" 2>/dev/null; expect_eq "$?" 2 "status with an unknown option" || return 1
  "$CLI" report --top many "$PT" 2>/dev/null; expect_eq "$?" 2 "status with --top many" || return 1
  "$CLI" report --html 2>/dev/null; expect_eq "$?" 2 "status with --html and no file" || return 1
  "$CLI" report nonexistent.json 2>err.txt; rc=$?
  expect_eq "$rc" 2 "status for a missing file" && expect_contains err.txt "nonexistent.json: cannot open: No such file or directory" "message" || return 1
  "$CLI" report --help > help.txt; expect_eq "$?" 0 "status of --help" && expect_contains help.txt "--memory-viz OUT" "help" || return 1
  "$CLI" report diff --help > help.txt; expect_eq "$?" 0 "status of diff --help" && expect_contains help.txt "usage: gpuguard report diff" "diff help"
}
check "bad usage exits 2 with a message; --help exits 0" usage_errors

# Issue 30, item 7: the summary printed a report's whole message (a program's gpuguard_report() text,
# up to 4 KiB, many lines); it prints its first line, cut at about 200 characters with an ellipsis.
long_message_is_one_line() {
  local out long
  long=$(printf 'Z%.0s' $(seq 300))
  python3 - "$DATA/diff_a.json" "$TMP/long_message.json" "$long" <<'PY' || return 1
import json, sys
r = json.load(open(sys.argv[1]))
r["message"] = "checkpoint 3: " + sys.argv[3] + "\nsecond line of the program's text\nthird line\n"
json.dump(r, open(sys.argv[2], "w"))
PY
  # The text page wraps long lines, so the cut is counted in Z's: 200 characters less "checkpoint 3: ".
  out=$("$CLI" report "$TMP/long_message.json") || return 1
  expect_eq "$(grep -oE "Z{10,}" <<<"$out" | tr -d "\n" | wc -c)" 186 "the Z's of the first line shown (runs of ten or more: the temporary path may hold a Z)" &&
    expect_contains "$out" "Z…" "the ellipsis where it was cut" &&
    expect_not_contains "$out" "second line of the program's text" "the message's second line" || return 1
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["message"]="short one\n"; json.dump(r, open(sys.argv[2], "w"))' \
    "$DATA/diff_a.json" "$TMP/short_message.json" || return 1
  out=$("$CLI" report "$TMP/short_message.json") || return 1
  expect_contains "$out" "short one" "a one-line message" && expect_not_contains "$out" "short one…" "no ellipsis on a whole line"
}
check "the summary gives one line of a report's message: its first, cut at ~200 characters with an ellipsis" \
  long_message_is_one_line

# Issue 20: `gpuguard report reports/gpuguard-quota-*.json`, as the README writes it, failed once the
# folder held two reports, and `gpuguard report FOLDER` said "empty file". Several reports or a
# folder: the newest is read and named; --all reads each, oldest first.
several_reports_and_folders() {
  fresh
  mkdir -p reports empty && cp "$DATA/driver_oom.json" reports/gpuguard-driver_oom-1-h-1-1.json &&
    cp "$PT" reports/gpuguard-quota-2-h-2-1.json && touch -d '2 minutes ago' reports/gpuguard-driver_oom-1-h-1-1.json
  local out err
  out=$("$CLI" report --no-color reports/gpuguard-*.json 2>err.txt) || { cat err.txt; return 1; }
  expect_contains err.txt "2 reports given; reading the newest, reports/gpuguard-quota-2-h-2-1.json (--all reads each)" "the note" || return 1
  expect_eq "$out" "$("$CLI" report --no-color reports/gpuguard-quota-2-h-2-1.json)" "the newest report's summary" || return 1
  out=$("$CLI" report --no-color reports 2>err.txt) || { cat err.txt; return 1; }
  expect_contains err.txt "reading the newest, reports/gpuguard-quota-2-h-2-1.json" "a folder" || return 1
  out=$("$CLI" report --no-color --all reports/) || return 1
  expect_eq "$(grep '^== ' <<<"$out")" $'== reports/gpuguard-driver_oom-1-h-1-1.json\n== reports/gpuguard-quota-2-h-2-1.json' "--all's headings, oldest first" || return 1
  expect_eq "$("$CLI" report --json --all reports | python3 -c 'import json,sys; print([json.loads(l)["report"].split("/")[-1] for l in sys.stdin])')" \
    "['gpuguard-driver_oom-1-h-1-1.json', 'gpuguard-quota-2-h-2-1.json']" "--all --json, one document a line" || return 1
  "$CLI" report empty 2>err.txt; expect_eq "$?" 2 "status for a folder without reports" || return 1
  expect_contains err.txt "empty: no report in this folder (reports are named gpuguard-*.json)" "the folder's message" || return 1
  "$CLI" report diff reports "$PT" 2>err.txt; expect_eq "$?" 2 "status of diff given a folder" || return 1
  expect_contains err.txt "reports: a folder, not a report" "diff's message for a folder"
}
check "several reports or a folder: the newest is read and named; --all reads each; a folder is never an 'empty file'" several_reports_and_folders

unwritable_output() {
  local rc
  "$CLI" report --html /nonexistent-dir/page.html "$PT" 2>err.txt; rc=$?
  expect_eq "$rc" 1 "exit status" && expect_contains err.txt "gpuguard: cannot write /nonexistent-dir/page.html: No such file or directory" "message"
}
check "an output file that cannot be written: exit 1, naming it" unwritable_output

# ---- diff ---------------------------------------------------------------------------------------

diff_text() {
  local out; out=$("$CLI" report diff --no-color "$DATA/diff_a.json" "$DATA/diff_b.json") || return 1
  expect_contains "$out" "live bytes  3.56 GiB → 6.25 GiB  +2.69 GiB" "total" &&
  expect_contains "$out" "peak        4.00 GiB → 7.00 GiB  +3.00 GiB" "peak" || return 1
  local grew; grew=$(sed -n '/^Grew/,/^$/p' <<<"$out")
  expect_contains "$(sed -n 2,3p <<<"$grew")" "+3.19 GiB" "largest growth first" &&
  expect_contains "$(sed -n 2,3p <<<"$grew")" "log_metrics (work/train.py:57)" "where it grew" &&
  expect_contains "$grew" "new" "a stack only in B" &&
  expect_contains "$out" "gone" "a stack only in A" &&
  # the parameters' stack has other ids and addresses in B, and the same frames: matched, unchanged
  expect_contains "$out" "1 stack unchanged" "stacks matched by content"
}
check "diff lists what grew by stack, largest first, matching stacks by their frames" diff_text

diff_json() {
  "$CLI" report diff --json "$DATA/diff_a.json" "$DATA/diff_b.json" > d.json || return 1
  python3 - d.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
GiB, MiB = 1 << 30, 1 << 20
assert d["live_bytes_delta"] == (6 * GiB + 256 * MiB) - (3 * GiB + 576 * MiB), d["live_bytes_delta"]
assert d["peak_bytes_delta"] == 3 * GiB
s = d["stacks"]
assert [x["delta"] for x in s] == sorted((x["delta"] for x in s), reverse=True)
assert s[0]["delta"] == 3 * GiB + 192 * MiB and s[0]["status"] == "grew" and "log_metrics" in s[0]["where"]
assert {x["status"] for x in s} == {"grew", "new", "same", "shrank", "gone"}
assert len(s) == 5
assert "tensor" not in d                                 # neither report has a tensor view
PY
}
check "diff --json gives totals and per-stack changes" diff_json

# Two reports of a PyTorch program: the tensors are compared too, growth first (tests/data/tensor_fixtures.py:
# the metrics stack went from 10 to 60 blocks of 4 MiB, the attention stack from 150 to 160, and the
# 20 gradient buffers went).
diff_tensor_text() {
  local out; out=$("$CLI" report diff --no-color "$DATA/tensor_before.json" "$TV") || return 1
  expect_contains "$out" "allocated   720.00 MiB → 880.00 MiB  +160.00 MiB" "allocated total" &&
  expect_contains "$out" "reserved    1.29 GiB → 1.68 GiB  +400.00 MiB" "reserved total" || return 1
  local grew; grew=$(sed -n '/^Tensors grew/,/^$/p' <<<"$out")
  expect_contains "$(sed -n 1p <<<"$grew")" "2 stacks, largest growth first" "tensor growth heading" &&
  expect_contains "$(sed -n 2p <<<"$grew")" "+200.00 MiB  40.00 MiB → 240.00 MiB, 10 → 60 tensors" "largest tensor growth first" &&
  expect_contains "$(sed -n 3p <<<"$grew")" "log_metrics (work/train.py:57)" "where the tensors grew" &&
  expect_contains "$(sed -n 5p <<<"$grew")" "forward (work/model.py:41)" "second growth" &&
  expect_contains "$(sed -n '/^Tensors shrank/,/^$/p' <<<"$out")" "80.00 MiB → 0 B, 20 → 0 tensors, gone" "a stack of tensors gone" || return 1
  # the driver allocations' comparison is still there, after the tensors'
  local t d; t=$(grep -n '^Tensors grew' <<<"$out" | cut -d: -f1); d=$(grep -n '^Driver allocations grew' <<<"$out" | cut -d: -f1)
  [[ -n $t && -n $d && $t -lt $d ]] || { echo "tensors ($t) should come before driver allocations ($d):"; echo "$out"; return 1; }
}
check "diff of two reports with tensor views: allocated, reserved, and tensor bytes by stack, growth first" diff_tensor_text

diff_tensor_json() {
  "$CLI" report diff --json "$DATA/tensor_before.json" "$TV" > dt.json || return 1
  python3 - dt.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); t = d["tensor"]; MiB = 1 << 20
assert t["a"]["allocated_bytes"] == 720 * MiB and t["b"]["allocated_bytes"] == 880 * MiB
assert t["allocated_bytes_delta"] == 160 * MiB and t["reserved_bytes_delta"] == 400 * MiB
assert t["a"]["blocks"] == 180 and t["b"]["blocks"] == 220 and t["b"]["source"] == "c10"
s = t["stacks"]
assert [(x["where"], x["delta"], x["status"], x["count_before"], x["count_after"]) for x in s] == [
    ("log_metrics (work/train.py:57)", 200 * MiB, "grew", 10, 60),
    ("forward (work/model.py:41)", 40 * MiB, "grew", 150, 160),
    ("zero_grad (torch/optim/optimizer.py:1002) ← accumulate (work/train.py:49)", -80 * MiB, "gone", 20, 0)], s
assert s[0]["frames"][0] == "<module> (work/train.py:118)"
assert d["live_bytes_delta"] == 400 * MiB and len(d["stacks"]) == 3          # the driver allocations, as before
PY
}
check "diff --json of two reports with tensor views has a 'tensor' section" diff_tensor_json

diff_errors() {
  local rc
  "$CLI" report diff "$DATA/diff_a.json" 2>/dev/null; expect_eq "$?" 2 "status with one report" || return 1
  "$CLI" report diff "$DATA/diff_a.json" "$DATA/broken_version99.json" 2>err.txt; rc=$?
  expect_eq "$rc" 2 "status with a bad B" && expect_contains err.txt "broken_version99.json" "message"
}
check "diff with a missing or unreadable report exits 2" diff_errors
