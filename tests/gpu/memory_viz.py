"""`gpuguard report --memory-viz` read by PyTorch's own memory_viz (torch.cuda._memory_viz), on the GPU
machine. Run by tests/gpu/memory_viz.sh:

  python3 memory_viz.py SNAPSHOT.pickle REPORT.json OUTDIR

Makes PyTorch's own snapshot of a small workload (torch.cuda.memory._record_memory_history, no shim)
for the keys its trace entries have, then loads gpuguard's snapshot of the report with pickle as
memory_viz does and writes trace_plot's and segment_plot's pages and trace()'s text into OUTDIR.
Prints one "check  result" row a line; a result that is not "ok ..." is a failure.
"""
import base64
import json
import os
import pickle
import re
import sys

import torch
import torch.cuda._memory_viz as mv

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import memory_viz_reader  # noqa: E402  (what MemoryViz.js does with the trace, redone in Python)

MiB = 1 << 20
rows, failed = [], []


def row(check, ok, detail=""):
    rows.append(f"{check:<62} {'ok' if ok else 'FAIL'}{' (' + str(detail) + ')' if detail != '' else ''}")
    if not ok:
        failed.append(check)


def reference_keys():
    """Each action's keys, and the frames' keys, in PyTorch's own trace entries."""
    torch.cuda.memory._record_memory_history(max_entries=10000)
    held = [torch.empty(4 * MiB, dtype=torch.uint8, device="cuda") for _ in range(8)]
    del held[::2]
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        pass
    del held
    torch.cuda.empty_cache()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    keys, frame_keys = {}, set()
    for trace in snap["device_traces"]:
        for e in trace:
            keys.setdefault(e["action"], set()).update(e)
            for f in e.get("frames", []):
                frame_keys.update(f)
    return keys, frame_keys


def main(snapshot_path, report_path, out):
    theirs, their_frame_keys = reference_keys()
    raw = open(snapshot_path, "rb").read()
    s = pickle.loads(raw)
    r = json.load(open(report_path))
    events = r["tensor_view"]["events"]["rows"]
    device = r["tensor_view"]["device"]
    trace = s["device_traces"][device]
    ours = {}
    for e in trace:
        ours.setdefault(e["action"], set()).update(e)
    # Every key we write is one PyTorch writes for that action (device_free only on oom).
    extra = {a: sorted(k - theirs.get(a, set())) for a, k in ours.items() if k - theirs.get(a, set())}
    row("entries' keys are PyTorch's for each action", not extra and set(ours) <= set(theirs) | {"oom"},
        f"ours {sorted(ours)}, PyTorch's {sorted(theirs)}, extra {extra}")
    ours_frame_keys = {k for e in trace for f in e["frames"] for k in f}
    row("frames' keys are PyTorch's", ours_frame_keys <= their_frame_keys,
        f"{sorted(ours_frame_keys)} vs {sorted(their_frame_keys)}")

    allocs = [e for e in trace if e["action"] == "alloc"]
    want = sum(1 for e in events if e[1] == "a")
    row("one alloc entry per alloc event of the report", len(allocs) == want > 0, f"{len(allocs)} of {want}")
    live = {b[0] for b in r["tensor_view"]["blocks"]["list"]}
    firsts = [e["frames"][0]["filename"] for e in allocs if e["addr"] in live and e["frames"]]
    row("live blocks' entries start with a Python frame", firsts and all(f.endswith(".py") for f in firsts),
        f"{len(firsts)} entries, e.g. {firsts[:1]}")

    page = mv.trace_plot(s)
    open(os.path.join(out, "trace_plot.html"), "w").write(page)
    embedded = json.loads(re.search(r"const local_files = (\[.*\])", page).group(1))[0]["base64"]
    back = pickle.loads(base64.b64decode(embedded))
    row("trace_plot's page embeds every alloc entry",
        sum(e["action"] == "alloc" for e in back["device_traces"][device]) == len(allocs), len(page))
    page = mv.segment_plot(s)
    open(os.path.join(out, "segment_plot.html"), "w").write(page)
    row("segment_plot writes its page", "Allocator State History" in page and len(page) > 1000, len(page))
    text = mv.trace(s)
    open(os.path.join(out, "trace.txt"), "w").write(text)
    lines = [l for l in text.splitlines() if re.match(r"^\w+ = \w+\[\d+:", l)]
    row("_memory_viz.trace lists each allocation", len(lines) == len(allocs), f"{len(lines)} lines")
    # "raise OutOfMemoryError() # ..." in older PyTorch, "raise OutOfMemoryError # ..." in 2.11
    row("_memory_viz.trace shows the out-of-memory", re.search(r"^raise OutOfMemoryError(\(\))? #", text, re.M) is not None)
    open(os.path.join(out, "segsum.txt"), "w").write(mv.segsum(s))  # asserts the blocks tile each segment
    row("_memory_viz.segsum reads the segments", True)

    viz = memory_viz_reader.annotate(pickle.loads(raw))
    drawn = memory_viz_reader.timeline(viz, device)
    row("MemoryViz.js's timeline draws them (redone in Python)", len(drawn) >= len(allocs), len(drawn))
    try:
        memory_viz_reader.replay(viz, device)
        row("MemoryViz.js's state history replays to the first event", True)
    except AssertionError as e:
        row("MemoryViz.js's state history replays to the first event", False, str(e)[:200])


if __name__ == "__main__":
    try:
        main(*sys.argv[1:4])
    except Exception as e:  # a row, not a traceback, in the caller's table
        row("memory_viz.py ran", False, f"{type(e).__name__}: {str(e)[:200]}")
    print("\n".join(rows))
    sys.exit(1 if failed else 0)
