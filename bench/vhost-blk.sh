#!/bin/sh
# Benchmark: the same Linux guest under QEMU TCG reading/writing one raw
# image through (a) moat's virtio-blk over vhost-user (`moat device blk`,
# buffered, and with --direct when this moat has it) and (b) QEMU's own
# virtio-blk (aio=io_uring, cache=none). Results and the exact command:
# docs/BENCHMARKS.md.
#
#   bench/vhost-blk.sh            (after `make all guest bench-tools`)
#
# The workload is bench/guest/blkbench.c (static, appended to the guest's
# initramfs as a second cpio), all O_DIRECT on /dev/vda in the guest:
#   R4K-QD1    4 KiB random reads, one in flight, for BENCH_SECS   -> IOPS
#   R4K-QD32   4 KiB random reads, 32 in flight (Linux AIO)         -> IOPS
#   SEQ-READ   1 MiB reads, 128 MiB                                 -> MiB/s
#   SEQ-WRITE  1 MiB writes, 64 MiB at 128 MiB, then fdatasync      -> MiB/s
# timed in the guest with CLOCK_MONOTONIC. ROUNDS rounds; each round boots
# the guest once per backend (backends interleaved, so that load from other
# work on the host spreads over all of them) and runs blkbench once. The
# median over the rounds is reported with moat/QEMU for each figure, then the
# min..max spread. Under TCG the guest CPU dominates, so this compares the
# backends' request paths, not disks.
# Env: B, QEMU, MOAT, IMG_MB (default 256), BENCH_SECS (default 3),
#      ROUNDS (default 5), BENCH_DIRECT (auto|0|1: also run moat --direct).
set -u
B=${B:-build}
QEMU=${QEMU:-qemu-system-x86_64}
IMG_MB=${IMG_MB:-256}
MOAT=${MOAT:-$B/moat}
SECS=${BENCH_SECS:-3}
DIRECT=${BENCH_DIRECT:-auto}
ROUNDS=${ROUNDS:-5}
if ! command -v "$QEMU" >/dev/null 2>&1; then
    echo "SKIPPED: vhost-blk bench: $QEMU not installed"
    exit 0
fi
for f in "$MOAT" "$B/guest/bzImage" "$B/guest/initramfs.cpio" "$B/bench/blkbench.cpio"; do
    if [ ! -e "$f" ]; then
        echo "vhost-blk bench: $f missing (make all guest bench-tools)" >&2
        exit 1
    fi
done
if [ "$DIRECT" = auto ]; then
    if "$MOAT" device --help 2>&1 | grep -q -- '--direct'; then DIRECT=1; else DIRECT=0; fi
fi
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/moat-vbench.XXXXXX")
dpid=
trap '[ -n "$dpid" ] && kill $dpid 2>/dev/null; rm -rf "$tmp"' EXIT
dd if=/dev/urandom of="$tmp/disk.img" bs=1M count="$IMG_MB" status=none
cat "$B/guest/initramfs.cpio" "$B/bench/blkbench.cpio" > "$tmp/initrd"

GCMD="/blkbench -t $SECS -s 128 -o 128 -w 64 /dev/vda"

qemu_common="-M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg -m 256 -nographic -no-reboot -device i8042 \
 -object memory-backend-memfd,id=m,size=256M,share=on -machine memory-backend=m \
 -global virtio-mmio.force-legacy=false -kernel $B/guest/bzImage -initrd $tmp/initrd"
append="console=ttyS0 reboot=k panic=-1 quiet virtio_mmio.device=512@0xfeb00e00:12 -- /bin/sh -c \"$GCMD\""

run() {     # NAME EXTRA_QEMU_ARGS
    # shellcheck disable=SC2086
    timeout 900 "$QEMU" $qemu_common $2 -append "$append" < /dev/null 2>&1 | tr -d '\r' >> "$tmp/$1.out"
}

med() {     # NAME KEY -> median
    sed -n "s/^$2 //p" "$tmp/$1.out" | awk '$1 ~ /^[0-9.]+$/' | sort -g |
        awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'
}

KEYS="R4K-QD1 R4K-QD32 SEQ-READ SEQ-WRITE"
report() {  # NAME
    line=$(printf '%-28s' "$1")
    for k in $KEYS; do
        v=$(med "$1" "$k")
        if [ -z "$v" ]; then
            echo "$1: no $k result (guest output below)"; tail -n 20 "$tmp/$1.out"; return
        fi
        eval "V_$(echo "$1_$k" | tr -c 'A-Za-z0-9\n' '_')=$v"
        line="$line $(printf '%12s' "$v")"
    done
    echo "$line"
}
val() { eval "echo \${V_$(echo "$1_$2" | tr -c 'A-Za-z0-9\n' '_'):-}"; }

moat_run() {    # NAME EXTRA_DEVICE_ARGS
    rm -f "$tmp/sock"
    # shellcheck disable=SC2086
    "$MOAT" device blk --socket "$tmp/sock" --disk "$tmp/disk.img" $2 > "$tmp/$1.dev.log" 2>&1 &
    dpid=$!
    i=0; while [ ! -S "$tmp/sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    run "$1" "-chardev socket,id=c,path=$tmp/sock -device vhost-user-blk,chardev=c,num-queues=1"
    kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=
}

names="moat-vhost-user"
[ "$DIRECT" = 1 ] && names="$names moat-vhost-user-direct"
r=0
while [ $r -lt "$ROUNDS" ]; do
    moat_run moat-vhost-user ""
    [ "$DIRECT" = 1 ] && moat_run moat-vhost-user-direct "--direct"
    run qemu-virtio-blk "-drive file=$tmp/disk.img,format=raw,if=none,id=d,aio=io_uring,cache=none -device virtio-blk-device,drive=d"
    r=$((r + 1))
done

echo "vhost-blk bench: QEMU TCG guest, $IMG_MB MiB raw image, blkbench (O_DIRECT in the guest), medians of $ROUNDS rounds"
printf '%-28s %12s %12s %12s %12s\n' backend "4K QD1 IOPS" "4K QD32 IOPS" "rd MiB/s" "wr MiB/s"
for n in $names qemu-virtio-blk; do report "$n"; done
for n in $names; do
    line=$(printf '%-28s' "$n/QEMU")
    for k in $KEYS; do
        a=$(val "$n" "$k"); q=$(val qemu-virtio-blk "$k")
        line="$line $(awk -v a="$a" -v q="$q" 'BEGIN { if (a != "" && q > 0) printf "%12.2f", a / q; else printf "%12s", "-" }')"
    done
    echo "$line"
done
echo "spread over the rounds (min..max):"
for n in $names qemu-virtio-blk; do
    line=$(printf '%-28s' "$n")
    for k in $KEYS; do
        line="$line $(sed -n "s/^$k //p" "$tmp/$n.out" | sort -g | awk 'NR == 1 {a = $1} {b = $1} END {printf "%12s", a ".." b}')"
    done
    echo "$line"
done
