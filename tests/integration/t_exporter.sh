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

# A real Prometheus server scrapes the exporter every second while a third process allocates and frees;
# a query of its HTTP API sees the limit, and the usage rise and fall. (A process that exits holding
# memory stays counted, as "dead", until another process of the ledger reclaims it: the quota's view.)
prometheus_scrapes() {
  local eport pport pid prom q
  eport=$(free_port) pport=$(free_port)
  "$CLI" exporter --listen "127.0.0.1:$eport" --ledger "$L" --container c1 2>exporter.err &
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
  local ok=0
  waitfor 'up{job="gpuguard"}' 1 &&
    waitfor 'gpuguard_device_limit_bytes{container="c1"}' 1073741824 &&
    waitfor 'gpuguard_device_used_bytes' 4194304 &&
    start_holder 8388608 9 free 0 && C=$HOLDER_PID &&
    waitfor 'gpuguard_device_used_bytes' 12582912 &&
    waitfor "gpuguard_process_used_bytes{pid=\"$C\"}" 8388608 &&
    { exec 9>&-; wait $C; true; } &&
    waitfor 'gpuguard_device_used_bytes' 4194304 &&
    waitfor 'max_over_time(gpuguard_device_used_bytes[1m])' 12582912 && ok=1
  kill $prom $pid; wait $prom $pid 2>/dev/null
  ((ok)) || { tail -5 prometheus.log; return 1; }
}
if [[ -n $SANITIZER ]]; then
  skip "a Prometheus server scrapes the exporter" "the plain build runs it (a minute of CI under each sanitizer)"
elif ! command -v prometheus >/dev/null; then
  if [[ ${CI:-} == true ]]; then check "prometheus is installed under CI=true" false
  else skip "a Prometheus server scrapes the exporter" "no prometheus here (tests/deps.sh installs it)"; fi
else
  check "a Prometheus server scraping the exporter sees the limit, and usage rise and fall as a process comes and goes" \
    prometheus_scrapes
fi

exec 7>&- 8>&-
wait 2>/dev/null
