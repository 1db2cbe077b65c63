"""Issue 9 on two GPUs: what one process sees and gets on each device under the shim.

  multi_gpu_devices.py limits     prints each device's mem_get_info total, then allocates 256 MiB
                                  blocks on device 1 until refused, then 1 GiB more on device 0
  multi_gpu_devices.py hold N D   holds N GiB on CUDA device D (of this process's visible ones),
                                  prints 'held', and waits for its input to close
"""
import sys

import torch

GIB = 1 << 30


def limits():
    for d in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(d)
        print(f"device {d} total={total}", flush=True)
    blocks = []
    try:
        while True:
            blocks.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda:1"))
    except torch.cuda.OutOfMemoryError:
        pass
    print(f"device 1 got={len(blocks) * 256 << 20}", flush=True)
    try:
        more = torch.empty(GIB, dtype=torch.uint8, device="cuda:0")
        print("device 0 after device 1 refused: ok", flush=True)
        del more
    except torch.cuda.OutOfMemoryError:
        print("device 0 after device 1 refused: refused", flush=True)


def hold(gib, device):
    x = torch.empty(int(gib * GIB), dtype=torch.uint8, device=f"cuda:{device}")
    print("held", flush=True)
    sys.stdin.read()
    del x


if __name__ == "__main__":
    if sys.argv[1] == "limits":
        limits()
    else:
        hold(float(sys.argv[2]), int(sys.argv[3]))
