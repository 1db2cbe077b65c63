# Sourced by tests/run_all.sh and tests/integration/run.sh with BUILD, LIB (and CLI) set. Sets PRELOAD,
# what a test puts in LD_PRELOAD to run a program under the shim, and, when the shim was built with
# `make SANITIZE=...`, the sanitizer's environment:
#
#   - A preloaded library that needs a sanitizer runtime must have that runtime loaded before libc,
#     or the runtime cannot interpose malloc and the pthread calls (ASan refuses to start, TSan sees
#     no synchronisation). Test programs built by the Makefile link the runtime themselves, but
#     python3, sh and the commands `gpuguard run` starts do not. So PRELOAD is "<runtime>:<shim>",
#     and CLI becomes a wrapper that starts gpuguard with the runtime in LD_PRELOAD, which `gpuguard
#     run` and `doctor` keep after the shim for the commands they start (still before libc;
#     verify_asan_link_order=0 lets ASan accept a runtime that is not first). The runtime is not
#     preloaded into the rest of the test run: some tools hang under it (pgrep, under ASan), and
#     libtsan preloaded alone into an uninstrumented program (sh, python3) crashes it before main:
#     ThreadSanitizer starts from an instrumented object's constructor, so it is only ever preloaded
#     together with one (the shim, the Python probe).
#   - Every report goes to a file under SAN_LOG_DIR (log_path), never only to a stderr that a test
#     may discard: lib.sh's `check` fails the check during which a report appeared, and prints it.
#   - Leaks: python3 and the shell leak by design, so detect_leaks=0 by default, and `shimmed` and
#     run_all.sh turn it on for the programs this project builds.
#
# SANITIZER is set to "address", "thread" or "" (a plain build).
SANITIZER=
SANITIZER_NAME=
SAN_RT=
if [[ -f $LIB ]]; then
  # What the shim itself needs, resolved by the loader: exactly the runtime it will run with.
  san_libs=$(env -u LD_PRELOAD ldd "$LIB" 2>/dev/null)
  if [[ $san_libs == *libasan.so* ]]; then
    SANITIZER=address; SAN_RT=$(awk '/libasan\.so.*=>/ {print $3; exit}' <<<"$san_libs")
    [[ $san_libs != *libubsan.so* ]] || SANITIZER_NAME=address,undefined
  elif [[ $san_libs == *libtsan.so* ]]; then
    SANITIZER=thread; SAN_RT=$(awk '/libtsan\.so.*=>/ {print $3; exit}' <<<"$san_libs")
  fi
  unset san_libs
fi
PRELOAD=$LIB
if [[ -n $SANITIZER ]]; then
  PRELOAD="$SAN_RT:$LIB"
  if [[ -z ${GG_SAN_ENV:-} ]]; then
    export GG_SAN_ENV=1  # once: run_all.sh and then run.sh source this file
    SAN_LOG_DIR=${SAN_LOG_DIR:-$(mktemp -d /tmp/gpuguard-san.XXXXXX)}
    mkdir -p "$SAN_LOG_DIR/seen"
    common="log_path=$SAN_LOG_DIR/report:print_stacktrace=1"
    # halt_on_error=1 makes a UBSan finding fatal, like ASan's.
    export ASAN_OPTIONS="$common:verify_asan_link_order=0:detect_leaks=0:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    export UBSAN_OPTIONS="$common:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
    # second_deadlock_stack: a lock-order report names both acquisitions.
    export TSAN_OPTIONS="$common:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
    export SAN_LOG_DIR
    unset common
  fi
  if [[ -n ${CLI:-} && ${CLI##*/} == gpuguard ]]; then
    cat > "$SAN_LOG_DIR/gpuguard" <<EOF
#!/bin/sh
# gpuguard with the sanitizer runtime preloaded (tests/sanitize_env.sh). No subprocess before the exec:
# as PID 1 of a new PID namespace, gpuguard must still give its command pid 2.
case ":\${LD_PRELOAD:-}:" in *[:\ ]"$SAN_RT"[:\ ]*) ;; *) LD_PRELOAD="$SAN_RT\${LD_PRELOAD:+:\$LD_PRELOAD}"; export LD_PRELOAD ;; esac
exec "$CLI" "\$@"
EOF
    chmod +x "$SAN_LOG_DIR/gpuguard"
    CLI=$SAN_LOG_DIR/gpuguard
  fi
fi
SANITIZER_NAME=${SANITIZER_NAME:-$SANITIZER}
export SANITIZER SANITIZER_NAME SAN_RT PRELOAD

# The sanitizer reports written since the last call, printed and moved aside; status 1 when any.
sanitizer_reports() {
  [[ -n $SANITIZER ]] || return 0
  local f found=0
  for f in "$SAN_LOG_DIR"/report.*; do
    [[ -e $f ]] || continue
    found=1
    echo "    sanitizer report $(basename "$f"):"
    sed -n '1,60p' "$f" | sed 's/^/      /'
    mv "$f" "$SAN_LOG_DIR/seen/" 2>/dev/null
  done
  ((found == 0))
}
