"""Writes a report crafted to be as slow as possible to read and replay, up to a size.

  adversarial_report.py OUT [--bytes N] [--fragments N] [--holes N] [--rounds N] [--expandable | --trusted]
                        [--pad events|timeline] [--walk BLOCKS]

From the what-if fixture (tests/data/whatif_quota.json), its tensor view's events replaced by:
  1. fragments: small blocks handed out, every other one taken back, so that the caching allocator's
     small pool holds as many free blocks as the events can make, none of them mergeable;
  2. holes: blocks of 20 MiB, every other one taken back and its memory given back by a refusal, so
     that expandable segments hold as many unmapped holes between live blocks;
  3. refusals and requests larger than every hole, repeated: each refusal makes the allocator give
     back its cache, each request looks for room;
  4. older events of another device in front (the replay skips them, the reader reads them), until the
     file is N bytes (default: 64 MiB less 4 KiB, just under the reader's limit).
The budget is made large (a quota of 64 TiB) so that the replays under it refuse only the refusals.

--trusted crafts events the what-if's model follows (the worst case for the summary, whose verdict
then needs every replay): the same fragments and holes, PyTorch's reserved bytes as c10 counts them
(2 MiB segments of 4096 small blocks, a 20 MiB segment a hole), rounds that take a cached hole and
give it back, and one request of 32 TiB refused at the end under a quota of 4 TiB, after which c10
gives back the free holes. No block is live before the events. --pad timeline puts the padding in
the report's timeline instead of the events, so that the events stay within what the shim writes
(218,453 rows, common/report/limits.h) while the file is still N bytes. --walk crafts instead the
worst case of c10's walk from the best fit with expandable segments (walk_events below; the tests
use --walk 10000 --rounds 80000 --pad timeline: 200,001 events).
"""
import argparse
import json
import os

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


class Events:
    """Rows of block events, each with PyTorch's allocated and reserved bytes after it."""

    def __init__(self):
        self.rows, self.allocated, self.reserved, self.t = [], 0, 0, 0
        self.address = 1 << 44

    def row(self, action, address, size):
        self.t += 1
        self.rows.append([self.t, action, address, size, self.allocated, self.reserved, 0])

    def alloc(self, size, address=None, reserve=0):
        """A block handed out, at the next address unless given; `reserve` is what PyTorch reserved for it
        (None: reserved grows to allocated, which c10 does not count but which serves the slow report)."""
        if address is None:
            address = self.address
            self.address += size
        self.allocated += size
        self.reserved = max(self.reserved, self.allocated) if reserve is None else self.reserved + reserve
        self.row("a", address, size)
        return address

    def free(self, address, size):
        self.allocated -= size
        self.row("f", address, size)


def fragments_and_holes(ev, fragments, holes, counted):
    """1 and 2 above; `counted`: reserved as c10 counts it (a 2 MiB segment for 4096 fragments, a 20 MiB
    one a hole). The holes freed, in order."""
    per_segment = 2 * MiB // 512
    small = [ev.alloc(512, reserve=(2 * MiB if i % per_segment == 0 else 0) if counted else None)
             for i in range(fragments)]
    for a in small[::2]:
        ev.free(a, 512)
    big = [ev.alloc(20 * MiB, reserve=20 * MiB if counted else None) for _ in range(holes)]
    for a in big[::2]:
        ev.free(a, 20 * MiB)
    return big[::2]


def crafted_events(fragments, holes, rounds):
    ev = Events()
    fragments_and_holes(ev, fragments, holes, counted=False)
    refused = 1 << 49
    for _ in range(rounds):
        ev.row("o", 0, refused)
        ev.free(ev.alloc(40 * MiB), 40 * MiB)
    return ev.rows


def trusted_events(fragments, holes, rounds):
    ev = Events()
    free = fragments_and_holes(ev, fragments, holes, counted=True)
    for i in range(rounds):  # a cached hole taken and given back: no segment got
        ev.free(ev.alloc(20 * MiB, address=free[i % len(free)]), 20 * MiB)
    ev.reserved -= 20 * MiB * len(free)  # the refusal gives back the free holes
    ev.row("o", 0, 32 << 40)
    return ev.rows


def walk_events(blocks, rounds):
    """--walk: with expandable segments, c10 walks on from the best fit while the next free block of the
    size order can grow to less (get_free_block). One range (1 PiB) holding `blocks` free blocks of one
    20 MiB page, in address order, the i-th followed by blocks + 1 - i unmapped pages: each can grow to
    a page less than the one before, so that every request of a page walks past all of them. Made by
    handing out each block and its pages after it, then those pages taken back and given back by a
    refusal, then the blocks taken back; then `rounds` times a page handed out and taken back."""
    ev, page = Events(), 20 * MiB
    kept, holes = [], []
    for i in range(blocks):
        kept.append(ev.alloc(page, reserve=None))
        holes.append((ev.alloc((blocks - i) * page, reserve=None), (blocks - i) * page))
    for a, size in holes:
        ev.free(a, size)
    ev.row("o", 0, (1 << 50) - page)  # more than the budget leaves: c10 gives back every free page
    for a in kept:
        ev.free(a, page)
    for _ in range(rounds):
        ev.free(ev.alloc(page, reserve=None), page)
    return ev.rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--bytes", type=int, default=64 * MiB - 4096)
    p.add_argument("--fragments", type=int, default=300000)
    p.add_argument("--holes", type=int, default=60000)
    p.add_argument("--rounds", type=int, default=130000)
    p.add_argument("--expandable", action="store_true", help="recorded with expandable_segments:True")
    p.add_argument("--trusted", action="store_true", help="events the what-if's model follows")
    p.add_argument("--pad", choices=["events", "timeline"], default="events")
    p.add_argument("--walk", type=int, metavar="BLOCKS", help="c10's walk of expandable free blocks (above)")
    a = p.parse_args()
    if a.trusted and a.expandable:
        raise SystemExit("adversarial_report.py: --trusted counts reserved bytes without expandable segments")
    if a.trusted and a.holes < 1:
        raise SystemExit("adversarial_report.py: --trusted needs a hole for its rounds")
    report = json.load(open(os.path.join(HERE, "whatif_quota.json")))
    report["limit"]["bytes"] = 64 << 40
    report["limit"]["spec"] = "64TiB"
    t = report["tensor_view"]
    t["oom"] = None
    # The replay that runs every event whatever it refuses is the one as configured: with expandable
    # segments it walks the holes too (still quadratic in them: docs/architecture.md).
    t["allocator_conf"] = "expandable_segments:True" if a.expandable else ""
    if a.walk:
        report["limit"]["bytes"] = 1 << 50
        report["limit"]["spec"] = "1PiB"
        report["device"]["total_bytes"] = 1 << 50
        t["allocator_conf"] = "expandable_segments:True"
        t["blocks"], t["segments"], t["mappings"] = [], [], []
        rows = walk_events(a.walk, a.rounds)
    elif a.trusted:
        report["limit"]["bytes"] = 4 << 40
        report["limit"]["spec"] = "4TiB"
        t["blocks"], t["segments"], t["mappings"] = [], [], []
        rows = trusted_events(a.fragments, a.holes, a.rounds)
    else:
        rows = crafted_events(a.fragments, a.holes, a.rounds)
    events = t["events"]
    events["rows"] = rows
    text = json.dumps(report, separators=(",", ":"))
    # Pad with older events of another device (or points of the timeline), by the length of one row.
    pad_row = [0, "a", 1 << 44, 512, 0, 0, 1] if a.pad == "events" else [0, 1 << 40]
    pad_len = len(json.dumps(pad_row, separators=(",", ":"))) + 1
    padding = max(0, (a.bytes - len(text)) // pad_len)
    if a.pad == "events":
        events["rows"] = [pad_row] * padding + rows
    else:
        report["timeline"]["points"] = [pad_row] * padding + report["timeline"]["points"]
    events["capacity"] = events["recorded"] = len(events["rows"])
    events["dropped"] = 0
    text = json.dumps(report, separators=(",", ":"))
    if len(text) > a.bytes:
        raise SystemExit(f"adversarial_report.py: {len(text)} bytes of events alone pass --bytes {a.bytes}")
    open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
