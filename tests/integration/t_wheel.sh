# The wheel (make wheel): its name and contents, installed with no network into a fresh virtual
# environment (/usr/bin/python3 -m venv; pip install --no-index), the demo through `python -m gpuguard
# run`, the Python API with and without the shim, and a notebook executed by Debian's nbconvert with a
# real kernel, whose %gpuguard shows the usage and the report inline.
# Built from the plain build only: a sanitized shim needs its runtime preloaded first, which a wheel
# does not carry.

PY=/usr/bin/python3
WHEEL=$TMP/dist/gpuguard-0.1.0-py3-none-manylinux2014_x86_64.whl
wheel_checks() {
  "$PY" "$ROOT/packaging/wheel/build.py" "$BUILD" "$TMP/dist" 0.1.0 > built.txt || return 1
  expect_eq "$(cat built.txt)" "$WHEEL" "the wheel's name" || return 1
  "$PY" - "$WHEEL" > contents.txt <<'PY' || return 1
import sys, zipfile
for i in zipfile.ZipFile(sys.argv[1]).infolist():
    print(oct(i.external_attr >> 16), i.filename)
PY
  local f
  for f in "0o100755 gpuguard/_native/gpuguard" "0o100755 gpuguard/_native/libgpuguard.so" \
    "gpuguard/_native/libunwind.so.8" "gpuguard/__init__.py" "gpuguard/__main__.py" "gpuguard/jupyter.py" \
    "gpuguard-0.1.0.dist-info/entry_points.txt" "gpuguard-0.1.0.dist-info/LICENSE" "gpuguard-0.1.0.dist-info/NOTICE"; do
    expect_contains contents.txt "$f" "the wheel's files" || return 1
  done
  # What the wheel ships meets its tag: no glibc symbol above 2.17.
  mkdir -p unpacked && (cd unpacked && "$PY" -m zipfile -e "$WHEEL" .) || return 1
  "$ROOT/packaging/check_floor.sh" unpacked/gpuguard/_native/{gpuguard,libgpuguard.so,libunwind.so.8} > floor.txt 2>&1 ||
    { cat floor.txt; return 1; }
}

venv_install() {
  "$PY" -m venv "$TMP/venv" && "$TMP/venv/bin/pip" install -q --no-index "$WHEEL" > pip.txt 2>&1 || { cat pip.txt; return 1; }
  [[ -x $TMP/venv/bin/gpuguard ]] || { echo "    no gpuguard script in the venv" >&2; return 1; }
  expect_eq "$("$TMP/venv/bin/gpuguard" --version)" "gpuguard 0.1.0" "the script's version" &&
    expect_eq "$("$TMP/venv/bin/python" -m gpuguard --version)" "gpuguard 0.1.0" "python -m gpuguard --version"
}

demo_through_the_wheel() {
  LD_LIBRARY_PATH=$FAKE "$TMP/venv/bin/python" -m gpuguard run --limit 1GiB --ledger "$TMP/l_demo" --report-dir demo \
    -- "$TMP/venv/bin/python" "$ROOT/examples/demo_without_gpu.py" > demo.out 2> demo.err || { cat demo.out demo.err; return 1; }
  expect_contains demo.out "out of memory at step" "the demo's output" &&
    expect_contains demo.err "gpuguard: refused cuMemAlloc_v2" "the shim's line (the wheel's shim, preloaded by the wheel's command)" &&
    "$TMP/venv/bin/gpuguard" report --no-color demo > summary.txt 2>&1 &&
    expect_contains summary.txt "OUT OF MEMORY (quota)" "the report's summary" &&
    expect_contains summary.txt "demo_without_gpu.py" "the report's Python frames"
}

api_with_the_shim() {
  cat > api.py <<'PY'
import ctypes, json, os, sys
import gpuguard
assert gpuguard.loaded(), gpuguard.status()
assert "/venv/" in gpuguard.status(), gpuguard.status()
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
cuda.cuInit(0); cuda.cuDeviceGet(ctypes.byref(dev), 0)
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev); cuda.cuCtxSetCurrent(ctx)
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(64 << 20)) == 0
u = gpuguard.usage()
print(json.dumps({"process": u["devices"][0]["process"], "used": u["devices"][0]["used"],
                  "limit": gpuguard.limit(), "shim": u["shim"]}, sort_keys=True))
with gpuguard.phase("eval"):
    with gpuguard.phase("inner"):
        pass
    print("report:", gpuguard.report("asked in eval"))
with gpuguard.tensor_view(False) as v:
    inner = gpuguard.tensor_view(True).previous  # off inside the block: False; on from here
    gpuguard.tensor_view(False)
print("tensor_view:", v.previous, inner, gpuguard.tensor_view(True).previous, gpuguard.tensor_view(True).previous)
PY
  LD_LIBRARY_PATH=$FAKE "$TMP/venv/bin/python" -m gpuguard run --limit 512MiB --ledger "$TMP/l_api" --report-dir api \
    -- "$TMP/venv/bin/python" api.py > api.out 2> api.err || { cat api.out api.err; return 1; }
  expect_contains api.out '{"limit": {"0": 536870912}, "process": 67108864, "shim": true, "used": 67108864}' "usage() and limit()" &&
    expect_contains api.out "report: True" "report()'s answer" &&
    expect_contains api.out "tensor_view: True False True True" "tensor_view(): whether it was on; the block's exit puts it back" &&
    expect_eq "$(json api/gpuguard-request-*.json 'd["phase"]')" "eval" "the report's phase (the outer one, once the inner ended)" &&
    expect_eq "$(json api/gpuguard-request-*.json 'd["message"]')" "asked in eval" "the report's message" &&
    "$TMP/venv/bin/gpuguard" report --no-color api > api_summary.txt && expect_contains api_summary.txt "in the program's phase eval" "the summary"
}

api_without_the_shim() {
  "$TMP/venv/bin/python" -c '
import gpuguard, sys
print(gpuguard.loaded(), gpuguard.report("x"), gpuguard.tensor_view(False).previous)
with gpuguard.phase("p"), gpuguard.tensor_view(False):
    pass
print(sorted(gpuguard.usage()))' > plain.out 2> plain.err || { cat plain.out plain.err; return 1; }
  expect_eq "$(cat plain.out)" $'False None None\n[\'devices\', \'ledger\', \'note\', \'shim\']' "the answers without the shim" &&
    expect_contains plain.err "the shim is not loaded in this process" "what report() says"
}

notebook_with_a_real_kernel() {
  # Debian's jupyter (nbconvert, ipykernel) seen from a venv of its own that also holds the wheel;
  # the kernel is that venv's python (its kernelspec in the venv), started under the shim.
  "$PY" -m venv --system-site-packages "$TMP/nbvenv" && "$TMP/nbvenv/bin/pip" install -q --no-index "$WHEEL" &&
    "$TMP/nbvenv/bin/python" -m ipykernel install --sys-prefix > /dev/null 2>&1 || { echo "    cannot set up the notebook's venv" >&2; return 1; }
  JUPYTER_RUNTIME_DIR=$TMP/jr JUPYTER_DATA_DIR=$TMP/jd IPYTHONDIR=$TMP/ipy PYDEVD_DISABLE_FILE_VALIDATION=1 LD_LIBRARY_PATH=$FAKE \
    timeout 120 "$TMP/nbvenv/bin/python" -m gpuguard run --limit 1GiB --ledger "$TMP/l_nb" --report-dir nb \
    -- "$TMP/nbvenv/bin/python" -m nbconvert --to notebook --execute "$ROOT/examples/notebook/gpuguard.ipynb" \
    --output-dir "$TMP" --output executed.ipynb > nb.log 2>&1 || { tail -20 nb.log; return 1; }
  "$PY" - executed.ipynb > outputs.txt <<'PY' || return 1
import json, sys
for c in json.load(open(sys.argv[1]))["cells"]:
    for o in c.get("outputs", []):
        if o.get("output_type") == "error": print("CELL-ERROR:", o.get("ename"), o.get("evalue"))
        t = o.get("text") or o.get("data", {}).get("text/html") or ""
        print(t if isinstance(t, str) else "".join(t))
PY
  expect_not_contains outputs.txt "CELL-ERROR:" "the executed notebook" &&
    expect_contains outputs.txt "the shim is loaded in this process" "status() in the kernel" &&
    expect_contains outputs.txt "out of memory after 4 blocks of 256 MiB" "the cell that fills the quota" &&
    expect_contains outputs.txt "<th>this kernel</th>" "%gpuguard's usage table" &&
    expect_contains outputs.txt "<td>1.00 GiB</td><td>1.00 GiB</td>" "the limit and the container's usage in it" &&
    expect_contains outputs.txt "<iframe class='gpuguard-report' sandbox='allow-scripts' srcdoc=" "the report's page inline, sandboxed" &&
    expect_contains outputs.txt "notebook cell 3" "the phase the cell tagged, in the report" &&
    expect_contains outputs.txt "this kernel holds {0: 1073741824}" "usage() in the kernel"
}

if [[ -n $SANITIZER ]]; then
  skip "the wheel" "built from the plain build (a sanitized shim needs its runtime, which a wheel does not carry)"
elif ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  if [[ ${CI:-} == true ]]; then check "python3-venv is installed under CI=true" false
  else skip "the wheel" "no python3-venv here (tests/deps.sh installs it)"; fi
else
  check "make wheel: manylinux2014 wheel with the shim, libunwind, the command and the package; nothing above glibc 2.17" wheel_checks
  check "pip install --no-index into a fresh venv gives the gpuguard script and python -m gpuguard" venv_install
  check "the demo through python -m gpuguard run: refused by the wheel's shim, a report with Python frames" demo_through_the_wheel
  check "under the shim: usage() and limit() from the ledger, report() and phase() tag the report" api_with_the_shim
  check "without the shim: loaded() is False, report() writes nothing and says why, usage() still answers" api_without_the_shim
  if "$PY" -c 'import nbconvert, ipykernel' 2>/dev/null; then
    check "a notebook executed by nbconvert (a real kernel): %load_ext gpuguard, an OOM, %gpuguard shows usage and the report inline" \
      notebook_with_a_real_kernel
  elif [[ ${CI:-} == true ]]; then check "nbconvert and ipykernel are installed under CI=true" false
  else skip "the notebook" "no python3-nbconvert / python3-ipykernel here (tests/deps.sh installs them)"; fi
fi
