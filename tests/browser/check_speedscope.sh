#!/usr/bin/env bash
# Loads profiles into the real speedscope app (its npm package's dist/release, served on localhost)
# in headless Chromium, and checks that speedscope imported each: no import-error dialog, and the page
# title names the profile. Proves the --speedscope and --folded outputs against the tool itself.
#
#   tests/browser/check_speedscope.sh SPEEDSCOPE_PACKAGE_DIR OUTDIR PROFILE...
#
# SPEEDSCOPE_PACKAGE_DIR is an unpacked `npm pack speedscope` (it holds dist/release/index.html).
# Exit status: 0 all imported, 1 one did not, 77 Chromium, Node 20+ or the package is missing.
set -u
# A sanitized test run preloads its runtime into every process (tests/sanitize_env.sh); the browser and
# node are not ours and must not start under it.
unset LD_PRELOAD
pkg=$1 out=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
[[ -f $pkg/dist/release/index.html ]] || { echo "SKIP: no speedscope package at '$pkg'"; exit 77; }
command -v node >/dev/null && node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' ||
  { echo "SKIP: speedscope check needs Node 20 or later"; exit 77; }
command -v "${CHROMIUM:-chromium}" >/dev/null || { echo "SKIP: no Chromium"; exit 77; }
mkdir -p "$out"
site=$(mktemp -d /tmp/gpuguard-speedscope.XXXXXX)
cp -r "$pkg/dist/release/." "$site/"
for f in "$@"; do cp "$f" "$site/"; done
# speedscope refuses profileURL on file: pages, so serve the app and the profiles over loopback.
python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$site" > "$site/.server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$site"' EXIT
port=
for _ in $(seq 50); do
  port=$(grep -o 'port [0-9]*' "$site/.server.log" | grep -o '[0-9]*' | head -1)
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || { echo "could not start a local HTTP server"; exit 1; }
fail=0
for f in "$@"; do
  name=$(basename "$f")
  title=$(node --experimental-websocket "$here/cdp.mjs" "http://127.0.0.1:$port/index.html#profileURL=http://127.0.0.1:$port/$name" \
    "$out/$name.png" "document.title" 60000 "document.title.endsWith(' - speedscope')" 2> "$out/$name.log"); rc=$?
  if ((rc != 0)); then echo "  speedscope did not import $name: $(cat "$out/$name.log")" >&2; fail=1; continue; fi
  # An imported profile puts its name in the title ("NAME - speedscope"); the welcome page is just "speedscope".
  if [[ $title != *" - speedscope\"" ]]; then echo "  speedscope did not show $name (title $title)" >&2; fail=1; continue; fi
  echo "ok: speedscope imported $name: $title"
done
exit $fail
