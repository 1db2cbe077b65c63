"""What PyTorch's memory_viz does with a snapshot's device_traces, in Python, for tests without torch.

torch/utils/viz/MemoryViz.js (pytorch.org/memory_viz, and the page torch.cuda._memory_viz.trace_plot
writes) reads a snapshot in three steps that each assume something of the trace; this module redoes
them and raises AssertionError where the page would draw nothing or throw:

  annotate(s)          annotate_snapshot: a free_requested directly followed by the free_completed of
                       the same address becomes one "free"; a block's address is its segment's plus
                       the sizes of the blocks before it.
  timeline(s, device)  process_alloc_data, the "Active Memory Timeline": allocs and frees paired by
                       address; blocks live in the snapshot and not allocated in the trace are drawn
                       from the start. Returns the allocations drawn (size, frames) in the order drawn.
  replay(s, device)    simulate_memory, the "Allocator State History": from the snapshot's segments and
                       blocks, undoes the trace event by event back to each index; every block must lie
                       in a segment at every step (the page reads block.segment.occupied) and every
                       free_requested left unpaired must name a live block.

Read from MemoryViz.js at pytorch/pytorch main (2025); only what touches the trace is kept.
"""


def annotate(s):
    for trace in s["device_traces"]:
        out = []
        for t in trace:
            t.setdefault("frames", [])
            assert {"action", "addr", "size", "stream"} <= set(t) or t["action"] == "oom", t
            if t["action"] == "free_completed" and out and out[-1]["action"] == "free_requested" \
                    and out[-1]["addr"] == t["addr"]:
                out[-1]["action"] = "free"
                continue
            out.append(t)
        trace[:] = out
    for seg in s["segments"]:
        addr = seg["address"]
        for b in seg["blocks"]:
            b["addr"] = addr
            addr += b["size"]
    return s


def timeline(s, device):
    elements, initially, actions, addr_to_alloc = [], [], [], {}
    for e in s["device_traces"][device]:
        if e["action"] == "alloc":
            elements.append(e)
            addr_to_alloc[e["addr"]] = len(elements) - 1
            actions.append(len(elements) - 1)
        elif e["action"] in ("free", "free_completed"):
            if e["addr"] in addr_to_alloc:
                actions.append(addr_to_alloc.pop(e["addr"]))
            else:
                elements.append(e)
                initially.append(len(elements) - 1)
                actions.append(len(elements) - 1)
    for seg in s["segments"]:
        if seg["device"] != device:
            continue
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and b["addr"] not in addr_to_alloc:
                elements.append({"action": "alloc", "addr": b["addr"], "size": b["requested_size"],
                                 "frames": b["frames"]})
                initially.append(len(elements) - 1)
    # Each action adds its element the first time and removes it the second: the running total is what
    # the page stacks up, and it must never go below what the initially allocated blocks hold.
    total = sum(elements[i]["size"] for i in initially)
    live = set(initially)
    for i in actions:
        if i in live:
            live.remove(i)
            total -= elements[i]["size"]
        else:
            live.add(i)
            total += elements[i]["size"]
        assert total >= 0, total
    return elements


def _find(segments, addr):
    for seg in segments:
        if seg["addr"] <= addr < seg["addr"] + seg["size"]:
            return seg
    return None


def replay(s, device):
    segments = [{"addr": g["address"], "size": g["total_size"]} for g in s["segments"] if g["device"] == device]
    blocks = {b["addr"]: {"addr": b["addr"], "size": b["size"]}
              for g in s["segments"] if g["device"] == device
              for b in g["blocks"] if b["state"] == "active_allocated"}
    events = s["device_traces"][device]
    for idx in range(len(events) - 1, -1, -1):
        # The state just before events[idx + 1 ...] happened: undo the event at idx + 1.
        if idx + 1 < len(events):
            e = events[idx + 1]
            a = e["action"]
            if a in ("free", "free_completed"):
                blocks[e["addr"]] = {"addr": e["addr"], "size": e["size"]}
            elif a == "free_requested":
                assert e["addr"] in blocks, ("free_requested of no live block", e)
            elif a == "alloc":
                blocks.pop(e["addr"], None)
            elif a == "segment_free":
                segments.append({"addr": e["addr"], "size": e["size"]})
            elif a == "segment_alloc":
                at = [i for i, g in enumerate(segments) if g["addr"] == e["addr"]]
                assert at, ("segment_alloc of no segment live after it", e)
                segments.pop(at[0])
        for b in blocks.values():
            assert _find(segments, b["addr"]) is not None, ("a block in no segment at event", idx, hex(b["addr"]))
