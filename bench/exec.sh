#!/bin/sh
# Benchmark on KVM (POSIX sh: also runs under busybox in the nested L1
# of tests/nested/, see docs/BENCHMARKS.md):
#
#  1. tiny-guest virtio-blk: the polling test driver (tests/guests/blk.c) in
#     its durability-writer mode (`-- blkdur`): for each sector n of the
#     drive, write it, flush, print "ack n" on the serial port. Wall time of
#     `moat run --kernel build/guests/blk.elf --drive IMG -- blkdur` with a
#     64-sector and a BLK_BIG-sector image; the difference over the extra
#     sectors is the time per record (write + flush + ~8 serial port writes),
#     boot and exit cancelled out.
#  2. `moat exec --vsock S -- true` round trip against the default Linux
#     guest (build/guest) booted with `moat run --vsock S`: RUNS runs.
#  3. vsock throughput through the agent: `moat exec -- head -c N /dev/zero`
#     (guest -> host, stdout) and `moat cp FILE :/tmp/f` (host -> guest),
#     VSOCK_MB MiB, 3 runs each.
# Wall times come from bench/runstat (fork -> reap, CLOCK_MONOTONIC); medians
# are printed. Without a usable KVM (`moat host`): "SKIPPED: ..." and exit 0;
# on PVM only 1. runs (Linux never reaches user space there).
#
#   bench/exec.sh             (after `make all guest test-guests bench-tools`)
#   bench/exec.sh --tcg       2. and 3. only, with the same Linux guest under
#                             QEMU TCG (microvm) using moat's vsock over
#                             vhost-user (`moat device vsock`); no KVM needed
# Env: B (build), MOAT, RUNS (20), BLK_RUNS (5), BLK_BIG (2048),
#      VSOCK_MB (16), EXEC_TIMEOUT (600 s for the Linux guest).
set -u
B=${B:-build}
MOAT=${MOAT:-$B/moat}
RUNSTAT=${RUNSTAT:-$B/bench/runstat}
RUNS=${RUNS:-20}
BLK_RUNS=${BLK_RUNS:-5}
BLK_BIG=${BLK_BIG:-2048}
VSOCK_MB=${VSOCK_MB:-16}
EXEC_TIMEOUT=${EXEC_TIMEOUT:-600}
QEMU=${QEMU:-qemu-system-x86_64}
MODE=kvm KIND=
[ "${1:-}" = --tcg ] && MODE=tcg

if [ $MODE = tcg ]; then
    if ! command -v "$QEMU" >/dev/null 2>&1; then
        echo "SKIPPED: bench/exec --tcg: $QEMU not installed"
        exit 0
    fi
    if ! "$MOAT" device --help 2>&1 | grep -q 'device vsock'; then
        echo "SKIPPED: bench/exec --tcg: this moat has no 'moat device vsock'"
        exit 0
    fi
else
    [ -x "$MOAT" ] || { echo "bench/exec: $MOAT missing (make)" >&2; exit 1; }
    KIND=$(MOAT_BIN=$MOAT "$(dirname "$0")/../scripts/host-kind.sh") || exit 1   # the host probe (docs/host.md)
    if [ "$KIND" = none ]; then
        echo "SKIPPED: bench/exec: no usable KVM on this host ($("$MOAT" host --reason 2>/dev/null)); nothing measured"
        exit 0
    fi
fi
for f in "$MOAT" "$RUNSTAT" "$B/guest/bzImage" "$B/guest/initramfs.cpio"; do
    if [ ! -e "$f" ]; then
        echo "bench/exec: $f missing (make all guest test-guests bench-tools)" >&2
        exit 1
    fi
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moat-ebench.XXXXXX")
gpid= dpid=
trap '[ -n "$gpid" ] && kill $gpid 2>/dev/null; [ -n "$dpid" ] && kill $dpid 2>/dev/null; rm -rf "$tmp"' EXIT

# median of column 1 of runs whose exit status (column 3) is $2; $1 = file
med_ok() {
    awk -v want="$2" '$3 == want {print $1}' "$1" | sort -n |
        awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'
}
count_ok() { awk -v want="$2" '$3 == want' "$1" | wc -l | tr -d ' '; }

echo "bench/exec ($MODE): $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPU(s)"

# ---- 1. tiny-guest blk ------------------------------------------------------
[ $MODE = kvm ] && [ ! -e "$B/guests/blk.elf" ] && echo "bench/exec: $B/guests/blk.elf missing, tiny-guest blk not run"
[ $MODE = kvm ] && [ -e "$B/guests/blk.elf" ] && for n in 64 "$BLK_BIG"; do
    dd if=/dev/zero of="$tmp/d$n.img" bs=512 count="$n" 2>/dev/null
    "$RUNSTAT" "$BLK_RUNS" "$MOAT" run --timeout 600 --kernel "$B/guests/blk.elf" \
        --drive "$tmp/d$n.img" -- blkdur > "$tmp/blk$n.txt"
done
if [ -e "$tmp/blk64.txt" ]; then
s=$(med_ok "$tmp/blk64.txt" 0); b=$(med_ok "$tmp/blk$BLK_BIG.txt" 0)
echo "tiny-guest blk (blkdur, $BLK_RUNS runs): ok $(count_ok "$tmp/blk64.txt" 0)+$(count_ok "$tmp/blk$BLK_BIG.txt" 0)"
if [ -n "$s" ] && [ -n "$b" ]; then
    awk -v s="$s" -v b="$b" -v n="$BLK_BIG" 'BEGIN {
        printf "  wall, 64-sector drive:      %10.1f ms\n", s / 1000
        printf "  wall, %d-sector drive:    %10.1f ms\n", n, b / 1000
        per = (b - s) / (n - 64); rate = 0
        if (per > 0) rate = 1e6 / per
        printf "  per record (write+flush+ack): %8.1f us  (%.0f records/s)\n", per, rate }'
else
    echo "  no successful runs"; cat "$tmp/blk64.txt" "$tmp/blk$BLK_BIG.txt"
fi
fi

# ---- 2./3. Linux guest over vsock -------------------------------------------
if [ $MODE = kvm ] && [ "$KIND" = pvm ]; then
    echo "SKIPPED: bench/exec: 2./3. need Linux user space, which PVM never reaches (bench/exec.sh --tcg, or the nested L1)"
    exit 0
fi
S=$tmp/v.sock
if [ $MODE = kvm ]; then
    "$MOAT" run --timeout "$EXEC_TIMEOUT" --vsock "$S" > "$tmp/guest.out" 2>&1 &
    gpid=$!
else
    "$MOAT" device vsock --socket "$tmp/vhu.sock" --uds "$S" > "$tmp/dev.log" 2>&1 &
    dpid=$!
    i=0; while [ ! -S "$tmp/vhu.sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    timeout "$EXEC_TIMEOUT" "$QEMU" -M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg \
        -m 256 -nographic -no-reboot -device i8042 \
        -object memory-backend-memfd,id=m,size=256M,share=on -machine memory-backend=m \
        -global virtio-mmio.force-legacy=false \
        -chardev socket,id=c,path="$tmp/vhu.sock" -device vhost-user-vsock-device,chardev=c \
        -kernel "$B/guest/bzImage" -initrd "$B/guest/initramfs.cpio" \
        -append "console=ttyS0 reboot=k panic=-1 quiet virtio_mmio.device=512@0xfeb00e00:12 moat.agent=1024" \
        < /dev/null > "$tmp/guest.out" 2>&1 &
    gpid=$!
fi
if ! "$MOAT" exec --vsock "$S" --wait 300 -- true > "$tmp/first.out" 2>&1; then
    echo "bench/exec: the Linux guest's agent did not answer"; cat "$tmp/first.out"; tail -n 20 "$tmp/guest.out"
    exit 1
fi
"$RUNSTAT" "$RUNS" "$MOAT" exec --vsock "$S" -- true > "$tmp/exec.txt"
m=$(med_ok "$tmp/exec.txt" 0)
echo "moat exec -- true ($RUNS runs, $(count_ok "$tmp/exec.txt" 0) ok): median $(awk -v m="${m:-0}" 'BEGIN {printf "%.2f", m / 1000}') ms," \
     "min $(sort -n "$tmp/exec.txt" | awk 'NR == 1 {printf "%.2f", $1 / 1000}') ms"

"$RUNSTAT" 3 "$MOAT" exec --vsock "$S" -- head -c "$((VSOCK_MB * 1048576))" /dev/zero > "$tmp/out.txt"
dd if=/dev/urandom of="$tmp/blob" bs=1048576 count="$VSOCK_MB" 2>/dev/null
"$RUNSTAT" 3 "$MOAT" cp --vsock "$S" "$tmp/blob" :/tmp/blob > "$tmp/cp.txt"
for k in out cp; do
    m=$(med_ok "$tmp/$k.txt" 0)
    case $k in out) what="exec -- head -c ${VSOCK_MB}M /dev/zero (guest->host)";; *) what="cp ${VSOCK_MB} MiB file (host->guest)";; esac
    if [ -n "$m" ]; then
        awk -v m="$m" -v mb="$VSOCK_MB" -v w="$what" 'BEGIN {printf "%-48s median %8.1f ms  %7.1f MiB/s\n", w, m / 1000, mb / (m / 1e6)}'
    else
        echo "$what: failed"; cat "$tmp/$k.txt"
    fi
done
# (timeout: with --tcg, the exec client was seen to stay connected to
# `moat device vsock` after QEMU had gone)
timeout 20 "$MOAT" exec --vsock "$S" -- /sbin/reboot -f > /dev/null 2>&1
i=0; while kill -0 "$gpid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null; gpid=
if [ -n "$dpid" ]; then kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=; fi
