#!/usr/bin/env bash
# Linux guest tests: the default kernel through build/moat, chosen by the
# host probe (scripts/host-kind.sh; docs/testing.md#3-linux-tests):
#  - kvm (hardware KVM): command output, exit status, 2 vCPUs, initrd,
#    timings, and the kernel device checks below;
#  - pvm: Linux never reaches user space there, so the user-space tests are
#    SKIPPED (the nested suite runs them: make test-nested) and the kernel
#    device checks run: with a virtio-blk root disk and a virtio-vsock
#    device, Linux's own drivers must probe moat's devices (the disk with
#    its capacity), mount the ext4 root from /dev/vda and get as far as
#    running /init;
#  - none (no usable KVM): all of those SKIPPED, loudly.
# Always: the same guest under QEMU TCG (tests/linux/qemu-smoke.sh), which
# exercises the kernel config, /init and the initramfs without KVM, and its
# network set-up and HTTP client there (tests/linux/qemu-net.sh: QEMU's
# user-mode network, traffic only to the host's loopback).
set -u
cd "$(dirname "$0")/../.."
MOAT=${MOAT_BIN:-build/moat}
pass=0; fail=0; skip=0
ok()   { echo "PASS: linux: $1"; pass=$((pass + 1)); }
bad()  { echo "FAIL: linux: $1"; fail=$((fail + 1)); }
skp()  { echo "SKIPPED: linux: $1"; skip=$((skip + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moat-linux.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
out=$tmp/out

HW_TESTS="echo-output exit-status two-vcpus initrd timings"
DEV_TESTS="kernel-blk-probe kernel-root-on-vda kernel-vsock-probe"
kind=$(MOAT_BIN=$MOAT scripts/host-kind.sh) || { bad "host probe failed (is $MOAT built?)"; kind=none; }
reason=$(MOAT_BIN=$MOAT scripts/host-kind.sh --reason 2>/dev/null)
echo "linux: host kind $kind ($reason)"

# Line number of the first line matching ERE $1 in $out (0: none).
line_of() { local n; n=$(grep -n -m1 -E -- "$1" "$out" | cut -d: -f1); echo "${n:-0}"; }

# The kernel device checks: moat's virtio-blk as the root disk and its
# virtio-vsock, through Linux's virtio_blk and virtio_vsock drivers. The
# uncompressed vmlinux, no initramfs (the root is the disk) and 64 MiB keep
# the boot short where ring-0 code is emulated (PVM). moat -v logs
# "<dev>: driver ready" when the driver sets DRIVER_OK, i.e. after its probe.
kernel_devices() {
    local root=$tmp/root img=$tmp/root.img blocks rc t0 secs
    local mke2fs top=$PWD
    mke2fs=$(PATH=/sbin:/usr/sbin:$PATH command -v mke2fs) || { for t in $DEV_TESTS; do skp "$t: mke2fs missing"; done; return; }
    if [ ! -f build/guest/vmlinux ] || [ ! -f build/guest/initramfs.cpio ]; then
        for t in $DEV_TESTS; do skp "$t: build/guest not built (make guest)"; done; return
    fi
    mkdir -p "$root"
    # Its device nodes need root to make; the kernel's devtmpfs has them anyway.
    (cd "$root" && cpio -idm --quiet < "$top/build/guest/initramfs.cpio" 2>/dev/null)
    [ -x "$root/init" ] || { bad "kernel devices: unpacking the initramfs failed"; return; }
    "$mke2fs" -q -F -t ext4 -d "$root" "$img" 24M >/dev/null || { bad "kernel devices: mke2fs failed"; return; }
    blocks=$(( $(stat -c %s "$img") / 512 ))
    t0=$(date +%s)
    timeout 400 "$MOAT" run -v --timeout 360 --mem 64 --kernel build/guest/vmlinux \
        --drive "$img" --vsock "$tmp/v.sock" \
        --cmdline "console=ttyS0 reboot=k panic=-1 8250.nr_uarts=1 root=/dev/vda rw init=/init" \
        -- /bin/true >"$out" 2>&1
    rc=$?; secs=$(( $(date +%s) - t0 ))
    echo "linux: kernel device boot: moat exit $rc after ${secs}s"
    local lblk lvfs linit lvs linit_raw
    # moat's own log lines (stderr) land between the console's (stdout) as
    # they come, even inside a console line the writer thread had not
    # finished ("...logical blomoat: virtio-blk@0: driver ready...\ncks"):
    # the kernel's lines are looked for with moat's lines taken out, the
    # order of moat's vsock line and /init in the file as it is.
    local raw=$out
    sed -z -E 's/moat: [^\n]*\n//g' "$raw" > "$tmp/out.kernel"
    out=$tmp/out.kernel
    lblk=$(line_of "virtio_blk virtio[0-9]+: \[vda\] $blocks 512-byte logical blocks")
    lvfs=$(line_of "VFS: Mounted root \(ext4 filesystem\)")
    linit=$(line_of "Run /init as init process")
    out=$raw
    linit_raw=$(line_of "Run /init as init process")
    lvs=$(line_of "virtio-vsock@[0-9]+: driver ready: .*3 of 3 queues set up")
    if [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ "$linit" = 0 ]; then
        bad "kernel devices: the kernel did not reach /init (moat exit $rc)"; tail -30 "$out"
    fi
    if [ "$lblk" -gt 0 ] && { [ "$linit" = 0 ] || [ "$lblk" -lt "$linit" ]; }; then
        ok "kernel-blk-probe: virtio_blk probed moat's disk as vda with $blocks sectors"
    else
        bad "kernel-blk-probe: no 'virtio_blk ... [vda] $blocks 512-byte logical blocks' before /init"
        grep -E "virtio|vda" "$out" | head -10
    fi
    if [ "$lvfs" -gt "$lblk" ] && [ "$lblk" -gt 0 ] && [ "$linit" -gt "$lvfs" ]; then
        ok "kernel-root-on-vda: 'VFS: Mounted root (ext4 filesystem)' from moat's disk, then /init"
    else
        bad "kernel-root-on-vda: ext4 root not mounted from /dev/vda before /init (lines blk=$lblk vfs=$lvfs init=$linit)"
        grep -E "VFS|EXT4|vda|Kernel panic" "$out" | head -10
    fi
    if [ "$lvs" -gt 0 ] && [ "$linit_raw" -gt "$lvs" ]; then
        ok "kernel-vsock-probe: virtio_vsock probed moat's vsock device ($(sed -n "${lvs}p" "$out" | sed 's/^moat: //'))"
    else
        bad "kernel-vsock-probe: no 'driver ready ... 3 of 3 queues set up' from moat's vsock device before /init"
        grep -E "vsock|VSOCK" "$out" | head -10
    fi
}

# Ctrl+Alt+Del into Linux (docs/devices.md, "i8042"): moat vmm's
# SendCtrlAltDel once the kernel has registered its keyboard, then the
# kernel's own restart (reboot=k: 0xFE) ends moat vmm with 0. Needs a kernel
# with CONFIG_VT, CONFIG_INPUT_KEYBOARD, CONFIG_KEYBOARD_ATKBD and
# CONFIG_SERIO_I8042 in MOAT_CAD_KERNEL: the default guest has none of them
# (docs/guest.md). Runs before user space, so PVM hosts run it too.
kernel_cad() {
    local k=${MOAT_CAD_KERNEL:-} sock=$tmp/cad.sock pid i code t0 rc
    if [ -z "$k" ] || [ ! -r "$k" ]; then
        skp "kernel-ctrl-alt-del: MOAT_CAD_KERNEL (a bzImage with the VT, atkbd and i8042 drivers) not set"; return
    fi
    command -v curl >/dev/null || { skp "kernel-ctrl-alt-del: curl missing"; return; }
    put() { curl -s --max-time 20 --unix-socket "$sock" -X PUT -H 'Content-Type: application/json' \
                -d "$2" -o /dev/null -w '%{http_code}' "http://localhost$1"; }
    # the console's input stays open and silent: /init's shell waits on it
    mkfifo "$tmp/cad.in" && exec 9<>"$tmp/cad.in"
    "$MOAT" vmm --api-sock "$sock" <"$tmp/cad.in" >"$out" 2>&1 & pid=$!
    exec 9>&-
    for i in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -r build/guest/initramfs.cpio ] || { skp "kernel-ctrl-alt-del: build/guest/initramfs.cpio not built (make guest)"; return; }
    # moat's /init and its shell (hardware KVM runs user space; on PVM /init
    # cannot run and the kernel panics some seconds after the keyboard)
    code=$(put /boot-source "{\"kernel_image_path\":\"$(realpath "$k")\",\"initrd_path\":\"$PWD/build/guest/initramfs.cpio\",\"boot_args\":\"console=ttyS0 reboot=k panic=-1 8250.nr_uarts=1 loglevel=7\"}")
    [ "$(put /actions '{"action_type":"InstanceStart"}')" = 204 ] || { bad "kernel-ctrl-alt-del: InstanceStart (boot-source $code)"; kill -9 $pid; return; }
    t0=$(date +%s)
    i=0; while ! grep -aq "input: AT .* keyboard" "$out" && kill -0 $pid 2>/dev/null && [ $i -lt 4000 ]; do sleep 0.1; i=$((i + 1)); done
    if ! grep -aq "input: AT .* keyboard" "$out"; then
        bad "kernel-ctrl-alt-del: no 'input: AT ... keyboard' from the kernel"; kill -9 $pid 2>/dev/null; grep -a "i8042\|serio\|atkbd" "$out" | head; return
    fi
    code=$(put /actions '{"action_type":"SendCtrlAltDel"}')
    i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
    kill -0 $pid 2>/dev/null && { kill -9 $pid; bad "kernel-ctrl-alt-del: moat vmm still runs 120 s after SendCtrlAltDel ($code)"; return; }
    wait $pid; rc=$?
    if [ "$code" = 204 ] && [ $rc = 0 ] && grep -aq "reboot: Restarting system" "$out" && ! grep -aq "Kernel panic" "$out"; then
        ok "kernel-ctrl-alt-del: i8042 and atkbd registered, SendCtrlAltDel restarted the kernel, moat vmm exit 0 ($(( $(date +%s) - t0 )) s)"
    else
        bad "kernel-ctrl-alt-del: SendCtrlAltDel $code, moat vmm exit $rc"; grep -a "i8042\|atkbd\|reboot\|panic" "$out" | head
    fi
}

case "$kind" in
none)
    for t in $HW_TESTS $DEV_TESTS kernel-ctrl-alt-del; do skp "$t: no usable KVM on this host ($reason)"; done ;;
pvm)
    for t in $HW_TESTS; do
        skp "$t: KVM here is PVM, where Linux never reaches user space (the nested suite runs it: make test-nested)"
    done
    kernel_devices; kernel_cad ;;
kvm)
    timeout 60 "$MOAT" run --timeout 30 -- /bin/echo hello-from-moat >"$out" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q hello-from-moat "$out"; then ok "echo-output"; else bad "echo-output (rc=$rc)"; tail -20 "$out"; fi
    timeout 60 "$MOAT" run --timeout 30 -- /bin/sh -c 'exit 7' >"$out" 2>&1; rc=$?
    if [ $rc -eq 7 ]; then ok "exit-status"; else bad "exit-status: want 7, got $rc"; tail -20 "$out"; fi
    timeout 60 "$MOAT" run --timeout 30 --cpus 2 -- /bin/sh -c 'echo cpus=$(nproc)' >"$out" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "cpus=2" "$out"; then ok "two-vcpus"; else bad "two-vcpus (rc=$rc)"; tail -20 "$out"; fi
    timeout 60 "$MOAT" run --timeout 30 -- /bin/sh -c 'test -x /init && test -x /bin/busybox && echo initrd-ok' >"$out" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q initrd-ok "$out"; then ok "initrd"; else bad "initrd (rc=$rc)"; tail -20 "$out"; fi
    timeout 60 "$MOAT" run --timeout 30 --timings -- /bin/true >/dev/null 2>"$out"; rc=$?
    if [ $rc -eq 0 ] && grep -q '"init_reached"' "$out" && grep -q '"cmd_finished"' "$out"; then ok "timings: $(grep -o '{.*}' "$out")"
    else bad "timings (rc=$rc)"; cat "$out"; fi
    kernel_devices; kernel_cad ;;
*)
    bad "unknown host kind '$kind'" ;;
esac

# The same guest under QEMU TCG: kernel config, /init, busybox, exit path.
if [ -x tests/linux/qemu-smoke.sh ] && command -v qemu-system-x86_64 >/dev/null; then
    if tests/linux/qemu-smoke.sh >"$out" 2>&1; then ok "qemu-tcg-smoke"; else bad "qemu-tcg-smoke"; tail -30 "$out"; fi
else
    skp "qemu-tcg-smoke: qemu-system-x86_64 or tests/linux/qemu-smoke.sh missing"
fi
# The guest's network under QEMU TCG: /init's moat.net= modes, DHCP,
# moat-fetch and wget against a server on the loopback. Its own PASS lines
# are shown indented (one count for the lot); each SKIPPED line counts.
if [ -x tests/linux/qemu-net.sh ]; then
    tests/linux/qemu-net.sh >"$out" 2>&1; rc=$?
    grep -E '^(PASS|FAIL): ' "$out" | sed 's/^/    /'
    grep '^SKIPPED: ' "$out" > "$tmp/net-skips"
    while IFS= read -r l; do skp "qemu-tcg-net: ${l#SKIPPED: qemu-net: }"; done < "$tmp/net-skips"
    if [ $rc -ne 0 ]; then bad "qemu-tcg-net"; grep -v -E '^(PASS|FAIL|SKIPPED): ' "$out" | tail -40
    elif grep -q '^PASS: ' "$out"; then ok "qemu-tcg-net"; fi
else
    skp "qemu-tcg-net: tests/linux/qemu-net.sh missing"
fi
echo "linux: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
