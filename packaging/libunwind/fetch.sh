#!/usr/bin/env bash
# packaging/libunwind/fetch.sh DIR: Debian's source of libunwind, the version of the machine's
# libunwind-dev, unpacked into DIR/src with the headers its configure script would make in DIR/gen.
# The Makefile compiles it into the libunwind.so.8 shipped beside the shim: the system's copy asks for
# glibc 2.34 (stat, fstat, pthread_*), ours is built with the glibc floor (common/floor/glibc.def).
#
# The source comes from the same Debian archive as the binary package, through apt-get with lists
# of its own under DIR/apt (the machine's apt configuration is not touched): a deb-src line for the
# archive and suite that `apt-cache policy libunwind-dev` names.
set -euo pipefail
dir=${1:?usage: fetch.sh DIR}
mkdir -p "$dir" && dir=$(cd "$dir" && pwd)  # apt-get reads relative paths from /etc/apt
here=$(cd "$(dirname "$0")" && pwd)
version=$(dpkg-query -W -f='${Version}' libunwind-dev 2>/dev/null) ||
  { echo "gpuguard: libunwind-dev is not installed (make deps installs it)" >&2; exit 1; }
origin=$(apt-cache policy libunwind-dev | awk -v v="$version" '
  $1 == "***" || $1 == v { want = ($1 == "***" ? $2 : $1) == v; next }
  want && $2 ~ /^[a-z]+:\/\// { print $2, $3; exit }')
if [[ -z $origin ]]; then
  echo "gpuguard: cannot tell which Debian archive libunwind-dev $version came from (apt-cache policy libunwind-dev)" >&2
  exit 1
fi
read -r uri suite_component <<<"$origin"
apt=$dir/apt
rm -rf "$dir/src" "$dir/gen" "$apt"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/parts" "$dir/gen/tdep"
echo "deb-src $uri ${suite_component%%/*} ${suite_component#*/}" > "$apt/sources.list"
opts=(-q -o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts="$apt/parts"
      -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache" -o APT::Sandbox::User=root)
if ! apt-get "${opts[@]}" update > "$apt/update.log" 2>&1; then
  echo "gpuguard: cannot read the source index of $uri (see $apt/update.log)" >&2
  exit 1
fi
if ! (cd "$apt" && apt-get "${opts[@]}" source --download-only "libunwind=$version" > download.log 2>&1); then
  echo "gpuguard: cannot download Debian's source of libunwind $version (see $apt/download.log)" >&2
  exit 1
fi
dpkg-source -q -x "$apt"/libunwind_*.dsc "$dir/src" > "$apt/unpack.log" 2>&1 ||
  { echo "gpuguard: cannot unpack libunwind's source (see $apt/unpack.log)" >&2; exit 1; }
rm -rf "$apt/lists" "$apt/cache" "$dir"/libunwind_*

# What configure would write for x86-64 Linux: the version in libunwind-common.h, the architecture's
# internal header, and config.h (ours: packaging/libunwind/config.h).
upstream=${version%%-*}
IFS=. read -r major minor extra <<<"$upstream"
sed -e "s/@PKG_MAJOR@/$major/" -e "s/@PKG_MINOR@/$minor/" -e "s/@PKG_EXTRA@/${extra:-0}/" \
  "$dir/src/include/libunwind-common.h.in" > "$dir/gen/libunwind-common.h"
sed 's/@arch@/x86_64/g' "$dir/src/include/libunwind.h.in" > "$dir/gen/libunwind.h"
sed 's/@arch@/x86_64/g' "$dir/src/include/tdep/libunwind_i.h.in" > "$dir/gen/tdep/libunwind_i.h"
cp "$here/config.h" "$dir/gen/config.h"
echo "$version" > "$dir/version"
