#!/usr/bin/env bash
# Opens an HTML report in headless Chromium and checks that it works: the script ran to its end
# without a JavaScript error (the page sets <html data-gg-status="ok">, or "error: ..." from
# window.onerror), the timeline chart and the flame graph were drawn (their elements exist, and
# screenshots of each hold the chart's colours), and the page is not blank.
#
#   tests/browser/check_html.sh REPORT.html OUTDIR [--dom-only | --tensor]
#
# --dom-only checks only that the script finished without error (for reports without a timeline or
# stacks, where there is no chart to look for). --tensor is for a report with PyTorch's tensor view:
# the timeline also draws allocated and reserved (their colours in its screenshot) and marks c10's
# OOM, and the "by tensor / by segment" switch is shown; it is clicked (tests/browser/cdp_pipe.py)
# and the flame graph, the tables' headings and the flame graph again after clicking back are
# compared. Without --tensor the switch must be hidden.
# Leaves dom.html, page.png, timeline.png and flame.png in OUTDIR (look at them). Exit status: 0 all
# good, 1 a check failed, 77 no Chromium here (the caller decides whether a skip is acceptable).
set -u
# A sanitized test run preloads its runtime into every process (tests/sanitize_env.sh); the browser and
# node are not ours and must not start under it.
unset LD_PRELOAD
html=$1 out=$2 mode=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
browser=${CHROMIUM:-}
if [[ -z $browser ]]; then
  for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then browser=$(command -v "$b"); break; fi
  done
fi
if [[ -z $browser ]]; then
  echo "SKIP: no Chromium found (install the Debian package 'chromium', or set CHROMIUM=/path/to/chrome)"
  exit 77
fi
url="file://$(cd "$(dirname "$html")" && pwd)/$(basename "$html")"

# Each run gets a fresh profile; nothing may reach the network.
chrome() {
  local profile
  profile=$(mktemp -d /tmp/gpuguard-chromium.XXXXXX)
  timeout 90 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --disable-extensions \
    --user-data-dir="$profile" --hide-scrollbars --enable-logging=stderr --v=0 "$@"
  local rc=$?
  rm -rf "$profile"
  return $rc
}

fail=0
bad() { echo "  $*" >&2; fail=1; }

chrome --dump-dom "$url" > "$out/dom.html" 2> "$out/chromium-dom.log" || bad "chromium --dump-dom failed (see $out/chromium-dom.log)"
status=$(grep -o 'data-gg-status="[^"]*"' "$out/dom.html" | head -1)
[[ $status == 'data-gg-status="ok"' ]] || bad "page status is ${status:-missing}, expected data-gg-status=\"ok\" (a JavaScript error, or the script did not finish)"
if grep -q 'Uncaught' "$out/chromium-dom.log"; then bad "JavaScript error on the console: $(grep -m1 Uncaught "$out/chromium-dom.log")"; fi
if [[ $mode == --dom-only ]]; then
  ((fail == 0)) && echo "ok: $html runs its script without error"
  exit $fail
fi
points=$(grep -o 'id="timeline"[^>]*data-points="[0-9]*"' "$out/dom.html" | grep -o '[0-9]*"$' | tr -d '"')
[[ ${points:-0} -ge 2 ]] || bad "the timeline chart was not drawn (data-points=${points:-none})"
grep -q '<svg[^>]*aria-label="GPU memory' "$out/dom.html" || bad "no timeline <svg> in the page"
nodes=$(grep -o 'id="flame"[^>]*data-nodes="[0-9]*"' "$out/dom.html" | grep -o '[0-9]*"$' | tr -d '"')
[[ ${nodes:-0} -ge 2 ]] || bad "the flame graph was not drawn (data-nodes=${nodes:-none})"
grep -q 'aria-sort="descending"' "$out/dom.html" || bad "no sorted table in the page"
switch=$(grep -o '<div[^>]*id="view-switch"[^>]*>' "$out/dom.html")
if [[ $mode == --tensor ]]; then
  tpoints=$(grep -o 'id="timeline"[^>]*data-tensor-points="[0-9]*"' "$out/dom.html" | grep -o '[0-9]*"$' | tr -d '"')
  [[ ${tpoints:-0} -ge 2 ]] || bad "PyTorch's allocated and reserved were not drawn (data-tensor-points=${tpoints:-none})"
  grep -q 'id="timeline"[^>]*data-oom="[0-9]*"' "$out/dom.html" || bad "the timeline does not mark PyTorch's OOM"
  [[ -n $switch && $switch != *hidden* ]] || bad "no 'by tensor / by segment' switch shown: ${switch:-none}"
elif [[ $switch == *'<div'* && $switch != *hidden* ]]; then
  bad "the 'by tensor / by segment' switch is shown for a report without a tensor view"
fi

chrome --window-size=1280,3200 --screenshot="$out/page.png" "$url" >/dev/null 2>&1 || bad "screenshot of the page failed"
chrome --window-size=1200,600 --screenshot="$out/timeline.png" "$url#only=timeline" >/dev/null 2>&1 || bad "screenshot of the timeline failed"
chrome --window-size=1200,900 --screenshot="$out/flame.png" "$url#only=flame" >/dev/null 2>&1 || bad "screenshot of the flame graph failed"

# Not blank: many colours on the page; the timeline's line colour (#2f6fde) in its screenshot; the
# flame graph's native-frame blue (hsl(195..213, 55%, 58..68%)) in its own.
if [[ -s $out/page.png ]]; then
  read -r w h colours busy _ < <(python3 "$here/png_stats.py" "$out/page.png")
  [[ ${colours:-0} -ge 50 ]] || bad "page screenshot looks blank: $colours colours"
fi
if [[ -s $out/timeline.png ]]; then
  read -r _ _ _ _ line < <(python3 "$here/png_stats.py" "$out/timeline.png" 47,111,222,30)
  [[ ${line:-0} -ge 300 ]] || bad "timeline screenshot shows no chart line: ${line:-0} pixels of its colour"
fi
if [[ -s $out/flame.png ]]; then
  read -r _ _ _ _ blue < <(python3 "$here/png_stats.py" "$out/flame.png" 91,170,205,30)
  [[ ${blue:-0} -ge 2000 ]] || bad "flame graph screenshot shows no frames: ${blue:-0} pixels of native-frame blue"
fi
if [[ $mode == --tensor && -s $out/timeline.png ]]; then
  # allocated #0e9f6e and reserved #8e59d9 (report.css)
  read -r _ _ _ _ green < <(python3 "$here/png_stats.py" "$out/timeline.png" 14,159,110,30)
  [[ ${green:-0} -ge 300 ]] || bad "timeline screenshot shows no allocated line: ${green:-0} pixels of its colour"
  read -r _ _ _ _ purple < <(python3 "$here/png_stats.py" "$out/timeline.png" 142,89,217,30)
  [[ ${purple:-0} -ge 300 ]] || bad "timeline screenshot shows no reserved line: ${purple:-0} pixels of its colour"
fi
if [[ $mode == --tensor ]]; then
  # Click "By segment", then "By tensor", reading the flame graph and the tables' headings each time.
  state='(() => {
    const h = document.getElementById("flame"), q = s => document.querySelector(s);
    return {view: h.dataset.view, nodes: +h.dataset.nodes, root: h.firstElementChild ? h.firstElementChild.textContent : "",
            labels: Array.from(h.children).map(n => n.textContent).join("|"),
            flameTitle: q("#flame-title").firstChild.nodeValue, count: q("#holders th:nth-child(3)").textContent,
            allocs: q("#allocs-title").firstChild.nodeValue, pressed: q("#view-tensor").getAttribute("aria-pressed")};
  })()'
  clicks="(() => { const s = () => $state; const a = s(); document.getElementById('view-segment').click(); const b = s();
    document.getElementById('view-tensor').click(); const c = s(); return {a, b, c, status: document.documentElement.dataset.ggStatus}; })()"
  if ! python3 "$here/cdp_pipe.py" "$url" "$clicks" > "$out/clicks.json" 2> "$out/clicks.log"; then
    bad "could not click the switch: $(cat "$out/clicks.log")"
  elif ! python3 - "$out/clicks.json" <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1])); a, b, c = d["a"], d["b"], d["c"]
problems = []
if d["status"] != "ok": problems.append("page status after the clicks: %s" % d["status"])
if a["view"] != "tensor" or not a["root"].startswith("all live tensors"): problems.append("not by tensor at first: %s" % a)
if b["view"] != "segment" or not b["root"].startswith("all live memory"): problems.append("not by segment after the click: %s" % b)
if a["labels"] == b["labels"]: problems.append("the flame graph did not change")
if min(a["nodes"], b["nodes"]) < 2: problems.append("a flame graph without frames: %d, %d nodes" % (a["nodes"], b["nodes"]))
if (a["count"], b["count"]) != ("Tensors", "Allocations"): problems.append("holders' count column: %s, %s" % (a["count"], b["count"]))
if a["flameTitle"] == b["flameTitle"] or a["allocs"] == b["allocs"]: problems.append("headings did not change")
if (a["pressed"], b["pressed"]) != ("true", "false"): problems.append("aria-pressed: %s, %s" % (a["pressed"], b["pressed"]))
if c != a: problems.append("clicking back did not restore the tensor view: %s" % c)
for p in problems: print("  " + p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
    bad "the switch did not change the flame graph and the tables (see $out/clicks.json)"
  fi
fi
((fail == 0)) && echo "ok: $html renders (status ok, $points timeline points, $nodes flame nodes, $colours colours${tpoints:+, $tpoints tensor points, switch clicked})"
exit $fail
