# Shared by tests/vhost/run.sh and tests/vhost/overlay.sh (sourced, POSIX
# sh): the prerequisites, PASS/FAIL bookkeeping, `moat device blk` in the
# background, and the default guest booted under QEMU TCG (microvm, memfd
# RAM, modern virtio-mmio) with vhost-user-blk on $tmp/sock. The sourcing
# script sets LABEL (the PASS/FAIL/SKIPPED prefix) first.
# Env: B (build dir), QEMU (binary), TIMEOUT (seconds per boot, default 180),
#      MOAT (the moat binary, default $B/moat).
B=${B:-build}
QEMU=${QEMU:-qemu-system-x86_64}
TIMEOUT=${TIMEOUT:-180}
MOAT=${MOAT:-$B/moat}
BZ=$B/guest/bzImage
INITRD=$B/guest/initramfs.cpio
passed=0
failed=0
PATH=$PATH:/sbin:/usr/sbin

if ! command -v "$QEMU" >/dev/null 2>&1; then
    echo "SKIPPED: $LABEL: $QEMU not installed"
    echo "0 passed, 0 failed"
    exit 0
fi
for tool in mke2fs debugfs md5sum; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIPPED: $LABEL: $tool not installed (e2fsprogs)"
        echo "0 passed, 0 failed"
        exit 0
    fi
done
for f in "$BZ" "$INITRD" "$MOAT"; do
    if [ ! -f "$f" ]; then
        echo "FAIL: $LABEL: $f missing (run make all guest)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

tmp=$(mktemp -d)
dpid=
qpid=
cleanup() {
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
    [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

pass() { echo "PASS: $LABEL: $1"; passed=$((passed + 1)); }
# fail MSG [NAME]: with NAME, the tail of that boot's guest output and
# device log too.
fail() {
    echo "FAIL: $LABEL: $1"
    if [ -n "${2:-}" ] && [ -f "$tmp/$2.out" ]; then
        echo "---- last guest output ----"
        grep -v '^\[ *[0-9]' "$tmp/$2.out" | tail -n 15
        echo "---- moat device log ----"
        tail -n 10 "$tmp/$2.dev"
        echo "-------------------------"
    fi
    failed=$((failed + 1))
}

# start_dev NAME ARGS...: `moat device blk --socket $tmp/sock ARGS -v` in
# the background (log in $tmp/NAME.dev, pid in $dpid), once its socket is up.
start_dev() {
    name=$1
    shift
    rm -f "$tmp/sock"
    "$MOAT" device blk --socket "$tmp/sock" "$@" -v > "$tmp/$name.dev" 2>&1 &
    dpid=$!
    i=0
    while [ ! -S "$tmp/sock" ] && [ $i -lt 50 ]; do
        sleep 0.1
        i=$((i + 1))
    done
}

# end_dev: SIGTERM the server; its exit status in $drc.
end_dev() {
    kill "$dpid" 2>/dev/null
    wait "$dpid"
    drc=$?
    dpid=
}

# qemu_blk [--bg] ARGS...: QEMU with the default guest and vhost-user-blk
# on $tmp/sock, ARGS (the -append) added, under `timeout $TIMEOUT`. --bg:
# in the background, $qpid the timeout process itself (so that killing it
# stops QEMU).
qemu_blk() {
    bg=0
    if [ "$1" = --bg ]; then
        bg=1
        shift
    fi
    set -- "$QEMU" -M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg \
        -m 256 -nographic -no-reboot -device i8042 \
        -object memory-backend-memfd,id=m,size=256M,share=on -machine memory-backend=m \
        -global virtio-mmio.force-legacy=false \
        -chardev socket,id=c,path="$tmp/sock" -device vhost-user-blk,chardev=c,num-queues=1 \
        -kernel "$BZ" -initrd "$INITRD" "$@"
    if [ $bg = 1 ]; then
        timeout "$TIMEOUT" "$@" &
        qpid=$!
    else
        timeout "$TIMEOUT" "$@"
    fi
}

# The kernel command line running COMMAND as /init's command.
guest_cmdline() {
    echo "console=ttyS0 reboot=k panic=-1 virtio_mmio.device=512@0xfeb00e00:12 -- /bin/sh -c \"$1\""
}

# boot NAME COMMAND (foreground): output (CR stripped) in $tmp/NAME.out,
# QEMU's exit code in $rc.
boot() {
    qemu_blk -append "$(guest_cmdline "$2")" < /dev/null > "$tmp/$1.raw" 2>&1
    rc=$?
    tr -d '\r' < "$tmp/$1.raw" > "$tmp/$1.out"
}

# value NAME KEY: the rest of the guest's line "KEY value".
value() { sed -n "s/^$2 //p" "$tmp/$1.out" | tail -n 1; }
md5() { md5sum < "$1" | cut -d' ' -f1; }
