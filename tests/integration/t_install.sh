# `make install` (issue 30, item 7): the shim's libunwind.so.8 in PREFIX/lib/gpuguard/ (not in
# PREFIX/lib, where other programs would find it), the man page gpuguard(1), the binaries stripped
# (`STRIP=` keeps them whole), and the installed command and shim working from the prefix.

install_into() {  # PREFIX [MAKE ARGS...]
  local prefix=$1; shift
  make -s -C "$ROOT" install BUILD="$BUILD" PREFIX="$prefix" "$@" > install.txt 2>&1 || { cat install.txt; return 1; }
}

installed_layout() {
  local p=$TMP/prefix f
  install_into "$p" || return 1
  for f in bin/gpuguard lib/libgpuguard.so lib/gpuguard/libunwind.so.8 include/gpuguard/gpuguard.h share/man/man1/gpuguard.1; do
    [[ -f $p/$f ]] || { echo "    $f was not installed" >&2; return 1; }
  done
  [[ ! -e $p/lib/libunwind.so.8 ]] || { echo "    libunwind.so.8 was installed in PREFIX/lib" >&2; return 1; }
  expect_eq "$(head -1 "$p/share/man/man1/gpuguard.1")" '.TH GPUGUARD 1 "" "gpuguard 0.1.0" "User Commands"' "the man page's title line" &&
    expect_contains "$p/share/man/man1/gpuguard.1" "exporter" "the man page's commands" || return 1
  for f in bin/gpuguard lib/libgpuguard.so lib/gpuguard/libunwind.so.8; do
    expect_contains "$(file "$p/$f")" ", stripped" "file's verdict on $f" || return 1
  done
  install_into "$TMP/whole" STRIP= || return 1
  expect_contains "$(file "$TMP/whole/bin/gpuguard")" "not stripped" "file's verdict with STRIP= (kept whole)"
}

preload_from_the_prefix() {
  local out p=$TMP/prefix
  out=$(GPUGUARD_DEBUG=1 LD_LIBRARY_PATH=$FAKE "$p/bin/gpuguard" run --ledger none --limit 1GiB -- "$BIN/drv_linked" linked alloc 67108864 2>&1)
  expect_contains "$out" "alloc 67108864 -> CUDA_SUCCESS" "the program under the installed shim" &&
    expect_contains "$out" "unwinding with libunwind from $p/lib/gpuguard/libunwind.so.8" "the shim's libunwind, from lib/gpuguard/" || return 1
  out=$("$p/bin/gpuguard" doctor 2>&1)
  expect_contains "$out" "$p/lib/libgpuguard.so" "doctor naming the installed shim"
}

if [[ -n ${SANITIZER:-} ]]; then
  skip "make install: libunwind in lib/gpuguard/, a man page, stripped binaries (STRIP= keeps them)" "make install is the plain build's"
  skip "the installed command runs a program under the installed shim, which finds its libunwind; doctor names it" "make install is the plain build's"
else
  check "make install: libunwind in lib/gpuguard/, a man page, stripped binaries (STRIP= keeps them)" installed_layout
  check "the installed command runs a program under the installed shim, which finds its libunwind; doctor names it" preload_from_the_prefix
fi
