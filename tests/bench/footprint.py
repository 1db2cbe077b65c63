#!/usr/bin/env python3
"""What the shim touches in one allocate+free pair: instructions, and distinct 64-byte cache lines
and 4 KiB pages of code and of data.

The real driver's call evicts the caller's caches and TLB entries (BENCHMARKS.md), so every line and
page the shim touches between two driver calls is a likely miss: this count, unlike a time, is
exact and the same on every machine. Input: the log of

    valgrind --tool=lackey --trace-mem=yes --trace-redir=yes --log-file=LOG bench_alloc pairs SIZE N 0

run under the shim (tests/bench/run.sh does it). The trace is cut into pairs at each entry of the
shim's cuMemAlloc_v2; in each, an instruction counts when it is the shim's, or a library's (libc,
the loader, ...) called by the shim: libraries are charged to the module that last ran outside
them, so what the test driver and the program do (and the libc calls they make) is left out.

    footprint.py LOG SHIM [--detail] [--entry NAME]
                                        prints one line: instructions=.. code_lines=.. code_pages=..
                                        data_lines=.. data_pages=.. pairs=.. (medians over the pairs
                                        after the first quarter); --detail adds the last pair's
                                        functions and the data pages each touched. --entry cuts the
                                        trace at another of the shim's functions (default
                                        cuMemAlloc_v2): c10::reportMemoryUsageToProfiler counts one
                                        tensor-view block event (`bench_alloc blocks`) a "pair".
"""
import bisect
import collections
import re
import statistics
import subprocess
import sys

LIBRARIES = ("libc.so", "libstdc++", "libm.so", "libgcc", "ld-linux", "libpthread", "librt", "libdl")
LINE, PAGE = 6, 12


def readelf(args, path):
    return subprocess.run(["readelf", *args, path], capture_output=True, text=True, check=True).stdout


def text_address(path):
    for line in readelf(["-SW"], path).splitlines():
        m = re.search(r"\]\s+\.text\s+\S+\s+([0-9a-f]+)", line)
        if m:
            return int(m.group(1), 16)
    return None


def mapped_span(path):
    end = 0
    for line in readelf(["-lW"], path).splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            end = max(end, int(f[2], 16) + int(f[5], 16))
    return end


def symbol_table(path, base, kinds="tTwWiI"):
    out = subprocess.run(["nm", "-C", "--defined-only", path], capture_output=True, text=True).stdout
    out += subprocess.run(["nm", "-C", "-D", "--defined-only", path], capture_output=True, text=True).stdout
    table = []
    for line in out.splitlines():
        f = line.split(" ", 2)
        if len(f) == 3 and f[1] in kinds:
            table.append((base + int(f[0], 16), f[2]))
    return sorted(table)


class Modules:
    """The objects valgrind loaded, from its 'Reading syms from' and 'svma .., avma ..' lines."""

    def __init__(self):
        self.ranges = []  # (start, end, path)
        self.page_cache = {}
        self.symbols = {}

    def add(self, path, svma, avma):
        if svma == avma or text_address(path) != svma:  # valgrind's own tool, or not the text
            return
        base = avma - svma
        self.ranges.append((base, base + mapped_span(path), path))

    def of(self, addr):
        page = addr >> PAGE
        if page not in self.page_cache:
            self.page_cache[page] = next((p for s, e, p in self.ranges if s <= addr < e), "?")
        return self.page_cache[page]

    def base(self, path):
        return next(s for s, e, p in self.ranges if p == path)

    def name_of(self, addr, kinds="tTwWiI"):
        """The function (or, with data kinds, the object) at addr, as module:name."""
        path = self.of(addr)
        if path == "?":
            return "?"
        if (path, kinds) not in self.symbols:
            self.symbols[path, kinds] = symbol_table(path, self.base(path), kinds)
        t = self.symbols[path, kinds]
        i = bisect.bisect_right(t, (addr, "\uffff")) - 1
        name = t[i][1].replace("(anonymous namespace)", "{anon}").split("(")[0] if i >= 0 else "?"
        return path.rsplit("/", 1)[-1].split(".so")[0] + ":" + name


class Pair:
    def __init__(self, keep_trace):
        self.instructions = 0
        self.code, self.data = set(), set()
        self.trace = [] if keep_trace else None  # (ip, [data addresses]), for --detail only


def read(log, shim, keep_trace, entry_name="cuMemAlloc_v2"):
    mods, pairs = Modules(), []
    entry = None
    pending = None
    owner_is_shim = False
    counting = False  # the last instruction counted: its data accesses count too
    pair = None
    with open(log, errors="replace") as f:
        for line in f:
            if line.startswith("--"):
                m = re.search(r"Reading syms from (\S+)", line)
                if m:
                    pending = m.group(1)
                    continue
                m = re.search(r"svma 0x([0-9a-f]+), avma 0x([0-9a-f]+)", line)
                if m and pending:
                    mods.add(pending, int(m.group(1), 16), int(m.group(2), 16))
                    if pending == shim and entry is None and mods.ranges and mods.ranges[-1][2] == shim:
                        for s in symbol_table(shim, mods.base(shim)):
                            if s[1].split("(")[0] == entry_name:
                                entry = s[0]
                continue
            if line.startswith("=="):
                continue
            kind = line[:2]
            try:
                addr = int(line[3:].split(",", 1)[0], 16)
            except ValueError:
                continue
            if kind == "I ":
                if addr == entry:
                    pair = Pair(keep_trace)
                    pairs.append(pair)
                path = mods.of(addr)
                if not any(lib in path for lib in LIBRARIES) and path != "?":
                    owner_is_shim = path == shim
                counting = pair is not None and owner_is_shim
                if counting:
                    pair.instructions += 1
                    pair.code.add(addr >> LINE)
                    if keep_trace:
                        pair.trace.append((addr, []))
            elif counting:
                pair.data.add(addr >> LINE)
                if keep_trace:
                    pair.trace[-1][1].append(addr)
    if entry is None:
        sys.exit("footprint: no %s of %s in %s (run under the shim, with --trace-redir=yes)" % (entry_name, shim, log))
    return mods, pairs


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    log, shim, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    detail = "--detail" in rest
    entry_name = rest[rest.index("--entry") + 1] if "--entry" in rest[:-1] else "cuMemAlloc_v2"
    mods, pairs = read(log, shim, detail, entry_name)
    steady = pairs[len(pairs) // 4:-1]  # past the warm-up; the last is cut by the program's exit
    if not steady:
        sys.exit("footprint: fewer than 2 pairs in %s" % log)

    def median(measure):
        return int(statistics.median(measure(p) for p in steady))

    print("instructions=%d code_lines=%d code_pages=%d data_lines=%d data_pages=%d pairs=%d" % (
        median(lambda p: p.instructions), median(lambda p: len(p.code)),
        median(lambda p: len({l >> (PAGE - LINE) for l in p.code})), median(lambda p: len(p.data)),
        median(lambda p: len({l >> (PAGE - LINE) for l in p.data})), len(steady)))
    if not detail:
        return
    last = steady[-1]
    count, lines = collections.Counter(), collections.defaultdict(set)
    pages = collections.defaultdict(collections.Counter)
    for ip, data in last.trace:
        fn = mods.name_of(ip)
        count[fn] += 1
        lines[fn].add(ip >> LINE)
        for d in data:
            pages[d >> PAGE][fn] += 1
    print("\nthe last pair, by function: instructions, code lines, code pages")
    for fn, n in count.most_common():
        print("  %5d %3d %-40s %s" % (n, len(lines[fn]), ",".join(sorted({hex(l >> (PAGE - LINE)) for l in lines[fn]})), fn))
    print("\ndata pages: lines touched, by whom")
    for page in sorted(pages):
        n = len({d for d in last.data if d >> (PAGE - LINE) == page})
        who = "; ".join("%s (%d)" % (fn, c) for fn, c in pages[page].most_common(3))
        what = sorted({mods.name_of(d << LINE, "bBdDrRvVgGsS") for d in last.data if d >> (PAGE - LINE) == page} - {"?"})
        print("  %#x %3d %s%s" % (page << PAGE, n, who, ("\n" + " " * 18 + "in: " + ", ".join(what)) if what else ""))


if __name__ == "__main__":
    main()
