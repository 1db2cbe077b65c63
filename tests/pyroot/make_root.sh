#!/usr/bin/env bash
# A Debian root with the CPython releases newer than any this machine has (Debian testing, forky:
# python3.14 and python3.15 with their headers), where t_pyframes.sh runs its checks under each and
# checks shim/python/layout.h against the headers (layout.c). Made once, by `make pyroot`, into
# GPUGUARD_PYROOT (default /var/tmp/gpuguard-pyroot); needs root and the network (debootstrap).
# Not part of `make test` or .ci/run: t_pyframes.sh uses the root where it exists and says so where not.
set -euo pipefail
PYROOT=${GPUGUARD_PYROOT:-/var/tmp/gpuguard-pyroot}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=forky
PACKAGES=python3.14,libpython3.14-dev,python3.15,libpython3.15-dev

[[ -f $PYROOT/.gpuguard-pyroot-complete ]] && { echo "pyroot: $PYROOT is made"; exit 0; }
[[ $(id -u) == 0 ]] || { echo "pyroot: needs root (debootstrap)" >&2; exit 1; }
if ! command -v debootstrap > /dev/null; then
  apt-get install -y debootstrap > /dev/null || { echo "pyroot: no debootstrap, and apt-get could not install it" >&2; exit 1; }
fi
# An older debootstrap knows no script by forky's name; testing's is sid's.
script=/usr/share/debootstrap/scripts/$SUITE
[[ -e $script ]] || script=/usr/share/debootstrap/scripts/sid
log=$(mktemp)
rm -rf --one-file-system "$PYROOT.partial"
echo "pyroot: debootstrap --variant=minbase --include=$PACKAGES $SUITE $PYROOT ($MIRROR)"
if ! nice -n 10 debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$PYROOT.partial" "$MIRROR" "$script" > "$log" 2>&1; then
  echo "pyroot: debootstrap failed: $(tail -1 "$log") (the whole log: $log)" >&2
  rm -rf --one-file-system "$PYROOT.partial"
  exit 1
fi
rm -f "$log"
echo "$SUITE $PACKAGES" > "$PYROOT.partial/.gpuguard-pyroot-complete"
rm -rf --one-file-system "$PYROOT"
mv "$PYROOT.partial" "$PYROOT"
echo "pyroot: made $PYROOT"
