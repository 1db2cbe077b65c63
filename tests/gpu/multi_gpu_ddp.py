"""Issue 9 on two GPUs: a DistributedDataParallel training loop for torchrun --nproc_per_node=2
under `gpuguard run --limit 8GiB`. Each rank trains a few steps (NCCL all-reduces the gradients),
prints its device's UUID, then rank 1 asks for more than its quota leaves and prints the outcome;
both ranks wait at a barrier in between so that `gpuguard top` can see them.

  NCCL_NVLS_ENABLE=0 torchrun --nproc_per_node=2 multi_gpu_ddp.py PAUSE_FILE
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4096, 4096).cuda(), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 4096, device="cuda")
    for _ in range(20):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    print(f"rank {rank} uuid={torch.cuda.get_device_properties(rank).uuid} trained", flush=True)
    dist.barrier()
    pause = sys.argv[1]
    if rank == 0:
        open(pause, "w").close()  # the checker runs gpuguard top now, then removes the file
    while os.path.exists(pause):
        time.sleep(0.1)
    dist.barrier()
    if rank == 1:
        try:
            torch.empty(9 << 30, dtype=torch.uint8, device="cuda")
            print("rank 1 oom: not refused", flush=True)
        except torch.cuda.OutOfMemoryError:
            print("rank 1 oom: refused", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
