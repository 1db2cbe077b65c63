# gpuguard report --memory-viz: the report's block events as the snapshot's device_traces, PyTorch's
# trace entries (torch.cuda.memory._snapshot()), so that memory_viz's Active Memory Timeline replays the
# run. memory_viz_reader.py redoes what MemoryViz.js does with the trace (torch is not needed);
# tests/gpu/memory_viz.sh feeds a real run's snapshot to torch.cuda._memory_viz on a GPU machine.
DATA=$ROOT/tests/data
export PYTHONPATH=$ROOT/tests/integration${PYTHONPATH:+:$PYTHONPATH}

# The fragmentation fixture with a longer ring: a segment got, a block allocated and freed in it, the
# segment given back, an expandable segment's handle (address 0) got and given back, a refusal PyTorch
# recovered from, then the fixture's own events (frees and allocs of live blocks, the final refusal).
events_report() {  # OUT
  python3 - "$DATA/tensor_fragmentation.json" "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); ev = d["tensor_view"]["events"]; MiB = 1 << 20
SEG = 0x7F3000000000
early = [[1199980000000, "S", SEG, 20 * MiB, 922746880, 1803550720, 0],
         [1199981000000, "a", SEG + 2 * MiB, 8 * MiB, 931135488, 1824522240, 0],
         [1199982000000, "f", SEG + 2 * MiB, 8 * MiB, 922746880, 1824522240, 0],
         [1199983000000, "s", SEG, 20 * MiB, 922746880, 1803550720, 0],
         [1199984000000, "S", 0, 2 * MiB, 922746880, 1803550720, 0],
         [1199985000000, "s", 0, 2 * MiB, 922746880, 1803550720, 0],
         [1199986000000, "o", 0, 4096 * MiB, 922746880, 1803550720, 0]]
ev["rows"] = early + ev["rows"]; ev["capacity"] = len(ev["rows"])
json.dump(d, open(sys.argv[2], "w"))
PY
}

trace_in_order() {
  events_report ev.json && "$CLI" report --memory-viz ev.pickle ev.json 2>/dev/null || return 1
  python3 - ev.pickle ev.json <<'PY'
import json, pickle, sys
s = pickle.load(open(sys.argv[1], "rb")); r = json.load(open(sys.argv[2])); tv = r["tensor_view"]
t0 = tv["timeline"]["t0_unix_ns"]; SEG = 0x7F3000000000; MiB = 1 << 20
trace = s["device_traces"][0]
got = [(e["action"], e.get("addr", 0), e["size"]) for e in trace]
rows = tv["events"]["rows"]
want = [("segment_alloc", SEG, 20 * MiB), ("alloc", SEG + 2 * MiB, 8 * MiB),
        ("free_requested", SEG + 2 * MiB, 8 * MiB), ("free_completed", SEG + 2 * MiB, 8 * MiB),
        ("segment_free", SEG, 20 * MiB), ("oom", 0, 4096 * MiB)]
for row in rows[7:]:
    if row[1] == "f":
        want += [("free_requested", row[2], row[3]), ("free_completed", row[2], row[3])]
    else:
        want.append(({"a": "alloc", "o": "oom"}[row[1]], row[2], row[3]))
assert got == want, "\n".join(map(str, got))
for e in trace:   # PyTorch's keys: an oom has device_free in place of addr
    where = "device_free" if e["action"] == "oom" else "addr"
    assert set(e) == {"action", where, "size", "stream", "frames", "time_us"} and e["stream"] == 0, e
# time_us on the snapshot's clock (Unix microseconds): the ring's t_ns is since the timeline's t0.
times = [e["time_us"] for e in trace if e["action"] != "oom"]
want_t = []
for row in rows:
    if row[1] == "f": want_t += [(t0 + row[0]) // 1000] * 2
    elif row[1] == "a" or (row[1] in "Ss" and row[2]): want_t.append((t0 + row[0]) // 1000)
assert times == want_t, (times, want_t)
ooms = [e for e in trace if e["action"] == "oom"]
# The recovered refusal: its size, nothing known of the device then; the final one: the report's figures.
assert ooms[0]["size"] == 4096 * MiB and ooms[0]["device_free"] == 0 and ooms[0]["frames"] == []
assert ooms[1]["size"] == tv["oom"]["requested_bytes"] and ooms[1]["device_free"] == 2048 * MiB - 1784 * MiB
assert ooms[1]["time_us"] == tv["oom"]["time_unix_ns"] // 1000 and ooms[1]["frames"], ooms[1]
assert trace[-1] is ooms[1]
PY
}
check "--memory-viz writes the block events as device_traces in order: allocs, frees as free_requested then free_completed, segments got and given back, every refusal" trace_in_order

frames_python_first() {
  events_report ev.json && "$CLI" report --memory-viz ev.pickle ev.json 2>/dev/null || return 1
  python3 - ev.pickle ev.json <<'PY'
import json, pickle, sys
s = pickle.load(open(sys.argv[1], "rb")); r = json.load(open(sys.argv[2])); tv = r["tensor_view"]
live = {b[0]: b[2] for b in tv["blocks"]["list"]}
def expected(stack):
    fr = r["stacks"][stack]["frames"]
    py = [(f["file"], f["line"], f["function"]) for f in fr if f["kind"] == "python"]
    nat = [f["module"] for f in fr if f["kind"] == "native" and "libgpuguard" not in f["module"]]
    return py, nat
trace = s["device_traces"][0]
allocs = [e for e in trace if e["action"] == "alloc"]
live_allocs = [e for e in allocs if e["addr"] in live]
assert len(live_allocs) == 3, len(live_allocs)
for e in live_allocs:
    py, nat = expected(live[e["addr"]])
    got_py = [(f["filename"], f["line"], f["name"]) for f in e["frames"][:len(py)]]
    assert got_py == py, (got_py, py)                                   # innermost first, as in the report
    assert [f["filename"] for f in e["frames"][len(py):]] == nat          # then the native ones, in order
    assert not any("libgpuguard" in f["filename"] for f in e["frames"])
# A block freed before the report: the ring has no stack for it, and its entry says so.
gone = [e for e in trace if e.get("addr") == 0x7F3000000000 + (2 << 20)]
assert len(gone) == 3 and all(e["frames"][0]["filename"] == "gpuguard" and "freed before the report" in e["frames"][0]["name"] for e in gone), gone
# The segment blocks carry the same frames as the entries that made them.
for seg in s["segments"]:
    addr = seg["address"]
    for b in seg["blocks"]:
        if b["state"] == "active_allocated" and addr in live:
            match = [e for e in live_allocs if e["addr"] == addr]
            if match: assert match[0]["frames"] == b["frames"]
            assert b["frames"][0]["filename"].endswith(".py"), b["frames"][0]
        addr += b["size"]
PY
}
check "each trace entry carries its frames, Python first then native; a block freed before the report says it has none" frames_python_first

memory_viz_reads_it() {
  events_report ev.json || return 1
  for f in ev.json "$DATA/tensor_fragmentation.json" "$DATA/whatif_quota.json" "$DATA/tensor_before.json"; do
    "$CLI" report --memory-viz viz.pickle "$f" 2>/dev/null || { echo "$f: no snapshot"; return 1; }
    python3 - viz.pickle "$f" <<'PY' || { echo "$f"; return 1; }
import json, pickle, sys
import memory_viz_reader as mv
s = mv.annotate(pickle.load(open(sys.argv[1], "rb"))); r = json.load(open(sys.argv[2]))
rows = r["tensor_view"]["events"]["rows"]
drawn = mv.timeline(s, 0)
# Every block the ring allocated is drawn at its allocation, not only the snapshot's final blocks.
assert [e["addr"] for e in drawn if "time_us" in e and e["action"] == "alloc"] == [row[2] for row in rows if row[1] == "a"]
mv.replay(s, 0)
PY
  done
}
check "memory_viz's timeline draws each allocation of the ring, and its state history replays back to the first event" memory_viz_reads_it

no_ring_no_trace() {
  "$CLI" report --memory-viz pq.pickle "$DATA/pytorch_quota.json" 2>/dev/null || return 1
  python3 - pq.pickle <<'PY'
import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
assert [e["action"] for t in s["device_traces"] for e in t] == ["oom"], s["device_traces"]
PY
}
check "a report without PyTorch's block events keeps one oom entry" no_ring_no_trace

long_ring_in_batches() {
  # 3000 allocations of one block each, freed: 9000 trace entries on one device.
  python3 - "$DATA/tensor_fragmentation.json" long.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); ev = d["tensor_view"]["events"]; rows = []
for i in range(3000):
    a = 0x7F3000000000 + i * (1 << 20)
    rows += [[1000000 + 2 * i, "a", a, 1 << 20, 1, 1, 0], [1000001 + 2 * i, "f", a, 1 << 20, 1, 1, 0]]
ev["rows"] = rows + ev["rows"]; ev["capacity"] = len(ev["rows"])
json.dump(d, open(sys.argv[2], "w"))
PY
  "$CLI" report --memory-viz long.pickle long.json 2>/dev/null || return 1
  python3 - long.pickle <<'PY'
import pickle, pickletools, sys
raw = open(sys.argv[1], "rb").read()
# MemoryViz.js appends a batch with arr.push(...items): a batch of hundreds of thousands overflows the
# JavaScript stack. Python's pickle writes batches of 1000; so must we. Count each batch's items.
pushes = {"EMPTY_DICT", "EMPTY_LIST", "BINUNICODE", "BININT", "BININT1", "BININT2", "LONG1", "BINGET",
          "LONG_BINGET", "NONE", "NEWTRUE", "NEWFALSE", "BINFLOAT"}
depth, marks, largest = 0, [], 0
for op, _, _ in pickletools.genops(raw):
    if op.name in pushes: depth += 1
    elif op.name == "MARK": marks.append(depth)
    elif op.name in ("APPENDS", "SETITEMS"):
        m = marks.pop(); largest = max(largest, depth - m); depth = m
assert largest == 1000, largest
s = pickle.loads(raw)
assert len(s["device_traces"][0]) == 9000 + 10, len(s["device_traces"][0])
# Frames are shared: the freed note is one list object, written once.
freed = [e["frames"] for e in s["device_traces"][0] if e["frames"] and e["frames"][0]["filename"] == "gpuguard"]
assert len(freed) > 9000 and all(f is freed[0] for f in freed), len(freed)
PY
}
check "--memory-viz writes long lists in batches of 1000 items, as pickle does, and each stack's frames once" long_ring_in_batches
