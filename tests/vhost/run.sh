#!/bin/sh
# End-to-end test of `moat device blk` (moat's virtio-blk over vhost-user)
# driven by Linux's real virtio_blk driver: the default guest
# (build/guest/{bzImage,initramfs.cpio}) boots under QEMU TCG on microvm with
# -device vhost-user-blk connected to moat's socket.
#
#   tests/vhost/run.sh            (after `make all guest`)
#
# Cases (each prints PASS or FAIL; a final "N passed, N failed" line; exit
# status 1 if any failed; SKIPPED and exit 0 if QEMU is not installed):
#   rw        the guest runs mke2fs on /dev/vda, mounts it, writes 4 MiB of
#             random data, prints its md5, syncs and unmounts; on the host the
#             file is read out of the image with debugfs and its md5 must match
#   ro-read   with --ro the guest sees a read-only disk (/sys/block/vda/ro),
#             mounts a host-made ext4 image and reads a file whose md5 matches
#   ro-write  with --ro, direct and buffered writes to /dev/vda fail in the
#             guest (after a `blockdev --setrw` attempt) and the image is
#             byte-for-byte unchanged. Linux 6.1 keeps a disk the device
#             declared read-only (VIRTIO_BLK_F_RO) read-only whatever BLKROSET
#             says, so the device's own refusal of OUT requests on a read-only
#             disk cannot be reached from this guest; it is covered by the
#             virtio-blk request unit tests, and the image is opened O_RDONLY.
#   restart   the server keeps running after the frontend goes away and
#             exits 0 on SIGTERM (checked after each boot)
#
# QEMU notes: microvm with acpi=off (with ACPI on, the kernel - which has no
# ACPI - does not find the device) and auto-kernel-cmdline=off, so we write
# virtio_mmio.device= ourselves before " -- " (microvm would append it after
# the command, where /init would get it). A single device sits at
# 512@0xfeb00e00:12. Modern virtio-mmio (force-legacy=false) is required by
# vhost-user-blk, and guest RAM must be a shared memfd for the backend to map.
# Env: B (build dir), QEMU (binary), TIMEOUT (seconds per boot, default 180),
#      MOAT (the moat binary, default $B/moat).
set -u
B=${B:-build}
QEMU=${QEMU:-qemu-system-x86_64}
TIMEOUT=${TIMEOUT:-180}
MOAT=${MOAT:-$B/moat}
BZ=$B/guest/bzImage
INITRD=$B/guest/initramfs.cpio
passed=0
failed=0

if ! command -v "$QEMU" >/dev/null 2>&1; then
    echo "SKIPPED: vhost: $QEMU not installed"
    echo "0 passed, 0 failed"
    exit 0
fi
for tool in mke2fs debugfs md5sum; do
    if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/sbin/$tool" ] && [ ! -x "/usr/sbin/$tool" ]; then
        echo "SKIPPED: vhost: $tool not installed (e2fsprogs)"
        echo "0 passed, 0 failed"
        exit 0
    fi
done
PATH=$PATH:/sbin:/usr/sbin
for f in "$BZ" "$INITRD" "$MOAT"; do
    if [ ! -f "$f" ]; then
        echo "FAIL: vhost: $f missing (run make all guest)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

tmp=$(mktemp -d)
dpid=
cleanup() {
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

pass() { echo "PASS: vhost: $1"; passed=$((passed + 1)); }
fail() {
    echo "FAIL: vhost: $1"
    if [ -n "${2:-}" ] && [ -f "$tmp/$2.out" ]; then
        echo "---- last guest output ----"
        grep -v '^\[ *[0-9]' "$tmp/$2.out" | tail -n 15
        echo "---- moat device log ----"
        tail -n 10 "$tmp/$2.dev"
        echo "-------------------------"
    fi
    failed=$((failed + 1))
}

# start_dev NAME DISK [--ro]: run moat device blk in the background.
start_dev() {
    rm -f "$tmp/sock"
    "$MOAT" device blk --socket "$tmp/sock" --disk "$2" ${3:-} -v > "$tmp/$1.dev" 2>&1 &
    dpid=$!
    i=0
    while [ ! -S "$tmp/sock" ] && [ $i -lt 50 ]; do
        sleep 0.1
        i=$((i + 1))
    done
}

# stop_dev NAME: SIGTERM; the server must exit 0 (it survived the frontend).
stop_dev() {
    kill "$dpid" 2>/dev/null
    wait "$dpid"
    drc=$?
    dpid=
    if [ "$drc" -eq 0 ]; then
        pass "$1: server outlived the frontend, exited 0 on SIGTERM"
    else
        fail "$1: server exited with $drc" "$1"
    fi
}

# boot NAME COMMAND: boot the guest with vhost-user-blk on $tmp/sock; output
# (CR stripped) in $tmp/NAME.out, QEMU's exit code in $rc.
boot() {
    timeout "$TIMEOUT" "$QEMU" -M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg \
        -m 256 -nographic -no-reboot -device i8042 \
        -object memory-backend-memfd,id=m,size=256M,share=on -machine memory-backend=m \
        -global virtio-mmio.force-legacy=false \
        -chardev socket,id=c,path="$tmp/sock" -device vhost-user-blk,chardev=c,num-queues=1 \
        -kernel "$BZ" -initrd "$INITRD" \
        -append "console=ttyS0 reboot=k panic=-1 virtio_mmio.device=512@0xfeb00e00:12 -- /bin/sh -c \"$2\"" \
        < /dev/null > "$tmp/$1.raw" 2>&1
    rc=$?
    tr -d '\r' < "$tmp/$1.raw" > "$tmp/$1.out"
}

# value NAME KEY: the rest of the guest's line "KEY value".
value() { sed -n "s/^$2 //p" "$tmp/$1.out" | tail -n 1; }

# ---- rw: mkfs, mount, write, sync, checksum on the host
truncate -s 64M "$tmp/rw.img"
start_dev rw "$tmp/rw.img"
boot rw "mke2fs -q /dev/vda && mkdir -p /tmp/m && mount -t ext2 /dev/vda /tmp/m && \
dd if=/dev/urandom of=/tmp/m/data bs=64k count=64 2>/dev/null && sync && \
echo SUM \$(md5sum < /tmp/m/data) && umount /tmp/m && echo RW-DONE"
gsum=$(value rw SUM | cut -d' ' -f1)
if [ "$rc" -ne 0 ]; then
    fail "rw: QEMU exited with $rc (124: timeout)" rw
elif ! grep -qx RW-DONE "$tmp/rw.out" || [ -z "$gsum" ]; then
    fail "rw: the guest did not finish mkfs/mount/write/umount" rw
else
    debugfs -R "dump /data $tmp/rw.data" "$tmp/rw.img" > /dev/null 2>&1
    hsum=$(md5sum < "$tmp/rw.data" 2>/dev/null | cut -d' ' -f1)
    if [ "$hsum" = "$gsum" ] && [ "$(stat -c %s "$tmp/rw.data")" -eq 4194304 ]; then
        pass "rw: mkfs + mount + 4 MiB write + sync in the guest; host md5 $hsum matches"
    else
        fail "rw: guest md5 $gsum, host md5 ${hsum:-none}" rw
    fi
fi
stop_dev rw

# ---- ro: a host-made ext4 image served with --ro
mkdir -p "$tmp/root"
head -c 1048576 /dev/urandom > "$tmp/root/file"
want=$(md5sum < "$tmp/root/file" | cut -d' ' -f1)
mke2fs -q -t ext4 -d "$tmp/root" "$tmp/ro.img" 32M > /dev/null 2>&1
before=$(md5sum < "$tmp/ro.img" | cut -d' ' -f1)
start_dev ro "$tmp/ro.img" --ro
boot ro "echo RO \$(cat /sys/block/vda/ro); mkdir -p /tmp/m; mount -o ro /dev/vda /tmp/m && \
echo SUM \$(md5sum < /tmp/m/file); umount /tmp/m; blockdev --setrw /dev/vda; \
dd if=/dev/zero of=/dev/vda bs=4096 count=16 oflag=direct 2>/dev/null && echo WRITE ok || echo WRITE failed; \
dd if=/dev/zero of=/dev/vda bs=4096 seek=100 count=1 conv=fsync 2>/dev/null && echo WRITE2 ok || echo WRITE2 failed; \
echo RO-DONE"
after=$(md5sum < "$tmp/ro.img" | cut -d' ' -f1)
if [ "$rc" -ne 0 ] || ! grep -qx RO-DONE "$tmp/ro.out"; then
    fail "ro-read: QEMU exited with $rc or the guest did not finish" ro
    fail "ro-write: (not reached)"
else
    gsum=$(value ro SUM | cut -d' ' -f1)
    if [ "$(value ro RO)" = 1 ] && [ "$gsum" = "$want" ]; then
        pass "ro-read: guest sees a read-only disk and reads the host's file (md5 $want)"
    else
        fail "ro-read: ro flag '$(value ro RO)', md5 '$gsum' (want 1, $want)" ro
    fi
    if [ "$(value ro WRITE)" = failed ] && [ "$(value ro WRITE2)" = failed ] &&
       [ "$after" = "$before" ]; then
        pass "ro-write: direct and buffered writes fail in the guest, image unchanged"
    else
        fail "ro-write: WRITE $(value ro WRITE), WRITE2 $(value ro WRITE2), image md5 $before -> $after" ro
    fi
fi
stop_dev ro

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
