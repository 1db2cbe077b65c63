"""GPU check with PyTorch under GPUGUARD_MEM_LIMIT=2GiB: mem_get_info shows 2 GiB total; filling it
raises torch.cuda.OutOfMemoryError; after freeing, the program allocates again. Prints PASS/FAIL."""
import os
import sys

import torch


def fill(blocks):
    while True:
        blocks.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))  # FILL-LINE


def main():
    free, total = torch.cuda.mem_get_info()
    print(f"torch: mem_get_info total={total} free={free}")
    blocks = []
    raised = False
    try:
        fill(blocks)
    except torch.cuda.OutOfMemoryError as e:
        raised = True
        print(f"torch: OutOfMemoryError after {len(blocks)} x 256 MiB: {str(e).splitlines()[0][:120]}")
    del blocks[:]
    torch.cuda.empty_cache()
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    print(f"torch: after freeing, allocated {x.numel() >> 20} MiB again")
    ok = total == 2 << 30 and raised
    print("torch:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


sys.exit(main())
