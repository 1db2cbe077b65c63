"""tests/gpu/packaging.sh's PyTorch program, run from the wheel's venv under `python -m gpuguard run`.
usage MODE: "usage" prints gpuguard.usage() beside torch's numbers; "oom" allocates 256 MiB tensors
until the quota stops it (torch.cuda.OutOfMemoryError), inside gpuguard.phase("fill"); "hold N"
holds N MiB until stdin closes (the exporter's two-process run)."""
import json
import sys

import torch

import gpuguard

mode = sys.argv[1]
print(gpuguard.status(), flush=True)
if mode == "usage":
    x = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    u = gpuguard.usage()
    dev = next(iter(u["devices"].values()))
    print("USAGE " + json.dumps({"shim": u["shim"], "process": dev["process"], "used": dev["used"], "limit": dev["limit"],
                                 "torch_reserved": torch.cuda.memory_reserved(), "torch_allocated": torch.cuda.memory_allocated(),
                                 "torch_free_total": torch.cuda.mem_get_info()}), flush=True)
elif mode == "oom":
    held = []
    try:
        with gpuguard.phase("fill"):
            while True:
                held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as e:
        print("OOM after %d tensors: %s" % (len(held), str(e).splitlines()[0][:160]), flush=True)
elif mode == "hold":
    x = torch.empty(int(sys.argv[2]) << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("ready", flush=True)
    sys.stdin.read()
