# gpuguard report --stacks tensors|segments: the stacks --folded, --speedscope and --perfetto weigh.
# With PyTorch's tensor view (tensor_fragmentation.json) the default is the tensors: live blocks by the
# stack that allocated them (tensor_view.by_stack, peak_by_stack); segments are the driver
# allocations (by_stack, peak.by_stack). A report without one (pytorch_quota.json) has segments only.
DATA=$ROOT/tests/data
TV=$DATA/tensor_fragmentation.json
PT=$DATA/pytorch_quota.json

# expected REPORT VIEW [peak]: "innermost-python-frame bytes" lines, largest first, of the view's list.
expected() {
  python3 - "$@" <<'PY'
import sys, json
d = json.load(open(sys.argv[1])); view = sys.argv[2]; peak = len(sys.argv) > 3
src = d["tensor_view"] if view == "tensors" else dict(by_stack=d["by_stack"], peak_by_stack=d["peak"]["by_stack"])
for e in sorted(src["peak_by_stack" if peak else "by_stack"], key=lambda x: -x["bytes"]):  # as loaded
    py = [f for f in d["stacks"][e["stack"]]["frames"] if f["kind"] == "python"][0]
    print("%s:%d %d" % (py["function"], py["line"], e["bytes"]))
PY
}
# folded_innermost FILE: the same from a folded file: the innermost Python frame of each line, and its weight.
folded_innermost() {
  python3 - "$1" <<'PY'
import re, sys
for line in open(sys.argv[1]):
    frames, weight = line.rstrip("\n").rsplit(" ", 1)
    py = [m for m in (re.match(r"(\S+) \(.*:(\d+)\)$", f) for f in frames.split(";")) if m]
    print("%s:%s %s" % (py[-1].group(1), py[-1].group(2), weight))
PY
}

folded_by_view() {
  "$CLI" report --folded tv.folded "$TV" 2>/dev/null || return 1
  expect_eq "$(folded_innermost tv.folded)" "$(expected "$TV" tensors)" "default with a tensor view: the tensors" || return 1
  "$CLI" report --folded tv.folded --stacks=tensors --peak "$TV" 2>/dev/null || return 1
  expect_eq "$(folded_innermost tv.folded)" "$(expected "$TV" tensors peak)" "--stacks=tensors --peak" || return 1
  "$CLI" report --folded seg.folded --stacks segments "$TV" 2>/dev/null || return 1
  expect_eq "$(folded_innermost seg.folded)" "$(expected "$TV" segments)" "--stacks segments" || return 1
  "$CLI" report --folded seg.folded --stacks segments --peak "$TV" 2>/dev/null || return 1
  expect_eq "$(folded_innermost seg.folded)" "$(expected "$TV" segments peak)" "--stacks segments --peak"
}
check "--folded weighs the tensors' stacks by default with a tensor view, the segments' with --stacks segments" folded_by_view

speedscope_by_view() {
  "$CLI" report --speedscope tv.json "$TV" 2>/dev/null && "$CLI" report --speedscope seg.json --stacks segments "$TV" 2>/dev/null || return 1
  python3 - tv.json seg.json "$TV" <<'PY'
import json, sys
tv, seg, d = (json.load(open(p)) for p in sys.argv[1:4])
def check(doc, lists, names):
    frames = doc["shared"]["frames"]
    assert [p["name"].split(":")[0] for p in doc["profiles"]] == names, [p["name"] for p in doc["profiles"]]
    for p, want in zip(doc["profiles"], lists):
        want = sorted(want, key=lambda x: -x["bytes"])                     # largest first, as loaded
        assert p["weights"] == [e["bytes"] for e in want] and p["endValue"] == sum(p["weights"]), (p["weights"], want)
        for sample, e in zip(p["samples"], want):       # the innermost frame of each sample is its stack's
            inner = [f for f in d["stacks"][e["stack"]]["frames"] if "libgpuguard" not in f.get("module", "")][0]
            assert frames[sample[-1]]["name"].startswith(inner.get("symbol", inner.get("function", "")).split("(")[0]), frames[sample[-1]]
t = d["tensor_view"]
check(tv, [t["by_stack"], t["peak_by_stack"]], ["live tensors at the report", "tensors at the peak of allocated"])
check(seg, [d["by_stack"], d["peak"]["by_stack"]], ["live GPU memory at the report", "GPU memory at the peak"])
PY
}
check "--speedscope: a profile of the tensors' stacks (now, at the peak) by default with a tensor view, of the segments' with --stacks segments" speedscope_by_view

perfetto_by_view() {
  "$CLI" report --perfetto tv.json "$TV" 2>/dev/null && "$CLI" report --perfetto seg.json --stacks segments "$TV" 2>/dev/null &&
    "$CLI" report --perfetto pt.json "$PT" 2>/dev/null || return 1
  python3 - tv.json seg.json pt.json "$TV" "$PT" <<'PY'
import json, sys
tv, seg, pt, d, dp = (json.load(open(p)) for p in sys.argv[1:6])
def tracks(doc):
    ev = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    out = {}
    for e in ev:
        if e["ph"] == "i" and e["tid"] in names and "stack" in e.get("args", {}):
            out.setdefault(names[e["tid"]], []).append(e)
    return out
def check(doc, report, want):
    got = tracks(doc)
    assert sorted(got) == sorted(want), sorted(got)
    for name, lst in want.items():
        events, lst = got[name], sorted(lst, key=lambda x: -x["bytes"])   # largest first, as loaded
        assert [e["args"]["bytes"] for e in events] == [x["bytes"] for x in lst], name
        assert [e["args"]["count"] for e in events] == [x["count"] for x in lst], name
        for e, x in zip(events, lst):
            frames = [f for f in report["stacks"][x["stack"]]["frames"] if "libgpuguard" not in f.get("module", "")]
            assert len(e["args"]["stack"]) == len(frames), (e["args"]["stack"], frames)
            outer = frames[-1].get("function") or frames[-1]["symbol"].split("(")[0]
            assert e["args"]["stack"][-1].startswith(outer), (e["args"]["stack"], outer)   # innermost first
        assert len({e["ts"] for e in events}) == 1, name
    return got
t = d["tensor_view"]
got = check(tv, d, {"live tensors by stack at the report": t["by_stack"],
                    "tensors by stack at the peak of allocated": t["peak_by_stack"]})
ev = tv["traceEvents"]
end = [e["ts"] for e in ev if e["ph"] == "i" and e.get("cat") == "gpuguard" and e["name"].startswith("OOM")][0]
assert got["live tensors by stack at the report"][0]["ts"] == end
# the tensors' peak: the tensor timeline's point of most allocated bytes
t0 = d["timeline"]["t0_unix_ns"]; tt0 = t["timeline"]["t0_unix_ns"]
most = max(t["timeline"]["points"], key=lambda p: p[1])
assert got["tensors by stack at the peak of allocated"][0]["ts"] == (tt0 + most[0] - t0) / 1000
assert "forward (work/model.py:41)" in got["live tensors by stack at the report"][0]["name"]
check(seg, d, {"live GPU memory by stack at the report": d["by_stack"],
               "GPU memory by stack at the peak": d["peak"]["by_stack"]})
check(pt, dp, {"live GPU memory by stack at the report": dp["by_stack"],
               "GPU memory by stack at the peak": dp["peak"]["by_stack"]})
PY
}
check "--perfetto: the live bytes by stack as instant events on their own tracks, at the report and the peak, tensors' or segments'" perfetto_by_view

stacks_usage() {
  local out rc
  out=$("$CLI" report --folded x.folded --stacks=bogus "$TV" 2>&1); rc=$?
  expect_eq "$rc" 2 "status of --stacks=bogus" && expect_contains "$out" "gpuguard: report: --stacks wants tensors or segments, not 'bogus'" "message" || return 1
  expect_eq "$(wc -l <<<"$out")" 1 "lines on stderr" || return 1
  out=$("$CLI" report --stacks segments "$TV" 2>&1); rc=$?
  expect_eq "$rc" 2 "status of --stacks without a stack export" && expect_contains "$out" "--stacks applies to --folded, --speedscope and --perfetto" "message" || return 1
  # Tensors asked of a report without a tensor view: the segments' stacks, and a line that says so.
  out=$("$CLI" report --folded pt.folded --stacks tensors "$PT" 2>&1); rc=$?
  expect_eq "$rc" 0 "status" && expect_contains "$out" "has no tensor view (PyTorch's blocks): the stacks written are the segments'" "note" || return 1
  "$CLI" report --folded pt2.folded "$PT" 2>/dev/null && cmp -s pt.folded pt2.folded || { echo "tensors of a report without them: not the segments' stacks"; return 1; }
  "$CLI" report --help | grep -q -- "--stacks WHOSE" || { echo "--stacks missing from --help"; return 1; }
}
check "--stacks: a bad value or no stack export is a usage error (exit 2, one gpuguard: line); tensors of a report without them writes the segments'" stacks_usage
