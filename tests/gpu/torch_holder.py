"""Holds N GiB on the GPU (or as much as it can, in 256 MiB steps up to N GiB), prints what it got,
then waits (for the ledger test: 'python3 torch_holder.py 3 wait' or 'try')."""
import sys
import time

import torch

want = int(float(sys.argv[1]) * 4)  # in 256 MiB blocks
blocks = []
try:
    for _ in range(want):
        blocks.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError:
    pass
print(f"holder: got {len(blocks) * 256} MiB", flush=True)
if len(sys.argv) > 2 and sys.argv[2] == "wait":
    time.sleep(120)
