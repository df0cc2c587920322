#!/bin/sh
# Copy-on-write disks (docs/disk-overlay.md) end to end, without KVM: Linux's
# virtio_blk driver under QEMU TCG writes through `moat device blk --disk
# BASE --overlay OVERLAY` (vhost-user, as tests/vhost/run.sh), and the moat
# disk commands inspect the result on the host.
#
#   tests/vhost/overlay.sh        (after `make all guest`)
#
# Cases (PASS/FAIL lines, a final "N passed, N failed"; exit 1 if any
# failed; SKIPPED and exit 0 without QEMU or e2fsprogs):
#   write      the guest mounts the ext4 base through a new moat-format
#              overlay, reads a base file, writes 4 MiB and syncs; the base's
#              md5 is unchanged; moat disk export of the overlay holds the
#              guest's file (debugfs dump, md5); info counts blocks; diff
#              lists ranges and --files names /data
#   readback   a second boot on the same overlay reads both files back
#   clones     20 moat disk clone copies of the overlay over the 1 GiB
#              (allocated) base take, with the base, under 1.1 GiB plus 21
#              times the overlay's own space (du); diff between clones: none
#   crash      the guest writes numbered records (partial 4 KiB blocks:
#              copy-up), each followed by a flush, and prints ACK N after
#              each; the backend is SIGKILLed mid-loop; every acknowledged
#              record is in the overlay (read through moat disk export) and
#              the rest of each record's block is the base's
# Env: B, QEMU, TIMEOUT, MOAT as tests/vhost/run.sh.
set -u
LABEL=overlay
. "$(dirname "$0")/blk-lib.sh"

stop_dev() {
    end_dev
    [ "$drc" -eq 0 ] || fail "$1: server exited with $drc" "$1"
}

# ---- the base: a 1 GiB ext4 image with /file, every block allocated
mkdir -p "$tmp/root"
head -c 1048576 /dev/urandom > "$tmp/root/file"
fsum=$(md5 "$tmp/root/file")
mke2fs -q -t ext4 -d "$tmp/root" "$tmp/base.img" 1G > /dev/null 2>&1
fallocate -l 1G "$tmp/base.img" 2>/dev/null || true
bsum=$(md5 "$tmp/base.img")
"$MOAT" disk create --no-reflink --base "$tmp/base.img" "$tmp/o.ovl" > /dev/null

# ---- write
start_dev write --disk "$tmp/base.img" --overlay "$tmp/o.ovl"
boot write "mkdir -p /tmp/m && mount -t ext4 /dev/vda /tmp/m && echo FILE \$(md5sum < /tmp/m/file) && \
dd if=/dev/urandom of=/tmp/m/data bs=64k count=64 2>/dev/null && sync && \
echo SUM \$(md5sum < /tmp/m/data) && umount /tmp/m && echo W-DONE"
stop_dev write
gsum=$(value write SUM | cut -d' ' -f1)
gfile=$(value write FILE | cut -d' ' -f1)
if [ "$rc" -ne 0 ] || ! grep -qx W-DONE "$tmp/write.out" || [ -z "$gsum" ]; then
    fail "write: QEMU exited with $rc or the guest did not finish" write
else
    "$MOAT" disk export "$tmp/o.ovl" "$tmp/flat.img"
    debugfs -R "dump /data $tmp/data.out" "$tmp/flat.img" > /dev/null 2>&1
    hsum=$(md5 "$tmp/data.out" 2>/dev/null)
    alloc=$("$MOAT" disk info "$tmp/o.ovl" | sed -n 's/^blocks allocated: \([0-9]*\) .*/\1/p')
    "$MOAT" disk diff "$tmp/o.ovl" > "$tmp/diff.out" 2> "$tmp/diff.err"
    "$MOAT" disk diff --files "$tmp/o.ovl" > "$tmp/files.out" 2>&1
    after=$(md5 "$tmp/base.img")
    if [ "$after" = "$bsum" ] && [ "$gfile" = "$fsum" ] && [ "$hsum" = "$gsum" ] &&
       [ "${alloc:-0}" -ge 1024 ] && [ -s "$tmp/diff.out" ] && grep -q "file: /data" "$tmp/files.out"; then
        pass "write: base md5 unchanged; guest file (md5 $gsum) in the overlay; $alloc blocks; $(cat "$tmp/diff.err"); --files names /data"
    else
        fail "write: base $bsum -> $after, file $gfile (want $fsum), data host '$hsum' guest '$gsum', alloc '$alloc', diff $(wc -l < "$tmp/diff.out") lines, files: $(head -c 300 "$tmp/files.out")" write
    fi
fi

# ---- readback
start_dev readback --disk "$tmp/base.img" --overlay "$tmp/o.ovl"
boot readback "mkdir -p /tmp/m && mount -t ext4 /dev/vda /tmp/m && echo FILE \$(md5sum < /tmp/m/file) && \
echo SUM \$(md5sum < /tmp/m/data) && umount /tmp/m && echo R-DONE"
stop_dev readback
if [ "$rc" -eq 0 ] && grep -qx R-DONE "$tmp/readback.out" && [ -n "$gsum" ] &&
   [ "$(value readback SUM | cut -d' ' -f1)" = "$gsum" ] && [ "$(value readback FILE | cut -d' ' -f1)" = "$fsum" ]; then
    pass "readback: both files read back through the overlay"
else
    fail "readback: rc $rc, data '$(value readback SUM)', file '$(value readback FILE)'" readback
fi

# ---- clones
i=1
while [ $i -le 20 ]; do
    "$MOAT" disk clone "$tmp/o.ovl" "$tmp/c$i.ovl" || break
    i=$((i + 1))
done
own=$(du -k "$tmp/o.ovl" | cut -f1)
total=$(du -ck "$tmp/base.img" "$tmp/o.ovl" "$tmp"/c*.ovl | tail -n 1 | cut -f1)
limit=$((1100 * 1024 + 21 * own))
"$MOAT" disk diff "$tmp/c1.ovl" "$tmp/c20.ovl" > "$tmp/cdiff.out" 2>/dev/null
crc=$?
if [ $i -eq 21 ] && [ "$total" -lt "$limit" ] && [ "$crc" -eq 0 ] && [ ! -s "$tmp/cdiff.out" ] &&
   cmp -s "$tmp/o.ovl" "$tmp/c20.ovl"; then
    pass "clones: base + overlay + 20 clones use ${total} KiB (< 1.1 GiB + 21 x ${own} KiB); clones identical"
else
    fail "clones: $((i - 1)) made, ${total} KiB used (limit ${limit}), diff rc $crc"
fi
rm -f "$tmp"/c*.ovl "$tmp/flat.img"

# ---- crash: SIGKILL the backend in the middle of a write+flush loop
head -c 16777216 /dev/urandom > "$tmp/rbase.img"
rsum=$(md5 "$tmp/rbase.img")
"$MOAT" disk create --no-reflink --base "$tmp/rbase.img" "$tmp/r.ovl" > /dev/null
start_dev crash --disk "$tmp/rbase.img" --overlay "$tmp/r.ovl"
cmd="i=1; while [ \$i -le 1000 ]; do printf REC%06d \$i | dd of=/dev/vda bs=512 seek=\$((i * 8 + 1)) conv=sync,fsync,notrunc oflag=direct 2>/dev/null && echo ACK \$i; i=\$((i + 1)); done; echo C-DONE"
qemu_blk --bg -append "$(guest_cmdline "$cmd")" < /dev/null > "$tmp/crash.raw" 2>&1
n=0
while [ $n -lt 600 ] && ! grep -q "^ACK 40" "$tmp/crash.raw" 2>/dev/null; do sleep 0.2; n=$((n + 1)); done
kill -9 "$dpid" 2>/dev/null
wait "$dpid" 2>/dev/null
dpid=
sleep 0.5
kill "$qpid" 2>/dev/null
wait "$qpid" 2>/dev/null
qpid=
tr -d '\r' < "$tmp/crash.raw" > "$tmp/crash.out"
acked=$(sed -n 's/^ACK \([0-9]*\)$/\1/p' "$tmp/crash.out" | tail -n 1)
acked=${acked:-0}
if [ "$acked" -lt 40 ]; then
    fail "crash: only $acked records acknowledged before the kill" crash
elif ! "$MOAT" disk export "$tmp/r.ovl" "$tmp/rflat.img" 2> "$tmp/crash.exp"; then
    fail "crash: the overlay does not open after the kill: $(cat "$tmp/crash.exp")"
else
    bad=0
    i=1
    while [ $i -le "$acked" ]; do
        got=$(dd if="$tmp/rflat.img" bs=1 skip=$((i * 4096 + 512)) count=9 2>/dev/null)
        if [ "$got" != "$(printf REC%06d $i)" ] ||
           ! cmp -s -n 512 -i $((i * 4096)) "$tmp/rflat.img" "$tmp/rbase.img"; then
            bad=$((bad + 1))
        fi
        i=$((i + 1))
    done
    if [ "$bad" -eq 0 ] && [ "$(md5 "$tmp/rbase.img")" = "$rsum" ]; then
        pass "crash: backend SIGKILLed after $acked acknowledged records; all there, copy-up kept the base bytes, base unchanged"
    else
        fail "crash: $bad of $acked acknowledged records missing or wrong" crash
    fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
