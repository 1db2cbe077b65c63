#!/usr/bin/env bash
# Installs the Debian packages that building and testing gpuguard need, when one is missing.
# `make`, `make test` and `make demo` call it, so each works as the first command on a fresh machine.
#   tests/deps.sh [--quiet] [--fuzz] [--bench]   --fuzz: also clang with libFuzzer (make fuzz);
#                                                 --bench: also valgrind (make bench's footprint table)
set -euo pipefail
quiet=0 fuzz=0 bench=0
for a in "$@"; do
  case $a in --quiet) quiet=1 ;; --fuzz) fuzz=1 ;; --bench) bench=1 ;; esac
done
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# util-linux: unshare, mount and mountpoint for the hostile-environment checks (t_hostile.sh: PID
# namespaces, a small tmpfs; skipped with the reason where root is not there). Essential in Debian, so
# normally present. dpkg-dev unpacks Debian's source of libunwind, which the shipped libunwind.so.8 is
# built from (packaging/libunwind/fetch.sh). libdw-dev: elfutils' headers, which `gpuguard report`
# compiles against to name native frames (tools/report/symbolize.h); the command loads libdw.so.1 with
# dlopen at run time, so it does not need it installed to start.
for pkg in libunwind-dev nlohmann-json3-dev doctest-dev util-linux dpkg-dev libdw-dev; do have "$pkg" || need+=("$pkg"); done
# chromium drives the HTML report's browser test; prometheus (its server and promtool) checks the
# exporter (t_exporter.sh); clang + its runtimes build the fuzz targets.
if [[ ${GPUGUARD_DEPS_BROWSER:-1} == 1 ]]; then have chromium || need+=(chromium); fi
have prometheus || need+=(prometheus)
# The wheel's test (t_wheel.sh) installs it into a fresh venv and executes a notebook with a real kernel
# (nbconvert --execute); the .deb's test (t_deb.sh) builds it with dpkg-deb (dpkg-dev, above).
for pkg in python3-venv python3-nbconvert python3-ipykernel; do have "$pkg" || need+=("$pkg"); done
if ((fuzz)); then for pkg in clang libclang-rt-14-dev; do have "$pkg" || need+=("$pkg"); done; fi
if ((bench)); then have valgrind || need+=(valgrind); fi
if ((${#need[@]} == 0)); then
  ((quiet)) || echo "deps: all present"
  exit 0
fi
if [[ $(id -u) != 0 ]] && ! command -v sudo >/dev/null; then
  echo "gpuguard: missing Debian packages: ${need[*]} (run as root, or install them)" >&2
  exit 1
fi
SUDO=; [[ $(id -u) != 0 ]] && SUDO=sudo
echo "deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
