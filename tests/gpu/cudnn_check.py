#!/usr/bin/env python3
"""GPU check for issue 5 (cuDNN workspaces): a convolution network trained with
torch.backends.cudnn.benchmark=True under a gpuguard quota in which cuDNN's largest workspace does
not fit. Run it three ways and compare the last lines:

  LD_PRELOAD=build/libgpuguard.so GPUGUARD_REPORT_ON_EXIT=1 python3 tests/gpu/cudnn_check.py
  LD_PRELOAD=build/libgpuguard.so GPUGUARD_REPORT_ON_EXIT=1 GPUGUARD_CUDNN_WORKSPACE_LIMIT=off \\
      python3 tests/gpu/cudnn_check.py --limit <the limit the first run printed>
  python3 tests/gpu/cudnn_check.py                      # no shim: the reference step time

The quota: --limit SIZE, or (default, under the shim only) calibrated first in a child process
that runs one training step with no quota and the cap off, and reads how much the step reserved
(P) and the largest workspace cuDNN asked for (W) from a gpuguard report: the limit is then
P - W/2 (P when W >= P) plus 128 MiB, so that training fits but the largest workspace does not.
GPUGUARD_MEM_LIMIT, when set, wins over both. The quota is this process's own (GPUGUARD_LEDGER=none
unless set): a shared ledger keeps the limit of the first process that registered the device,
which would tie one run to another. The run trains --steps steps and exits 0 when they all
finished; the last line is a one-line summary (step times; the shim's view: cap, largest workspace,
plans and algorithms rejected, failed allocations, reports written; PyTorch's allocator retries
and OOMs).
"""
import argparse
import ctypes
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30


def human(n):
    if n is None:
        return "n/a"
    for unit, size in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


def parse_size(s):
    s = s.strip()
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    num = s.rstrip("BbIi")
    mult = 1
    if num and num[-1].lower() in units:
        mult = units[num[-1].lower()]
        num = num[:-1]
    return int(float(num) * mult)


def shim_loaded():
    return "libgpuguard" in os.environ.get("LD_PRELOAD", "")


def shim_report(tag):
    """Asks the shim for a report now (the public gpuguard_report) and returns it parsed, or None
    when the shim is not in the process."""
    try:
        fn = ctypes.CDLL(None).gpuguard_report
    except AttributeError:
        return None
    fn.argtypes = [ctypes.c_char_p]
    if fn(tag.encode()) != 0:
        return None
    folder = os.environ.get("GPUGUARD_REPORT_DIR", ".")
    mine = glob.glob(os.path.join(folder, f"gpuguard-request-*-{os.getpid()}-*.json"))
    if not mine:
        return None
    with open(max(mine, key=os.path.getmtime)) as f:
        return json.load(f)


def automatic_reports():
    """Reports the shim wrote on its own for this process (failed allocations)."""
    folder = os.environ.get("GPUGUARD_REPORT_DIR", ".")
    pid = os.getpid()
    return [p for reason in ("quota", "driver_oom") for p in glob.glob(os.path.join(folder, f"gpuguard-{reason}-*-{pid}-*.json"))]


def build(torch):
    nn = torch.nn
    # Large kernels on large feature maps: FFT-style and split-k engines ask for workspaces of GiBs,
    # implicit GEMM for none, so cuDNN has plans on both sides of any cap.
    body = nn.Sequential(
        nn.Conv2d(3, 64, 7, padding=3), nn.ReLU(inplace=True),
        nn.Conv2d(64, 128, 5, padding=2), nn.ReLU(inplace=True),
        nn.Conv2d(128, 128, 11, padding=5), nn.ReLU(inplace=True),
        nn.Conv2d(128, 128, 5, padding=2), nn.ReLU(inplace=True),
    )
    head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
    return nn.Sequential(body, head)


def train(args):
    import torch

    if not torch.cuda.is_available():
        print("cudnn_check: no CUDA device", flush=True)
        sys.exit(2)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = build(torch).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if step == 0 or (step + 1) % 10 == 0:
            print(f"step {step + 1}/{args.steps}: {times[-1] * 1000:.1f} ms, loss {loss.item():.3f}", flush=True)
    stats = torch.cuda.memory_stats()
    return {
        "times": times,
        "reserved_peak": torch.cuda.max_memory_reserved(),
        "allocated_peak": torch.cuda.max_memory_allocated(),
        "alloc_retries": stats.get("num_alloc_retries", 0),
        "ooms": stats.get("num_ooms", 0),
        "cudnn": torch.backends.cudnn.version(),
        "torch": torch.__version__,
    }


def calibrate(args):
    """One step with no quota and no cap, in a child process: its peak and largest workspace."""
    env = dict(os.environ)
    env.pop("GPUGUARD_MEM_LIMIT", None)
    env["GPUGUARD_LEDGER"] = "none"
    env["GPUGUARD_CUDNN_WORKSPACE_LIMIT"] = "off"
    env["GPUGUARD_REPORT_ON_EXIT"] = "0"
    with tempfile.TemporaryDirectory() as d:
        env["GPUGUARD_REPORT_DIR"] = d
        cmd = [sys.executable, __file__, "--calibrate", "--steps", "1", "--batch", str(args.batch), "--size", str(args.size)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    for line in out.stdout.splitlines():
        if line.startswith("calibration "):
            return json.loads(line[len("calibration "):])
    print(out.stdout + out.stderr, flush=True)
    print("cudnn_check: calibration failed; pass --limit", flush=True)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=128, help="input height and width")
    ap.add_argument("--limit", help="GPUGUARD_MEM_LIMIT for the run (default: calibrated)")
    ap.add_argument("--calibrate", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.calibrate:
        r = train(args)
        rep = shim_report("cudnn_check calibration") or {}
        ws = (rep.get("cudnn") or {}).get("largest_workspace_requested_bytes")
        print("calibration " + json.dumps({"reserved_peak": r["reserved_peak"], "largest_ws": ws}), flush=True)
        return

    limit_note = "no shim: no quota, no cap"
    if shim_loaded():
        # The quota must be in the environment before the shim's first hooked call (CUDA init).
        os.environ.setdefault("GPUGUARD_LEDGER", "none")
        if os.environ.get("GPUGUARD_MEM_LIMIT"):
            limit_note = f"GPUGUARD_MEM_LIMIT={os.environ['GPUGUARD_MEM_LIMIT']} (from the environment)"
        elif args.limit:
            os.environ["GPUGUARD_MEM_LIMIT"] = args.limit
            limit_note = f"GPUGUARD_MEM_LIMIT={args.limit} (--limit)"
        else:
            c = calibrate(args)
            p, w = c["reserved_peak"], c["largest_ws"] or 0
            # W is the largest size cuDNN asked for, which PyTorch may never have allocated (it skips
            # plans larger than the free memory): P alone then already keeps it out.
            limit = p if w >= p else p - w // 2
            limit += 128 << 20  # what cuDNN and the driver allocate outside PyTorch's allocator
            limit = (limit + (1 << 20) - 1) >> 20 << 20
            os.environ["GPUGUARD_MEM_LIMIT"] = f"{limit >> 20}MiB"
            limit_note = (f"GPUGUARD_MEM_LIMIT={limit >> 20}MiB (calibrated: one step reserved {human(p)}, "
                          f"largest workspace {human(w)}; pass --limit {limit >> 20}MiB to reuse)")
    cap_note = f"; cap GPUGUARD_CUDNN_WORKSPACE_LIMIT={os.environ.get('GPUGUARD_CUDNN_WORKSPACE_LIMIT', 'auto')}"
    print(f"cudnn_check: {limit_note}{cap_note if shim_loaded() else ''}", flush=True)

    r = train(args)
    steady = r["times"][1:] or r["times"]
    rep = shim_report("cudnn_check end") if shim_loaded() else None
    c = (rep or {}).get("cudnn") or {}
    failures = sum(v.get("failures", 0) for v in (rep or {}).get("counts_by_api", {}).values()) if rep else None
    cap = c.get("workspace_cap_bytes")
    largest = c.get("largest_workspace_requested_bytes")
    verdict = ""
    if cap is not None and c.get("plans_rejected", 0) + c.get("algorithms_rejected", 0) == 0:
        verdict = " NOTE: nothing was over the cap (the largest workspace fit): lower --limit to test the cap"
    print(f"cudnn_check: torch {r['torch']} cudnn {r['cudnn']} steps={len(r['times'])} finished "
          f"first_step={r['times'][0]:.2f}s median_step={statistics.median(steady) * 1000:.1f}ms "
          f"limit={os.environ.get('GPUGUARD_MEM_LIMIT', 'none') if shim_loaded() else 'none'} "
          f"cap={c.get('workspace_cap', 'n/a')}:{human(cap)} largest_ws={human(largest)} "
          f"plans_rejected={c.get('plans_rejected', 'n/a')} algos_rejected={c.get('algorithms_rejected', 'n/a')} "
          f"alloc_failures={failures if failures is not None else 'n/a'} "
          f"reports={len(automatic_reports()) if shim_loaded() else 'n/a'} "
          f"torch_alloc_retries={r['alloc_retries']} torch_ooms={r['ooms']} "
          f"reserved_peak={human(r['reserved_peak'])}{verdict}", flush=True)


if __name__ == "__main__":
    main()
