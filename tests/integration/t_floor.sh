# The glibc floor: every binary gpuguard ships (the shim, the libunwind beside it, the command) loads on
# glibc 2.17 and newer (common/floor/glibc.def; packaging/check_floor.sh reads the version needs).

shipped_binaries_meet_the_floor() {
  "$ROOT/packaging/check_floor.sh" --floor 2.17 "$LIB" "$BUILD/libunwind.so.8" "$CLI"
}

# The checker itself fails on a binary above the floor, naming the symbols: Debian's own
# libunwind.so.8 asks for stat@GLIBC_2.33 and pthread_once@GLIBC_2.34.
the_check_names_what_is_above_the_floor() {
  local out
  if out=$("$ROOT/packaging/check_floor.sh" --floor 2.17 /usr/lib/x86_64-linux-gnu/libunwind.so.8); then
    echo "the checker passed Debian's libunwind.so.8: $out"; return 1
  fi
  expect_contains "$out" "GLIBC_2.33 (fstat stat) above the floor 2.17" "the checker's output"
}

# Bound to the old __libc_start_main, the command still runs its constructors (common/floor/start.cpp
# hands them over as older glibc's startup code did): std::cout, which a constructor of the C++
# runtime sets up, prints the report's JSON. (The shim's caching walker finds each frame's unwind
# table through the _dl_find_object stand-in: t_stacks.sh checks its stacks.)
old_bindings_still_work() {
  local out
  out=$("$CLI" report --json "$ROOT/tests/data/driver_oom.json") || return 1
  expect_contains "$out" '"analysis"' "report --json through std::cout"
}

if [[ -n $SANITIZER ]]; then
  skip "the shipped binaries load on glibc 2.17" "a sanitized build links the machine's glibc (its runtime needs it)"
else
  check "the shim, its libunwind and the command load on glibc 2.17 and newer" shipped_binaries_meet_the_floor
fi
check "the floor check names each symbol above the floor (Debian's libunwind.so.8)" the_check_names_what_is_above_the_floor
check "bound to old glibc versions, the command runs its constructors" old_bindings_still_work
