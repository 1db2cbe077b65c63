#!/usr/bin/env bash
# `make deb`: dist/gpuguard_<version>_amd64.deb (dpkg-deb), installing into /usr: the command in
# /usr/bin, the shim and its libunwind in /usr/lib/gpuguard (a folder of their own, where the
# command finds them and where that libunwind.so.8 is no other program's), the C header, the man page
# made from the command's help (man.sh), README, LICENSE and NOTICE. The binaries load on glibc 2.17+.
# usage: build.sh BUILD_DIR OUT_DIR VERSION
set -euo pipefail
build=$1 out=$2 version=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
install -d "$stage/DEBIAN" "$stage/usr/bin" "$stage/usr/lib/gpuguard" "$stage/usr/include/gpuguard" \
  "$stage/usr/share/man/man1" "$stage/usr/share/doc/gpuguard"
strip --strip-debug -o "$stage/usr/bin/gpuguard" "$build/gpuguard"
strip --strip-debug -o "$stage/usr/lib/gpuguard/libgpuguard.so" "$build/libgpuguard.so"
strip --strip-debug -o "$stage/usr/lib/gpuguard/libunwind.so.8" "$build/libunwind.so.8"
chmod 0755 "$stage/usr/bin/gpuguard" "$stage/usr/lib/gpuguard/libgpuguard.so"
chmod 0644 "$stage/usr/lib/gpuguard/libunwind.so.8"
install -m 0644 "$root/include/gpuguard/gpuguard.h" "$stage/usr/include/gpuguard/"
"$(dirname "$0")/man.sh" "$build/gpuguard" "$version" | gzip -9n > "$stage/usr/share/man/man1/gpuguard.1.gz"
install -m 0644 "$root/README.md" "$root/NOTICE" "$stage/usr/share/doc/gpuguard/"
install -m 0644 "$root/LICENSE" "$stage/usr/share/doc/gpuguard/copyright"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: gpuguard
Version: $version
Architecture: amd64
Maintainer: gpuguard maintainers <maintainers@gpuguard.invalid>
Depends: libc6 (>= 2.17)
Section: utils
Priority: optional
Installed-Size: $(du -sk "$stage/usr" | cut -f1)
Description: GPU memory quota inside a container, and a report on every CUDA OOM
 An LD_PRELOAD shim (libgpuguard.so) enforces a GPU memory quota shared by the
 processes of a container and writes a report on every out-of-memory; the
 gpuguard command runs programs under it (run), reads reports (report), shows
 usage (top), checks the setup (doctor) and serves Prometheus metrics (exporter).
CONTROL
mkdir -p "$out"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$out/gpuguard_${version}_amd64.deb" >/dev/null
echo "$out/gpuguard_${version}_amd64.deb"
