#!/bin/bash
# tests/nested/test-moat.sh: run moat's KVM tests inside the nested (QEMU TCG)
# L1 guest, where /dev/kvm exists, on a host that has none.
#   - kvmprobe (real + long mode, 2 vCPUs);
#   - tests/integration (build/tests/test_integration) with build/moat and
#     build/moat-san, MOAT_REQUIRE_KVM=1, MOAT_TEST_SLOW=10;
#   - build/tests/test_api and build/tests-san/test_api (libmoat: two VMs,
#     pause/resume, snapshot chain, 20 forks, bad snapshot files);
#   - build/tests/test_blk with build/moat and build/moat-san (virtio-blk);
#   - build/tests/test_hostile (the hostile-guest suite, build/moat, 2
#     rounds);
#   - build/tests/test_vsock and build/tests/test_net likewise (test_net:
#     a TAP in a network namespace of its own; L1's tun.ko and this host's
#     iproute2 ip, copied in);
#   - if build/guest/{bzImage,initramfs.cpio} exist: the default Linux guest
#     (echo, exit status, 2 vCPUs, snapshot/restore, with a drive too).
# Needs `make all test-guests build/tests/test_integration` first (and
# `make guest` for the Linux part). Prints "N passed, N failed".
# Usage: [NESTED_ONLY='glob'] tests/nested/test-moat.sh [run.sh options, e.g. --timeout 1200]
#        tests/nested/test-moat.sh --native
# --native runs the same checks directly on this host, for hosts whose own
# /dev/kvm works (hardware KVM): the payload directory stands in for L1's
# /payload.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
native=0
if [ "${1:-}" = --native ]; then
    native=1
    shift
fi
for f in build/moat build/moat-san build/tests/test_integration build/tests/test_api build/tests-san/test_api build/guests; do
    [ -e "$f" ] || { echo "test-moat: $f missing (make all test-guests build/tests/test_integration build/tests/test_api build/tests-san/test_api)" >&2; exit 2; }
done
pl=$(mktemp -d "${TMPDIR:-/tmp}/nested-pl.XXXXXX")
log=$(mktemp "${TMPDIR:-/tmp}/nested-log.XXXXXX")
trap 'rm -rf "$pl" "$log"' EXIT
mkdir -p "$pl/build/tests" "$pl/build/tests-san" "$pl/build/guests"
cp build/moat build/moat-san "$pl/build/"
cp build/tests/test_integration build/tests/test_api "$pl/build/tests/"
cp build/tests-san/test_api "$pl/build/tests-san/"
# virtio-blk suite: the test program and the host tools it drives (real
# e2fsprogs and cpio; L1 only has busybox).
blk=0
if [ -x build/tests/test_blk ]; then
    cp build/tests/test_blk "$pl/build/tests/"
    for tool in mke2fs debugfs cpio; do
        p=$(command -v "$tool" || PATH=/sbin:/usr/sbin:$PATH command -v "$tool") && cp "$p" "$pl/"
    done
    blk=1
fi
[ -x build/tests/test_vsock ] && cp build/tests/test_vsock "$pl/build/tests/"
[ -x build/tests/test_hostile ] && cp build/tests/test_hostile "$pl/build/tests/"
# the page-fault handler of test_integration's uffd restore
[ -x build/tests/uffd_handler ] && cp build/tests/uffd_handler "$pl/build/tests/"
# virtio-net: L1's /init loads tun.ko (/dev/net/tun); test_net also needs
# iproute2's ip for its network namespace and TAP (busybox's has no
# `ip netns`): this host's, first in L1's PATH, its libraries copied by
# run.sh. Without it test_net prints SKIPPED in L1.
if [ -x build/tests/test_net ]; then
    cp build/tests/test_net "$pl/build/tests/"
    if p=$(PATH=/sbin:/usr/sbin:$PATH command -v ip) && "$p" netns list >/dev/null 2>&1; then
        cp "$p" "$pl/ip"
    else
        echo "test-moat: no iproute2 ip on this host: test_net will print SKIPPED in L1" >&2
    fi
fi
[ -x build/examples/sandbox ] && mkdir -p "$pl/build/examples" && cp build/examples/sandbox "$pl/build/examples/"
cp build/guests/*.elf "$pl/build/guests/"
# The host probe's shell helper, for the bench scripts checks run in L1.
mkdir -p "$pl/scripts" && cp scripts/host-kind.sh "$pl/scripts/"
linux=0
if [ -f build/guest/bzImage ] && [ -f build/guest/initramfs.cpio ]; then
    mkdir -p "$pl/build/guest"
    cp build/guest/bzImage build/guest/initramfs.cpio "$pl/build/guest/"
    linux=1
fi

# The script that runs in L1 (busybox sh). Each check prints
# "NESTED-CHECK PASS|FAIL name".
cat > "$pl/checks.sh" <<'EOF'
# t NAME CMD...: one check, with its own time limit ($T_LIMIT s, default
# 600, four times the slowest check's time in L1; a check sets T_LIMIT=N
# before t for itself). A check past its limit is killed, with whatever
# moat processes it left, and fails; the next check runs.
t() {
    _t_name=$1; shift; case "$_t_name" in $ONLY) ;; *) return 0 ;; esac
    _t_lim=${T_LIMIT:-600}; T_LIMIT=
    read -r _t_0 _ </proc/uptime
    echo "NESTED-CHECK START $_t_name (limit ${_t_lim}s)"
    timeout "$_t_lim" "$@"; _t_r=$?
    read -r _t_1 _ </proc/uptime
    _t_d=$(awk -v a="$_t_0" -v b="$_t_1" 'BEGIN { printf "%.1f", b - a }')
    if [ "$_t_r" = 0 ]; then echo "NESTED-CHECK PASS $_t_name ${_t_d}s"
    elif awk -v d="$_t_d" -v l="$_t_lim" 'BEGIN { exit !(d >= l - 1) }'; then
        echo "NESTED-CHECK FAIL $_t_name ${_t_d}s: over its ${_t_lim}s limit, killed"
        # In L1 only: what the check left running (on the host, --native,
        # that could be someone else's moat).
        if [ -n "${NESTED_L1:-}" ]; then
            pkill -KILL -f build/moat 2>/dev/null; pkill -KILL -f build/tests 2>/dev/null
        fi
    else echo "NESTED-CHECK FAIL $_t_name ${_t_d}s (status $_t_r)"; fi
}
export MOAT_REQUIRE_KVM=1 MOAT_TEST_SLOW=10 CK_FORK=yes
t kvmprobe kvmprobe -c 2 -n 2000
t integration env MOAT_BIN=build/moat ./build/tests/test_integration
t integration-san env MOAT_BIN=build/moat-san ./build/tests/test_integration
t api env MOAT_GUESTS=build/guests ./build/tests/test_api
t api-san env MOAT_GUESTS=build/guests ./build/tests-san/test_api
if [ -x build/tests/test_blk ]; then
    t blk env MOAT_BIN=build/moat MOAT_GUESTS=build/guests ./build/tests/test_blk
    t blk-moat-san env MOAT_BIN=build/moat-san MOAT_GUESTS=build/guests ./build/tests/test_blk
fi
if [ -x build/tests/test_vsock ]; then
    t vsock env MOAT_BIN=build/moat MOAT_GUESTS=build/guests ./build/tests/test_vsock
    t vsock-moat-san env MOAT_BIN=build/moat-san MOAT_GUESTS=build/guests ./build/tests/test_vsock
fi
# The hostile-guest suite: 2 rounds (the RSS check still runs), build/moat
# only (the sanitizer build runs it on the host); its net part is SKIPPED
# in L1 (no passt).
if [ -x build/tests/test_hostile ]; then
    T_LIMIT=900; t hostile env MOAT_BIN=build/moat MOAT_GUESTS=build/guests MOAT_HOSTILE_ROUNDS=2 ./build/tests/test_hostile
fi
if [ -x build/tests/test_net ]; then
    t net env MOAT_BIN=build/moat MOAT_GUESTS=build/guests ./build/tests/test_net
    t net-moat-san env MOAT_BIN=build/moat-san MOAT_GUESTS=build/guests ./build/tests/test_net
fi
if [ -f build/guest/bzImage ]; then
    o=/tmp/linux.out
    t linux-echo sh -c './build/moat run --timeout 300 -- /bin/echo hello-from-l2 >$0 2>&1; r=$?; cat $0; [ $r = 0 ] && grep -q hello-from-l2 $0' $o
    t linux-exit-status sh -c './build/moat run --timeout 300 -- /bin/sh -c "exit 7"; [ $? = 7 ]'
    t linux-initrd sh -c './build/moat run --timeout 300 -- /bin/sh -c "test -x /init && test -x /bin/busybox && echo initrd-ok" >$0 2>&1; r=$?; cat $0; [ $r = 0 ] && grep -q initrd-ok $0' $o
    t linux-timings sh -c './build/moat run --timeout 300 --timings -- /bin/true 2>$0; r=$?; cat $0; [ $r = 0 ] && grep -q "\"init_reached\"" $0 && grep -q "\"cmd_finished\"" $0' $o
    # Snapshot a Linux guest in the middle of a sleep, restore it: the
    # restored kernel's timers, console and /init carry on, and the
    # command's status comes back through the restored VM.
    t linux-snapshot-restore sh -c '
        d=/tmp/lsnap; rm -rf $d; mkdir -p $d
        ./build/moat run --timeout 300 --snapshot-dir $d -- /bin/sh -c "echo before-sleep; sleep 3; echo after-sleep; exit 5" >$d/a.out 2>&1 &
        p=$!; n=0
        while ! grep -q before-sleep $d/a.out && [ $n -lt 600 ]; do sleep 0.5; n=$((n + 1)); done
        kill -USR2 $p; wait $p; ra=$?
        ./build/moat restore --timeout 300 $d >$d/b.out 2>&1; rb=$?
        echo "first run ($ra):"; cat $d/a.out; echo "restored ($rb):"; cat $d/b.out
        [ $ra = 0 ] && [ $rb = 5 ] && grep -q after-sleep $d/b.out && ! grep -q after-sleep $d/a.out'
    # A Linux guest with a drive, snapshotted (SIGUSR2) between two writes
    # to its ext4 filesystem and restored: the virtio-blk queue carries on,
    # and both files are in the image (debugfs on the host side of L2).
    if [ -x ./mke2fs ] && [ -x ./debugfs ]; then
    t linux-snapshot-drive sh -c '
        d=/tmp/dsnap; rm -rf $d; mkdir -p $d/s
        ./mke2fs -q -F -t ext4 $d/img 16M || exit 1
        ./build/moat run --timeout 300 --drive $d/img --snapshot-dir $d/s -- /bin/sh -c "mkdir -p /m; mount /dev/vda /m; echo one > /m/a; sync; echo snap-ready; sleep 3; echo two > /m/b; sync; umount /m" >$d/a.out 2>&1 &
        p=$!; n=0
        while ! grep -q snap-ready $d/a.out && [ $n -lt 600 ]; do sleep 0.5; n=$((n + 1)); done
        kill -USR2 $p; wait $p; ra=$?
        ./build/moat restore --timeout 300 $d/s >$d/b.out 2>&1; rb=$?
        echo "first run ($ra):"; cat $d/a.out; echo "restored ($rb):"; cat $d/b.out
        ./debugfs -R "cat /a" $d/img 2>/dev/null >$d/fa; ./debugfs -R "cat /b" $d/img 2>/dev/null >$d/fb
        echo "a: $(cat $d/fa) b: $(cat $d/fb)"
        [ $ra = 0 ] && [ $rb = 0 ] && grep -qx one $d/fa && grep -qx two $d/fb'
    fi
    # The guest agent over virtio-vsock: moat run --vsock with no command
    # keeps the guest up for the agent; moat exec and moat cp reach it
    # through the hybrid-vsock socket.
    t linux-agent-exec sh -c '
        d=/tmp/lagent; rm -rf $d; mkdir -p $d
        ./build/moat run --timeout 600 --vsock $d/v.sock >$d/guest.out 2>&1 &
        g=$!
        ./build/moat exec --vsock $d/v.sock --wait 300 -- /bin/sh -c "echo hello-agent; exit 7" >$d/e1.out 2>&1; r1=$?
        ./build/moat exec --vsock $d/v.sock -- /bin/sh -c "echo to-stderr >&2; exit 0" >$d/e2.out 2>$d/e2.err; r2=$?
        head -c 100000 /dev/urandom >$d/blob
        ./build/moat cp --vsock $d/v.sock $d/blob :/tmp/blob; r3=$?
        ./build/moat exec --vsock $d/v.sock -- md5sum /tmp/blob >$d/guest.md5; r4=$?
        ./build/moat cp --vsock $d/v.sock :/tmp/blob $d/blob2; r5=$?
        ./build/moat exec --vsock $d/v.sock --timeout 2 -- sleep 60; r6=$?
        ./build/moat exec --vsock $d/v.sock -- /sbin/reboot -f; kill $g 2>/dev/null; wait $g
        echo "rc: $r1 $r2 $r3 $r4 $r5 $r6"; cat $d/e1.out $d/e2.err $d/guest.md5; md5sum $d/blob $d/blob2
        h1=$(md5sum <$d/blob | cut -d" " -f1); h2=$(md5sum <$d/blob2 | cut -d" " -f1); hg=$(cut -d" " -f1 $d/guest.md5)
        [ $r1 = 7 ] && grep -q hello-agent $d/e1.out && [ $r2 = 0 ] && grep -q to-stderr $d/e2.err &&
        [ $r3 = 0 ] && [ $r4 = 0 ] && [ $r5 = 0 ] && [ "$h1" = "$hg" ] && [ "$h1" = "$h2" ] && [ $r6 = 137 ]'
    # libmoat's moat_exec through examples/sandbox.c: boot, run, status.
    if [ -x build/examples/sandbox ]; then
        t example-sandbox sh -c './build/examples/sandbox build/guest/bzImage build/guest/initramfs.cpio /bin/sh -c "echo from-libmoat; echo err >&2; exit 9" >$0 2>&1; r=$?; cat $0; [ $r = 9 ] && grep -q from-libmoat $0 && grep -q err $0' $o
    fi
    t linux-two-vcpus sh -c './build/moat run --timeout 300 --cpus 2 -- /bin/sh -c "nproc" >$0 2>&1; r=$?; cat $0; [ $r = 0 ] && tr -d "\\r" <$0 | grep -qx 2' $o
fi
EOF
# More checks, one file per feature: tests/nested/checks.d/NAME.sh runs in
# L1 (busybox sh, the t() helper above, cwd /payload; the Linux guest is
# there when build/guest/bzImage is); an optional NAME.host is sourced here
# first (bash, on the host, $pl = the payload directory) to copy in what the
# check needs.
for f in tests/nested/checks.d/*.sh; do
    [ -e "$f" ] || continue
    h=${f%.sh}.host
    [ -f "$h" ] && . "$h"
    { echo "# --- $f"; cat "$f"; } >> "$pl/checks.sh"
done
echo 'exit 0' >> "$pl/checks.sh"
# NESTED_ONLY='glob' runs only the checks whose names match (e.g. 'linux-agent*').
sed -i "1i ONLY='${NESTED_ONLY:-*}'" "$pl/checks.sh"
if [ "$native" = 1 ]; then
    ${CC:-cc} -std=gnu11 -O2 -pthread -o "$pl/kvmprobe" tests/nested/kvmprobe.c || exit 2
    (cd "$pl" && PATH="$pl:$PATH" MOAT_NATIVE=1 sh checks.sh) 2>&1 | tee "$log"
else
    tests/nested/run.sh "$@" "$pl" -- sh checks.sh 2>&1 | tee "$log"
fi
rc=${PIPESTATUS[0]}
pass=$(grep -c '^NESTED-CHECK PASS' "$log")
fail=$(grep -c '^NESTED-CHECK FAIL' "$log")
# A check that started and never ended: where L1 stalled or timed out.
last=$(sed -n 's/^NESTED-CHECK START \([^ ]*\).*/\1/p' "$log" | tail -1)
if [ -n "$last" ] && ! grep -qE "^NESTED-CHECK (PASS|FAIL) $last " "$log"; then
    echo "test-moat: L1 ended during check '$last'"
fi
echo "test-moat: check times (L1 seconds):"
sed -n 's/^NESTED-CHECK \(PASS\|FAIL\) \([^ ]*\) \([0-9.]*\)s.*/  \3 \1 \2/p' "$log" | sort -rn | head -15
[ "$linux" = 1 ] || echo "SKIPPED: nested: linux guest checks (build/guest not built; make guest)"
if [ "$rc" != 0 ]; then
    echo "test-moat: L1 run failed (status $rc)"
    fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
