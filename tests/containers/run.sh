#!/usr/bin/env bash
# Issue 29: the shared quota in containers made the way a runtime makes them. Each container is
# `unshare --mount --pid --ipc --fork` (its program is pid 1 of its own PID namespace) and a chroot
# into a Debian root made by debootstrap (bookworm, minbase; cached in /var/tmp/gpuguard-rootfs),
# mounted read-only, with its own /proc and a /dev/shm that is either a private tmpfs or a bind
# mount of a shared folder. The shim, the test driver (tests/fake) and drv_linked are copied into
# the root; the test driver's ground truth (FAKE_CUDA_TRUTH, one file bind-mounted into every
# container) says what was really handed out, whatever the shim believed.
#
#   1  containers with their own /dev/shm get their own quotas
#   2  containers that share /dev/shm (a shared folder, or the host's) share one quota: ground truth
#      of everything held together stays within the limit
#   3  N containers started together on a fresh shared /dev/shm: one ledger, one quota, no process
#      told that its quota is private (TRIALS trials)
#
# Needs root and, the first time, the network (debootstrap); skips with a `skip:` line otherwise.
# Not part of `make test` or .ci/run: `make container-test` runs it. Environment: BUILD (default
# build), GPUGUARD_ROOTFS (the cached root), DEBIAN_MIRROR, CONTAINERS (scenario 3, default 8),
# TRIALS (scenario 3, default 10).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$ROOT" && cd "${BUILD:-build}" && pwd)
ROOTFS=${GPUGUARD_ROOTFS:-/var/tmp/gpuguard-rootfs}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
N=${CONTAINERS:-8}
TRIALS=${TRIALS:-10}
MIB=1048576
LIMIT=300MiB
LIMIT_BYTES=$((300 * MIB))
IMG=/opt/gpuguard-test  # where the shim, the test driver and the program go inside the root

skip() {
  echo "skip: $*"
  exit 0
}
[[ $(id -u) == 0 ]] || skip "needs root (mount, PID and IPC namespaces, chroot, mount)"
for tool in unshare chroot mount mkfifo; do
  command -v "$tool" > /dev/null || skip "no $tool on this machine"
done
for f in libgpuguard.so libunwind.so.8 fake/libcuda.so.1 tests/bin/drv_linked tests/bin/fake_truth; do
  [[ -e $BUILD/$f ]] || {
    echo "FAIL: $BUILD/$f is missing (make container-test builds it)"
    exit 1
  }
done

# The root file system, made once and reused (a root that debootstrap did not finish is made again).
make_rootfs() {
  [[ -f $ROOTFS/.gpuguard-rootfs-complete ]] && return 0
  if ! command -v debootstrap > /dev/null; then
    if ! command -v apt-get > /dev/null || ! apt-get install -y debootstrap > /dev/null 2>&1; then
      skip "no debootstrap, and apt-get could not install it"
    fi
  fi
  local log
  log=$(mktemp)
  rm -rf --one-file-system "$ROOTFS.partial"
  echo "making the root file system: debootstrap --variant=minbase bookworm $ROOTFS ($MIRROR)"
  if ! nice -n 10 debootstrap --variant=minbase bookworm "$ROOTFS.partial" "$MIRROR" > "$log" 2>&1; then
    local why
    why=$(tail -1 "$log")
    rm -rf --one-file-system "$ROOTFS.partial" "$log"
    skip "debootstrap could not make a root (no network?): $why"
  fi
  rm -f "$log"
  echo "debootstrap --variant=minbase bookworm" > "$ROOTFS.partial/.gpuguard-rootfs-complete"
  rm -rf --one-file-system "$ROOTFS"
  mv "$ROOTFS.partial" "$ROOTFS"
}
make_rootfs

# The image: the shim with its libunwind, the test driver, the program; /gg is where the ground
# truth is bind-mounted.
rm -rf "${ROOTFS:?}$IMG"
mkdir -p "$ROOTFS$IMG/lib" "$ROOTFS$IMG/fake" "$ROOTFS$IMG/bin" "$ROOTFS/gg" "$ROOTFS/dev/shm"
cp "$BUILD/libgpuguard.so" "$BUILD/libunwind.so.8" "$ROOTFS$IMG/lib/"
cp -P "$BUILD"/fake/libcuda.so* "$ROOTFS$IMG/fake/"
cp "$BUILD/tests/bin/drv_linked" "$ROOTFS$IMG/bin/"

W=$(mktemp -d /tmp/gpuguard-containers.XXXXXX)
HOST_LEDGER=/dev/shm/gpuguard-container-test-$$.ledger
cleanup() {
  local pid
  for pid in $(jobs -p); do kill "$pid" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$W" "$HOST_LEDGER"
}
trap cleanup EXIT

# What runs as pid 1 of a new container, before its program: the mounts a runtime makes (in the
# container's own mount namespace, so none is seen outside), an optional start gate (a FIFO that
# every container opens; the parent opens and closes it, and all go at once), then the chroot.
# Arguments: ROOTFS SHM(private|FOLDER) TRUTH_DIR GATE(-|FIFO) ARMED_FILE PROGRAM ARGS...
# shellcheck disable=SC2016
CONTAINER_INIT='
set -e
root=$1 shm=$2 truth=$3 gate=$4 armed=$5
shift 5
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount -t proc proc "$root/proc"
if [ "$shm" = private ]; then
  mount -t tmpfs -o size=65536k,mode=1777 shm "$root/dev/shm"
else
  mount --bind "$shm" "$root/dev/shm"
fi
mount --bind "$truth" "$root/gg"
: > "$armed"
[ "$gate" = - ] || { timeout 20 cat "$gate" > /dev/null || true; date +%s%N > "$armed.go"; }
exec chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin "$@"
'

# container NAME SHM GATE [VAR=VALUE...] -- PROGRAM ARGS...: starts one in the background; its
# stdout and stderr go to $W/NAME.out and $W/NAME.err. PIDS collects the unshare processes.
PIDS=()
container() {
  local name=$1 shm=$2 gate=$3
  shift 3
  local vars=()
  while [[ $1 != -- ]]; do
    vars+=("$1")
    shift
  done
  shift
  unshare --mount --pid --ipc --fork --kill-child --propagation private \
    sh -c "$CONTAINER_INIT" init "$ROOTFS" "$shm" "$W/truth" "$gate" "$W/$name.armed" \
    LD_PRELOAD=$IMG/lib/libgpuguard.so LD_LIBRARY_PATH=$IMG/fake FAKE_CUDA_TRUTH=/gg/truth \
    GPUGUARD_MEM_LIMIT=$LIMIT GPUGUARD_MAX_REPORTS=0 "${vars[@]}" "$IMG/bin/drv_linked" linked "$@" \
    > "$W/$name.out" 2> "$W/$name.err" &
  PIDS+=($!)
}
wait_all() {
  local pid rc=0
  for pid in "${PIDS[@]}"; do wait "$pid" || rc=1; done
  PIDS=()
  return $rc
}
# Opens the gate once every named container is waiting at it.
open_gate() {
  local gate=$1 name
  shift
  for name in "$@"; do
    for _ in $(seq 400); do [[ -e $W/$name.armed ]] && break; sleep 0.025; done
    [[ -e $W/$name.armed ]] || return 1
  done
  sleep 0.1
  exec {g}<> "$gate"  # read-write: never blocks, and the readers waiting in open() go on
  sleep 0.2
  exec {g}>&-
}
# The ground truth: the most the test driver ever had handed out at once on the device.
truth_max() {
  [[ -e $W/truth/truth ]] || { echo 0; return; }
  "$BUILD/tests/bin/fake_truth" "$W/truth/truth" | sed -n 's/^device 0 current [0-9]* max \([0-9]*\)$/\1/p'
}
fresh_truth() {
  mkdir -p "$W/truth"
  rm -f "$W/truth/truth"
}
admitted() { { grep -l "alloc $((200 * MIB)) -> CUDA_SUCCESS" "$@" 2> /dev/null || true; } | wc -l; }
# Lines of the shim saying a process went on with a quota of its own.
private_lines() { cat "$@" | grep -ci 'private\|alone' || true; }
mib() { echo "$(($1 / MIB)) MiB"; }

FAILS=0
TABLE=()
result() {  # result OK NAME DETAILS TABLE-ROW
  if [[ $1 == 0 ]]; then echo "PASS $2"; else
    echo "FAIL $2"
    FAILS=$((FAILS + 1))
  fi
  echo "     $3"
  TABLE+=("$4|$([[ $1 == 0 ]] && echo PASS || echo FAIL)")
}

echo "root: $ROOTFS ($(cat "$ROOTFS/etc/debian_version")); limit $LIMIT in every container"

# 0: the container is what a runtime makes: its program is pid 1, in PID, IPC and mount namespaces
# that are not the host's, chrooted into the image (read-only), with a tmpfs of its own at /dev/shm.
fresh_truth
# shellcheck disable=SC2016
container s0 private - -- exec sh -c 'echo pid=$$; readlink /proc/self/ns/pid /proc/self/ns/ipc /proc/self/ns/mnt
  test -x /opt/gpuguard-test/bin/drv_linked && echo image; touch /write-test 2> /dev/null || echo read-only
  stat -f -c shm=%T /dev/shm'
wait_all || true
host_ns=$(readlink /proc/self/ns/pid /proc/self/ns/ipc /proc/self/ns/mnt)
ok=0
out0=$(cat "$W/s0.out")
[[ $out0 == "pid=1"$'\n'*$'\nimage\nread-only\nshm=tmpfs' ]] || ok=1
for ns in $host_ns; do [[ $out0 != *"$ns"* ]] || ok=1; done
((ok == 0)) || cat "$W"/s0.*
result $ok "0: a container's program is pid 1 in PID, IPC and mount namespaces of its own, in the read-only image" \
  "$(echo "$out0" | tr '\n' ' ')" "0 the container itself|1|1|-|-|-"

# 1: three containers, each with its own tmpfs at /dev/shm and the default ledger: each admits 200 MiB
# of its 300 MiB and sees only its own (cuMemGetInfo: 100 MiB free of 300 MiB); 600 MiB held at once.
fresh_truth
mkfifo "$W/gate1"
for c in a b c; do container "s1$c" private "$W/gate1" -- alloc $((200 * MIB)) info sleep 1500; done
open_gate "$W/gate1" s1a s1b s1c
wait_all || true
ok=0
n1=$(admitted "$W"/s1?.out)
info1=$({ grep -l "info -> CUDA_SUCCESS free=$((100 * MIB)) total=$LIMIT_BYTES" "$W"/s1?.out || true; } | wc -l)
max1=$(truth_max)
((n1 == 3 && info1 == 3 && max1 == 600 * MIB)) || ok=1
[[ -z $(ls -A "$ROOTFS/dev/shm") ]] || ok=1  # the ledgers lived in the containers' tmpfs alone
result $ok "1: 3 containers, each with a private tmpfs at /dev/shm, have 3 quotas" \
  "admitted 200 MiB: $n1 of 3; each saw only its own ($info1 of 3 free=100 MiB); ground truth held at once: $(mib "$max1") (3 x 200 MiB)" \
  "1 own /dev/shm (tmpfs)|3|1|$n1 of 3|$(mib "$max1")|3 x $LIMIT"

# 2a: two containers bind-mount one shared folder at /dev/shm: one quota. Container A holds 200 MiB;
# B is refused 200 MiB and admitted 100 MiB, and sees nothing free. Then both race: 8 threads each
# allocating and freeing 100 MiB, 200 rounds, in each container; ground truth never above the limit.
fresh_truth
mkdir -p "$W/shm2"
container s2a "$W/shm2" - -- alloc $((200 * MIB)) sleep 3000  # holds its 200 MiB for 3 s
for _ in $(seq 400); do grep -q SUCCESS "$W/s2a.out" 2> /dev/null && break; sleep 0.025; done
container s2b "$W/shm2" - -- alloc $((200 * MIB)) alloc $((100 * MIB)) info
wait_all || true
ok=0
out2=$(cat "$W/s2b.out")
[[ $out2 == *"alloc $((200 * MIB)) -> CUDA_ERROR_OUT_OF_MEMORY"* && $out2 == *"alloc $((100 * MIB)) -> CUDA_SUCCESS"* &&
  $out2 == *"info -> CUDA_SUCCESS free=0 total=$LIMIT_BYTES"* ]] || ok=1
grep -q "alloc $((200 * MIB)) -> CUDA_SUCCESS" "$W/s2a.out" || ok=1
max2=$(truth_max)
((max2 <= LIMIT_BYTES)) || ok=1
((ok == 0)) || cat "$W"/s2?.out "$W"/s2?.err
result $ok "2a: 2 containers sharing a folder as /dev/shm: B refused 200 MiB beside A's 200 MiB, admitted 100 MiB" \
  "ground truth held at once: $(mib "$max2") (limit $LIMIT)" \
  "2a shared folder, held|2|1|A 200, B 100 of 200+100|$(mib "$max2")|$LIMIT"

fresh_truth
rm -rf "$W/shm2" && mkdir -p "$W/shm2"
mkfifo "$W/gate2"
container s2c "$W/shm2" "$W/gate2" -- threads 8 $((100 * MIB)) 200
container s2d "$W/shm2" "$W/gate2" -- threads 8 $((100 * MIB)) 200
open_gate "$W/gate2" s2c s2d
wait_all || true
ok=0
max2r=$(truth_max)
served=$(sed -n 's/^threads ok=\([0-9]*\) refused=\([0-9]*\)$/\1 \2/p' "$W"/s2[cd].out | awk '{o += $1; r += $2} END {print o + 0, r + 0}')
read -r ok2r ref2r <<< "$served"
((max2r <= LIMIT_BYTES && max2r > 0 && ok2r > 0 && ref2r > 0)) || ok=1
(($(private_lines "$W"/s2[cd].err) == 0)) || ok=1
((ok == 0)) || cat "$W"/s2[cd].out "$W"/s2[cd].err
result $ok "2a: 2 containers x 8 threads racing 100 MiB allocations on one shared /dev/shm stay within $LIMIT" \
  "$ok2r allocations admitted, $ref2r refused; ground truth peak: $(mib "$max2r") (limit $LIMIT)" \
  "2a shared folder, racing|2|1|$ok2r admitted, $ref2r refused|$(mib "$max2r")|$LIMIT"

# 2b: the host's own /dev/shm bind-mounted into a container: a process on the host (no container)
# holds 200 MiB; the container is refused 200 MiB and admitted 100 MiB. The ledger is named
# (GPUGUARD_LEDGER) so that nothing else on the host meets it.
fresh_truth
mkfifo "$W/hostin"
(LD_PRELOAD=$BUILD/libgpuguard.so LD_LIBRARY_PATH=$BUILD/fake FAKE_CUDA_TRUTH=$W/truth/truth GPUGUARD_MEM_LIMIT=$LIMIT \
  GPUGUARD_MAX_REPORTS=0 GPUGUARD_LEDGER=$HOST_LEDGER "$BUILD/tests/bin/drv_linked" linked alloc $((200 * MIB)) wait \
  < "$W/hostin" > "$W/host.out" 2> "$W/host.err") &
hostpid=$!
exec {hostfd}> "$W/hostin"
for _ in $(seq 400); do grep -q ready "$W/host.out" 2> /dev/null && break; sleep 0.025; done
container s2e /dev/shm - GPUGUARD_LEDGER="$HOST_LEDGER" -- alloc $((200 * MIB)) alloc $((100 * MIB)) info
wait_all || true
exec {hostfd}>&-
wait "$hostpid" || true
ok=0
out2e=$(cat "$W/s2e.out")
grep -q "alloc $((200 * MIB)) -> CUDA_SUCCESS" "$W/host.out" || ok=1
[[ $out2e == *"alloc $((200 * MIB)) -> CUDA_ERROR_OUT_OF_MEMORY"* && $out2e == *"alloc $((100 * MIB)) -> CUDA_SUCCESS"* ]] || ok=1
max2e=$(truth_max)
((max2e <= LIMIT_BYTES)) || ok=1
((ok == 0)) || cat "$W"/host.* "$W"/s2e.*
result $ok "2b: the host's /dev/shm bind-mounted into a container: one quota with a process on the host" \
  "host 200 MiB admitted; container refused 200 MiB, admitted 100 MiB; ground truth held at once: $(mib "$max2e") (limit $LIMIT)" \
  "2b host /dev/shm, held|1 + host|1|host 200, container 100|$(mib "$max2e")|$LIMIT"

# 3: N containers started together (one gate) on a fresh shared /dev/shm, the default ledger path,
# none there yet: each is pid 1 of its own namespace and asks for 200 MiB under 300 MiB. In every
# trial exactly one is admitted, no process says its quota is private, ground truth within the limit,
# one ledger file and no temporary file left.
bad=0 worst=0 privs=0 adm_total=0 spreads=()
for trial in $(seq "$TRIALS"); do
  fresh_truth
  rm -rf "$W/shm3" "$W"/s3.* && mkdir -p "$W/shm3"
  rm -f "$W/gate3" && mkfifo "$W/gate3"
  names=()
  for i in $(seq "$N"); do
    container "s3.$i" "$W/shm3" "$W/gate3" -- alloc $((200 * MIB)) sleep 1500
    names+=("s3.$i")
  done
  open_gate "$W/gate3" "${names[@]}" || echo "trial $trial: not every container reached the gate"
  wait_all || true
  n3=$(admitted "$W"/s3.*.out)
  p3=$(private_lines "$W"/s3.*.err)
  m3=$(truth_max)
  spreads+=($(($(sort -n "$W"/s3.*.go | sed -n '$p') - $(sort -n "$W"/s3.*.go | sed -n 1p))))
  files=$(ls -A "$W/shm3")
  adm_total=$((adm_total + n3))
  privs=$((privs + p3))
  ((m3 > worst)) && worst=$m3
  if ((n3 != 1 || p3 != 0 || m3 > LIMIT_BYTES)) || [[ $files != gpuguard-0.ledger ]]; then
    bad=$((bad + 1))
    echo "     trial $trial: $n3 of $N admitted, $p3 private lines, ground truth $(mib "$m3"), /dev/shm: $files"
    grep -h gpuguard "$W"/s3.*.err | sort | uniq -c | head -5
  fi
done
spread_ms=$(printf '%s\n' "${spreads[@]}" | sort -n | awk '{a[NR] = $1} END {printf "%.1f ms median, %.1f ms most", a[int((NR + 1) / 2)] / 1e6, a[NR] / 1e6}')
result $((bad > 0)) "3: $N containers started together on a fresh shared /dev/shm: one quota ($TRIALS trials)" \
  "trials with 2 quotas, a private line or a stray file: $bad of $TRIALS; admitted $adm_total of $((N * TRIALS)) (one a trial); private/alone lines: $privs; ground truth peak: $(mib "$worst"); gate to exec, first to last container: $spread_ms" \
  "3 shared folder, $N together|$N|$TRIALS|$adm_total of $((N * TRIALS))|$(mib "$worst") max|$LIMIT"

echo
printf '%-30s %-11s %-6s %-36s %-18s %-10s %s\n' scenario containers trials "admitted (200 MiB requests)" "held (ground truth)" limit result
for row in "${TABLE[@]}"; do
  IFS='|' read -r a b c d e f g <<< "$row"
  printf '%-30s %-11s %-6s %-36s %-18s %-10s %s\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g"
done
((FAILS == 0))
