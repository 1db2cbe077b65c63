"""Writes a report crafted to be as slow as possible to read and replay, up to a size.

  adversarial_report.py OUT [--bytes N] [--expandable]

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
"""
import argparse
import json
import os

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def crafted_events(fragments, holes, rounds):
    rows, allocated, reserved, t = [], 0, 0, 0
    address = 1 << 44

    def row(action, addr, size):
        nonlocal t
        t += 1
        rows.append([t, action, addr, size, allocated, reserved, 0])

    small = []
    for _ in range(fragments):
        allocated += 512
        reserved = max(reserved, allocated)
        row("a", address, 512)
        small.append(address)
        address += 512
    for a in small[::2]:
        allocated -= 512
        row("f", a, 512)
    big = []
    for _ in range(holes):
        allocated += 20 * MiB
        reserved = max(reserved, allocated)
        row("a", address, 20 * MiB)
        big.append(address)
        address += 20 * MiB
    for a in big[::2]:
        allocated -= 20 * MiB
        row("f", a, 20 * MiB)
    refused = 1 << 49
    for _ in range(rounds):
        row("o", 0, refused)
        allocated += 40 * MiB
        row("a", address, 40 * MiB)
        allocated -= 40 * MiB
        row("f", address, 40 * MiB)
        address += 40 * MiB
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--bytes", type=int, default=64 * MiB - 4096)
    p.add_argument("--fragments", type=int, default=300000)
    p.add_argument("--holes", type=int, default=60000)
    p.add_argument("--rounds", type=int, default=130000)
    p.add_argument("--expandable", action="store_true", help="recorded with expandable_segments:True")
    a = p.parse_args()
    report = json.load(open(os.path.join(HERE, "whatif_quota.json")))
    report["limit"]["bytes"] = 64 << 40
    report["limit"]["spec"] = "64TiB"
    t = report["tensor_view"]
    t["oom"] = None
    # The replay that runs every event whatever it refuses is the one as configured: with expandable
    # segments it walks the holes too (still quadratic in them: docs/architecture.md).
    t["allocator_conf"] = "expandable_segments:True" if a.expandable else ""
    rows = crafted_events(a.fragments, a.holes, a.rounds)
    events = t["events"]
    events["rows"] = rows
    text = json.dumps(report, separators=(",", ":"))
    # Pad with older events of another device, 8 in a batch per line of text measured.
    pad_row = [0, "a", 1 << 44, 512, 0, 0, 1]
    pad_len = len(json.dumps(pad_row, separators=(",", ":"))) + 1
    padding = max(0, (a.bytes - len(text)) // pad_len)
    events["rows"] = [pad_row] * padding + rows
    events["capacity"] = events["recorded"] = len(events["rows"])
    events["dropped"] = 0
    text = json.dumps(report, separators=(",", ":"))
    if len(text) > a.bytes:
        raise SystemExit(f"adversarial_report.py: {len(text)} bytes of events alone pass --bytes {a.bytes}")
    open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
