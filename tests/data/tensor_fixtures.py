#!/usr/bin/env python3
"""Writes the report fixtures with a tensor view (docs/report-schema.md, "tensor_view"):

  tensor_fragmentation.json  a quota OOM of PyTorch's caching allocator from fragmentation: 220 live
                             4 MiB blocks spread over 86 segments of 20 MiB (880 MiB allocated,
                             1.68 GiB reserved, 840 MiB free inside the segments, none of it in a piece
                             of more than 4 MiB), and a 600 MiB request that a new segment would have
                             to serve, past the 2 GiB limit. Plus one 64 MiB driver allocation made by
                             NCCL outside the caching allocator.
  tensor_before.json         the same program ten minutes earlier (a report it asked for): fewer
                             blocks of the metrics stack, 20 blocks of a stack that is gone later,
                             so that `report diff` has growth, shrinkage and a stack that went.

The files are checked in; this script is how their numbers came about (rerun it after changing it:
python3 tests/data/tensor_fixtures.py). Stack ids differ between the two files, as they would between
two runs, so that diff must match stacks by their frames.
"""
import json
import os

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
SEG = 20 * MiB
BLOCK = 4 * MiB
BASE = 0x7F2A00000000          # segment i lies at BASE + i * 32 MiB: below 2^53, exact in JavaScript
NCCL_ADDR = 0x7F29F0000000


def native(module, offset, symbol, ip_base=0x7F0A00000000):
    return {"kind": "native", "ip": hex(ip_base + offset), "module": module, "offset": hex(offset),
            "build_id": "a9d3e2", "symbol": symbol}


def py(file, function, line):
    return {"kind": "python", "file": file, "function": function, "line": line}


TORCH = "/opt/venv/lib/python3.12/site-packages/torch"
SHIM = "/usr/local/lib/libgpuguard.so"
DRIVER_HOOK = native(SHIM, 0x4A1C, "gg::hooks::cuMemAlloc_v2(unsigned long long*, unsigned long)")
BLOCK_HOOK = native(SHIM, 0x9C40, "c10::reportMemoryUsageToProfiler(void*, long, unsigned long, unsigned long, c10::Device)")
CUDART = native("/opt/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12", 0x5A2F0, "cudaMalloc")
C10_MALLOC = [
    native(TORCH + "/lib/libc10_cuda.so", 0x41D40,
           "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"),
    native(TORCH + "/lib/libc10_cuda.so", 0x45A10,
           "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)"),
    native(TORCH + "/lib/libtorch_cuda.so", 0x2B1B7C0,
           "at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)"),
    native(TORCH + "/lib/libtorch_cuda.so", 0x2B1C010,
           "at::native::empty_cuda(c10::ArrayRef<long>, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>)"),
]
EVAL = native("/usr/bin/python3.12", 0x1C01F0, "_PyEval_EvalFrameDefault", 0x5581AA000000)
CALL = py(TORCH + "/nn/modules/module.py", "_call_impl", 1762)
STEP = [py("/work/train.py", "train_step", 61), py("/work/train.py", "main", 102), py("/work/train.py", "<module>", 118)]


def attention_frames(line):
    """model.forward at `line`: the attention scores (matmul) at 41, the logits (linear) at 47."""
    op = (native(TORCH + "/lib/libtorch_cuda.so", 0x2F01A30, "at::native::matmul(at::Tensor const&, at::Tensor const&)")
          if line == 41 else
          native(TORCH + "/lib/libtorch_cuda.so", 0x2F0B110, "at::native::linear(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)"))
    return [op, EVAL, py("/work/model.py", "forward", line), CALL] + STEP


def metrics_frames():
    return [native(TORCH + "/lib/libtorch_cuda.so", 0x2B2C4F0, "at::native::clone(at::Tensor const&, std::optional<c10::MemoryFormat>)"),
            EVAL, py("/work/train.py", "log_metrics", 57), py("/work/train.py", "train_step", 66)] + STEP[1:]


def grads_frames():
    return [native(TORCH + "/lib/libtorch_cuda.so", 0x2B1D220, "at::native::zeros_like(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>)"),
            EVAL, py(TORCH + "/optim/optimizer.py", "zero_grad", 1002), py("/work/train.py", "accumulate", 49)] + STEP


def nccl_frames():
    nccl = "/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
    return [DRIVER_HOOK, CUDART, native(nccl, 0x8E210, "ncclCommInitRank"),
            native(TORCH + "/lib/libtorch_cuda.so", 0x3A0F150, "c10d::ProcessGroupNCCL::getNCCLComm(std::string const&, c10::Device&, c10d::OpType, int, bool)"),
            EVAL, py("/work/train.py", "setup", 20), py("/work/train.py", "main", 95), py("/work/train.py", "<module>", 118)]


def driver_stack(frames):  # a segment: cudaMalloc called by c10's malloc
    return {"frames": [DRIVER_HOOK, CUDART] + C10_MALLOC + frames}


def block_stack(frames):  # a block: c10 reporting it from its malloc
    return {"frames": [BLOCK_HOOK] + C10_MALLOC + frames}


def report(after):
    """after=True: tensor_fragmentation.json; False: tensor_before.json."""
    # Stack ids: other ids in each file for the same frames.
    ids = ({"seg_attn": "s1", "seg_metrics": "s2", "nccl": "s3", "failed": "s4", "blk_attn": "s5", "blk_metrics": "s6"}
           if after else
           {"blk_attn": "s1", "blk_metrics": "s2", "blk_grads": "s3", "seg_attn": "s4", "seg_metrics": "s5", "nccl": "s6"})
    stacks = {ids["seg_attn"]: driver_stack(attention_frames(41)), ids["seg_metrics"]: driver_stack(metrics_frames()),
              ids["nccl"]: {"frames": nccl_frames()}, ids["blk_attn"]: block_stack(attention_frames(41)),
              ids["blk_metrics"]: block_stack(metrics_frames())}
    if after:
        stacks[ids["failed"]] = driver_stack(attention_frames(47))
    else:
        stacks[ids["blk_grads"]] = block_stack(grads_frames())

    t0 = 1764690000000000000
    start = t0
    now = t0 + (600 if not after else 1200) * 1000000000

    # Segments: 86 of 20 MiB when the OOM came; 70 made for the attention scores, then 16 for metrics.
    nseg = 86 if after else 66
    segments = []
    for i in range(nseg):
        stack = ids["seg_attn"] if i < 70 else ids["seg_metrics"]
        segments.append([BASE + i * 32 * MiB, SEG, stack, "cudaMalloc"])
    segments.append([NCCL_ADDR, 64 * MiB, ids["nccl"], "cuMemAlloc_v2"])

    # Blocks: after, the first 48 segments hold three blocks (at 0, 8 and 16 MiB: two 4 MiB holes),
    # the other 38 two (at 4 and 12 MiB: three holes). Before, every segment holds blocks at 0, 8 and
    # 16 MiB except the first 6 (two blocks, at 4 and 12), and 20 of them are gradient buffers.
    slots = []
    for i in range(nseg):
        a = BASE + i * 32 * MiB
        three = i < 48 if after else i >= 6
        slots += [a, a + 8 * MiB, a + 16 * MiB] if three else [a + 4 * MiB, a + 12 * MiB]
    if after:
        owners = [ids["blk_attn"]] * 160 + [ids["blk_metrics"]] * 60
    else:
        owners = [ids["blk_attn"]] * 150 + [ids["blk_grads"]] * 20 + [ids["blk_metrics"]] * 10
    assert len(slots) >= len(owners), (len(slots), len(owners))
    slots = slots[:len(owners)]
    blocks = [[addr, BLOCK, owner, 2000000000 + 37000000 * (k % 50)] for k, (addr, owner) in enumerate(zip(slots, owners))]
    allocated = BLOCK * len(blocks)
    reserved = SEG * nseg
    by = {}
    for _, size, owner, _ in blocks:
        by.setdefault(owner, [0, 0])
        by[owner][0] += size
        by[owner][1] += 1
    by_stack = [{"stack": s, "bytes": b, "count": c} for s, (b, c) in sorted(by.items(), key=lambda kv: -kv[1][0])]

    # PyTorch's totals over time: reserved ratchets up a segment at a time while allocated rises
    # through each forward pass and falls back after backward; the last point is the report's.
    points = []
    steps = 40
    for k in range(steps + 1):
        t = 5000000000 + k * ((now - t0 - 6000000000) // steps)
        r = SEG * max(1, round(nseg * (k + 1) / (steps + 1)))
        a = min(r, allocated * (k + 1) // (steps + 1))
        points.append([t, a, r])
    points[-1] = [now - t0 - 1000000, allocated, reserved]
    if after:  # the peak of allocated: a forward pass at step 30, 1000 MiB (peak_by_stack below)
        points[30][1] = 1000 * MiB
    peak_allocated = max(p[1] for p in points)

    nccl_bytes = 64 * MiB
    process = reserved + nccl_bytes
    timeline = [[0, 0], [200000000, nccl_bytes]] + [[p[0] + 1000, p[2] + nccl_bytes] for p in points]

    seg_by = {}
    for _, size, stack, _ in segments:
        seg_by.setdefault(stack, [0, 0])
        seg_by[stack][0] += size
        seg_by[stack][1] += 1
    driver_by_stack = [{"stack": s, "bytes": b, "count": c} for s, (b, c) in sorted(seg_by.items(), key=lambda kv: -kv[1][0])]
    top = sorted(segments, key=lambda s: -s[1])[:20]
    top_allocations = [{"address": hex(a), "bytes": b, "api": api, "device": 0, "age_ns": 30000000000 + 1000 * i,
                        "thread": 5151, "stack": s, "tag": None} for i, (a, b, s, api) in enumerate(top)]

    request = 600 * MiB
    # The ring's last events (GPUGUARD_TENSOR_EVENTS as small as they are): blocks taken back and
    # handed out again at the same address, then the refused request.
    events = []
    for k in range(3):
        t = now - t0 - 9000000 + 2000000 * k
        events.append([t, "f", slots[k], BLOCK, allocated - BLOCK, reserved, 0])
        events.append([t + 1000000, "a", slots[k], BLOCK, allocated, reserved, 0])
    if after:
        events.append([now - t0 - 500000, "o", 0, request, allocated, reserved, 0])
    limit = 2048 * MiB
    r = {
        "schema": "gpuguard.report", "version": 1,
        "reason": "quota" if after else "request",
        "message": ("refused 600.00 MiB on device 0: process would hold 2.33 GiB of a 2.00 GiB limit" if after
                    else "report requested by the program (gpuguard_report)"),
        "time_unix_ns": now,
        "gpuguard_version": "0.1.0",
        "process": {"pid": 5151, "ppid": 1, "uid": 1000, "command": ["python3", "train.py", "--model", "gpt-small"],
                    "exe": "/usr/bin/python3.12", "hostname": "trainer-2", "start_unix_ns": start,
                    "env": {"GPUGUARD_MEM_LIMIT": "2GiB", "CUDA_VISIBLE_DEVICES": "0"}},
        "capture": {"unwinder": "cfi", "python": "3.12", "stack_depth": 48},
        "device": {"ordinal": 0, "uuid": "GPU-5e1d7c2a-93f1-4c57-b2e0-2d5f9a0e11c4", "name": "NVIDIA H200",
                   "total_bytes": 150754820096, "free_bytes": 140000000000},
        "limit": {"bytes": limit, "spec": "2GiB", "source": "GPUGUARD_MEM_LIMIT", "scope": "container"},
        "usage": {"process_bytes": process, "process_peak_bytes": process, "container_bytes": process,
                  "live_allocations": len(segments)},
        "failed_request": ({"api": "cudaMalloc", "driver_api": "cuMemAlloc_v2", "bytes": request, "device": 0,
                            "thread": 5151, "driver_result": 2, "stack": ids["failed"]} if after else None),
        "episode": {"id": 1, "failed_calls": 1, "first_unix_ns": now - 2000000} if after else None,
        "counts_by_api": {"cuMemAlloc_v2": {"allocs": len(segments), "frees": 0, "failures": 1 if after else 0,
                                            "live_bytes": process, "live_count": len(segments)}},
        "top_allocations": top_allocations,
        "by_stack": driver_by_stack,
        "peak": {"bytes": process, "time_unix_ns": now - 1000000, "by_stack": driver_by_stack},
        "timeline": {"t0_unix_ns": t0, "points": timeline},
        "stacks": stacks,
        "tensor_view": {
            "source": "c10", "backend": "native", "allocator_conf": "", "device": 0,
            "allocated_bytes": allocated, "reserved_bytes": reserved,
            "peak_allocated_bytes": peak_allocated,
            "peak_reserved_bytes": reserved,
            "blocks": {"count": len(blocks), "listed": len(blocks), "list": blocks},
            "by_stack": by_stack,
            "peak_by_stack": ([{"stack": ids["blk_attn"], "bytes": 800 * MiB, "count": 200},
                               {"stack": ids["blk_metrics"], "bytes": 200 * MiB, "count": 50}] if after else by_stack),
            "segments": segments,
            "mappings": [],
            "oom": ({"requested_bytes": request, "allocated_bytes": allocated, "reserved_bytes": reserved,
                     "device": 0, "time_unix_ns": now - 500000} if after else None),
            "timeline": {"t0_unix_ns": t0, "points": points},
            "events": {"capacity": len(events), "recorded": 9120, "dropped": 9120 - len(events),
                       "columns": ["t_ns", "action", "address", "bytes", "allocated", "reserved", "device"],
                       "rows": events},
        },
    }
    return r


def main():
    for name, after in (("tensor_fragmentation.json", True), ("tensor_before.json", False)):
        with open(os.path.join(HERE, name), "w") as f:
            json.dump(report(after), f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
