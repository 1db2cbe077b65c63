"""The tensor view's cost inside one process (make gpu-bench, tests/bench/gpu_tensor_cost.sh): the same
loop runs in blocks of steps with the view switched on and off at run time, taking turns many times, so
that the 10 to 25% by which whole processes differ on the GPU machine cancels out. Each round runs one
block of each, the order alternating round by round (on-off, off-on, ...); its ratio is on / off; the
median ratio over rounds, a distribution-free 95% interval for it, and its spread are printed. A
block of one step (the default) pairs each step with its neighbour, which cancels the drift of a
loop's step time over a run. After each switch, --settle steps (1) run untimed: switching the view
back on empties its live-block table, which then regrows during the next step, a cost of the switch
(rare in use) and not of the view.

  --mode shim     under the shim: gpuguard_set_tensor_view(1 / 0), the switch users have
                  (gpuguard.tensor_view); its symbol is found in the process as any program finds it
  --mode history  without the shim: PyTorch's recorder, _record_memory_history(stacks="python") on, and
                  _record_memory_history(None) off: the same comparison for it

Usage: tensor_inproc.py --mode shim|history [--loops llama,conv,decode] [--rounds R] [--block B] [--warmup W]
Prints per loop:
  inproc loop=NAME mode=M rounds=R block=B on_ms=.. off_ms=.. ratio=MEDIAN ci_lo=.. ci_hi=.. p25=.. p75=.. min=.. max=..
         blocks_per_step=..
where on_ms and off_ms are the median step times of the two kinds of block, and blocks_per_step the
blocks PyTorch handed out per step (allocation.all.allocated).
"""
import argparse
import ctypes
import math
import statistics
import sys
import time

import torch

import tensor_bench


def shim_switch():
    try:
        fn = ctypes.CDLL(None).gpuguard_set_tensor_view
    except AttributeError:
        sys.exit("tensor_inproc: gpuguard_set_tensor_view not found: run under the shim (LD_PRELOAD=libgpuguard.so)")
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return lambda on: fn(1 if on else 0)


def history_switch(on):
    if on:
        torch.cuda.memory._record_memory_history(stacks="python")
    else:
        torch.cuda.memory._record_memory_history(enabled=None)


def block_ms(step, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / n


def median_interval(sorted_values):
    """A distribution-free 95% interval for the median (the sign test's order statistics): the k-th
    smallest and k-th largest values, k the largest with P(Binomial(n, 1/2) < k) <= 2.5%."""
    n, k, below = len(sorted_values), 0, 0.0
    while k < n // 2:
        below += math.comb(n, k) / 2**n
        if below > 0.025:
            break
        k += 1
    k = max(k, 1)
    return sorted_values[k - 1], sorted_values[n - k]


def quantile(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def run(name, make, mode, switch, rounds, block, warmup, settle):
    step = make()
    for on in (True, False):  # both states warm: the site cache, the allocator's pools, cuBLAS's plans
        switch(on)
        block_ms(step, warmup)
    before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
    on_ms, off_ms, ratios = [], [], []
    for r in range(rounds):
        times = {}
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            switch(on)
            for _ in range(settle):  # untimed: what a switch sets off (the live-block table regrowing)
                step()
            times[on] = block_ms(step, block)
        on_ms.append(times[True])
        off_ms.append(times[False])
        ratios.append(times[True] / times[False])
    switch(True)
    blocks = (torch.cuda.memory_stats().get("allocation.all.allocated", 0) - before) / (2 * rounds * (block + settle))
    ratios.sort()
    lo, hi = median_interval(ratios)
    print(f"inproc loop={name} mode={mode} rounds={rounds} block={block} on_ms={statistics.median(on_ms):.3f} "
          f"off_ms={statistics.median(off_ms):.3f} ratio={statistics.median(ratios):.4f} ci_lo={lo:.4f} ci_hi={hi:.4f} "
          f"p25={quantile(ratios, 0.25):.4f} "
          f"p75={quantile(ratios, 0.75):.4f} min={ratios[0]:.4f} max={ratios[-1]:.4f} blocks_per_step={blocks:.1f}",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("shim", "history"), required=True)
    ap.add_argument("--loops", default="llama,conv,decode")
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--block", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--settle", type=int, default=1)
    a = ap.parse_args()
    switch = shim_switch() if a.mode == "shim" else history_switch
    loops = {"llama": tensor_bench.llama_loop, "conv": tensor_bench.conv_loop, "decode": tensor_bench.decode_loop}
    for name in a.loops.split(","):
        run(name, loops[name], a.mode, switch, a.rounds, a.block, a.warmup, a.settle)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
