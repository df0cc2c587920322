#!/bin/sh
# Boot the default guest (build/guest/{bzImage,vmlinux,initramfs.cpio}) under
# QEMU TCG on the microvm machine, independently of moat: checks that the
# kernel config, /init and the initramfs work before moat is involved.
#
#   tests/linux/qemu-smoke.sh          (after `make guest`)
#
# Cases (each prints PASS or FAIL; exit status 1 if any failed):
#   bzimage   bzImage boots, runs the command, QEMU exits by itself (reboot)
#   pvh       the same with vmlinux, entered through its PVH note
#   status    exit status reaches port 0x0F40 (isa-debug-exit there: QEMU's
#             exit code is status*2+1), for exit 3, not-found, SIGKILL
#   smp       2 vCPUs come up from the MP table (no ACPI in the guest)
#   shell     no command: interactive /bin/sh on the console, its exit status
#   virtio    virtio-mmio devices from the command line: virtio-blk with an
#             ext4 image (read and write), virtio-net (link present)
#
# microvm is used with acpi=off (moat provides no ACPI tables either; the
# guest kernel has no ACPI anyway) and auto-kernel-cmdline=off so the command
# line is exactly ours; its qboot firmware provides the MP table. microvm has no keyboard
# controller, so `-device i8042` is added: reboot=k resets through it, as
# it does on moat's minimal i8042 (without it, reboot=k falls back to a BIOS
# restart that QEMU does not treat as a reset and the test would hang).
# Env: B (build dir), QEMU (binary), TIMEOUT (seconds per boot, default 120).
set -u
B=${B:-build}
QEMU=${QEMU:-qemu-system-x86_64}
TIMEOUT=${TIMEOUT:-120}
BZ=$B/guest/bzImage
VMLINUX=$B/guest/vmlinux
INITRD=$B/guest/initramfs.cpio
BASE="console=ttyS0 reboot=k panic=-1"

if ! command -v "$QEMU" >/dev/null 2>&1; then
    echo "SKIPPED: qemu-smoke: $QEMU not installed"
    exit 0
fi
for f in "$BZ" "$VMLINUX" "$INITRD"; do
    if [ ! -f "$f" ]; then
        echo "FAIL: qemu-smoke: $f missing (run make guest)"
        exit 1
    fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# boot NAME KERNEL INPUT EXTRA_QEMU_ARGS CMDLINE_TAIL
# INPUT is a file for QEMU's stdin, or "prompt:FILE": FILE is typed once
# the shell prompt shows (bytes sent earlier would be lost, the console
# tty not being open yet). Leaves QEMU's exit code in $rc, its output (CR
# stripped) in $tmp/NAME.out, the wall time in $ms.
boot() {
    name=$1 kernel=$2 input=$3 extra=$4 tail=$5
    : > "$tmp/$name.raw"
    t0=$(now_ms)
    case $input in
    prompt:*)
        rm -f "$tmp/fifo"
        mkfifo "$tmp/fifo"
        qemu_run "$kernel" "$extra" "$tail" < "$tmp/fifo" > "$tmp/$name.raw" 2>&1 &
        qpid=$!
        exec 3> "$tmp/fifo"
        i=0
        while [ $i -lt $((TIMEOUT * 10)) ] && ! grep -qE '(~|/root) # ' "$tmp/$name.raw"; do
            sleep 0.1
            i=$((i + 1))
        done
        cat "${input#prompt:}" >&3
        wait "$qpid"
        rc=$?
        exec 3>&-
        ;;
    *)
        qemu_run "$kernel" "$extra" "$tail" < "$input" > "$tmp/$name.raw" 2>&1
        rc=$?
        ;;
    esac
    ms=$(($(now_ms) - t0))
    tr -d '\r' < "$tmp/$name.raw" > "$tmp/$name.out"
}
qemu_run() {    # KERNEL EXTRA_QEMU_ARGS CMDLINE_TAIL
    # shellcheck disable=SC2086
    timeout "$TIMEOUT" "$QEMU" -M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg \
        -m 256 -nographic -no-reboot -device i8042 $2 \
        -kernel "$1" -initrd "$INITRD" -append "$BASE $3"
}

pass() { echo "PASS: qemu-smoke: $1"; }
fail() {
    echo "FAIL: qemu-smoke: $1"
    echo "---- last lines of output ----"
    tail -n 25 "$tmp/$2.out"
    echo "------------------------------"
    failed=1
}

# A line that is exactly WORD (the kernel echoes the command line, which
# also contains it, but never alone on a line).
has_line() { grep -qx -- "$2" "$tmp/$1.out"; }

check_run() {   # NAME KERNEL
    boot "$1" "$2" /dev/null "" '-- /bin/sh -c "echo hello; exit 3"'
    if [ "$rc" -eq 124 ]; then
        fail "$1: QEMU did not exit within ${TIMEOUT}s (guest did not reboot)" "$1"
    elif [ "$rc" -ne 0 ]; then
        fail "$1: QEMU exited with $rc" "$1"
    elif ! has_line "$1" hello; then
        fail "$1: no 'hello' line in the output" "$1"
    elif grep -q "moat-init:" "$tmp/$1.out"; then
        fail "$1: /init reported an error" "$1"
    else
        pass "$1: ran the command and rebooted in ${ms} ms ($(basename "$2"))"
    fi
}

check_run bzimage "$BZ"
check_run pvh "$VMLINUX"

# status: QEMU's isa-debug-exit on port 0x0F40 (1 byte; 0x0F41 events stay
# unassigned) exits QEMU with (status << 1) | 1 when /init reports.
DBG="-device isa-debug-exit,iobase=0xf40,iosize=1"
for c in "3|exit 3" "127|/no/such/command" "137|kill -9 \$\$" "0|true"; do
    want=${c%%|*}
    cmd=${c#*|}
    case $cmd in
    /no/*) tail="-- $cmd" ;;
    *) tail="-- /bin/sh -c \"$cmd\"" ;;
    esac
    boot status "$BZ" /dev/null "$DBG" "$tail"
    got=$(((want * 2 + 1) & 255))
    if [ "$rc" -ne "$got" ]; then
        fail "status: '$cmd': wanted QEMU exit $got (status $want), got $rc" status
    elif [ "$want" -eq 127 ] && ! grep -q "moat-init: $cmd: command not found" "$tmp/status.out"; then
        fail "status: no 'command not found' message for $cmd" status
    else
        pass "status: '$cmd' reported status $want"
    fi
done

boot smp "$BZ" /dev/null "-smp 2" '-- /bin/cat /sys/devices/system/cpu/online'
if [ "$rc" -eq 0 ] && has_line smp "0-1"; then
    pass "smp: 2 CPUs online (MP table, no ACPI)"
else
    fail "smp: wanted '0-1' online, rc $rc" smp
fi

# shell: no command, so /init starts an interactive /bin/sh; type into it.
printf 'echo $((6 * 7))\nexit 5\n' > "$tmp/shell.in"
boot shell "$BZ" "prompt:$tmp/shell.in" "$DBG" ""
if [ "$rc" -eq 11 ] && has_line shell 42; then
    pass "shell: interactive /bin/sh ran input and reported status 5"
else
    fail "shell: wanted a '42' line and QEMU exit 11 (status 5), got rc $rc" shell
fi

# virtio: QEMU's microvm puts virtio-mmio transports at 0xfeb00000 + 512*n
# with IRQ 5 + n (acpi=off); the last created device gets the lowest slot
# in use, hence 0xe00/12 for the first and 0xc00/11 for the second.
if command -v mke2fs >/dev/null 2>&1; then
    mkdir -p "$tmp/fs"
    echo "from ext4" > "$tmp/fs/hello.txt"
    mke2fs -q -t ext4 -d "$tmp/fs" -F "$tmp/disk.img" 16M
    VIRTIO="-drive id=d0,file=$tmp/disk.img,format=raw,if=none -device virtio-blk-device,drive=d0
            -netdev user,id=n0 -device virtio-net-device,netdev=n0"
    MMIO="virtio_mmio.device=512@0xfeb00e00:12 virtio_mmio.device=512@0xfeb00c00:11"
    boot virtio "$BZ" /dev/null "$VIRTIO" "$MMIO -- /bin/sh -c \"mkdir /mnt && mount -t ext4 /dev/vda /mnt && cat /mnt/hello.txt && echo written > /mnt/new && umount /mnt && ip link show eth0\""
    if [ "$rc" -ne 0 ]; then
        fail "virtio: QEMU exited with $rc" virtio
    elif ! has_line virtio "from ext4"; then
        fail "virtio: could not read the ext4 file over virtio-blk" virtio
    elif ! grep -q "^2: eth0:" "$tmp/virtio.out"; then
        fail "virtio: no eth0 (virtio-net)" virtio
    elif command -v debugfs >/dev/null 2>&1 &&
         [ "$(debugfs -R "cat /new" "$tmp/disk.img" 2>/dev/null)" != written ]; then
        fail "virtio: the file written by the guest is not on the disk image" virtio
    else
        pass "virtio: virtio-blk + ext4 read/write, virtio-net"
    fi
else
    echo "SKIPPED: qemu-smoke: virtio: mke2fs not installed"
fi

exit "$failed"
