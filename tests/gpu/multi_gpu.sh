#!/usr/bin/env bash
# Issue 9's runs on a machine with two GPUs (the device tool's nvidia-h200-x2): per-device limits,
# one ledger under both CUDA_VISIBLE_DEVICES orders, and torchrun DDP under `gpuguard run`. Written
# with the CPU-machine tests of the same promises (tests/integration/t_multigpu.sh), and NOT YET RUN:
# no multi-GPU machine has been lent so far. Carry build/ as for make gpu-test; a short table last.
#   OUT=$OUT bash tests/gpu/multi_gpu.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}; [[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
LIB=$BUILD/libgpuguard.so CLI=$BUILD/gpuguard
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
W=$(mktemp -d /tmp/gpuguard-mgpu.XXXXXX)
export PYTHONUNBUFFERED=1 GPUGUARD_REPORT_DIR=$W NCCL_NVLS_ENABLE=0
GIB=1073741824
results=()
record() { results+=("$(printf '%-62s %s' "$1" "$2")"); }
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$@"; }
D=$ROOT/tests/gpu

n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "== $n GPUs"; nvidia-smi -L
((n >= 2)) || { echo "multi_gpu: needs two GPUs"; exit 2; }

echo "== 1. GPUGUARD_MEM_LIMIT=0=4GiB,1=2GiB in one process"
GPUGUARD_LEDGER=$W/l1 GPUGUARD_MEM_LIMIT="0=4GiB,1=2GiB" LD_PRELOAD=$LIB python3 "$D/multi_gpu_devices.py" limits 2>&1 | tee "$OUT/limits.log"
record "limits: totals 4 GiB and 2 GiB" "$(grep -c -e "device 0 total=$((4*GIB))" -e "device 1 total=$((2*GIB))" "$OUT/limits.log")/2"
record "limits: device 1 gets 2 GiB, then refused" "$(grep -o 'device 1 got=[0-9]*' "$OUT/limits.log")"
record "limits: device 0 still allocates (expect ok)" "$(sed -n 's/.*device 0 after device 1 refused: //p' "$OUT/limits.log")"

echo "== 2. CUDA_VISIBLE_DEVICES=1,0 and 0,1 on one ledger (4 GiB a device)"
export GPUGUARD_LEDGER=$W/l2 GPUGUARD_MEM_LIMIT=4GiB
mkfifo "$W/in2"
CUDA_VISIBLE_DEVICES=1,0 LD_PRELOAD=$LIB python3 "$D/multi_gpu_devices.py" hold 3 0 <"$W/in2" >"$W/hold2" 2>&1 &
exec {fd}>"$W/in2"
for _ in $(seq 300); do grep -q held "$W/hold2" && break; sleep 0.1; done
out=$(CUDA_VISIBLE_DEVICES=0,1 LD_PRELOAD=$LIB python3 -c '
import torch
for d in (1, 0):
    try:
        torch.empty(3 << 30, dtype=torch.uint8, device=f"cuda:{d}"); print(f"cuda:{d} ok")
    except torch.cuda.OutOfMemoryError:
        print(f"cuda:{d} refused")' 2>&1)
exec {fd}>&-; wait
echo "$out"
record "visible devices: physical GPU 1 refused, GPU 0 ok" "$(tr '\n' ' ' <<<"$out")"
unset GPUGUARD_LEDGER GPUGUARD_MEM_LIMIT

echo "== 3. torchrun --nproc_per_node=2 DDP under gpuguard run --limit 8GiB"
pause=$W/pause
"$CLI" run --ledger "$W/l3" --limit 8GiB -- torchrun --nproc_per_node=2 "$D/multi_gpu_ddp.py" "$pause" >"$OUT/ddp.log" 2>&1 &
run=$!
for _ in $(seq 600); do [[ -e $pause ]] && break; sleep 0.1; done
"$CLI" top --ledger "$W/l3" --json >"$OUT/ddp_top.json" 2>&1
"$CLI" top --ledger "$W/l3" --once | tee "$OUT/ddp_top.txt"
rm -f "$pause"
wait "$run"; rc=$?
cat "$OUT/ddp.log" | tail -20
record "ddp: exit status" "$rc"
record "ddp: top shows processes on two devices" "$(json "$OUT/ddp_top.json" "len({x['index'] for p in d['processes'] for x in p['devices'] if x['bytes']})")"
record "ddp: rank 1's 9 GiB request" "$(grep -o 'rank 1 oom: .*' "$OUT/ddp.log")"
r=$(ls -t "$W"/gpuguard-quota-*.json 2>/dev/null | head -1)
record "ddp: the OOM report's device (ordinal, uuid)" "$([[ -n $r ]] && json "$r" "(d['device']['ordinal'], d['device']['uuid'])")"
record "ddp: the ranks' UUIDs" "$(grep -o 'uuid=[^ ]*' "$OUT/ddp.log" | tr '\n' ' ')"
cp "$W"/gpuguard-quota-*.json "$OUT/" 2>/dev/null

echo; echo "== gpuguard multi-GPU checks"
printf '%s\n' "${results[@]}" | tee "$OUT/summary.txt"
rm -rf "$W"
