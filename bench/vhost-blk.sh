#!/bin/sh
# Benchmark: the same Linux guest under QEMU TCG reading/writing one raw
# image through (a) moat's virtio-blk over vhost-user (`moat device blk`)
# and (b) QEMU's own virtio-blk (aio=io_uring, cache=none). Results and the
# exact command: docs/BENCHMARKS.md.
#
#   bench/vhost-blk.sh            (after `make all guest`)
#
# The guest has only busybox, so the workloads are dd with O_DIRECT:
#   seq-read   1 MiB blocks, 192 MiB, iflag=direct
#   seq-write  1 MiB blocks, 64 MiB, oflag=direct
#   4k-read    4 KiB blocks, 16 MiB, iflag=direct: one request in flight
#              (QD1), sequential offsets (busybox has no random-offset tool)
# Each is timed in the guest from /proc/uptime (10 ms resolution; busybox
# date has no %N) and repeated 3 times; the median is reported. Under TCG the guest CPU
# dominates, so this compares the two backends' request paths, not disks.
# Env: B, QEMU, MOAT, IMG_MB (default 256).
set -u
B=${B:-build}
QEMU=${QEMU:-qemu-system-x86_64}
IMG_MB=${IMG_MB:-256}
MOAT=${MOAT:-$B/moat}
if ! command -v "$QEMU" >/dev/null 2>&1; then
    echo "SKIPPED: vhost-blk bench: $QEMU not installed"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/moat-vbench.XXXXXX")
dpid=
trap '[ -n "$dpid" ] && kill $dpid 2>/dev/null; rm -rf "$tmp"' EXIT
dd if=/dev/urandom of="$tmp/disk.img" bs=1M count="$IMG_MB" status=none

GCMD='for i in 1 2 3; do \
t0=$(read u x < /proc/uptime; echo $u); dd if=/dev/vda of=/dev/null bs=1M count=192 iflag=direct 2>/dev/null; t1=$(read u x < /proc/uptime; echo $u); echo R-SEQ $t0 $t1; \
t0=$(read u x < /proc/uptime; echo $u); dd if=/dev/zero of=/dev/vda bs=1M count=64 seek=128 oflag=direct 2>/dev/null; t1=$(read u x < /proc/uptime; echo $u); echo W-SEQ $t0 $t1; \
t0=$(read u x < /proc/uptime; echo $u); dd if=/dev/vda of=/dev/null bs=4k count=4096 skip=8192 iflag=direct 2>/dev/null; t1=$(read u x < /proc/uptime; echo $u); echo R-4K $t0 $t1; \
done'

qemu_common="-M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg -m 256 -nographic -no-reboot -device i8042 \
 -object memory-backend-memfd,id=m,size=256M,share=on -machine memory-backend=m \
 -global virtio-mmio.force-legacy=false -kernel $B/guest/bzImage -initrd $B/guest/initramfs.cpio"
append="console=ttyS0 reboot=k panic=-1 quiet virtio_mmio.device=512@0xfeb00e00:12 -- /bin/sh -c \"$GCMD\""

run() {     # NAME EXTRA_QEMU_ARGS
    # shellcheck disable=SC2086
    timeout 600 "$QEMU" $qemu_common $2 -append "$append" < /dev/null 2>&1 | tr -d '\r' > "$tmp/$1.out"
}

med() {     # NAME KEY -> median microseconds
    sed -n "s/^$2 //p" "$tmp/$1.out" | awk '$1 ~ /^[0-9.]+$/ && $2 ~ /^[0-9.]+$/ {printf "%d\n", ($2 - $1) * 1000000}' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'
}

report() {  # NAME
    rs=$(med "$1" R-SEQ); ws=$(med "$1" W-SEQ); r4=$(med "$1" R-4K)
    if [ -z "$rs" ] || [ -z "$ws" ] || [ -z "$r4" ]; then
        echo "$1: no results (see output below)"; tail -n 20 "$tmp/$1.out"; return
    fi
    awk -v n="$1" -v rs="$rs" -v ws="$ws" -v r4="$r4" 'BEGIN {
        printf "%-22s seq read %7.1f MiB/s   seq write %7.1f MiB/s   4k QD1 read %6.0f IOPS (%5.0f us/req)\n",
            n, 192 / (rs / 1e6), 64 / (ws / 1e6), 4096 / (r4 / 1e6), r4 / 4096 }'
}

rm -f "$tmp/sock"
"$MOAT" device blk --socket "$tmp/sock" --disk "$tmp/disk.img" > "$tmp/dev.log" 2>&1 &
dpid=$!
i=0; while [ ! -S "$tmp/sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
run moat-vhost-user "-chardev socket,id=c,path=$tmp/sock -device vhost-user-blk,chardev=c,num-queues=1"
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=

run qemu-virtio-blk "-drive file=$tmp/disk.img,format=raw,if=none,id=d,aio=io_uring,cache=none -device virtio-blk-device,drive=d"

echo "vhost-blk bench: QEMU TCG guest, $IMG_MB MiB raw image, medians of 3 in-guest runs"
report moat-vhost-user
report qemu-virtio-blk
