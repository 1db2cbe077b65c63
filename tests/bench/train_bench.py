"""PyTorch training loops for tests/bench/gpu_run.sh: a small convolution net and a small
transformer-style block, timed step by step (each step ends with a synchronize). Run in separate
processes without the shim, with it (LD_PRELOAD) and with PyTorch's own
torch.cuda.memory._record_memory_history() (--history); PYTORCH_NO_CUDA_MEMORY_CACHING=1 in the
environment makes every tensor a driver call.

Usage: train_bench.py [--steps N] [--warmup W] [--models conv,xfmr] [--history] [--oom]
Prints one line per model:  train model=conv steps=N step_ms=MEDIAN p10_ms=.. p90_ms=.. allocs_per_step=..
[history_events=..], where allocs_per_step is the driver allocations (cudaMalloc) PyTorch made per
timed step (torch.cuda.memory_stats' num_device_alloc; -1 where PyTorch does not count them, as with
PYTORCH_NO_CUDA_MEMORY_CACHING=1: the profiled shim's hook counts say how many there were then).
With --oom, after the conv model's loop, inside a training step with the model live:
  report ms=..        gpuguard_report() called through ctypes (only under the shim)
  oom ms=a,b,c        time from a 200 GiB request to torch's OutOfMemoryError, three times, 1.2 s
                      apart (the shim starts a new episode, and writes a new report, after 1 s)
  oom_report ...      what the newest report in GPUGUARD_REPORT_DIR holds (only under the shim)
"""
import argparse
import ctypes
import glob
import json
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_setup(dev):
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 64, 64, device=dev)
    y = torch.randint(0, 10, (64,), device=dev)
    return model, opt, x, y


class Block(nn.Module):
    def __init__(self, d=256, heads=8, ff=1024, layers=2):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, batch_first=True) for _ in range(layers))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(dim=1))


def xfmr_setup(dev):
    model = Block().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 128, 256, device=dev)
    y = torch.randint(0, 10, (32,), device=dev)
    return model, opt, x, y


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()


def run(name, setup, args, dev):
    model, opt, x, y = setup(dev)
    for _ in range(args.warmup):
        train_step(model, opt, x, y)
    allocs_before = torch.cuda.memory_stats().get("num_device_alloc", -1)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        train_step(model, opt, x, y)
        times.append((time.perf_counter() - t0) * 1e3)
    allocs = torch.cuda.memory_stats().get("num_device_alloc", -1)
    # Without the cache PyTorch counts no device allocations: 0 would be wrong.
    counted = allocs_before >= 0 and allocs >= 0 and not os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING")
    per_step = (allocs - allocs_before) / args.steps if counted else -1
    q = statistics.quantiles(times, n=10)
    extra = f" allocs_per_step={per_step:.1f}"
    if args.history:
        try:
            snap = torch.cuda.memory._snapshot()
            extra += f" history_events={sum(len(t) for t in snap.get('device_traces', []))}"
        except Exception:  # noqa: BLE001
            extra += " history_events=-1"
    print(f"train model={name} steps={args.steps} step_ms={statistics.median(times):.4f} "
          f"p10_ms={q[0]:.4f} p90_ms={q[-1]:.4f}{extra}", flush=True)
    return model, opt, x, y


def oom_step(model, x):
    """A training step that asks for far more than any quota or GPU holds, as a too-large batch would."""
    model(x)
    return torch.empty(200 << 30, dtype=torch.uint8, device=x.device)


def oom_test(model, x):
    try:
        report = ctypes.CDLL(None).gpuguard_report
    except AttributeError:
        report = None
    if report:
        report.argtypes = [ctypes.c_char_p]
        t0 = time.perf_counter()
        rc = report(b"train_bench on demand")
        print(f"report ms={(time.perf_counter() - t0) * 1e3:.2f} rc={rc}", flush=True)
    times = []
    for i in range(3):
        if i:
            time.sleep(1.2)
        t0 = time.perf_counter()
        try:
            oom_step(model, x)
        except torch.cuda.OutOfMemoryError:
            pass
        times.append((time.perf_counter() - t0) * 1e3)
    print("oom ms=" + ",".join(f"{t:.2f}" for t in times), flush=True)
    rdir = os.environ.get("GPUGUARD_REPORT_DIR")
    if report and rdir:
        files = sorted(glob.glob(os.path.join(rdir, "gpuguard-quota-*.json")) +
                       glob.glob(os.path.join(rdir, "gpuguard-driver_oom-*.json")), key=os.path.getmtime)
        if files:
            text = open(files[-1]).read()
            d = json.loads(text)
            print(f"oom_report files={len(files)} bytes={len(text)} reason={d.get('reason')} "
                  f"stacks={len(d.get('stacks', {}))} live={d.get('usage', {}).get('live_allocations')} "
                  f"names_script={int('train_bench.py' in text)}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--models", default="conv,xfmr")
    ap.add_argument("--history", action="store_true")
    ap.add_argument("--oom", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    torch.empty(1, device=dev)  # context
    if args.history:
        try:
            torch.cuda.memory._record_memory_history(max_entries=100000)
        except Exception as e:  # noqa: BLE001 - reported, and the run goes on without it
            print(f"note: _record_memory_history failed: {e}", flush=True)
    for name in args.models.split(","):
        model, opt, x, y = run(name, {"conv": conv_setup, "xfmr": xfmr_setup}[name], args, dev)
        if args.oom and name == "conv":
            oom_test(model, x)
        del model, opt, x, y


if __name__ == "__main__":
    main()
