# `gpuguard exporter`: the ledger's devices, processes and counters as Prometheus metrics, checked by
# promtool, over HTTP in both formats, and scraped by a real Prometheus server (Debian's prometheus
# package) on loopback while processes come and go.

L=$TMP/ledger
# A process under the shim on ledger $L that allocates BYTES and holds them until its input closes
# (as in t_top.sh), then does OPS (free 0: gives them back). Sets HOLDER_PID; the input stays open on
# file descriptor $2.
start_holder() {
  local bytes=$1 fd=$2
  shift 2
  mkfifo "$TMP/in_$fd"
  GPUGUARD_MEM_LIMIT=1GiB GPUGUARD_LEDGER=$L LD_PRELOAD=$PRELOAD LD_LIBRARY_PATH=$FAKE \
    "$BIN/drv_linked" linked alloc "$bytes" wait "$@" <"$TMP/in_$fd" >"$TMP/out_$fd" &
  HOLDER_PID=$!
  eval "exec $fd>\"$TMP/in_$fd\""
  for _ in $(seq 200); do grep -q ready "$TMP/out_$fd" 2>/dev/null && return 0; sleep 0.02; done
  echo "    the holder of $bytes bytes never got ready" >&2
  return 1
}
# One refusal counted: a third process asks for more than the limit leaves.
refuse_once() {
  GPUGUARD_MEM_LIMIT=1GiB GPUGUARD_LEDGER=$L GPUGUARD_REPORT_DIR=$TMP shimmed "$BIN/drv_linked" linked alloc $((1 << 30)) \
    >/dev/null 2>&1
}
# GET URL [ACCEPT]: the body, with the response's Content-Type on the first line.
get() {
  python3 - "$@" <<'PY'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Accept": sys.argv[2]} if len(sys.argv) > 2 else {})
with urllib.request.urlopen(req, timeout=10) as r:
    print(r.headers["Content-Type"]); sys.stdout.write(r.read().decode())
PY
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_holder 1048576 7 && A=$HOLDER_PID
start_holder 3145728 8 && B=$HOLDER_PID
refuse_once

# A process on a ledger of its own ($K) that holds some of every kind (as t_usage.sh makes them): a
# context of 300 MiB (the test driver's FAKE_CUDA_CTX_BYTES, measured from NVML's figure of the
# process), 100 MiB allocated, 50 MiB a stream-ordered pool keeps after its free, and a graph's 64 MiB
# memory node mapped by its launch. Sets KINDS_PID once it holds them all.
MIB=1048576
K=$TMP/kinds_ledger
# Started without a shell function between (as start_holder), so that $! is the program's pid; its
# sleep ends it if the kill at the end of this file is never reached.
start_kinds_holder() {
  GPUGUARD_MEM_LIMIT=1GiB GPUGUARD_LEDGER=$K GPUGUARD_REPORT_DIR=$TMP FAKE_CUDA_TRUTH=$TMP/truth \
    FAKE_CUDA_CTX_BYTES=$((300 * MIB)) LD_PRELOAD=$PRELOAD LD_LIBRARY_PATH=$FAKE "$BIN/usage_linked" ctx \
    alloc $((100 * MIB)) threshold async $((50 * MIB)) free_async capture $((64 * MIB)) glaunch info \
    sleep 120000 >"$TMP/kinds_out" 2>&1 &
  KINDS_PID=$!
  for _ in $(seq 200); do grep -q '^info ->' "$TMP/kinds_out" 2>/dev/null && return 0; sleep 0.02; done
  echo "    the holder of every kind never got ready" >&2; cat "$TMP/kinds_out" >&2
  return 1
}
start_kinds_holder

metrics_pass_promtool() {
  "$CLI" exporter --once --ledger "$L" --container c1 > metrics.txt || return 1
  if command -v promtool >/dev/null; then
    # The one lint promtool has to say: UUID and modelName are not snake_case. They are DCGM
    # exporter's label names, kept so that a query can join on(UUID) with DCGM's metrics.
    promtool check metrics < metrics.txt > lint.txt 2>&1
    if grep -v "label names should be written in 'snake_case' not 'camelCase'" lint.txt | grep -q .; then
      cat lint.txt; return 1
    fi
    sed 's/[{,]/\n/g' metrics.txt | grep -o '^[A-Za-z_]*[A-Z][A-Za-z_]*=' | sort -u > camel.txt
    expect_eq "$(tr '\n' ' ' < camel.txt)" "UUID= modelName= " "the camelCase labels (DCGM's)" || return 1
  elif [[ ${CI:-} == true ]]; then
    echo "promtool is required under CI=true (tests/deps.sh installs 'prometheus')"; return 1
  fi
  local l="container=\"c1\",ledger=\"$L\",gpu=\"0\",UUID=\"GPU-"
  expect_contains metrics.txt "gpuguard_device_limit_bytes{$l" "the limit's labels" &&
    expect_contains metrics.txt 'modelName="Fake GPU 0"} 1073741824' "the limit" &&
    grep -q '^gpuguard_device_used_bytes{.*} 4194304$' metrics.txt &&
    grep -q '^gpuguard_device_refusals_total{.*} 1$' metrics.txt &&
    grep -q "^gpuguard_process_used_bytes{.*pid=\"$A\".*} 1048576$" metrics.txt &&
    grep -q "^gpuguard_process_state{.*pid=\"$B\".*gpuguard_process_state=\"alive\"} 1$" metrics.txt &&
    grep -q '^gpuguard_reports_total{.*} 1$' metrics.txt &&
    grep -q '^gpuguard_ledger_up{.*} 1$' metrics.txt || { echo "    metrics.txt:" >&2; sed 's/^/      /' metrics.txt >&2; return 1; }
}
check "--once: per device limit, usage, refusals; per process bytes and state; reports; promtool check metrics passes" \
  metrics_pass_promtool

# The split by kind, per device and per process, against what `gpuguard top --json` reads of the same
# ledger and against what the holder holds; each family's kinds sum to its used figure; the context's
# cost with its source.
kinds_exported() {
  [[ -n ${KINDS_PID:-} ]] && kill -0 "$KINDS_PID" || { echo "    no holder of every kind"; return 1; }
  "$CLI" top --ledger "$K" --json > kinds_top.json &&
    "$CLI" exporter --once --ledger "$K" --container c1 > kinds.txt || return 1
  if command -v promtool >/dev/null; then
    promtool check metrics < kinds.txt > kinds_lint.txt 2>&1
    if grep -v "label names should be written in 'snake_case' not 'camelCase'" kinds_lint.txt | grep -q .; then
      cat kinds_lint.txt; return 1
    fi
  fi
  python3 - kinds_top.json kinds.txt "$KINDS_PID" $MIB <<'PY' || { sed 's/^/      /' kinds.txt | grep by_kind >&2; return 1; }
import json, re, sys
top, text, pid, mib = json.load(open(sys.argv[1])), open(sys.argv[2]).read(), sys.argv[3], int(sys.argv[4])
samples = []  # (family, labels, value)
for line in text.splitlines():
    m = re.match(r'^([a-z_]+)\{(.*)\} (\S+)$', line)
    if m:
        samples.append((m[1], dict(re.findall(r'([A-Za-z_]+)="((?:[^"\\]|\\.)*)"', m[2])), int(m[3])))
def values(family, **want):
    return [v for f, l, v in samples if f == family and all(l.get(k) == w for k, w in want.items())]
def one(family, **want):
    v = values(family, **want)
    assert len(v) == 1, f"{family}{want}: {len(v)} series"
    return v[0]
expected = {"allocations": 100 * mib, "context_and_modules": 300 * mib, "graphs": 64 * mib, "pool_reserve": 50 * mib}
bad = []
def expect(what, got, want):
    if got != want: bad.append(f"{what}: {got}, expected {want}")
dev = top["devices"][0]
gpu = str(dev["index"])
expect("top's split of the device", dev["by_kind"], expected)
used = one("gpuguard_device_used_bytes", gpu=gpu)
expect("the device's used bytes", used, dev["used_bytes"])
for kind, want in dev["by_kind"].items():
    expect(f"device kind {kind}", one("gpuguard_device_used_by_kind_bytes", gpu=gpu, kind=kind), want)
expect("the device's kinds", sum(values("gpuguard_device_used_by_kind_bytes", gpu=gpu)), used)
expect("the device's kind labels", len(values("gpuguard_device_used_by_kind_bytes", gpu=gpu)), 4)
proc = [p for p in top["processes"] if str(p["pid"]) == pid][0]["devices"][0]
expect("top's split of the process", proc["by_kind"], expected)
pused = one("gpuguard_process_used_bytes", gpu=gpu, pid=pid)
expect("the process's used bytes", pused, proc["bytes"])
for kind, want in proc["by_kind"].items():
    expect(f"process kind {kind}", one("gpuguard_process_used_by_kind_bytes", gpu=gpu, pid=pid, kind=kind), want)
expect("the process's kinds", sum(values("gpuguard_process_used_by_kind_bytes", gpu=gpu, pid=pid)), pused)
expect("the context's cost", one("gpuguard_device_context_cost_bytes", gpu=gpu, source="own_process"),
       dev["context_cost_bytes"])
expect("top's context cost", dev["context_cost_bytes"], 300 * mib)
print("\n".join("    " + b for b in bad), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}
check "--once: used bytes by kind per device and per process (as gpuguard top says, summing to the used bytes), the context's cost and its source" \
  kinds_exported

http_both_formats() {
  "$CLI" exporter --listen 127.0.0.1:0 --ledger "$L" --ledger "$TMP/none" --container c1 2> exporter.err &
  local pid=$! url out
  for _ in $(seq 100); do url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' exporter.err); [[ -n $url ]] && break; sleep 0.05; done
  [[ -n $url ]] || { kill $pid; cat exporter.err; return 1; }
  out=$(get "$url")
  expect_contains "$out" "text/plain; version=0.0.4" "the content type without an Accept" &&
    expect_contains "$out" "# TYPE gpuguard_device_refusals_total counter" "a counter in the text format" &&
    expect_contains "$out" "gpuguard_ledger_up{container=\"c1\",ledger=\"$TMP/none\"} 0" "a ledger not there yet" || { kill $pid; return 1; }
  out=$(get "$url" "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
  expect_contains "$out" "application/openmetrics-text; version=1.0.0" "the content type for Prometheus's Accept" &&
    expect_contains "$out" "# TYPE gpuguard_device_refusals counter" "a counter in OpenMetrics" &&
    expect_contains "$out" "# UNIT gpuguard_device_used_bytes bytes" "a unit in OpenMetrics" &&
    [[ $(tail -1 <<<"$out") == "# EOF" ]] || { kill $pid; echo "no # EOF at the end"; return 1; }
  python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1].replace('/metrics','/nothing'))" "$url" 2>err.txt
  expect_contains err.txt "404" "another path" || { kill $pid; return 1; }
  kill -TERM $pid && wait $pid
  expect_eq "$?" 0 "the exporter's status after SIGTERM"
}
check "over HTTP: the text format, OpenMetrics when asked (as Prometheus asks), 404 elsewhere, exit 0 on SIGTERM" \
  http_both_formats

# Issue 30, item 7: a --listen with no port is bad usage, exit 2 as the help says (it was 1).
listen_usage() {
  local err rc
  err=$("$CLI" exporter --listen nonsense --ledger "$L" 2>&1); rc=$?
  expect_eq "$rc" 2 "the exit status for --listen nonsense" &&
    expect_eq "$err" "gpuguard: exporter: --listen nonsense is not HOST:PORT (try 'gpuguard exporter --help')" "the message" || return 1
  "$CLI" exporter --listen 127.0.0.1:99999 --ledger "$L" 2>/dev/null; rc=$?
  expect_eq "$rc" 2 "the exit status for a port over 65535"
}
check "--listen without a numeric port is bad usage: one line, exit 2" listen_usage

# Three clients that each stopped the server of one connection at a time (issue 29, item 2): a
# request that trickles in a byte every 0.1 s (each byte well within the old per-byte wait), 40
# connections that say nothing (more than --max-connections), and one that asks for a body larger
# than the sockets can buffer (12 MB, as 400 processes x 16 GPUs make; here a long container label
# on the up series of 100 ledgers not there) and never reads it. Each round ends with SIGTERM sent
# while a client that reads nothing is still connected, which must end the exporter with status 0.
# The deadlines are short (--read-timeout, --write-timeout) so that it runs in seconds; nothing is
# timed but a watchdog that tells a hung exporter (killed, 137) from one that exited.
# EXPORTER_FOR_TEST: another binary to run the same clients against (an older build, without the
# limit options).
clients_py() {
  cat <<'PY'
import os, signal, socket, sys, threading, time, urllib.request
url, pid, honest, large = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "large"
write_timeout = float(sys.argv[5])
host, port = url.split("/")[2].split(":")
addr = (host, int(port))
done = threading.Event()

def trickle():  # one byte every 0.1 s, connecting again whenever the server hangs up
    while not done.is_set():
        s = socket.create_connection(addr)
        try:
            for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\n" * 100:
                if done.is_set(): break
                s.send(bytes([b]))
                time.sleep(0.1)
        except OSError:
            pass
        s.close()

def non_reader():  # asks for the whole body with a small receive buffer, and reads nothing
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(addr)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    return s

idle = [socket.create_connection(addr) for _ in range(40)]
held = non_reader()
asked = time.monotonic()
threading.Thread(target=trickle, daemon=True).start()
time.sleep(0.2)
start = time.monotonic()
failures = 0
for i in range(honest):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = r.read()
            if r.status != 200 or b"gpuguard_ledger_up{" not in body or not body.endswith(b"\n"):
                failures += 1
    except Exception as e:
        failures += 1
        print(f"    scrape {i}: {e}")
    if failures == 3:  # enough to say it: the rest would wait out their timeouts as well
        break
print(f"    honest scrapes failed: {failures} of {honest}", f"{time.monotonic() - start:.1f}s", file=sys.stderr)
if large and not failures:
    # The write deadline: once it has passed, the server has given up on the first non-reader, so
    # that reading it now ends (end of file or a reset) short of the body it was promised. Waiting
    # for it here makes the check the same on a quiet machine, where the honest scrapes end first.
    # The deadline runs from the response's first byte, which a slow exporter (a sanitized build
    # makes the 12 MB body for seconds) sends well after the request: wait for that byte, then past it.
    held.settimeout(30)
    try:
        held.recv(1, socket.MSG_PEEK)
    except (ConnectionResetError, socket.timeout):
        pass
    time.sleep(max(0.0, asked + write_timeout + 0.5 - time.monotonic(), write_timeout + 0.5))
    # A wider window now, or what the kernel still holds for it (megabytes) trickles in 4 KiB at a time.
    held.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    got = b""
    try:
        while chunk := held.recv(1 << 20):
            got += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        failures += 1
        print("    the non-reader's connection was never closed")
    length = int(got.split(b"Content-Length: ")[1].split(b"\r")[0]) if b"Content-Length: " in got else 0
    if length and len(got) >= length:
        failures += 1
        print(f"    the non-reader got its whole body ({len(got)} bytes): the write deadline never came")
held_at_exit = non_reader()
time.sleep(0.2)
os.kill(pid, signal.SIGTERM)
done.set()
sys.exit(1 if failures else 0)
PY
}
# ROUND HONEST WRITE_TIMEOUT EXPORTER_ARGS...: the clients beside HONEST scrapes of an exporter run
# with the args.
hostile_round() {
  local round=$1 honest=$2 write_timeout=$3 url pid bin=${EXPORTER_FOR_TEST:-$CLI}
  local limits=(--read-timeout 0.5 --write-timeout "$write_timeout" --max-connections 16)
  shift 3
  [[ -n ${EXPORTER_FOR_TEST:-} ]] && limits=()
  "$bin" exporter --listen 127.0.0.1:0 "$@" "${limits[@]}" 2> "hostile_$round.err" &
  pid=$!
  for _ in $(seq 100); do url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "hostile_$round.err"); [[ -n $url ]] && break; sleep 0.05; done
  [[ -n $url ]] || { kill $pid; cat "hostile_$round.err"; return 1; }
  python3 <(clients_py) "$url" "$pid" "$honest" "$round" "$write_timeout"
  local rc=$?
  ( sleep 10; kill -KILL $pid ) >/dev/null 2>&1 &  # no hold on the harness's output
  local watchdog=$!
  wait $pid
  local status=$?
  kill $watchdog 2>/dev/null
  expect_eq "$rc" 0 "the honest scrapes' failures ($round)" && expect_eq "$status" 0 "the exporter's status after SIGTERM ($round)"
}
hostile_clients_cannot_stop_it() {
  local label ledgers=()
  label=$(head -c 120000 /dev/zero | tr '\0' c)
  for i in $(seq 100); do ledgers+=(--ledger "$TMP/absent_$i"); done
  # The honest scrapes: 100 of the usual ledger's metrics, then one of the 12 MB body (with time for
  # a busy machine to send it: each costs the exporter and the client well over a second there).
  # Under a sanitizer the exporter takes longer to make and send the 12 MB body than a scrape waits
  # (TSan: over 5 s), so that round is the plain build's; the first round's non-reader is there too.
  hostile_round usual 100 2 --ledger "$L" --container c1 || return 1
  [[ -n ${SANITIZER:-} ]] || hostile_round large 1 3 "${ledgers[@]}" --container "$label"
}
check "a trickling request, 40 silent connections and a client that never reads a 12 MB body, beside 100 honest scrapes (and one of the 12 MB): every scrape answered, SIGTERM still exits 0" \
  hostile_clients_cannot_stop_it

# A real Prometheus server scrapes the exporter every second while a third process allocates and frees;
# a query of its HTTP API sees the limit, and the usage rise and fall. (A process that exits holding
# memory stays counted, as "dead", until another process of the ledger reclaims it: the quota's view.)
prometheus_scrapes() {
  local eport pport pid prom q
  eport=$(free_port) pport=$(free_port)
  "$CLI" exporter --listen "127.0.0.1:$eport" --ledger "$L" --ledger "$K" --container c1 2>exporter.err &
  pid=$!
  cat > prometheus.yml <<YML
global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: gpuguard
    static_configs: [{targets: ["127.0.0.1:$eport"]}]
YML
  prometheus --config.file=prometheus.yml --storage.tsdb.path=prom --web.listen-address="127.0.0.1:$pport" \
    > prometheus.log 2>&1 &
  prom=$!
  q() { python3 - "http://127.0.0.1:$pport/api/v1/query" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
try:
    d = json.load(urllib.request.urlopen(sys.argv[1] + "?" + urllib.parse.urlencode({"query": sys.argv[2]}), timeout=5))
    print(" ".join(r["value"][1] for r in d["data"]["result"]))
except Exception as e:
    print("error", e)
PY
  }
  waitfor() {  # QUERY VALUE: until the query answers VALUE (20 s)
    local got
    for _ in $(seq 80); do got=$(q "$1"); [[ $got == "$2" ]] && return 0; sleep 0.25; done
    echo "    $1 = '$got', expected '$2'" >&2; return 1
  }
  local ok=0 l="ledger=\"$L\"" k="ledger=\"$K\""
  waitfor 'up{job="gpuguard"}' 1 &&
    waitfor "gpuguard_device_limit_bytes{container=\"c1\",$l}" 1073741824 &&
    waitfor "gpuguard_device_used_bytes{$l}" 4194304 &&
    start_holder 8388608 9 free 0 && C=$HOLDER_PID &&
    waitfor "gpuguard_device_used_bytes{$l}" 12582912 &&
    waitfor "gpuguard_process_used_bytes{pid=\"$C\"}" 8388608 &&
    { exec 9>&-; wait $C; true; } &&
    waitfor "gpuguard_device_used_bytes{$l}" 4194304 &&
    waitfor "max_over_time(gpuguard_device_used_bytes{$l}[1m])" 12582912 &&
    waitfor "gpuguard_device_used_by_kind_bytes{$k,kind=\"graphs\"}" $((64 * MIB)) &&
    waitfor "gpuguard_process_used_by_kind_bytes{$k,pid=\"$KINDS_PID\",kind=\"pool_reserve\"}" $((50 * MIB)) &&
    waitfor "count(gpuguard_device_used_by_kind_bytes{$k})" 4 &&
    waitfor "sum(gpuguard_device_used_by_kind_bytes{$k}) - sum(gpuguard_device_used_bytes{$k})" 0 &&
    waitfor "gpuguard_device_context_cost_bytes{$k,source=\"own_process\"}" $((300 * MIB)) && ok=1
  kill $prom $pid; wait $prom $pid 2>/dev/null
  ((ok)) || { tail -5 prometheus.log; return 1; }
}
if [[ -n $SANITIZER ]]; then
  skip "a Prometheus server scrapes the exporter" "the plain build runs it (a minute of CI under each sanitizer)"
elif ! command -v prometheus >/dev/null; then
  if [[ ${CI:-} == true ]]; then check "prometheus is installed under CI=true" false
  else skip "a Prometheus server scrapes the exporter" "no prometheus here (tests/deps.sh installs it)"; fi
else
  check "a Prometheus server scraping the exporter sees the limit, usage rise and fall as a process comes and goes, and usage by kind" \
    prometheus_scrapes
fi

exec 7>&- 8>&-
[[ -n ${KINDS_PID:-} ]] && kill "$KINDS_PID"
wait 2>/dev/null
