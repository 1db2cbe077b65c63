"""The workloads of tests/gpu/truth.sh (issue 19), one per subcommand. Each takes as much of the GPU
as its quota lets it, in the way its framework does, prints "PEAK ..." once it holds its most, then
holds until the file named by TRUTH_STOP exists (at most 60 s), so that the script can read the
driver's per-process figures while it holds.

  hold GIB        PyTorch's caching allocator: 256 MiB tensors up to GIB, or until refused
  graph           a CUDA graph whose capture allocates 768 MiB inside it (run with
                  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync), replayed, beside 1 GiB of tensors
  pool GIB        the cudaMallocAsync backend: GIB of tensors allocated and freed (the pool keeps
                  them: PyTorch sets its release threshold to the maximum)
  ddp             DistributedDataParallel with NCCL, one rank (RANK, WORLD_SIZE, MASTER_* set by the
                  script), a few steps, then tensors until refused
  cupy            CuPy on its stream-ordered pool (MemoryAsyncPool): 256 MiB arrays until refused,
                  half of them freed back to the pool
  jax             JAX (XLA's allocator as configured by the script's XLA_* variables): 256 MiB
                  arrays until refused
A framework that is not installed prints "SKIP <why>" and exits 0.
"""
import os
import sys
import time

MIB = 1 << 20


def hold(what):
    print(f"PEAK {what}", flush=True)
    stop = os.environ.get("TRUTH_STOP", "")
    end = time.time() + 60
    while time.time() < end and not (stop and os.path.exists(stop)):
        time.sleep(0.1)


def torch_blocks(torch, blocks, most_mib):
    """256 MiB tensors until most_mib or the first refusal; returns the refusal's text or ''."""
    try:
        while len(blocks) * 256 < most_mib:
            t = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
            t.fill_(1)
            blocks.append(t)
    except Exception as e:  # OutOfMemoryError, or AcceleratorError without the cache
        return type(e).__name__
    return ""


def cmd_hold(gib):
    import torch

    blocks = []
    why = torch_blocks(torch, blocks, int(float(gib) * 1024))
    torch.cuda.synchronize()
    hold(f"tensors={len(blocks) * 256}MiB stopped_by={why or 'target'}")


def cmd_graph():
    import torch

    blocks = []
    torch_blocks(torch, blocks, 1024)
    graph = "not made"
    try:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            with torch.cuda.graph(g):
                y = torch.empty(768 * MIB, dtype=torch.uint8, device="cuda")
                y.fill_(2)
        torch.cuda.current_stream().wait_stream(s)
        graph = "captured"
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        graph = "replayed"
    except Exception as e:
        graph += f", then {type(e).__name__}: {str(e).splitlines()[0][:80]}"
    why = torch_blocks(torch, blocks, 4096)
    torch.cuda.synchronize()
    hold(f"graph={graph} tensors={len(blocks) * 256}MiB stopped_by={why or 'target'}")


def cmd_pool(gib):
    import torch

    blocks = []
    why = torch_blocks(torch, blocks, int(float(gib) * 1024))
    got = len(blocks) * 256
    del blocks
    torch.cuda.synchronize()
    hold(f"freed={got}MiB kept_by_pool reserved={torch.cuda.memory_reserved() >> 20}MiB stopped_by={why or 'target'}")


def cmd_ddp():
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4096, 4096).cuda(), device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 4096, device="cuda")
    for _ in range(10):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    blocks = []
    why = torch_blocks(torch, blocks, 4096)
    torch.cuda.synchronize()
    dist.barrier()
    hold(f"trained tensors={len(blocks) * 256}MiB stopped_by={why or 'target'}")
    dist.destroy_process_group()


def cmd_cupy():
    try:
        import cupy
    except ImportError as e:
        print(f"SKIP no cupy ({e})", flush=True)
        return
    cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
    arrays, why = [], ""
    try:
        while len(arrays) < 16:
            a = cupy.empty(256 * MIB, dtype=cupy.uint8)
            a.fill(1)
            arrays.append(a)
    except Exception as e:
        why = type(e).__name__
    got = len(arrays) * 256
    del arrays[: len(arrays) // 2]
    cupy.cuda.Device().synchronize()
    hold(f"arrays={got}MiB half_freed stopped_by={why or 'target'}")


def cmd_jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        print(f"SKIP no jax ({e})", flush=True)
        return
    if not any(d.platform == "gpu" for d in jax.devices()):
        print("SKIP jax has no GPU backend", flush=True)
        return
    arrays, why = [], ""
    try:
        while len(arrays) < 16:
            arrays.append(jnp.ones((64 * MIB,), dtype=jnp.float32))
            arrays[-1].block_until_ready()
    except Exception as e:
        why = type(e).__name__
    hold(f"arrays={len(arrays) * 256}MiB stopped_by={why or 'target'}")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {"hold": cmd_hold, "graph": cmd_graph, "pool": cmd_pool, "ddp": cmd_ddp, "cupy": cmd_cupy, "jax": cmd_jax}[cmd](
        *args
    )


if __name__ == "__main__":
    main()
