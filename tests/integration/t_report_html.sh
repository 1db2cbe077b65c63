# gpuguard report --html, opened in headless Chromium (tests/browser/check_html.sh): the page's script
# runs without error, the timeline and the flame graph are drawn. Without Chromium the checks print a
# skip line; under CI=true a skip is a failure (tests/deps.sh installs the 'chromium' package there).
DATA=$ROOT/tests/data

html_renders() {
  local fixture=$1 mode=${2:-} name rc
  name=$(basename "$fixture" .json)
  "$CLI" report --html "$name.html" "$fixture" 2>/dev/null || { echo "gpuguard report --html failed"; return 1; }
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

if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 && [[ -z ${CHROMIUM:-} ]]; then
  echo "  SKIP the HTML report's browser checks: no Chromium here (tests/deps.sh installs 'chromium')"
fi
check "the HTML report of a PyTorch quota OOM renders: no script error, timeline and flame graph drawn" html_renders "$DATA/pytorch_quota.json"
check "the HTML report of a C program's driver OOM renders" html_renders "$DATA/driver_oom.json"
check "the HTML report written at exit renders" html_renders "$DATA/exit_report.json"

whatif_page() {
  html_renders "$DATA/whatif_quota.json" --dom-only || return 1
  [[ -f shots-whatif_quota/dom.html ]] || return 0  # no Chromium: html_renders said so
  expect_contains shots-whatif_quota/dom.html '<section id="whatif-section">' "the page (the what-if section shown)" &&
    expect_contains shots-whatif_quota/dom.html 'avoids it' "the what-if section"
}
check "the HTML report of a PyTorch OOM with block events shows the what-if replay" whatif_page

minimal_page() {
  echo '{"schema": "gpuguard.report", "version": 1, "reason": "signal"}' > minimal.json
  html_renders "$PWD/minimal.json" --dom-only
}
check "the HTML page of a report without timeline or stacks runs without error" minimal_page

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
  "$ROOT/tests/browser/check_speedscope.sh" "$dir" shots-speedscope gpuguard.speedscope.json gpuguard.folded; local rc=$?
  if ((rc == 77)); then echo "SKIP (speedscope, Node 20+ or Chromium missing)" >&2; return 0; fi
  return $rc
}
check "speedscope itself imports the --speedscope and --folded outputs" speedscope_imports
