#!/usr/bin/env bash
# The packages on the GPU machine (issue 20), with no network: the wheel from dist/ (make wheel) into a
# venv over the machine's Python (--system-site-packages --no-index, so PyTorch is the machine's),
# then through `python -m gpuguard run`: a PyTorch program whose gpuguard.usage() is checked against
# torch's numbers, a PyTorch OOM with its report, the example notebook executed by nbconvert (when
# jupyter is there) with the report inline, and the exporter scraped once during a two-process run.
# The wheel from dist/ (its command serves the exporter; $BUILD/gpuguard, default build/, if it did
# not install). Logs and reports go to
# $OUT/packaging/; the table ("check  result") is printed last. JUPYTER_SITE: see below. About a minute; bounded to 200 s.
#   make wheel && tests/gpu/packaging.sh        (OUT=... BUILD=... as for tests/gpu/run.sh)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}; [[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
OUT=${OUT:-$ROOT/gpu-out}; P=$OUT/packaging; mkdir -p "$P"
W=$(mktemp -d /tmp/gpuguard-packaging.XXXXXX)
trap 'exec 9>&- 2>/dev/null; kill $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT
export PYTHONUNBUFFERED=1
rows=()
row() { rows+=("$(printf '%-58s %s' "$1" "$2")"); }
PYTHON=${PYTHON:-python3}
START=$SECONDS
left() { echo $((195 - (SECONDS - START))); }  # seconds left of the 200 s budget

whl=$(ls -t "$ROOT"/dist/gpuguard-*.whl 2>/dev/null | head -1)
if [[ -z $whl ]]; then
  row "wheel in dist/" "FAIL (none: run make wheel)"
else
  row "wheel in dist/" "$(basename "$whl")"
  "$PYTHON" -m venv --system-site-packages "$W/venv" > "$P/venv.log" 2>&1 &&
    "$W/venv/bin/pip" install --no-index "$whl" >> "$P/venv.log" 2>&1
  # Where $PYTHON is itself a virtual environment's (the GPU machine's PyTorch lives in one), the new
  # venv's --system-site-packages reaches only the base interpreter's packages: a .pth file adds
  # $PYTHON's own, so that torch is found as it is where the user runs.
  site=$("$W/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
  [[ -d $site ]] && "$PYTHON" -c 'import site, sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
    > "$site/gpuguard-test-parent.pth" 2>>"$P/venv.log"
  # JUPYTER_SITE: a folder of Jupyter's packages for this Python (nbconvert, ipykernel, pyzmq), for
  # a machine that has none and no network (the GPU machine); it comes after $PYTHON's own packages.
  [[ -d $site && -n ${JUPYTER_SITE:-} ]] && echo "$JUPYTER_SITE" >> "$site/gpuguard-test-parent.pth"
  row "pip install --no-index into a venv over $($PYTHON --version 2>&1)" "$([[ -x $W/venv/bin/gpuguard ]] && echo ok || echo "FAIL (see venv.log)")"
fi
VPY=$W/venv/bin/python
# run NAME ARGS...: python -m gpuguard run with a ledger of its own (W/NAME.ledger), bounded by what is left.
run() {
  local name=$1 t; shift
  t=$(left); ((t > 60)) && t=60; ((t < 1)) && t=1
  timeout "$t" "$VPY" -m gpuguard run --ledger "$W/$name.ledger" "$@"
}

if [[ -x $W/venv/bin/gpuguard ]]; then
  echo "== usage() against torch, under a 4 GiB quota"
  run usage --limit 4GiB --report-dir "$W/r_usage" -- "$VPY" "$ROOT/tests/gpu/packaging_torch.py" usage > "$P/usage.log" 2>&1
  u=$(sed -n 's/^USAGE //p' "$P/usage.log"); [[ -n $u ]] || u='{"missing": "no USAGE line: see usage.log"}'
  row "status() under python -m gpuguard run" "$(grep -q 'the shim is loaded in this process' "$P/usage.log" && echo "loaded" || echo "FAIL (see usage.log)")"
  row "usage(): process bytes vs torch.cuda.memory_reserved()" "$(python3 -c '
import json, sys
u = json.loads(sys.argv[1])
if "missing" in u: sys.exit(print("FAIL (" + u["missing"] + ")"))
# The process also holds its CUDA context'"'"'s allocations beside the caching allocator'"'"'s segments.
ok = u["process"] >= u["torch_reserved"] and u["limit"] == 4 << 30
print("%s (process %d, torch reserved %d, limit %s)" % ("ok" if ok else "FAIL", u["process"], u["torch_reserved"], u["limit"]))' "$u" 2>&1 | tail -1)"
  row "usage(): cuMemGetInfo total is the quota" "$(python3 -c '
import json, sys; u = json.loads(sys.argv[1])
if "missing" in u: sys.exit(print("FAIL (" + u["missing"] + ")"))
t = u["torch_free_total"][1]
print(("ok" if t == 4 << 30 else "FAIL") + " (%d)" % t)' "$u" 2>&1 | tail -1)"

  echo "== a PyTorch OOM under a 2 GiB quota"
  run oom --limit 2GiB --report-dir "$W/r_oom" -- "$VPY" "$ROOT/tests/gpu/packaging_torch.py" oom > "$P/oom.log" 2>&1
  r=$(ls -t "$W"/r_oom/gpuguard-quota-*.json 2>/dev/null | head -1)
  [[ -n $r ]] && cp "$r" "$P/oom.json" && "$W/venv/bin/gpuguard" report --no-color "$r" > "$P/oom.txt" 2>&1
  row "torch OOM through the wheel: OutOfMemoryError caught" "$(grep -o 'OOM after [0-9]* tensors' "$P/oom.log" || echo "FAIL (see oom.log)")"
  row "its report: quota, phase 'fill', Python frames" "$( [[ -n $r ]] && grep -q 'in the program.s phase fill' "$P/oom.txt" && grep -q 'packaging_torch.py' "$P/oom.txt" && echo ok || echo "FAIL (see oom.txt)")"

  echo "== the notebook"
  if "$VPY" -c 'import nbconvert, ipykernel' 2>/dev/null; then
    "$VPY" -m ipykernel install --sys-prefix > /dev/null 2>&1
    JUPYTER_RUNTIME_DIR=$W/jr JUPYTER_DATA_DIR=$W/jd IPYTHONDIR=$W/ipy PYDEVD_DISABLE_FILE_VALIDATION=1 \
      run nb --limit 2GiB --report-dir "$W/r_nb" -- "$VPY" -m nbconvert --to notebook --execute \
      "$ROOT/examples/notebook/gpuguard.ipynb" --output-dir "$P" --output notebook.executed.ipynb > "$P/notebook.log" 2>&1
    row "notebook (nbconvert --execute): OOM, report inline" "$(python3 - "$P/notebook.executed.ipynb" 2>&1 <<'PY' | tail -1
import json, os, sys
if not os.path.exists(sys.argv[1]): sys.exit(print("FAIL (not executed: see notebook.log)"))
text = ""
for c in json.load(open(sys.argv[1]))["cells"]:
    for o in c.get("outputs", []):
        if o.get("output_type") == "error": text += "CELL-ERROR " + o.get("ename", "")
        t = o.get("text") or o.get("data", {}).get("text/html") or ""
        text += t if isinstance(t, str) else "".join(t)
ok = "CELL-ERROR" not in text and "out of memory after" in text and "gpuguard-report" in text
print("ok" if ok else "FAIL (see notebook.executed.ipynb)")
PY
)"
  else
    row "notebook (nbconvert --execute)" "skipped: no nbconvert/ipykernel in this Python"
  fi
fi

echo "== the exporter during a two-process run"
mkfifo "$W/hold"
if [[ -x $W/venv/bin/gpuguard ]]; then
  run exp --limit 8GiB --report-dir "$W/r_exp" -- "$VPY" "$ROOT/tests/gpu/packaging_torch.py" hold 1024 < "$W/hold" > "$P/hold_a.log" 2>&1 &
  exec 9>"$W/hold"
  run exp --limit 8GiB --report-dir "$W/r_exp" -- "$VPY" "$ROOT/tests/gpu/packaging_torch.py" hold 512 < "$W/hold" > "$P/hold_b.log" 2>&1 &
  for _ in $(seq 120); do
    [[ $(grep -l ready "$P"/hold_[ab].log 2>/dev/null | wc -l) == 2 ]] && break; sleep 0.25
  done
  cli=$W/venv/bin/gpuguard; [[ -x $cli ]] || cli=$BUILD/gpuguard
  "$cli" exporter --listen 127.0.0.1:0 --ledger "$W/exp.ledger" --container h200 2> "$W/exporter.err" &
  ep=$!
  for _ in $(seq 40); do url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$W/exporter.err"); [[ -n $url ]] && break; sleep 0.1; done
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$url" \
    > "$P/metrics.txt" 2>&1
  kill $ep 2>/dev/null
  exec 9>&-
  wait 2>/dev/null
  alive=$(grep -c '^gpuguard_process_state{.*gpuguard_process_state="alive"} 1' "$P/metrics.txt")
  row "exporter: limit 8 GiB, two processes alive" "$(grep -q '^gpuguard_device_limit_bytes{.*container="h200".*} 8589934592' "$P/metrics.txt" && [[ $alive -ge 2 ]] && echo "ok ($alive alive)" || echo "FAIL (see metrics.txt)")"
  used=$(awk '/^gpuguard_device_used_bytes/ {v = $NF + 0; printf "%s (%.0f)\n", (v >= 1610612736 ? "ok" : "FAIL"), v}' "$P/metrics.txt" | head -1)
  row "exporter: used >= 1.5 GiB (both tensors)" "${used:-FAIL (no device in metrics.txt)}"
fi

echo
printf '%s\n' "${rows[@]}" | tee "$P/summary.txt"
echo "($((SECONDS - START)) s)"
