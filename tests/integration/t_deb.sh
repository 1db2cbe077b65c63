# The .deb (make deb): its files and control, its man page, and the installed command finding its shim
# in /usr/lib/gpuguard. Under CI=true (as root, or with sudo) it is installed for real with
# `apt-get install ./gpuguard_*.deb` and removed after; elsewhere it is unpacked into a folder
# (dpkg-deb -x), which checks the same layout without touching the machine's /usr.

DEB=$TMP/dist/gpuguard_0.1.0_amd64.deb
deb_contents() {
  "$ROOT/packaging/deb/build.sh" "$BUILD" "$TMP/dist" 0.1.0 > built.txt || return 1
  expect_eq "$(cat built.txt)" "$DEB" "the package's name" || return 1
  dpkg-deb -c "$DEB" > files.txt && dpkg-deb -f "$DEB" Package Version Architecture Depends > control.txt || return 1
  local f
  for f in ./usr/bin/gpuguard ./usr/lib/gpuguard/libgpuguard.so ./usr/lib/gpuguard/libunwind.so.8 \
    ./usr/include/gpuguard/gpuguard.h ./usr/share/man/man1/gpuguard.1.gz ./usr/share/doc/gpuguard/copyright; do
    expect_contains files.txt "$f" "the package's files" || return 1
  done
  expect_eq "$(cat control.txt)" $'Package: gpuguard\nVersion: 0.1.0\nArchitecture: amd64\nDepends: libc6 (>= 2.17)' "the control fields" || return 1
  # What it ships meets its Depends: no glibc symbol above 2.17 (sanitized builds keep the machine's).
  [[ -n $SANITIZER ]] && return 0
  dpkg-deb -x "$DEB" floor && "$ROOT/packaging/check_floor.sh" floor/usr/bin/gpuguard floor/usr/lib/gpuguard/* > floor.txt 2>&1 ||
    { cat floor.txt; return 1; }
}

man_page() {
  dpkg-deb -x "$DEB" root && zcat root/usr/share/man/man1/gpuguard.1.gz > gpuguard.1 || return 1
  MANWIDTH=100 man -l gpuguard.1 > man.txt 2> man.err || { cat man.err; return 1; }
  [[ ! -s man.err ]] || { cat man.err; return 1; }
  expect_contains man.txt "GPUGUARD EXPORTER" "the man page (a section per command)" &&
    expect_contains man.txt "GPUGUARD_MEM_LIMIT" "the man page (the variables)"
}

installed_doctor() {
  local cli=$1 lib=$2
  "$cli" doctor > doctor.txt 2>&1  # exit 1 here: no GPU driver on this machine
  expect_contains doctor.txt "ok    library       $lib loads as a preload" "doctor (the installed shim)" &&
    expect_contains doctor.txt "ok    libunwind     libunwind.so.8 beside the library loads" "doctor (its libunwind)" &&
    LD_LIBRARY_PATH=$FAKE "$cli" run --limit 64MiB --ledger "$TMP/l_deb" --report-dir reports -- "$BIN/drv_linked" linked alloc $((128 << 20)) \
      > run.txt 2>&1
  expect_contains run.txt "refused cuMemAlloc_v2 of 128.00 MiB" "a refusal through the installed command"
}

check "make deb: the command, the shim and its libunwind in /usr/lib/gpuguard, the header, man page and copyright; nothing above glibc 2.17" deb_contents
if command -v man >/dev/null; then check "the man page renders, with every command and variable" man_page
else skip "the man page renders" "no man here"; fi
SUDO=; [[ $(id -u) == 0 ]] || SUDO="sudo -n"
if [[ ${CI:-} == true && -z $SANITIZER ]] && $SUDO true 2>/dev/null; then
  apt_installed() {
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$DEB" > apt.txt 2>&1 || { cat apt.txt; return 1; }
    installed_doctor /usr/bin/gpuguard /usr/lib/gpuguard/libgpuguard.so; local rc=$?
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get remove -y -qq gpuguard > /dev/null 2>&1
    return $rc
  }
  check "apt-get install ./gpuguard_*.deb, then gpuguard doctor finds the shim and run refuses over the limit" apt_installed
elif [[ -n $SANITIZER ]]; then
  skip "the .deb installed" "built from the plain build (a sanitized shim needs its runtime preloaded)"
else
  unpacked_doctor() {
    dpkg-deb -x "$DEB" unpacked && installed_doctor "$TMP/unpacked/usr/bin/gpuguard" "$TMP/unpacked/usr/lib/gpuguard/libgpuguard.so"
  }
  check "the unpacked .deb: gpuguard doctor finds the shim and run refuses over the limit (CI installs it with apt-get)" \
    unpacked_doctor
fi
