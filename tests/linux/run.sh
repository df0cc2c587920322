#!/usr/bin/env bash
# Linux guest tests: the default kernel + initramfs under build/moat.
#  - hardware KVM (vmx/svm): command output, exit status, 2 vCPUs, initrd, timings;
#  - PVM: those are SKIPPED (Linux cannot reach user space there) and the
#    kernel smoke test runs instead: the kernel must reach "Run /init";
#  - no /dev/kvm: all SKIPPED, loudly.
# Always: the same guest under QEMU TCG (tests/linux/qemu-smoke.sh), which
# exercises the kernel config, /init and the initramfs without KVM.
set -u
cd "$(dirname "$0")/../.."
MOAT=${MOAT_BIN:-build/moat}
pass=0; fail=0; skip=0
ok()   { echo "PASS: linux: $1"; pass=$((pass + 1)); }
bad()  { echo "FAIL: linux: $1"; fail=$((fail + 1)); }
skp()  { echo "SKIPPED: linux: $1"; skip=$((skip + 1)); }
out=$(mktemp); trap 'rm -f "$out"' EXIT

HW_TESTS="echo-output exit-status two-vcpus initrd timings"
kvm_state() {
    if [ ! -e /dev/kvm ]; then echo none; return; fi
    if ! [ -r /dev/kvm ] || ! [ -w /dev/kvm ]; then echo none; return; fi
    if [ -d /sys/module/kvm_pvm ] || ! grep -qwE 'vmx|svm' /proc/cpuinfo; then echo pvm; return; fi
    echo hw
}
state=$(kvm_state)
case "$state" in
none)
    for t in $HW_TESTS pvm-kernel-smoke; do skp "$t: /dev/kvm not available on this host"; done ;;
pvm)
    for t in $HW_TESTS; do skp "$t: KVM here is PVM, where Linux cannot reach user space (needs hardware KVM)"; done
    # Smoke: the kernel's own boot, through moat, up to running /init.
    timeout 300 "$MOAT" run --timeout 150 --cmdline "console=ttyS0 reboot=k panic=-1 8250.nr_uarts=1" \
        -- /bin/true >"$out" 2>&1
    if grep -q "Run /init as init process" "$out"; then ok "pvm-kernel-smoke: reached 'Run /init as init process'"
    else bad "pvm-kernel-smoke: kernel did not reach /init"; tail -20 "$out"; fi ;;
hw)
    skp "pvm-kernel-smoke: hardware KVM host (runs on PVM hosts)"
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
    else bad "timings (rc=$rc)"; cat "$out"; fi ;;
esac

# The same guest under QEMU TCG: kernel config, /init, busybox, exit path.
if [ -x tests/linux/qemu-smoke.sh ] && command -v qemu-system-x86_64 >/dev/null; then
    if tests/linux/qemu-smoke.sh >"$out" 2>&1; then ok "qemu-tcg-smoke"; else bad "qemu-tcg-smoke"; tail -30 "$out"; fi
else
    skp "qemu-tcg-smoke: qemu-system-x86_64 or tests/linux/qemu-smoke.sh missing"
fi
echo "linux: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
