#!/bin/sh
# The default guest's network set-up and HTTP client under QEMU TCG
# (docs/guest.md, "Network"): /init's moat.net= modes, udhcpc and its
# script, moat-fetch and busybox wget, against an HTTP server on the host's
# loopback that the guest reaches at 10.0.2.2 through QEMU's user-mode
# network (slirp) and a virtio-net device.
#
#   tests/linux/qemu-net.sh          (after `make guest`)
#
# Cases (each prints PASS, FAIL or SKIPPED; exit status 1 if any failed):
#   dhcp      no moat.net=: eth0 gets 10.0.2.15/24, the default route and
#             resolv.conf from slirp's DHCP server, before the command runs
#   fetch     moat-fetch: Content-Length, chunked, connection-close and
#             redirected bodies, SHA-256 equal to the server's; 404 gives
#             status 8 and leaves no file; a port with nothing listening
#             gives status 4
#   dns       a name looked up by moat-fetch's own DNS query (the test's
#             responder on 127.0.0.1:53, only inside its network namespace);
#             an unknown name gives status 4
#   wget      busybox wget fetches the same file
#   off       moat.net=off: eth0 down, no address, no udhcpc
#   static    moat.net=static:10.0.2.77/24,10.0.2.2,10.0.2.3: address,
#             route, resolv.conf, and a fetch through it
#   nolease   no DHCP server: /init says so within its bounded wait and
#             the command still runs
#
# Network traffic stays on this host: the whole test runs in a network
# namespace of its own with only lo (unshare -n, or -rn without root);
# where none can be made it runs on the host's loopback and skips the dns
# case (it needs port 53). The guest only ever talks to 10.0.2.2, which
# slirp maps to 127.0.0.1.
# Env: B (build dir), QEMU (binary), TIMEOUT (seconds per boot, default 120).
set -u
B=${B:-build}
QEMU=${QEMU:-qemu-system-x86_64}
TIMEOUT=${TIMEOUT:-120}
BZ=$B/guest/bzImage
INITRD=$B/guest/initramfs.cpio
BASE="console=ttyS0 reboot=k panic=-1 virtio_mmio.device=512@0xfeb00e00:12"
here=$(dirname "$0")

if [ "${1:-}" != --in-netns ]; then
    if ! command -v "$QEMU" >/dev/null 2>&1; then
        echo "SKIPPED: qemu-net: $QEMU not installed"; exit 0
    fi
    if ! "$QEMU" -netdev help 2>/dev/null | grep -qx user; then
        echo "SKIPPED: qemu-net: $QEMU has no user-mode network (-netdev user)"; exit 0
    fi
    if ! command -v python3 >/dev/null 2>&1; then
        echo "SKIPPED: qemu-net: python3 not installed (the test's HTTP server)"; exit 0
    fi
    for f in "$BZ" "$INITRD"; do
        [ -f "$f" ] || { echo "FAIL: qemu-net: $f missing (run make guest)"; exit 1; }
    done
    for u in "unshare -n" "unshare -rn"; do
        # shellcheck disable=SC2086
        if $u sh -c 'ip link set lo up' 2>/dev/null; then
            exec $u sh -c 'ip link set lo up && exec "$0" --in-netns' "$0"
        fi
    done
    echo "qemu-net: no network namespace could be made: running on the host's loopback"
fi
netns=0
[ "${1:-}" = --in-netns ] && netns=1

tmp=$(mktemp -d)
spid=
trap '[ -z "$spid" ] || kill "$spid" 2>/dev/null; rm -rf "$tmp"' EXIT
failed=0
pass() { echo "PASS: qemu-net: $1"; }
skip() { echo "SKIPPED: qemu-net: $1"; }
fail() {
    echo "FAIL: qemu-net: $1"
    if [ -n "${2:-}" ]; then
        echo "---- last lines of output ----"
        tail -n 25 "$tmp/$2.out"
        echo "------------------------------"
    fi
    failed=1
}

dnsflag=
[ "$netns" = 1 ] && dnsflag=--dns
python3 "$here/net-server.py" $dnsflag > "$tmp/srv.out" 2> "$tmp/srv.err" &
spid=$!
i=0
while [ $i -lt 100 ] && ! [ -s "$tmp/srv.out" ]; do sleep 0.1; i=$((i + 1)); done
read -r port closed sum < "$tmp/srv.out" || true
if [ -z "${sum:-}" ]; then
    fail "the test's HTTP server did not start: $(cat "$tmp/srv.err")"
    exit 1
fi

# boot NAME NETDEV CMDLINE_TAIL: output (CR stripped) in $tmp/NAME.out,
# QEMU's exit code in $rc, wall time in $ms.
boot() {
    t0=$(($(date +%s%N) / 1000000))
    # shellcheck disable=SC2086
    timeout "$TIMEOUT" "$QEMU" -M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg \
        -m 256 -nographic -no-reboot -device i8042 \
        -netdev "$2" -device virtio-net-device,netdev=n0 \
        -kernel "$BZ" -initrd "$INITRD" -append "$BASE $3" \
        < /dev/null > "$tmp/$1.raw" 2>&1
    rc=$?
    ms=$(($(date +%s%N) / 1000000 - t0))
    tr -d '\r' < "$tmp/$1.raw" > "$tmp/$1.out"
}
# The value of the guest's "R-KEY ..." line (the kernel echoes the command
# line, where "R-KEY" is preceded by "echo ").
res() { sed -n "s/^R-$2 //p" "$tmp/$1.out" | head -n 1; }
sha() { echo "${1%% *}"; }

H="10.0.2.2:$port"
F="moat-fetch -q -O -"
main="H=$H; echo R-addr \$(ip -4 addr show dev eth0 | grep -o 'inet [0-9./]*');
echo R-route \$(ip route | grep ^default);
echo R-resolv \$(cat /etc/resolv.conf);
echo R-file \$(moat-fetch -q -O /tmp/f http://\$H/file.bin; echo \$?) \$(sha256sum /tmp/f);
echo R-chunked \$($F http://\$H/chunked | sha256sum);
echo R-close \$($F http://\$H/close | sha256sum);
echo R-redirect \$($F http://\$H/redirect | sha256sum);
echo R-missing \$(moat-fetch -q -O /tmp/m http://\$H/missing; echo \$?) \$(ls /tmp/m 2>&1 | grep -c 'No such');
echo R-refused \$(moat-fetch -q -T 10 -O - http://10.0.2.2:$closed/; echo \$?);
echo R-wget \$(wget -q -O - http://\$H/file.bin | sha256sum)"
# Only with the test's own responder (in its namespace): never a query to
# whatever listens on the host's port 53.
[ "$netns" = 0 ] || main="$main;
echo nameserver 10.0.2.2 > /etc/resolv.conf;
echo R-dns \$($F http://files.test:$port/file.bin | sha256sum);
echo R-nxdomain \$($F http://nosuch.test:$port/file.bin; echo \$?)"
main=$(echo "$main" | tr '\n' ' ')
boot main "user,id=n0" "-- /bin/sh -c \"$main\""
if [ "$rc" -ne 0 ]; then
    fail "dhcp: QEMU exited with $rc (124: no reboot within ${TIMEOUT}s)" main
else
    if [ "$(res main addr)" = "inet 10.0.2.15/24" ] &&
       [ "$(res main route)" = "default via 10.0.2.2 dev eth0" ] &&
       [ "$(res main resolv)" = "nameserver 10.0.2.3" ]; then
        pass "dhcp: eth0 10.0.2.15/24, default via 10.0.2.2, nameserver 10.0.2.3 (boot and checks ${ms} ms)"
    else
        fail "dhcp: addr '$(res main addr)' route '$(res main route)' resolv '$(res main resolv)'" main
    fi
    bad=
    [ "$(res main file)" = "0 $sum /tmp/f" ] || bad="$bad file.bin('$(res main file)')"
    for k in chunked close redirect; do
        [ "$(sha "$(res main $k)")" = "$sum" ] || bad="$bad $k('$(res main $k)')"
    done
    [ "$(res main missing)" = "8 1" ] || bad="$bad 404('$(res main missing)': want status 8, no file)"
    [ "$(res main refused)" = "4" ] || bad="$bad refused('$(res main refused)': want 4)"
    if [ -z "$bad" ]; then
        pass "fetch: 200000 bytes by length, chunked, close and redirect match the server's SHA-256; 404 -> 8, no file; refused -> 4"
    else
        fail "fetch:$bad" main
    fi
    if [ "$netns" = 0 ]; then
        skip "dns: no network namespace for a responder on port 53"
    elif [ "$(sha "$(res main dns)")" = "$sum" ] && [ "$(res main nxdomain)" = 4 ]; then
        pass "dns: files.test found by moat-fetch's DNS query, the body matches; unknown name -> 4"
    else
        fail "dns: files.test '$(res main dns)', nosuch.test '$(res main nxdomain)' (want 4)" main
    fi
    if [ "$(sha "$(res main wget)")" = "$sum" ]; then
        pass "wget: busybox wget fetched the same bytes"
    else
        fail "wget: '$(res main wget)'" main
    fi
fi

state="echo R-flags \$(cat /sys/class/net/eth0/flags);
echo R-addr \$(ip -4 addr show dev eth0 | grep -o 'inet [0-9./]*');
echo R-route \$(ip route | grep ^default);
echo R-resolv \$(cat /etc/resolv.conf 2>/dev/null);
echo R-udhcpc \$(pidof udhcpc | wc -w)"
state=$(echo "$state" | tr '\n' ' ')

boot off "user,id=n0" "moat.net=off -- /bin/sh -c \"$state\""
flags=$(res off flags)
if [ "$rc" -ne 0 ]; then
    fail "off: QEMU exited with $rc" off
elif [ -n "$flags" ] && [ $((flags & 1)) -eq 0 ] && [ -z "$(res off addr)" ] &&
     [ -z "$(res off route)" ] && [ "$(res off udhcpc)" = 0 ]; then
    pass "off: eth0 down (flags $flags), no address, no route, no udhcpc"
else
    fail "off: flags '$flags' addr '$(res off addr)' route '$(res off route)' udhcpc '$(res off udhcpc)'" off
fi

boot static "user,id=n0" "moat.net=static:10.0.2.77/24,10.0.2.2,10.0.2.3 -- /bin/sh -c \"$state; echo R-fetch \$($F http://$H/file.bin | sha256sum)\""
if [ "$rc" -ne 0 ]; then
    fail "static: QEMU exited with $rc" static
elif [ "$(res static addr)" = "inet 10.0.2.77/24" ] &&
     [ "$(res static route)" = "default via 10.0.2.2 dev eth0" ] &&
     [ "$(res static resolv)" = "nameserver 10.0.2.3" ] && [ "$(res static udhcpc)" = 0 ] &&
     [ "$(sha "$(res static fetch)")" = "$sum" ]; then
    pass "static: eth0 10.0.2.77/24, default via 10.0.2.2, nameserver 10.0.2.3, no udhcpc, a fetch through it"
else
    fail "static: addr '$(res static addr)' route '$(res static route)' resolv '$(res static resolv)' udhcpc '$(res static udhcpc)' fetch '$(res static fetch)'" static
fi

# No DHCP server: the frames go to a loopback UDP port nobody reads.
boot nolease "socket,id=n0,udp=127.0.0.1:$closed,localaddr=127.0.0.1:0" "-- /bin/sh -c \"echo R-ran \$(cut -d' ' -f1 /proc/uptime)\""
if [ "$rc" -ne 0 ]; then
    fail "nolease: QEMU exited with $rc" nolease
elif grep -q "^moat-init: eth0: no DHCP lease after 4 tries; going on without an address" "$tmp/nolease.out" &&
     [ -n "$(res nolease ran)" ]; then
    pass "nolease: /init gave up on DHCP and ran the command at guest uptime $(res nolease ran) s (${ms} ms)"
else
    fail "nolease: no 'no DHCP lease' message or the command did not run" nolease
fi

exit "$failed"
