#!/usr/bin/env bash
# packaging/check_floor.sh [--floor 2.17] FILE...: whether each binary loads on glibc FLOOR and newer,
# read from its ELF version needs (what the loader checks before it runs anything). A file fails, each
# offending symbol named, when it asks for a glibc version above the floor, for a C++ or GCC runtime
# version (gpuguard links those statically), or for a library that manylinux2014 does not promise
# (libc, libm, libdl, libpthread, librt, the loader). The fix for a glibc symbol is a row of
# common/floor/glibc.def. Prints one line per file; exit 1 when any fails.
set -uo pipefail
floor=2.17
if [[ ${1:-} == --floor ]]; then floor=$2; shift 2; fi
allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2)$'
above() { [[ $(printf '%s\n%s\n' "$1" "$floor" | sort -V | tail -1) != "$floor" ]]; }
status=0
for f in "$@"; do
  if ! head=$(readelf -h "$f" 2>&1); then echo "$f: not an ELF file ($head)"; status=1; continue; fi
  problems=()
  # Versions asked for, from the version needs (readelf -V): "Name: GLIBC_2.34  Flags: ..."
  mapfile -t versions < <(readelf -V -W "$f" | sed -nE 's/.*Name: ([A-Z_]+_[0-9.]+) .*/\1/p' | sort -uV)
  newest=
  for v in "${versions[@]}"; do
    case $v in
      GLIBC_PRIVATE) problems+=("GLIBC_PRIVATE (glibc's internals: any other glibc refuses it)") ;;
      GLIBC_*) n=${v#GLIBC_}; newest=$n
               if above "$n" "$floor"; then
                 syms=$(objdump -T "$f" | awk -v v="$v" '$0 ~ "\\(?" v "\\)?" && / \*UND\*/ {print $NF}' | sort -u | tr '\n' ' ')
                 problems+=("$v (${syms% }) above the floor $floor")
               fi ;;
      *) problems+=("$v (a version of a library other than glibc: the C++ and GCC runtimes are linked statically)") ;;
    esac
  done
  needed=$(readelf -d -W "$f" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p' | tr '\n' ' ')
  for lib in $needed; do [[ $lib =~ $allowed ]] || problems+=("needs $lib, which manylinux2014 does not promise"); done
  if ((${#problems[@]})); then
    status=1
    for p in "${problems[@]}"; do echo "$f: $p"; done
  else
    echo "$f: loads on glibc $floor and newer (newest version asked: GLIBC_${newest:-none}; needs ${needed% })"
  fi
done
exit $status
