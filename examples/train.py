"""A small PyTorch training loop that runs out of GPU memory under a small quota.

    gpuguard run --limit 2GiB --report-dir reports -- python3 examples/train.py
    gpuguard report reports/gpuguard-quota-*.json        # what failed, who held the memory, advice

A small convolutional network trains on random images; every few steps the batch doubles, as a
person tuning the batch size would do, until an allocation is refused. Under gpuguard the refusal
comes at the quota (2 GiB above) instead of at the GPU's physical size, torch.cuda.mem_get_info()
answers with the quota, and the shim writes a report naming the Python lines that hold the memory.
Without gpuguard the loop stops at --max-batch so that it never takes a shared GPU's whole memory.

Exit status: 0 when it finished without running out of memory, 1 when it ran out (and a report was
written when gpuguard was in force), 2 when there is no GPU or no PyTorch.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import time


def shim_loaded():
    """Whether libgpuguard.so is mapped into this process."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libgpuguard.so" in line for line in maps)
    except OSError:
        return False


def newest_report(since):
    """The report this process wrote, if any: gpuguard-<reason>-<time>-<host>-<pid>-<n>.json."""
    folder = os.environ.get("GPUGUARD_REPORT_DIR") or "."
    mine = [p for p in glob.glob(os.path.join(folder, "gpuguard-*.json"))
            if p.rsplit("-", 2)[-2] == str(os.getpid()) and os.path.getmtime(p) >= since - 1]
    return max(mine, key=os.path.getmtime) if mine else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8, help="first batch size (default 8)")
    parser.add_argument("--max-batch", type=int, default=256, help="stop after this batch size (default 256, about 10 GiB)")
    parser.add_argument("--steps-per-size", type=int, default=3, help="steps before the batch doubles (default 3)")
    parser.add_argument("--size", type=int, default=128, help="image side in pixels (default 128)")
    args = parser.parse_args()

    try:
        import torch
        import torch.nn as nn
    except ImportError:
        print("train.py: PyTorch is not installed (pip install torch)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("train.py: torch.cuda is not available: no GPU or no driver (gpuguard doctor says why)", file=sys.stderr)
        return 2

    device = torch.device("cuda")
    free, total = torch.cuda.mem_get_info()
    print(f"gpuguard {'loaded' if shim_loaded() else 'NOT loaded (start me with gpuguard run)'}; "
          f"limit {os.environ.get('GPUGUARD_MEM_LIMIT', 'none')}; "
          f"CUDA reports {free / 2**30:.2f} GiB free of {total / 2**30:.2f} GiB")

    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(128, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    started = time.time()
    batch, step = args.batch, 0
    try:
        while batch <= args.max_batch:
            for _ in range(args.steps_per_size):
                images = torch.randn(batch, 3, args.size, args.size, device=device)
                labels = torch.randint(0, 10, (batch,), device=device)
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(images), labels)
                loss.backward()
                optimizer.step()
                step += 1
            print(f"step {step:3d}  batch {batch:5d}  loss {loss.item():.3f}  "
                  f"allocated {torch.cuda.memory_allocated() / 2**20:8.1f} MiB  "
                  f"reserved {torch.cuda.memory_reserved() / 2**20:8.1f} MiB", flush=True)
            batch *= 2
    except torch.cuda.OutOfMemoryError as e:
        print(f"\nout of GPU memory at batch {batch} (step {step + 1}):")
        print("  " + str(e).splitlines()[0])
        report = newest_report(started)
        if report:
            print(f"gpuguard's report: {report}")
            print(f"  read it with:   gpuguard report {report}")
            print(f"  or look at it:  gpuguard report --html oom.html {report}")
            if shutil.which("gpuguard"):
                print()
                env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
                subprocess.run(["gpuguard", "report", report], env=env, check=False)
        elif shim_loaded():
            print("no report found in GPUGUARD_REPORT_DIR (or the working directory); the shim's stderr line says why")
        return 1

    print(f"finished {step} steps up to batch {batch // 2} without running out of memory; "
          "try: gpuguard run --limit 2GiB -- python3 examples/train.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
