#!/bin/sh
# End-to-end test of `moat device net` (moat's virtio-net over vhost-user,
# with its metadata service) driven by Linux's real virtio_net driver: the
# default guest (build/guest/{bzImage,initramfs.cpio}) boots once under QEMU
# TCG on microvm with -netdev vhost-user connected to moat's socket, and
# moat's device sits on a TAP device inside a network namespace this script
# makes (10.89.0.1/24 there, 10.89.0.2/24 in the guest). Nothing is sent
# anywhere but that namespace and the device's own metadata address.
#
#   tests/vhost/net.sh            (after `make all guest`; as root)
#
# Checks (each prints PASS or FAIL; a final "N passed, N failed" line; exit
# status 1 if any failed; SKIPPED and exit 0 without QEMU, its vhost-user
# netdev, root, /dev/net/tun, `ip` or a network namespace):
#   link          the guest's eth0 is up with 10.89.0.2/24 (moat.net=static)
#   ping          ping -c 3 10.89.0.1 from the guest: 3 replies
#   tcp-in        1 MiB of random data from a listener in the namespace to
#                 the guest's busybox nc: the guest's md5 matches
#   tcp-out       1 MiB made in the guest, sent with nc to the namespace:
#                 md5s match
#   mmds-*        the metadata service from the guest (busybox nc and
#                 printf'd HTTP/1.0 requests, route to 169.254.169.254 via
#                 eth0): a GET without a token is 401; PUT /latest/api/token
#                 with a TTL gives a 32-character token; GET
#                 /latest/meta-data/instance-id with it is i-moat-test; with
#                 Accept: application/json /latest/meta-data is the JSON
#                 object; a wrong token is 401; (mmds-fin) an HTTP/1.1
#                 request sent in one segment with the FIN (TCP_CORK, then
#                 shutdown) is answered before the device closes
#   garbage       the guest sends 3000 malformed frames (random bytes, runts,
#                 bad ARP, IPv4 and TCP with bad headers to the metadata
#                 address and to the namespace, SYNs with malformed options)
#                 through a packet socket, 5000 UDP datagrams to a closed
#                 port of the namespace, a burst of 200 pings and 64 KiB
#                 pings (fragmented); the device's own host answered some
#                 of the TCP garbage (RSTs: the guest's Tcp InSegs grow by
#                 >= 50), and afterwards ping and the metadata service
#                 still answer
#   server        the device outlives the frontend, found no queue broken,
#                 and exits 0 on SIGTERM
#   bad-args      moat device net with a TAP name too long, a missing
#                 metadata file, or no tap=: exit 2 with a message naming
#                 the problem
# The malformed frames, the UDP flood and mmds-fin need a small static
# helper (tests/vhost/net_tool.c, appended to the initramfs as /bin/net-tool:
# busybox has no raw-frame or UDP sender and no way to cork a TCP socket);
# without a static C toolchain mmds-fin is not run and garbage is only the
# ping bursts (SKIPPED is said). tcp-in and tcp-out need python3 on the
# host (the namespace's peer); without it they are SKIPPED.
#
# QEMU notes (see tests/vhost/run.sh and docs/vhost-user.md): microvm with
# acpi=off and auto-kernel-cmdline=off, virtio_mmio.device= written by hand,
# modern virtio-mmio, guest RAM a shared memfd. The guest's commands are one
# script (appended to the initramfs as /bin/net-test) that prints
# "NETT KEY VALUE" lines on the console and ends the boot.
# Env: B (build dir), QEMU (binary), TIMEOUT (seconds for the guest,
#      default 240), MOAT (the moat binary, default $B/moat), CC, KEEP (set:
#      keep the temporary directory: guest output, device log).
set -u
B=${B:-build}
QEMU=${QEMU:-qemu-system-x86_64}
TIMEOUT=${TIMEOUT:-240}
MOAT=${MOAT:-$B/moat}
CC=${CC:-cc}
BZ=$B/guest/bzImage
INITRD=$B/guest/initramfs.cpio
GEN=$B/guest/gen_init_cpio
PATH=$PATH:/sbin:/usr/sbin
L=vhost-net
passed=0
failed=0

skip_all() {
    echo "SKIPPED: $L: $1"
    echo "0 passed, 0 failed"
    exit 0
}
command -v "$QEMU" >/dev/null 2>&1 || skip_all "$QEMU not installed"
"$QEMU" -netdev help 2>/dev/null | grep -qx vhost-user || skip_all "$QEMU has no vhost-user netdev"
[ "$(id -u)" = 0 ] || skip_all "needs root (a network namespace and a TAP device)"
[ -c /dev/net/tun ] || skip_all "no /dev/net/tun"
command -v ip >/dev/null 2>&1 || skip_all "no ip (iproute2)"
for f in "$BZ" "$INITRD" "$GEN" "$MOAT"; do
    if [ ! -f "$f" ]; then
        echo "FAIL: $L: $f missing (run make all guest)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

tmp=$(mktemp -d)
NS=moat-vhnet-$$
TAP=vhtap0              # inside the namespace: no clash with the host's names
ns_made=0
dpid=
qpid=
ppid_=
cleanup() {
    [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
    [ -n "$ppid_" ] && kill "$ppid_" 2>/dev/null
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
    wait 2>/dev/null
    [ $ns_made = 1 ] && ip netns del "$NS" 2>/dev/null
    if [ -n "${KEEP:-}" ]; then echo "$L: files kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

pass() { echo "PASS: $L: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $L: $1"; failed=$((failed + 1)); }
skip() { echo "SKIPPED: $L: $1"; }
now() { date +%s; }
t0=$(now)
nsx() { ip netns exec "$NS" "$@"; }

# ---- the namespace and its TAP device
if ! ip netns add "$NS" 2> "$tmp/ns.err"; then
    skip_all "cannot make a network namespace: $(head -c 200 "$tmp/ns.err")"
fi
ns_made=1
if ! { nsx ip link set lo up && nsx ip tuntap add dev $TAP mode tap &&
       nsx ip addr add 10.89.0.1/24 dev $TAP && nsx ip link set $TAP up; } 2> "$tmp/tap.err"; then
    skip_all "cannot make a TAP device in the namespace: $(head -c 200 "$tmp/tap.err")"
fi

# ---- the guest's script and helper, appended to the initramfs
cat > "$tmp/net-test" <<'EOF'
#!/bin/sh
# tests/vhost/net.sh's guest side: "NETT KEY VALUE" lines on the console.
H=10.89.0.1
M=169.254.169.254
r() { echo "NETT $*"; }
# the carrier comes up asynchronously (the driver reads the device's
# status, then linkwatch): wait for it, at most 10 s
i=0
while [ "$(cat /sys/class/net/eth0/operstate)" != up ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
r OPER $(cat /sys/class/net/eth0/operstate) $i
r ADDR $(ip -4 addr show dev eth0 | sed -n 's/.*inet \([0-9./]*\) .*/\1/p')
pings() { ping "$@" $H > /tmp/ping 2>&1; echo $? $(sed -n 's/.* \([0-9]*\) packets received.*/\1/p' /tmp/ping); }
r PING $(pings -c 3 -W 5 -w 15)
# TCP both ways with the namespace
timeout 90 nc $H 5001 < /dev/null > /tmp/in
r IN $? $(wc -c < /tmp/in) $(md5sum < /tmp/in | cut -d' ' -f1)
dd if=/dev/urandom of=/tmp/out bs=65536 count=16 2>/dev/null
r OUTSUM $(wc -c < /tmp/out) $(md5sum < /tmp/out | cut -d' ' -f1)
timeout 90 nc $H 5002 < /tmp/out > /dev/null
r OUT $?
# the metadata service: HTTP/1.0, so the device closes after each answer
ip route add $M dev eth0
http() {
    m=$1 p=$2
    shift 2
    { printf '%s %s HTTP/1.0\r\n' "$m" "$p"; for h in "$@"; do printf '%s\r\n' "$h"; done; printf '\r\n'; } |
        timeout 10 nc $M 80 | tr -d '\r' > /tmp/resp
}
st() { head -n 1 /tmp/resp | cut -d' ' -f2; }
body() { sed '1,/^$/d' /tmp/resp; }
http GET /latest/meta-data/instance-id
r MD_NOTOKEN $(st)
http PUT /latest/api/token 'X-metadata-token-ttl-seconds: 60'
T=$(body)
r MD_PUT $(st) ${#T}
http GET /latest/meta-data/instance-id "X-metadata-token: $T"
r MD_GET $(st) $(body)
http GET /latest/meta-data "X-metadata-token: $T" 'Accept: application/json'
r MD_JSON $(st) $(body)
http GET /latest/meta-data/instance-id 'X-metadata-token: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'
r MD_BADTOKEN $(st)
# an HTTP/1.1 request whose segment carries the FIN too
if [ -x /bin/net-tool ]; then
    printf 'GET /latest/meta-data/instance-id HTTP/1.1\r\nX-metadata-token: %s\r\n\r\n' "$T" |
        /bin/net-tool fin-request $M 80 | tr -d '\r' > /tmp/resp
    r MD_FIN $(st) $(body)
fi
# garbage, a UDP flood to a closed port, ping bursts
# the guest's TCP segments in (/proc/net/snmp: Tcp InSegs): the device's
# RSTs to the TCP garbage for its port 80 arrive as segments for no socket
insegs() { awk '/^Tcp:/ { n++; if (n == 2) print $11 }' /proc/net/snmp; }
if [ -x /bin/net-tool ]; then
    s0=$(insegs)
    r GARBAGE $(/bin/net-tool garbage eth0 3000 7 2>&1)
    sleep 1
    r GARBAGE_IN $(($(insegs) - s0))
    r UDP $(/bin/net-tool udp $H 9 5000 1400 2>&1)
fi
r BURST $(pings -c 200 -A -s 1400 -W 5 -w 30)
r BIG $(pings -c 3 -s 65000 -W 5 -w 15)
r PING_AFTER $(pings -c 3 -W 5 -w 15)
http GET /latest/meta-data/instance-id "X-metadata-token: $T"
r MD_AFTER $(st) $(body)
r DONE
EOF
printf 'file /bin/net-test %s 0755 0 0\n' "$tmp/net-test" > "$tmp/extra.list"
tool=0
if "$CC" -std=gnu11 -O2 -static -s -Wall -Wextra -o "$tmp/net-tool" tests/vhost/net_tool.c > "$tmp/cc.log" 2>&1; then
    printf 'file /bin/net-tool %s 0755 0 0\n' "$tmp/net-tool" >> "$tmp/extra.list"
    tool=1
else
    skip "garbage, mmds-fin: no static C build of tests/vhost/net_tool.c ($(tail -n 1 "$tmp/cc.log")): no malformed frames or UDP flood (only ping bursts), no mmds-fin"
fi
if ! "$GEN" "$tmp/extra.list" > "$tmp/extra.cpio" 2> "$tmp/gen.log"; then
    fail "setup: $GEN: $(head -c 200 "$tmp/gen.log")"
    echo "$passed passed, $failed failed"
    exit 1
fi
cat "$INITRD" "$tmp/extra.cpio" > "$tmp/initrd.cpio"

# ---- the namespace's TCP peer: 5001 sends $tmp/blob, 5002 takes what comes
py=0
if command -v python3 >/dev/null 2>&1; then
    py=1
    head -c 1048576 /dev/urandom > "$tmp/blob"
    ip netns exec "$NS" python3 - "$tmp" > "$tmp/peer.log" 2>&1 <<'EOF' &
import hashlib, os, socket, sys, threading
tmp = sys.argv[1]
blob = open(os.path.join(tmp, "blob"), "rb").read()
def listener(port):
    l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("10.89.0.1", port))
    l.listen(1)
    l.settimeout(200)
    return l
def send(l):
    c, _ = l.accept()
    c.settimeout(90)
    c.sendall(blob)
    c.shutdown(socket.SHUT_WR)
    while c.recv(65536):
        pass
    c.close()
def take(l):
    c, _ = l.accept()
    c.settimeout(90)
    h, n = hashlib.md5(), 0
    while True:
        b = c.recv(65536)
        if not b:
            break
        h.update(b)
        n += len(b)
    c.close()
    open(os.path.join(tmp, "got"), "w").write("%d %s\n" % (n, h.hexdigest()))
ls = [listener(5001), listener(5002)]
open(os.path.join(tmp, "ready"), "w").close()
ts = [threading.Thread(target=f, args=(l,)) for f, l in zip((send, take), ls)]
for t in ts:
    t.start()
for t in ts:
    t.join()
EOF
    ppid_=$!
    i=0
    while [ ! -f "$tmp/ready" ] && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
else
    skip "tcp-in, tcp-out: python3 not installed (the namespace's peer)"
fi

# ---- the device, in the namespace, and the guest
printf '%s\n' '{"latest":{"meta-data":{"instance-id":"i-moat-test","tags":{"a":"b"}}}}' > "$tmp/doc.json"
ip netns exec "$NS" "$MOAT" device net,tap=$TAP,mmds,metadata="$tmp/doc.json" --socket "$tmp/vhu.sock" -v \
    > "$tmp/dev.log" 2>&1 &
dpid=$!
i=0
while [ ! -S "$tmp/vhu.sock" ] && [ $i -lt 50 ] && kill -0 "$dpid" 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
done
timeout "$TIMEOUT" "$QEMU" -M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg \
    -m 256 -nographic -no-reboot -device i8042 \
    -object memory-backend-memfd,id=m,size=256M,share=on -machine memory-backend=m \
    -global virtio-mmio.force-legacy=false \
    -chardev socket,id=n,path="$tmp/vhu.sock" -netdev vhost-user,id=net0,chardev=n \
    -device virtio-net-device,netdev=net0,mac=52:54:00:89:00:02 \
    -kernel "$BZ" -initrd "$tmp/initrd.cpio" \
    -append "console=ttyS0 reboot=k panic=-1 virtio_mmio.device=512@0xfeb00e00:12 moat.net=static:10.89.0.2/24 -- /bin/net-test" \
    < /dev/null > "$tmp/guest.raw" 2>&1 &
qpid=$!
wait "$qpid"
qrc=$?
qpid=
tr -d '\r' < "$tmp/guest.raw" > "$tmp/guest.out"
boot_s=$(($(now) - t0))

# v KEY: the rest of the guest's line "NETT KEY ..."
v() { sed -n "s/^NETT $1 //p" "$tmp/guest.out" | tail -n 1; }
dump() {
    echo "---- last guest output ----"
    grep -v '^\[ *[0-9]' "$tmp/guest.out" | tail -n 25
    echo "---- moat device log ----"
    tail -n 10 "$tmp/dev.log"
    echo "-------------------------"
}

if [ $qrc -ne 0 ] || ! grep -qx 'NETT DONE' "$tmp/guest.out"; then
    fail "guest: QEMU exited with $qrc (124: timeout) or the guest script did not finish"
    dump
fi

# ---- link, ping
set -- $(v OPER)
if [ "${1:-}" = up ] && [ "$(v ADDR)" = 10.89.0.2/24 ]; then
    pass "link: eth0 up with 10.89.0.2/24 (carrier after $(( ${2:-0} * 100 )) ms of the script)"
else
    fail "link: operstate '$(v OPER)' (state, tenths of a second waited), address '$(v ADDR)'"
fi
if [ "$(v PING)" = "0 3" ]; then
    pass "ping: 3 of 3 replies from 10.89.0.1 in the namespace"
else
    fail "ping: status and replies '$(v PING)' (want '0 3')"
fi

# ---- TCP both ways
if [ $py = 1 ]; then
    want=$(md5sum < "$tmp/blob" | cut -d' ' -f1)
    if [ "$(v IN)" = "0 1048576 $want" ]; then
        pass "tcp-in: 1 MiB namespace -> guest (nc), md5 $want matches"
    else
        fail "tcp-in: guest got '$(v IN)' (status, bytes, md5), want '0 1048576 $want'"
    fi
    # the peer has finished (the guest's nc waited for it to close)
    i=0
    while kill -0 "$ppid_" 2>/dev/null && [ $i -lt 50 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    got=$(cat "$tmp/got" 2>/dev/null)
    if [ "$(v OUT)" = 0 ] && [ -n "$got" ] && [ "$got" = "$(v OUTSUM)" ]; then
        pass "tcp-out: 1 MiB guest -> namespace (nc), md5 ${got#* } matches"
    else
        fail "tcp-out: nc status '$(v OUT)', guest '$(v OUTSUM)', namespace got '${got:-nothing}' ($(tail -n 2 "$tmp/peer.log"))"
    fi
fi

# ---- the metadata service
json='{"instance-id":"i-moat-test","tags":{"a":"b"}}'
if [ "$(v MD_NOTOKEN)" = 401 ]; then
    pass "mmds-no-token: GET without a token: 401"
else
    fail "mmds-no-token: status '$(v MD_NOTOKEN)' (want 401)"
fi
if [ "$(v MD_PUT)" = "200 32" ]; then
    pass "mmds-token: PUT /latest/api/token with a TTL: 200, a 32-character token"
else
    fail "mmds-token: status and token length '$(v MD_PUT)' (want '200 32')"
fi
if [ "$(v MD_GET)" = "200 i-moat-test" ]; then
    pass "mmds-get: GET /latest/meta-data/instance-id with the token: i-moat-test"
else
    fail "mmds-get: '$(v MD_GET)' (want '200 i-moat-test')"
fi
if [ "$(v MD_JSON)" = "200 $json" ]; then
    pass "mmds-json: /latest/meta-data with Accept: application/json: $json"
else
    fail "mmds-json: '$(v MD_JSON)' (want '200 $json')"
fi
if [ "$(v MD_BADTOKEN)" = 401 ]; then
    pass "mmds-bad-token: a wrong token: 401"
else
    fail "mmds-bad-token: status '$(v MD_BADTOKEN)' (want 401)"
fi

if [ $tool = 1 ]; then
    if [ "$(v MD_FIN)" = "200 i-moat-test" ]; then
        pass "mmds-fin: a request and the guest's FIN in one segment (TCP_CORK, shutdown): answered before the close"
    else
        fail "mmds-fin: '$(v MD_FIN)' (want '200 i-moat-test')"
    fi
fi

# ---- garbage, then the device still works
bad=
if [ $tool = 1 ]; then
    # "sent S failed F": most must have left the guest, or nothing was tested
    set -- $(v GARBAGE)
    if [ "${1:-}" != sent ] || [ "${2:-0}" -lt 2700 ]; then
        bad="$bad malformed frames: '$(v GARBAGE)' (want >= 2700 of 3004 sent);"
    fi
    # the device's own host saw them: its RSTs reached the guest
    [ "$(v GARBAGE_IN)" -ge 50 ] 2>/dev/null ||
        bad="$bad the guest got '$(v GARBAGE_IN)' TCP segments back for the garbage (want >= 50 RSTs from the metadata host);"
    set -- $(v UDP)
    if [ "${1:-}" != sent ] || [ "${2:-0}" -lt 4500 ]; then
        bad="$bad UDP flood: '$(v UDP)' (want >= 4500 of 5000 sent);"
    fi
fi
set -- $(v BURST)
[ "${1:-1}" = 0 ] && [ "${2:-0}" -ge 150 ] || bad="$bad 200-ping burst: status and replies '$(v BURST)';"
[ "$(v BIG)" = "0 3" ] || bad="$bad 64 KiB pings: '$(v BIG)' (want '0 3');"
[ "$(v PING_AFTER)" = "0 3" ] || bad="$bad ping afterwards: '$(v PING_AFTER)' (want '0 3');"
[ "$(v MD_AFTER)" = "200 i-moat-test" ] || bad="$bad metadata afterwards: '$(v MD_AFTER)';"
if [ -z "$bad" ]; then
    if [ $tool = 1 ]; then
        pass "garbage: $(v GARBAGE | cut -d' ' -f2) malformed frames ($(v GARBAGE_IN) RSTs etc. back from the metadata host), $(v UDP | cut -d' ' -f2) UDP datagrams to a closed port, ping bursts; then ping 3/3 and the metadata service answers"
    else
        pass "garbage: ping bursts (200 x 1400 bytes, 3 x 65000 bytes); then ping 3/3 and the metadata service answers"
    fi
else
    fail "garbage:$bad"
fi

# ---- the server outlived the frontend
if kill -0 "$dpid" 2>/dev/null; then
    kill "$dpid"
    wait "$dpid"
    drc=$?
else
    wait "$dpid"
    drc="gone before SIGTERM ($?)"
fi
dpid=
if [ "$drc" = 0 ] && ! grep -q "broken" "$tmp/dev.log"; then
    pass "server: outlived the frontend, no queue found broken, exited 0 on SIGTERM"
else
    fail "server: exit '$drc'; $(grep -m 1 broken "$tmp/dev.log")"
    tail -n 10 "$tmp/dev.log"
fi

# ---- bad arguments on the host side: exit 2, the problem named
badarg() {  # NAME WORD OPTIONS: exit 2 and WORD in the message
    name=$1 word=$2
    shift 2
    nsx "$MOAT" device "$@" --socket "$tmp/bad.sock" > "$tmp/bad.out" 2>&1
    rc=$?
    if [ $rc = 2 ] && grep -q -- "$word" "$tmp/bad.out" && [ ! -e "$tmp/bad.sock" ]; then
        pass "bad-args: $name: exit 2, '$(head -n 1 "$tmp/bad.out")'"
    else
        fail "bad-args: $name: exit $rc (want 2), '$(head -n 1 "$tmp/bad.out")'"
    fi
}
badarg "a TAP name of 33 bytes" "tap=NAME" net,tap=nonexistent-with-a-very-long-name
badarg "missing metadata file" "$tmp/none.json" net,tap=$TAP,metadata="$tmp/none.json"
badarg "no tap=" "tap=NAME" net,mmds

echo "$L: $(($(now) - t0)) s (guest $boot_s s)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
