"""Turns benchmark results into the markdown tables of BENCHMARKS.md, and splices them in.

  report.py cpu RESULTS --machine M --commit C --command CMD --date D [--runs ...]
      RESULTS: lines "GROUP VARIANT ROUND VALUE" written by tests/bench/run.sh; markdown on stdout.
  report.py splice SECTION FILE < MARKDOWN
      replaces what lies between "<!-- SECTION:begin -->" and "<!-- SECTION:end -->" in FILE.
"""
import argparse
import collections
import re
import sys


def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def med(values):
    return pct(values, 50)


def load(path):
    data = collections.defaultdict(dict)  # group -> variant -> {round: value}
    for line in open(path):
        parts = line.split()
        if len(parts) != 4 or not parts[3]:
            continue
        try:
            data[parts[0]].setdefault(parts[1], {})[int(parts[2])] = float(parts[3])
        except ValueError:
            pass
    return data


def every_value(group):
    """All of a group's values, whatever their variant and round."""
    return [v for d in group.values() for v in d.values()]


def fmt_ns(x):
    return "—" if x != x else (f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}")


def fmt_num(x, places):
    return "—" if x != x else f"{x:,.{places}f}"


def spread(vals):
    return f"{fmt_ns(pct(vals, 25))}–{fmt_ns(pct(vals, 75))}"


def block_table(o, blocks, stacked, who):
    """The tensor view's cost per block report: each mode against no shim, and the view's own share
    (the default against GPUGUARD_TENSOR_VIEW=0, paired by round)."""
    o.append("")
    o.append(f"### The tensor view: per block report of PyTorch's caching allocator (8 call sites, {who})")
    o.append("")
    o.append("The loop calls c10::reportMemoryUsageToProfiler as libc10_cuda.so does, once for a block and once "
             "for its release; without the shim it is the test double's (libc10.so, which counts the call under a mutex). The budget of issue 17 "
             "is 2% of a training step: a small Llama's step on the H200 (33.6 ms) reports 1,053 blocks, each "
             "twice, so 2% is 320 ns a report.")
    o.append("")
    o.append("| mode | shim's cost per report (ns) | over the view off (ns) | ns per report, median (p25–p75) | budget | |")
    o.append("| --- | --- | --- | --- | --- | --- |")
    base, off = blocks.get("none", {}), blocks.get("view-off", {})
    for key, label in (("none", "no shim (the loop alone)"), ("view-off", "GPUGUARD_TENSOR_VIEW=0"),
                       ("view-nostacks", "tensor view, GPUGUARD_STACK_DEPTH=0"),
                       (stacked, "tensor view with its stacks (default)")):
        vals = blocks.get(key, {})
        if not vals:
            continue
        cost = paired_diff(base, vals) if key != "none" else float("nan")
        over = paired_diff(off, vals) if key not in ("none", "view-off") and off else float("nan")
        budget = 320 if key == stacked else None
        o.append(f"| {label} | {fmt_ns(cost)} | {fmt_ns(over)} | {fmt_ns(med(list(vals.values())))} "
                 f"({spread(list(vals.values()))}) | {'< 320 ns' if budget else ''} | {verdict(cost, budget)} |")


def paired_diff(base, other):
    """Median over rounds of (other - base) within the same round: the interleaving's point."""
    d = [other[r] - base[r] for r in other if r in base]
    return med(d) if d else float("nan")


def paired_ratios(base, other):
    """other / base within each round that ran both, in round order."""
    return [other[r] / base[r] for r in sorted(other) if r in base and base[r] > 0]


def ratios_text(ratios):
    return ", ".join(f"{x:.3f}" for x in ratios)


def own_cell(own_ms, own_pct):
    if not own_ms:
        return "not measured"
    return f"{med(own_ms):.3f} ms ({own_pct:.2f}%)"


def train_verdict(target, ratio, noise, calls, own_pct, history_ratio, history_events, steps):
    """(met?, why) for one training loop against its target (% of the step) and history.

    The cost: none when PyTorch makes no driver call in a step (the shim runs no code in it); else the
    profiled shim's own share when measured, and the step ratio must agree with it within the
    control's noise; else the ratio alone. History: where it records less than an event a step it
    does nothing in this loop, and there is nothing to be compared with."""
    cost = 100 * (ratio - 1)
    if calls == 0:  # nor is it slower than history, whatever the spread between processes shows
        return True, "no driver call in a step"
    if own_pct == own_pct:
        ok = own_pct < target and cost < target + noise
        why = (f"own time {own_pct:.2f}%, ratio {cost:+.1f}% " +
               ("within" if cost < target + noise else "beyond") + f" {target:g}% + noise {noise:.1f}%")
    else:
        ok, why = cost < target, f"ratio {cost:+.1f}% (control ±{noise:.1f}%)"
    if history_events == history_events and history_events < steps:
        why += "; history records nothing here"
    elif history_ratio == history_ratio and ratio > history_ratio:
        beyond = 100 * (ratio - history_ratio)
        ok = ok and beyond <= noise
        why += f"; {beyond:.1f}% slower than history" + (" (within noise)" if beyond <= noise else "")
    return ok, why


def verdict(value, budget):
    if budget is None or value != value:
        return ""
    return "met" if value < budget else "**missed**"


def pair_table(out, g, rows, note):
    base = g.get("none", {})
    out.append("| mode | ratio to no shim | shim's cost per pair (ns) | ns per pair, median (p25–p75) | budget (issue 4) | |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    b = list(base.values())
    out.append(f"| no shim | 1.00 | — | {fmt_ns(med(b))} ({spread(b)}) | | |")
    for key, label, budget in rows:
        vals = g.get(key, {})
        if not vals:
            continue
        cost = paired_diff(base, vals)
        ratio = med(list(vals.values())) / med(b)
        bud = f"< {budget:,} ns" if budget else ""
        out.append(f"| {label} | {ratio:.2f} | {fmt_ns(cost)} | {fmt_ns(med(list(vals.values())))} ({spread(list(vals.values()))}) "
                   f"| {bud} | {verdict(cost, budget)} |")
    if note:
        out.append("")
        out.append(note)


def python_groups(data):
    """The per-pair groups of each Python version (py3.11, py3.12...): not pyblocks, the block reports."""
    return sorted(k for k in data if re.fullmatch(r"py\d+\.\d+", k))


def cpu(args):
    data = load(args.results)
    o = []
    o.append(f"Machine: {args.machine}. Date: {args.date}. Commit: `{args.commit}`. Command: `{args.command}` "
             f"(tests/bench/run.sh, {args.seconds} s). Medians over {args.runs} interleaved rounds of {args.pairs:,} "
             "pairs of 512 B per process; the shim's cost is the median over rounds of (with shim − without) "
             "within the same round.")
    o.append("")
    o.append("### Budgets of issue 4, at a glance")
    o.append("")
    o.append("| budget | measured | |")
    o.append("| --- | --- | --- |")
    pairs = data.get("pairs", {})
    for key, what, budget in (("track", "bookkeeping per pair without stacks, (a) tracking only", 500),
                              ("quota", "bookkeeping per pair without stacks, (b) quota", 500),
                              ("native", "with native stacks, (c), C program", 3000)):
        cost = paired_diff(pairs.get("none", {}), pairs.get(key, {}))
        o.append(f"| {what} < {budget:,} ns | {fmt_ns(cost)} ns | {verdict(cost, budget)} |")
    for group in python_groups(data):
        cost = paired_diff(data[group].get("none", {}), data[group].get("all", {}))
        o.append(f"| with Python frames, (d), Python {group[2:]} < 10,000 ns | {fmt_ns(cost)} ns | {verdict(cost, 10000)} |")
    rep = data.get("report100000", {}).get("first", {})
    if rep:
        v = med(list(rep.values()))
        o.append(f"| report with 100,000 live allocations < 200 ms | {v:.1f} ms | {verdict(v, 200)} |")
    for n in (100000, 1000000):
        g = data.get(f"rss{n}", {})
        if g:
            cost = paired_diff(g.get("none", {}), g.get("native", {}))
            o.append(f"| memory per live allocation < 256 B ({n:,} live) | {cost:.0f} B | {verdict(cost, 256)} |")
    o.append("")
    o.append(f"### Per allocate+free pair, C program (cuMemAlloc_v2 + cuMemFree_v2, {args.depth} extra native frames)")
    o.append("")
    pair_table(o, data.get("pairs", {}), [
        ("track", "(a) tracking only: no limit, GPUGUARD_STACK_DEPTH=0", 500),
        ("quota", "(b) quota: GPUGUARD_MEM_LIMIT=8GiB, depth 0", 500),
        ("native", "(c) quota + native stacks (default depth 48; the caching walker)", 3000),
        ("native-libunwind", "(c) with libunwind in place of the caching walker (GPUGUARD_UNWINDER=libunwind)", 3000),
        ("native-libgcc", "(c) with libgcc's unwinder in place of the caching walker (GPUGUARD_UNWINDER=libgcc)", 3000),
    ], "")
    cold = data.get("cold", {})
    if cold:
        driver = every_value(data.get("colddriver", {}))
        o.append("")
        o.append("### Per allocate+free pair with cold caches (in-process A/B; the test driver reads 2 MiB before "
                 "each call, as the real driver's call evicts the caller's cache lines)")
        o.append("")
        o.append(f"The test driver's pair then takes {med(driver) / 1e3:.0f} µs, close to a real one; the extra "
                 "is the median per process of (exported symbol − the driver's own definition), in turns. Without "
                 "the shim both paths are the driver: the control.")
        o.append("")
        o.append("| mode | extra per pair, median (p25–p75) |")
        o.append("| --- | --- |")
        for key, label in (("quota", "(b) quota, depth 0"), ("native", "(c) quota + native stacks"),
                           ("none", "control, no shim")):
            vals = list(cold.get(key, {}).values())
            if vals:
                o.append(f"| {label} | {fmt_ns(med(vals))} ns ({spread(vals)}) |")
    if data.get("fp_instructions"):
        o.append("")
        o.append("### What the shim touches per allocate+free pair (valgrind lackey, `bench_alloc pairs 512 300`, "
                 "tests/bench/footprint.py; median over the pairs)")
        o.append("")
        o.append("Counts, not times: the same on every machine. The driver's call evicts the caller's caches and TLB "
                 "entries, so each 64-byte line and 4 KiB page below is a likely miss after it; libc's work for the "
                 "shim (locks, clocks) is counted, the driver's and the program's are not.")
        o.append("")
        o.append("| mode | instructions | code lines | code pages | data lines | data pages |")
        o.append("| --- | --- | --- | --- | --- | --- |")
        for key, label in (("track", "(a) tracking only"), ("quota", "(b) quota"),
                           ("native", "(c) quota + native stacks (the caching walker)")):
            cells = [data.get("fp_" + k, {}).get(key, {}).get(0, float("nan"))
                     for k in ("instructions", "code_lines", "code_pages", "data_lines", "data_pages")]
            if cells[0] == cells[0]:
                o.append(f"| {label} | " + " | ".join(fmt_num(c, 0) for c in cells) + " |")
    for group in python_groups(data):
        o.append("")
        o.append(f"### Per allocate+free pair, Python {group[2:]} through ctypes ({args.pydepth} Python frames; "
                 "ctypes releases the GIL around the call, as PyTorch does)")
        o.append("")
        pair_table(o, data[group], [
            ("native", "quota + native stacks, GPUGUARD_PYTHON_STACKS=0", 3000),
            ("all", "(d) quota + native stacks + Python frames, GPUGUARD_PYTHON_STACKS=1", 10000),
            ("all-libunwind", "(d) with libunwind in place of the caching walker", 10000),
        ], "")
    for group, stacked, who in (("blocks", "native", f"{args.depth} extra native frames, no Python frame: as PyTorch's "
                                 "autograd threads report"),
                                ("blockscold", "native", f"{args.depth} extra native frames, caches cold: 2 MiB read "
                                 "before each pair, the pair timed alone, as on the GPU machine between PyTorch's "
                                 "allocations"),
                                ("blocksfp", "native", f"{args.depth} extra native frames built with frame pointers, "
                                 "two stack words a frame to unwind: as Ubuntu 24.04's and Fedora's packages are"),
                                ("pyblocks", "all", f"called from Python through ctypes, {args.pydepth} Python frames "
                                 "above the loop: as a PyTorch operator reports")):
        if data.get(group):
            block_table(o, data[group], stacked, who)
    o.append("")
    o.append(f"### Admission under contention (8 × {args.pairs:,} pairs of 512 B, {args.depth} extra native frames)")
    o.append("")
    o.append(f"| workload | mode | throughput ratio to no shim | pairs/s, median (p25–p75) | CPU ns per pair "
             f"({args.cores} cores ÷ throughput) | shim's CPU ns per pair |")
    o.append("| --- | --- | --- | --- | --- | --- |")
    for group, label in (("threads", "8 threads, one process"), ("procs", "8 processes, one shared ledger")):
        g = data.get(group, {})
        b = list(g.get("none", {}).values())
        for key, mode in (("none", "no shim"), ("quota", "quota, depth 0"), ("native", "quota + native stacks")):
            vals = list(g.get(key, {}).values())
            if not vals:
                continue
            cpu_ns, base_ns = args.cores * 1e9 / med(vals), args.cores * 1e9 / med(b)
            o.append(f"| {label} | {mode} | {med(vals) / med(b):.2f} | {med(vals):,.0f} "
                     f"({pct(vals, 25):,.0f}–{pct(vals, 75):,.0f}) | {fmt_ns(cpu_ns)} | "
                     f"{'—' if key == 'none' else fmt_ns(cpu_ns - base_ns)} |")
    o.append("")
    o.append("### Reports on demand (`gpuguard_report()`, assembled and written; quota + native stacks, "
             "64 distinct stacks)")
    o.append("")
    o.append("| live allocations | first report (ms) | later reports (ms) | report size | budget | |")
    o.append("| --- | --- | --- | --- | --- | --- |")
    sizes = sorted({int(k[6:]) for k in data if k.startswith("report") and k[6:].isdigit()})
    for n in sizes:
        g = data[f"report{n}"]
        first, warm = list(g.get("first", {}).values()), list(g.get("warm", {}).values())
        sz = med(list(data.get(f"reportsize{n}", {}).get("bytes", {}).values()))
        budget = 200 if n == 100000 else None
        o.append(f"| {n:,} | {med(first):.1f} | {med(warm):.1f} | {sz / 1024:,.0f} KiB | "
                 f"{'< 200 ms' if budget else ''} | {verdict(med(first), budget)} |")
    o.append("")
    o.append("### Memory per live allocation (resident memory added while holding N allocations, ÷ N)")
    o.append("")
    o.append("| live allocations | without shim (test driver's own table) | with shim | shim's bytes per allocation | budget | |")
    o.append("| --- | --- | --- | --- | --- | --- |")
    for n in sorted(int(k[3:]) for k in data if k.startswith("rss")):
        g = data[f"rss{n}"]
        cost = paired_diff(g.get("none", {}), g.get("native", {}))
        o.append(f"| {n:,} | {med(list(g.get('none', {}).values())):.0f} | {med(list(g.get('native', {}).values())):.0f} "
                 f"| {cost:.0f} | < 256 B | {verdict(cost, 256)} |")
    f = data.get("fake", {})
    if f:
        o.append("")
        o.append(f"The test driver's own cost per pair (no shim): {fmt_ns(med(list(f.get('mmap', {}).values())))} ns "
                 f"with an mmap+munmap per allocation, {fmt_ns(med(list(f.get('bench', {}).values())))} ns with "
                 "FAKE_CUDA_BENCH=1 (used above). For scale, a real cuMemAlloc+cuMemFree of 2 MiB on the H200 "
                 "takes about 80 µs (docs/platform-facts.md).")
    print("\n".join(o))


def gpu(args):
    data = load(args.results)
    o = []
    o.append(f"Machine: {args.machine}. Date: {args.date}. Commit: `{args.commit}`. Command: `{args.command}` "
             f"(tests/bench/gpu_run.sh, {args.seconds} s). Variants run in separate processes taking turns, the "
             "order rotating each round. \"All features\": LD_PRELOAD=libgpuguard.so, GPUGUARD_MEM_LIMIT=100GiB, "
             "native stacks at the default depth (48), GPUGUARD_PYTHON_STACKS=1.")
    o.append("")
    o.append(f"### Raw cuMemAlloc + cuMemFree (C program, in-process A/B: {args.pairs} turns a process, each a pair "
             "through the exported symbols and a pair straight into libcuda's own definitions; the median "
             "difference per process, then the median over rounds)")
    o.append("")
    o.append("The driver's own time for the same pair moves by up to 40% between processes, and at times within "
             "one (tests/bench/gpu_compare.sh), far more than the shim's cost, so each process measures both paths "
             "taking turns. Without the shim both paths are the driver: that column is the control.")
    o.append("")
    o.append("| size | driver's pair (µs) | quota, no stacks: extra | all features (native stacks): extra "
             "| control, no shim | target: no stacks < 1% of the pair | |")
    o.append("| --- | --- | --- | --- | --- | --- | --- |")
    sizes = sorted(int(k[8:]) for k in data if k.startswith("rawextra") and k[8:].isdigit())
    names = {512: "512 B", 2 << 20: "2 MiB", 20 << 20: "20 MiB", 1 << 30: "1 GiB"}
    for n in sizes:
        g = data[f"rawextra{n}"]
        direct = every_value(data.get(f"rawdirect{n}", {}))
        if not direct:
            continue
        pair = med(direct)
        def cell(key):
            vals = list(g.get(key, {}).values())
            if not vals:
                return "—", float("nan")
            x = med(vals)
            return f"{x:.0f} ns ({100 * x / pair:.2f}%)", 100 * x / pair
        q, qpct = cell("quota")
        a, _ = cell("all")
        c, _ = cell("none")
        o.append(f"| {names.get(n, n)} | {pair / 1e3:.1f} | {q} | {a} | {c} | {qpct:.2f}% | {verdict(qpct, 1.0)} |")
    o.append("")
    o.append(f"### PyTorch training step (tests/bench/train_bench.py; median step over {args.steps} steps a process; "
             f"ratios paired within each round, then the median over the rounds that ran, of {args.runs}; each round's "
             "ratio in brackets)")
    o.append("")
    o.append("Step times of two processes of the same program differ by several percent: the control runs the "
             "program without the shim twice a round, and its largest departure from 1 is the noise that a ratio "
             "cannot see through. With no caching the shim built with step timers (`make PROFILE=1`) measures "
             "its own time inside every hooked call, beside the driver's: the shim's share of the step, which "
             "the spread between processes does not blur (an upper bound: the timers' own cost is in it).")
    o.append("")
    o.append("| model | allocator | driver allocations a step | shim, all features: ratio | the shim's own time a step "
             "| control: no shim again | `_record_memory_history()`: ratio | step ms: no shim / shim / history "
             "| target | |")
    o.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for alloc, label, target in (("caching", "caching", 1.0), ("nocache", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", 5.0)):
        for model, mlabel in (("conv", "convolution"), ("xfmr", "transformer block")):
            g = data.get(f"train-{alloc}-{model}", {})
            base = g.get("none", {})
            if not base:
                continue
            rs, rh, rc = (paired_ratios(base, g.get(v, {})) for v in ("all", "history", "control"))
            noise = 100 * max((abs(x - 1) for x in rc), default=0.0)
            calls = every_value(data.get(f"calls-{alloc}-{model}", {}))
            calls = med(calls) if calls else float("nan")
            own = list(data.get(f"ownms-{alloc}-{model}", {}).get("profiled", {}).values())
            own_pct = 100 * med(own) / med(list(base.values())) if own else float("nan")
            ev = list(data.get(f"histev-{alloc}-{model}", {}).get("history", {}).values())
            events = med(ev) if ev else float("nan")
            ok, why = train_verdict(target, med(rs), noise, calls, own_pct, med(rh), events, args.steps)
            hist = f"{med(rh):.3f} ({events:,.0f} events recorded)" if rh else "—"
            control = f"{med(rc):.3f} (±{noise:.1f}%)" if rc else "not run"
            o.append(f"| {mlabel} | {label} | {fmt_num(calls, 1)} | {med(rs):.3f} ({ratios_text(rs)}) "
                     f"| {own_cell(own, own_pct)} | {control} | {hist} "
                     f"| {' / '.join(fmt_num(med(list(g.get(v, {}).values())), 3) for v in ('none', 'all', 'history'))} "
                     f"| < {target:g}%, ≤ history "
                     f"| {'met' if ok else '**missed**'}: {why} |")
    o.append("")
    o.append("### Out of memory in the training loop (convolution, caching allocator, model live)")
    o.append("")
    oom = data.get("oom", {})
    rep = data.get("gpureport", {})
    o.append("| | no shim | shim, all features |")
    o.append("| --- | --- | --- |")
    if rep:
        o.append(f"| `gpuguard_report()` on demand, assembled and written | — | {med(list(rep.get('all', {}).values())):.1f} ms |")
    def first_later(v):
        d = oom.get(v, {})
        first = d.get(0, float("nan"))
        later = [d[k] for k in d if k > 0]
        return first, (med(later) if later else float("nan"))
    n0, n1 = first_later("none")
    s0, s1 = first_later("all")
    o.append(f"| 200 GiB request to OutOfMemoryError, first (ms) | {n0:.1f} (the driver refuses) | "
             f"{s0:.1f} (the quota refuses; the report is written inside the call) |")
    o.append(f"| the same, 2nd and 3rd, 1.2 s apart (ms) | {n1:.1f} | {s1:.1f} (a new episode each: a new report) |")
    f = data.get("oomfile", {})
    if f:
        def val(k):
            return f.get(k, {}).get(0, float("nan"))
        o.append(f"| the last OOM report | — | {val('bytes') / 1024:,.0f} KiB, {val('stacks'):.0f} stacks, "
                 f"{val('live'):.0f} live allocations, names train_bench.py: {'yes' if val('names_script') == 1 else 'no'} |")
    print("\n".join(o))


def splice(args):
    text = sys.stdin.read().rstrip("\n")
    begin, end = f"<!-- {args.section}:begin -->", f"<!-- {args.section}:end -->"
    doc = open(args.file).read()
    i, j = doc.find(begin), doc.find(end)
    if i < 0 or j < i:
        sys.exit(f"report.py: {args.file} has no {begin} ... {end} markers")
    doc = doc[: i + len(begin)] + "\n" + text + "\n" + doc[j:]
    open(args.file, "w").write(doc)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cpu")
    c.add_argument("results")
    for k in ("machine", "commit", "command", "date"):
        c.add_argument("--" + k, default="")
    for k in ("runs", "pairs", "depth", "pydepth", "seconds", "cores"):
        c.add_argument("--" + k, type=int, default=0)
    g = sub.add_parser("gpu")
    g.add_argument("results")
    for k in ("machine", "commit", "command", "date"):
        g.add_argument("--" + k, default="")
    for k in ("runs", "pairs", "steps", "seconds"):
        g.add_argument("--" + k, type=int, default=0)
    s = sub.add_parser("splice")
    s.add_argument("section")
    s.add_argument("file")
    args = ap.parse_args()
    {"cpu": cpu, "gpu": gpu, "splice": splice}[args.cmd](args)


if __name__ == "__main__":
    main()
