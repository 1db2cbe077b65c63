# gpuguard report --html, opened in headless Chromium (tests/browser/check_html.sh): the page's script
# runs without error, the timeline and the flame graph are drawn. Without Chromium the checks print a
# skip line; under CI=true a skip is a failure (tests/deps.sh installs the 'chromium' package there).
# Under a sanitizer the sanitized command still writes every page (what the sanitizer checks), but the
# browser is not opened: its pages are byte for byte the plain build's, which the plain run opens, and
# the browser took about 100 s of each run.
DATA=$ROOT/tests/data

html_renders() {
  local fixture=$1 mode=${2:-} name rc
  name=$(basename "$fixture" .json)
  "$CLI" report --html "$name.html" "$fixture" 2>/dev/null || { echo "gpuguard report --html failed"; return 1; }
  [[ -z ${SANITIZER:-} ]] || return 0  # the page is written; the plain run opens it
  "$ROOT/tests/browser/check_html.sh" "$name.html" "shots-$name" $mode; rc=$?
  if ((rc == 77)); then
    if [[ ${CI:-} == true ]]; then echo "Chromium is required under CI=true"; return 1; fi
    echo "SKIP (no Chromium): $name" >&2
    return 0
  fi
  # Keep the screenshots where a person can look at them after the run.
  if [[ -n ${GPUGUARD_SHOTS:-} ]]; then mkdir -p "$GPUGUARD_SHOTS" && cp -r "shots-$name" "$GPUGUARD_SHOTS/"; fi
  return $rc
}

if [[ -n ${SANITIZER:-} ]]; then
  echo "  SKIP the HTML report's browser checks under $SANITIZER: the plain run opens the same pages"
elif ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 && [[ -z ${CHROMIUM:-} ]]; then
  echo "  SKIP the HTML report's browser checks: no Chromium here (tests/deps.sh installs 'chromium')"
fi
check "the HTML report of a PyTorch quota OOM renders: no script error, timeline and flame graph drawn" html_renders "$DATA/pytorch_quota.json"
check "the HTML report of a C program's driver OOM renders" html_renders "$DATA/driver_oom.json"
check "the HTML report written at exit renders" html_renders "$DATA/exit_report.json"

whatif_page() {
  html_renders "$DATA/whatif_quota.json" --dom-only || return 1
  [[ -f shots-whatif_quota/dom.html ]] || return 0  # no Chromium: html_renders said so
  expect_contains shots-whatif_quota/dom.html '<section id="whatif-section">' "the page (the what-if section shown)" &&
    expect_contains shots-whatif_quota/dom.html 'avoids it' "the what-if section" &&
    expect_contains shots-whatif_quota/dom.html '<p class="banner warn">the summary does not search for the smallest budget' \
      "what the page's replays left out (the summary's: --what-if gives it)"
}
check "the HTML report of a PyTorch OOM with block events shows the what-if replay" whatif_page

# PyTorch's tensor view (tests/data/tensor_fixtures.py): the page opens by tensor with the switch shown,
# draws allocated and reserved beside the process's usage and marks c10's OOM; check_html.sh --tensor
# clicks the switch and sees the flame graph and the tables change, and change back.
check "the HTML report with a tensor view: by tensor / by segment switch, allocated and reserved lines, c10's OOM" \
  html_renders "$DATA/tensor_fragmentation.json" --tensor

driver_source_page() {
  # With the cudaMallocAsync backend c10 reports no blocks (source "driver"): there is nothing to show
  # by tensor, so no switch; PyTorch's totals are still drawn.
  python3 - "$DATA/tensor_fragmentation.json" async.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); tv = d["tensor_view"]
tv.update(source="driver", backend="cudaMallocAsync", blocks={"count": 0, "listed": 0, "list": []}, by_stack=[], peak_by_stack=[])
json.dump(d, open(sys.argv[2], "w"))
PY
  html_renders "$PWD/async.json" --dom-only || return 1  # the screenshots are the other checks' business
  [[ -f shots-async/dom.html ]] || return 0  # skipped: no Chromium
  grep -q 'id="timeline"[^>]*data-tensor-points="[0-9]' shots-async/dom.html || { echo "PyTorch's totals not drawn"; return 1; }
  local switch; switch=$(grep -o '<div[^>]*id="view-switch"[^>]*>' shots-async/dom.html)
  [[ $switch == *hidden* ]] || { echo "the by tensor / by segment switch is shown: ${switch:-none}"; return 1; }
}
check "the HTML report with a tensor view of source 'driver' draws PyTorch's totals and shows no switch" driver_source_page

odd_tensor_view_page() {
  # Every field of the tensor view of the wrong type or shape: the page still runs to its end.
  cat > odd.json <<'JSON'
{"schema": "gpuguard.report", "version": 1, "reason": "allocator_oom", "stacks": {"s1": {"frames": []}},
 "tensor_view": {"source": "c10", "allocated_bytes": "many", "reserved_bytes": null,
  "blocks": {"count": "x", "list": [["0x10", null], 5, [16, 4096, "s9", "old"], [4096, 1024, "s1", 5]]},
  "by_stack": "none", "peak_by_stack": [{"stack": "s1", "bytes": "x"}, null], "segments": [[1], "s", [4096, 8192, null, 3]],
  "mappings": {"a": 1}, "oom": {"time_unix_ns": "x", "requested_bytes": -1},
  "timeline": {"t0_unix_ns": 5, "points": [[1], "a", [10, 1, 2], [20, 3, 4], [30, null, 1]]}}}
JSON
  html_renders "$PWD/odd.json" --dom-only || return 1
  [[ -f shots-odd/dom.html ]] || return 0  # skipped: no Chromium
  local switch; switch=$(grep -o '<div[^>]*id="view-switch"[^>]*>' shots-odd/dom.html)
  [[ -n $switch && $switch != *hidden* ]] || { echo "no by tensor / by segment switch: ${switch:-none}"; return 1; }
}
check "the HTML page of a report whose tensor view has odd values runs without error" odd_tensor_view_page

minimal_page() {
  echo '{"schema": "gpuguard.report", "version": 1, "reason": "signal"}' > minimal.json
  html_renders "$PWD/minimal.json" --dom-only
}
check "the HTML page of a report without timeline or stacks runs without error" minimal_page

# Issue 20: about one report in five from a short run has a one-point timeline, the point at the
# report's own moment; the page drew no chart for it ("no usage timeline"). Now the line starts at 0
# bytes at time 0 and the chart is drawn, as it is for a lone point at time 0.
one_point_timeline() {
  python3 - "$DATA/driver_oom.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t0 = d["timeline"]["t0_unix_ns"]
d["timeline"]["points"] = [[400000000, 536870912]]
d["time_unix_ns"] = t0 + 400000000
json.dump(d, open("one_point.json", "w"))
d["timeline"]["points"] = [[0, 536870912]]
d["time_unix_ns"] = t0
json.dump(d, open("one_point_at_0.json", "w"))
PY
  local f
  for f in one_point one_point_at_0; do
    html_renders "$PWD/$f.json" --dom-only || return 1
    [[ -f shots-$f/dom.html ]] || return 0  # no Chromium: html_renders said so
    expect_contains "shots-$f/dom.html" 'data-points="2"' "the timeline of $f.json (drawn, with its starting point)" || return 1
    expect_not_contains "shots-$f/dom.html" '>This report has no usage timeline.<' "the page of $f.json (the drawn text, not the script's)" || return 1
  done
}
check "a one-point timeline is drawn (from 0 bytes at time 0, or held for a millisecond)" one_point_timeline

hostile_page() {
  python3 - "$DATA/pytorch_quota.json" hostile.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["process"]["command"] = ["python3", "</script><script>throw new Error('escaped')</script><!--"]
d["stacks"]["s1"]["frames"][-1]["function"] = "<img src=x onerror=\"document.documentElement.dataset.ggStatus='error: injected'\">"
json.dump(d, open(sys.argv[2], "w"))
PY
  html_renders "$PWD/hostile.json"
}
check "report strings with markup in them stay text in the page" hostile_page

# The page embeds the report's arrays of rows copied from its text, the rest from the document the
# loader read (tools/report/render/html.cpp): the page's data must be the file's JSON all the same, read
# as any JSON reader reads it (a later key replaces an earlier one, escapes decoded), whitespace and all,
# with the environment the reader does not carry left out, and no string in a row may end the script.
embedded_rows_page() {
  python3 - "$DATA/tensor_fragmentation.json" rows.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
hostile = "</script><script>throw new Error('escaped')</script><!--"
d["process"]["env"]["NOT_CARRIED_SECRET"] = "hunter2"
t = d["tensor_view"]
t["blocks"]["list"][0][2] = hostile
t["events"]["rows"].insert(0, [1, hostile, 4096, 512, 512, 2097152, 0])
t["SEGMENTS_KEY"] = t.pop("segments")
text = json.dumps(d, indent=2)  # whitespace and newlines inside every row array
text = text.replace('"SEGMENTS_KEY"', '"s\\u0065gments"', 1)  # a key spelled with an escape
# An earlier tensor view, replaced by the later one: its rows are in no reader's document.
text = '{"tensor_view": {"events": {"rows": [[9, "early"]]}, "segments": [[1, 2, "s1", "early"]]},' + text[1:]
open(sys.argv[2], "w").write(text)
PY
  "$CLI" report --html rows.html rows.json 2>/dev/null || { echo "gpuguard report --html failed"; return 1; }
  python3 - rows.json rows.html <<'PY' || return 1
import json, sys
report = json.loads(open(sys.argv[1]).read())
page = open(sys.argv[2]).read()
start = page.index('<script type="application/json" id="gg-data">') + len('<script type="application/json" id="gg-data">')
embedded = json.loads(page[start:page.index("</script>", start)])["report"]
env = embedded["process"].pop("env")
if "NOT_CARRIED_SECRET" in env or "hunter2" in page:
    sys.exit("the environment the reader does not carry is in the page")
if env != {k: v for k, v in report["process"].pop("env").items() if k != "NOT_CARRIED_SECRET"}:
    sys.exit("the carried environment differs: %r" % env)
if embedded != report:
    for k in report:
        if embedded.get(k) != report[k]: print("differs under", k)
    sys.exit("the page's report is not the file's JSON")
PY
  html_renders "$PWD/rows.json" --dom-only
}
check "the page embeds the report's rows as the file holds them, and a row's string cannot end the script" embedded_rows_page

# The real speedscope app imports our --speedscope and --folded files. Needs speedscope's npm package:
# SPEEDSCOPE_DIR=<unpacked package>, else `npm pack speedscope` once into a cache (about 3 MB); without
# either (no npm, no registry) it prints a skip line and passes.
speedscope_imports() {
  local dir=${SPEEDSCOPE_DIR:-} cache=${XDG_CACHE_HOME:-$HOME/.cache}/gpuguard-tests
  if [[ -z $dir ]]; then
    dir=$cache/speedscope/package
    if [[ ! -f $dir/dist/release/index.html ]] && command -v npm >/dev/null; then
      mkdir -p "$cache/speedscope" &&
      (cd "$cache/speedscope" && timeout 120 npm pack speedscope --silent >/dev/null 2>&1 && tar xzf speedscope-*.tgz && rm -f speedscope-*.tgz)
    fi
  fi
  "$CLI" report --speedscope gpuguard.speedscope.json --folded gpuguard.folded "$DATA/pytorch_quota.json" 2>/dev/null || return 1
  [[ -z ${SANITIZER:-} ]] || return 0  # written by the sanitized command; the plain run imports them
  "$ROOT/tests/browser/check_speedscope.sh" "$dir" shots-speedscope gpuguard.speedscope.json gpuguard.folded; local rc=$?
  if ((rc == 77)); then echo "SKIP (speedscope, Node 20+ or Chromium missing)" >&2; return 0; fi
  return $rc
}
check "speedscope itself imports the --speedscope and --folded outputs" speedscope_imports
