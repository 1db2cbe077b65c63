"""PyTorch loops for the tensor view's cost (tests/bench/gpu_tensor_cost.sh), each timed step by step
(a step ends with a synchronize), all with PyTorch's caching allocator, so that after warm-up no
driver call is left and every tensor is a block the shim sees through c10's report:

  llama    a training step of a small Llama from transformers (random weights, bf16, batch 8 x 512)
  conv     a small convolution net's training step (batch 64, 3x64x64)
  decode   one token of a small Llama's generate() decode loop (batch 8, KV cache), timed per token

Usage: tensor_bench.py [--steps N] [--warmup W] [--loops llama,conv,decode] [--history]
Prints per loop:  tensor loop=NAME steps=N step_ms=MEDIAN p10_ms=.. p90_ms=.. blocks_per_step=..
where blocks_per_step is the blocks PyTorch handed out per timed step (allocation.all.allocated).
--history runs under torch.cuda.memory._record_memory_history(stacks="python"), PyTorch's recorder.
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def small_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                      num_key_value_heads=16, vocab_size=32000, max_position_embeddings=2048)
    return LlamaForCausalLM(cfg).to("cuda", torch.bfloat16), cfg


def llama_loop():
    model, cfg = small_llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (8, 512), device="cuda")

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def conv_loop():
    model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(64, 3, 64, 64, device="cuda"), torch.randint(0, 10, (64,), device="cuda")

    def step():
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def decode_loop():
    model, cfg = small_llama()
    model.eval()
    ids = torch.randint(0, cfg.vocab_size, (8, 128), device="cuda")
    state = {}

    @torch.no_grad()
    def step():
        # One decode step: the next token for every sequence, the KV cache growing by one position.
        if not state or state["n"] >= 256:
            out = model(input_ids=ids, use_cache=True)
            state.update(cache=out.past_key_values, tok=out.logits[:, -1:].argmax(-1), n=0)
        out = model(input_ids=state["tok"], past_key_values=state["cache"], use_cache=True)
        state.update(cache=out.past_key_values, tok=out.logits[:, -1:].argmax(-1), n=state["n"] + 1)
    return step


def run(name, make, steps, warmup):
    step = make()
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    blocks = (torch.cuda.memory_stats().get("allocation.all.allocated", 0) - before) / steps
    times.sort()
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))]
    print(f"tensor loop={name} steps={steps} step_ms={statistics.median(times):.3f} p10_ms={q(0.1):.3f} "
          f"p90_ms={q(0.9):.3f} blocks_per_step={blocks:.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--loops", default="llama,conv,decode")
    ap.add_argument("--history", action="store_true")
    a = ap.parse_args()
    if a.history:
        torch.cuda.memory._record_memory_history(stacks="python")
    loops = {"llama": llama_loop, "conv": conv_loop, "decode": decode_loop}
    for name in a.loops.split(","):
        run(name, loops[name], a.steps, a.warmup)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
