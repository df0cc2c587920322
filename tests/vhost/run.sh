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
LABEL=vhost
. "$(dirname "$0")/blk-lib.sh"

# stop_dev NAME: the server must exit 0 on SIGTERM (it survived the frontend).
stop_dev() {
    end_dev
    if [ "$drc" -eq 0 ]; then
        pass "$1: server outlived the frontend, exited 0 on SIGTERM"
    else
        fail "$1: server exited with $drc" "$1"
    fi
}

# ---- rw: mkfs, mount, write, sync, checksum on the host
truncate -s 64M "$tmp/rw.img"
start_dev rw --disk "$tmp/rw.img"
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
start_dev ro --disk "$tmp/ro.img" --ro
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
