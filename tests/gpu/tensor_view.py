"""The tensor view on the GPU: PyTorch programs whose out-of-memory a user would want explained in
tensors. Run under the shim by tests/gpu/tensor_view.sh, one MODE per process:

  agree       varied tensors, some freed; asks the shim for a report and prints PyTorch's own numbers
  frag        440 tensors of 4 MiB, every other one freed, then 600 MiB: fails though the quota
              minus what is allocated is enough (the segments are pinned)
  slack       20 tensors of 100 MiB each freed and replaced by one of 60 MiB (a 40 MiB tail left in
              each segment), then 80 MiB: fails without expandable segments, fits with them
  kv          a small Llama (transformers, random weights) generating until its KV cache outgrows
              the quota, under torch.no_grad()
  ddp         DDP (NCCL, one rank) training with a growing batch until it runs out

Each prints "tensor_view: MODE key=value ..." lines that the driver script compares with the report:
PyTorch's memory_allocated() and memory_reserved() when the OutOfMemoryError was raised.
"""
import ctypes
import os
import sys

import torch

MiB = 1 << 20


def say(mode, **kv):
    print(f"tensor_view: {mode} " + " ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def at_oom(mode, e):
    say(mode, oom=1, allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved(),
        message=str(e).splitlines()[0][:160].replace(" ", "_"))


def agree():
    keep = [torch.empty(n * MiB + 4096 * i, dtype=torch.uint8, device="cuda") for i, n in enumerate([1, 3, 7, 30, 90] * 4)]
    small = [torch.ones(100 + i, device="cuda") for i in range(300)]
    del keep[::3], small[::2]
    stats = torch.cuda.memory_stats()
    ctypes.CDLL(None).gpuguard_report(b"agree")  # the shim's exported API: a report now
    say("agree", allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved(),
        blocks=stats["allocation.all.current"])


def frag():
    held = [torch.empty(4 * MiB, dtype=torch.uint8, device="cuda") for _ in range(440)]  # FRAG-ALLOC
    del held[::2]
    say("frag", allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved())
    try:
        big = torch.empty(600 * MiB, dtype=torch.uint8, device="cuda")  # FRAG-BIG
        say("frag", oom=0, big=big.numel())
    except torch.cuda.OutOfMemoryError as e:
        at_oom("frag", e)


def slack():
    kept = []
    for _ in range(20):
        b = torch.empty(100 * MiB, dtype=torch.uint8, device="cuda")
        del b
        kept.append(torch.empty(60 * MiB, dtype=torch.uint8, device="cuda"))  # SLACK-KEEP
    say("slack", allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved())
    try:
        big = torch.empty(80 * MiB, dtype=torch.uint8, device="cuda")
        say("slack", oom=0, big=big.numel())
    except torch.cuda.OutOfMemoryError as e:
        at_oom("slack", e)


def kv():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                      num_key_value_heads=16, vocab_size=32000, max_position_embeddings=8192)
    model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (64, 128), device="cuda")
    try:
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=4096, min_new_tokens=4096, do_sample=False)  # KV-GENERATE
        say("kv", oom=0, tokens=out.shape[1])
    except torch.cuda.OutOfMemoryError as e:
        at_oom("kv", e)


def ddp():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    net = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda()
    model = DistributedDataParallel(net, bucket_cap_mb=100)
    opt = torch.optim.Adam(model.parameters())
    batch = 256
    try:
        for step in range(40):
            say("ddp", step=step, batch=batch)  # how far a rerun gets (the what-if check)
            x = torch.randn(batch, 4096, device="cuda")
            loss = model(x).square().mean()
            loss.backward()  # DDP-BACKWARD
            opt.step()
            opt.zero_grad(set_to_none=True)
            batch *= 2
        say("ddp", oom=0, batch=batch)
    except torch.cuda.OutOfMemoryError as e:
        at_oom("ddp", e)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    {"agree": agree, "frag": frag, "slack": slack, "kv": kv, "ddp": ddp}[sys.argv[1]]()
