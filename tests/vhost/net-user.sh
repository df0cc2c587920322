#!/bin/sh
# End-to-end test of `moat device net --net user` (moat's virtio-net over
# vhost-user, its egress policy, and passt as the backend) driven by Linux's
# real virtio_net driver: the default guest boots under QEMU TCG on microvm
# with -netdev vhost-user connected to moat's socket, twice (two devices).
#
#   tests/vhost/net-user.sh            (after `make all guest`; as root)
#
# The network is made here and nothing leaves it: namespace A is the host
# moat and passt run on (10.91.0.1/24, default route via 10.91.0.2, its
# resolv.conf naming 10.91.0.53 through /etc/netns/A), namespace B the
# "internet" behind a veth pair (10.91.0.2 and the resolver 10.91.0.53 on
# the link, 203.0.113.10 and .20 on its loopback). B runs a small HTTP
# server (ports 8001-8004 on every address; /file is 64 KiB of random data,
# /id says which port) and a DNS server answering A queries:
# allowed.test -> 203.0.113.10, blocked.test -> 203.0.113.20, rebind.test ->
# 10.91.0.2. A runs an HTTP server on its loopback only (127.0.0.1:8004,
# 8005). Both log every TCP connection they accept.
#
# Boot 1: --net user,guest_mac=52:54:00:91:00:02 (QEMU's MAC; passt
#   started without the gateway mapping) and
#   default deny; allow 10.91.0.53/32,port=53 (the resolver passt offers);
#   allow 10.91.0.2/32,port=8001-8002,proto=tcp; deny 10.91.0.2/32,port=8002,
#   proto=tcp; allow 10.91.0.2/32,port=8004,proto=tcp; allow-domain
#   allowed.test,port=8003,proto=tcp; allow-domain rebind.test,port=8003,
#   proto=tcp
# Boot 2: --net user,host_loopback and default deny; allow 10.91.0.2/32,
#   port=8004,proto=tcp
# The guest's side is a script (appended to the initramfs as /bin/nu-test)
# that prints "NUT KEY ..." lines; each fetch is /bin/moat-fetch (its own DNS
# client). After each boot the device's counters come from SIGUSR1 (moat
# device writes its state to stdout).
#
# Checks (PASS or FAIL each; a final "N passed, N failed" line; exit status
# 1 if any failed; SKIPPED and exit 0 without QEMU, its vhost-user netdev,
# root, ip, python3, passt or network namespaces):
#   dhcp          passt's DHCP gave eth0 the host's address 10.91.0.1/24,
#                 the default route via 10.91.0.2 and the resolver
#                 10.91.0.53 (boot 1; boot 2's address too)
#   allow         http://10.91.0.2:8001/file: md5 matches B's file
#   deny          http://10.91.0.2:8002/file (covered by the allow range
#                 and by the deny rule): fails, B saw no connection on 8002
#   domain        http://allowed.test:8003/file: resolved through passt to
#                 203.0.113.10, learned by the domain rule, md5 matches
#   domain-port   http://allowed.test:8001/file: the learned address admits
#                 only its rule's port: fails, no connection on B
#   domain-other  http://blocked.test:8003/file (resolves, but no rule names
#                 it): fails, no connection on B
#   rebind        http://rebind.test:8003/file: the answer (10.91.0.2) is
#                 learned, but the preset beats learned addresses (RFC 1918):
#                 fails, no connection on B
#   counters      boot 1's counters say which rule decided: the deny rule
#                 dropped (and allowed nothing), the allow range allowed,
#                 the domain rule allowed, the resolver rule allowed, the
#                 preset 10.0.0.0/8 and the default dropped, link dhcpv4
#                 allowed, 2 DNS answers learned from, 203.0.113.10 learned
#   identity      boot 1: the policy pinned the guest's MAC (guest_mac=) and
#                 the address passt's DHCPACK gave it; ARP and DHCP were
#                 allowed and nothing was dropped for its source
#   gateway       boot 1: http://10.91.0.2:8004/id is B's (b-8004): without
#                 host_loopback the gateway address is the gateway, and A's
#                 loopback server saw nothing
#   loopback      boot 2 (host_loopback): the same URL reaches A's loopback
#                 (loopback-8004), and 127.0.0.1:8005 through the gateway
#                 address, which no rule allows, fails (A saw no connection
#                 on 8005); the counters: the 8004 rule allowed, the preset
#                 10.0.0.0/8 dropped (the gateway's address is private; the
#                 preset comes before the default)
#   server        each device exits 0 on SIGTERM after its frontend left
#
# QEMU notes (see tests/vhost/net.sh and docs/vhost-user.md): microvm with
# acpi=off and auto-kernel-cmdline=off, virtio_mmio.device= written by hand,
# modern virtio-mmio, guest RAM a shared memfd.
# Env: B (build dir), QEMU (binary), TIMEOUT (seconds per boot, default
#      150), MOAT (the moat binary, default $B/moat), KEEP (set: keep the
#      temporary directory: guest output, device logs, server logs).
set -u
B=${B:-build}
QEMU=${QEMU:-qemu-system-x86_64}
TIMEOUT=${TIMEOUT:-150}
MOAT=${MOAT:-$B/moat}
BZ=$B/guest/bzImage
INITRD=$B/guest/initramfs.cpio
GEN=$B/guest/gen_init_cpio
PATH=$PATH:/sbin:/usr/sbin
L=vhost-net-user
passed=0
failed=0

skip_all() {
    echo "SKIPPED: $L: $1"
    echo "0 passed, 0 failed"
    exit 0
}
command -v "$QEMU" >/dev/null 2>&1 || skip_all "$QEMU not installed"
"$QEMU" -netdev help 2>/dev/null | grep -qx vhost-user || skip_all "$QEMU has no vhost-user netdev"
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces, a veth pair)"
command -v ip >/dev/null 2>&1 || skip_all "no ip (iproute2)"
command -v python3 >/dev/null 2>&1 || skip_all "no python3 (the namespaces' HTTP and DNS servers)"
if [ -n "${MOAT_PASST:-}" ]; then
    [ -x "$MOAT_PASST" ] || skip_all "MOAT_PASST=$MOAT_PASST is not executable"
else
    command -v passt >/dev/null 2>&1 || skip_all "passt not installed (apt-get install passt)"
fi
for f in "$BZ" "$INITRD" "$GEN" "$MOAT"; do
    if [ ! -f "$f" ]; then
        echo "FAIL: $L: $f missing (run make all guest)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

tmp=$(mktemp -d)
chmod 755 "$tmp"                # passt (nobody) needs nothing here, but QEMU and moat do
NSA=moat-nu-a-$$
NSB=moat-nu-b-$$
made_a=0
made_b=0
etc_made=0
etc_dir_made=0
dpid=
qpid=
spids=
cleanup() {
    [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
    for p in $spids; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ $made_a = 1 ] && ip netns del "$NSA" 2>/dev/null
    [ $made_b = 1 ] && ip netns del "$NSB" 2>/dev/null
    if [ $etc_made = 1 ]; then
        rm -rf "/etc/netns/$NSA"
        [ $etc_dir_made = 1 ] && rmdir /etc/netns 2>/dev/null
    fi
    if [ -n "${KEEP:-}" ]; then echo "$L: files kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

pass() { echo "PASS: $L: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $L: $1"; failed=$((failed + 1)); }
now() { date +%s; }
t0=$(now)
# (processes in a namespace are started with `ip netns exec` itself, which
# execs them: $! is their pid, not a subshell's)

# ---- the two namespaces and the veth pair between them
if ! ip netns add "$NSA" 2> "$tmp/ns.err"; then
    skip_all "cannot make a network namespace: $(head -c 200 "$tmp/ns.err")"
fi
made_a=1
ip netns add "$NSB" 2> "$tmp/ns.err" || skip_all "cannot make a network namespace: $(head -c 200 "$tmp/ns.err")"
made_b=1
if ! { ip -n "$NSA" link add nu0 type veth peer name nu1 netns "$NSB" &&
       ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up &&
       ip -n "$NSA" addr add 10.91.0.1/24 dev nu0 && ip -n "$NSA" link set nu0 up &&
       ip -n "$NSA" route add default via 10.91.0.2 &&
       ip -n "$NSB" addr add 10.91.0.2/24 dev nu1 && ip -n "$NSB" addr add 10.91.0.53/24 dev nu1 &&
       ip -n "$NSB" addr add 203.0.113.10/32 dev lo && ip -n "$NSB" addr add 203.0.113.20/32 dev lo &&
       ip -n "$NSB" link set nu1 up; } 2> "$tmp/veth.err"; then
    skip_all "cannot set up the veth pair between the namespaces: $(head -c 200 "$tmp/veth.err")"
fi
# A's resolver, which passt reads and offers the guest by DHCP
[ -d /etc/netns ] || etc_dir_made=1
mkdir -p "/etc/netns/$NSA"
etc_made=1
echo "nameserver 10.91.0.53" > "/etc/netns/$NSA/resolv.conf"

# ---- the servers: HTTP (one thread a connection) and DNS (A records)
cat > "$tmp/serve.py" <<'EOF'
# serve.py LOG READY BLOB SPEC...: SPEC http:ADDR:PORT or dns:ADDR:PORT.
# Every accepted TCP connection and DNS query is logged to LOG.
import socket, struct, sys, threading
log_path, ready, blob_path = sys.argv[1:4]
blob = open(blob_path, "rb").read()
lock = threading.Lock()
def log(line):
    with lock:
        with open(log_path, "a") as f:
            f.write(line + "\n")
def http_conn(c, name, port):
    try:
        c.settimeout(20)
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 8192:
            b = c.recv(4096)
            if not b:
                break
            head += b
        parts = head.split(b" ")
        path = parts[1].decode() if len(parts) > 1 else "/"
        if path == "/file":
            body, st = blob, "200 OK"
        elif path == "/id":
            body, st = ("%s-%d\n" % (name, port)).encode(), "200 OK"
        else:
            body, st = b"not found\n", "404 Not Found"
        log("get %s %d %s %s" % (name, port, path, st.split()[0]))
        c.sendall(("HTTP/1.0 %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (st, len(body))).encode() + body)
    except OSError as e:
        log("error %s %d %s" % (name, port, e))
    finally:
        c.close()
def http(addr, port, name):
    l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, port))
    l.listen(16)
    def run():
        while True:
            c, peer = l.accept()
            log("conn %s:%d from %s" % (c.getsockname()[0], port, peer[0]))
            threading.Thread(target=http_conn, args=(c, name, port), daemon=True).start()
    threading.Thread(target=run, daemon=True).start()
NAMES = {"allowed.test": "203.0.113.10", "blocked.test": "203.0.113.20", "rebind.test": "10.91.0.2"}
def dns(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    def run():
        while True:
            q, peer = s.recvfrom(512)
            if len(q) < 17:
                continue
            qid, flags = struct.unpack("!HH", q[:4])
            i, labels = 12, []
            while i < len(q) and q[i] != 0:
                labels.append(q[i + 1:i + 1 + q[i]].decode(errors="replace"))
                i += 1 + q[i]
            qend = i + 5
            if qend > len(q):
                continue
            qtype = struct.unpack("!H", q[i + 1:i + 3])[0]
            name = ".".join(labels).lower()
            ip = NAMES.get(name)
            rcode = 0 if ip else 3
            ans = b""
            if ip and qtype == 1:
                ans = struct.pack("!HHHIH", 0xC00C, 1, 1, 300, 4) + socket.inet_aton(ip)
            rflags = 0x8080 | (flags & 0x0100) | rcode
            r = struct.pack("!HHHHHH", qid, rflags, 1, 1 if ans else 0, 0, 0) + q[12:qend] + ans
            s.sendto(r, peer)
            log("dns %s type %d -> %s" % (name, qtype, ip if ans else "none"))
    threading.Thread(target=run, daemon=True).start()
for spec in sys.argv[4:]:
    kind, addr, port = spec.split(":")
    if kind == "dns":
        dns(addr, int(port))
    else:
        http(addr, int(port), kind)
open(ready, "w").close()
threading.Event().wait()
EOF
head -c 65536 /dev/urandom > "$tmp/blob"
want=$(md5sum < "$tmp/blob" | cut -d' ' -f1)
: > "$tmp/b.log"
: > "$tmp/a.log"
ip netns exec "$NSB" python3 "$tmp/serve.py" "$tmp/b.log" "$tmp/b.ready" "$tmp/blob" \
    b:0.0.0.0:8001 b:0.0.0.0:8002 b:0.0.0.0:8003 b:0.0.0.0:8004 dns:10.91.0.53:53 > "$tmp/b.err" 2>&1 &
spids="$spids $!"
ip netns exec "$NSA" python3 "$tmp/serve.py" "$tmp/a.log" "$tmp/a.ready" "$tmp/blob" \
    loopback:127.0.0.1:8004 loopback:127.0.0.1:8005 > "$tmp/a.err" 2>&1 &
spids="$spids $!"
i=0
while { [ ! -f "$tmp/b.ready" ] || [ ! -f "$tmp/a.ready" ]; } && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
if [ ! -f "$tmp/b.ready" ] || [ ! -f "$tmp/a.ready" ]; then
    fail "setup: the servers did not start: $(tail -n 3 "$tmp/b.err" "$tmp/a.err")"
    echo "$passed passed, $failed failed"
    exit 1
fi

# ---- the guest's script, appended to the initramfs
cat > "$tmp/nu-test" <<'EOF'
#!/bin/sh
# tests/vhost/net-user.sh's guest side: "NUT KEY ..." lines on the console.
r() { echo "NUT $*"; }
# what /init's DHCP (udhcpc, from passt) set up
r ADDR $(ip -4 addr show dev eth0 | sed -n 's/.*inet \([0-9./]*\) .*/\1/p')
r ROUTE $(ip route show default | sed -n 's/^default via \([0-9.]*\) dev \([a-z0-9]*\).*/\1 \2/p' | head -n 1)
r DNS $(sed -n 's/^nameserver //p' /etc/resolv.conf | head -n 1)
# fetch KEY URL SECONDS: "NUT KEY status md5-of-body first-line-of-body"
fetch() {
    rm -f /tmp/b.$1
    moat-fetch -q -T $3 -O /tmp/b.$1 "$2" > /tmp/e.$1 2>&1
    rc=$?
    if [ -f /tmp/b.$1 ]; then
        set -- $1 $rc $(md5sum < /tmp/b.$1 | cut -d' ' -f1) "$(head -c 32 /tmp/b.$1 | head -n 1 | tr -dc 'a-z0-9-')"
    else
        set -- $1 $rc - "$(head -n 1 /tmp/e.$1 | tr ' ' _)"
    fi
    echo "NUT $*" > /tmp/r.$1
}
case "$1" in
policy)
    fetch ALLOW http://10.91.0.2:8001/file 20
    fetch DOMAIN http://allowed.test:8003/file 20
    fetch GATEWAY http://10.91.0.2:8004/id 20
    # the ones that must fail, at once (each waits out its connect timeout)
    fetch DENY http://10.91.0.2:8002/file 4 &
    fetch DOMAIN_PORT http://allowed.test:8001/file 4 &
    fetch DOMAIN_OTHER http://blocked.test:8003/file 4 &
    fetch REBIND http://rebind.test:8003/file 4 &
    wait
    cat /tmp/r.ALLOW /tmp/r.DOMAIN /tmp/r.GATEWAY /tmp/r.DENY /tmp/r.DOMAIN_PORT /tmp/r.DOMAIN_OTHER /tmp/r.REBIND
    ;;
loopback)
    fetch LOOPBACK http://10.91.0.2:8004/id 20
    fetch LOOPBACK_DENY http://10.91.0.2:8005/id 4
    cat /tmp/r.LOOPBACK /tmp/r.LOOPBACK_DENY
    ;;
esac
r DONE
EOF
printf 'file /bin/nu-test %s 0755 0 0\n' "$tmp/nu-test" > "$tmp/extra.list"
if ! "$GEN" "$tmp/extra.list" > "$tmp/extra.cpio" 2> "$tmp/gen.log"; then
    fail "setup: $GEN: $(head -c 200 "$tmp/gen.log")"
    echo "$passed passed, $failed failed"
    exit 1
fi
cat "$INITRD" "$tmp/extra.cpio" > "$tmp/initrd.cpio"

# boot NAME MODE DEVICE-ARGS...: moat device net in namespace A (stdout and
# stderr in $tmp/NAME.dev), QEMU with the guest running /bin/nu-test MODE
# (console in $tmp/NAME.out); then SIGUSR1 (the counters, $tmp/NAME.stats)
# and SIGTERM (the device's status in $drc). Sets $qrc, $boot_s.
boot() {
    name=$1 mode=$2
    shift 2
    s=$(now)
    ip netns exec "$NSA" "$MOAT" device net --socket "$tmp/$name.sock" "$@" -v > "$tmp/$name.dev" 2>&1 &
    dpid=$!
    i=0
    while [ ! -S "$tmp/$name.sock" ] && [ $i -lt 100 ] && kill -0 "$dpid" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    timeout "$TIMEOUT" "$QEMU" -M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg \
        -m 256 -nographic -no-reboot -device i8042 \
        -object memory-backend-memfd,id=m,size=256M,share=on -machine memory-backend=m \
        -global virtio-mmio.force-legacy=false \
        -chardev socket,id=n,path="$tmp/$name.sock" -netdev vhost-user,id=net0,chardev=n \
        -device virtio-net-device,netdev=net0,mac=52:54:00:91:00:02 \
        -kernel "$BZ" -initrd "$tmp/initrd.cpio" \
        -append "console=ttyS0 reboot=k panic=-1 virtio_mmio.device=512@0xfeb00e00:12 moat.net=dhcp -- /bin/nu-test $mode" \
        < /dev/null > "$tmp/$name.raw" 2>&1 &
    qpid=$!
    wait "$qpid"
    qrc=$?
    qpid=
    tr -d '\r' < "$tmp/$name.raw" > "$tmp/$name.out"
    boot_s=$(($(now) - s))
    # the device's state: wait for the end of what SIGUSR1 writes
    drc=
    if kill -0 "$dpid" 2>/dev/null; then
        kill -USR1 "$dpid"
        i=0
        while ! grep -q '^\[moat device net: end\]' "$tmp/$name.dev" && [ $i -lt 50 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        sed -n '/^\[moat device net: stats\]/,/^\[moat device net: end\]/p' "$tmp/$name.dev" > "$tmp/$name.stats"
        kill "$dpid"
        wait "$dpid"
        drc=$?
    else
        wait "$dpid"
        drc="gone before SIGTERM ($?)"
        : > "$tmp/$name.stats"
    fi
    dpid=
}

# v NAME KEY: the rest of the guest's line "NUT KEY ..."
v() { sed -n "s/^NUT $2 //p" "$tmp/$1.out" | tail -n 1; }
# row NAME KIND RULE: "frames-ok frames-drop" of that row of the counters
row() {
    awk -v kind="$2" -v rule="$3" '
        $1 ~ /^[0-9]+$/ && $2 == kind && NF >= 7 {
            r = $3
            for (i = 4; i <= NF - 4; i++) r = r " " $i
            if (r == rule) { print $(NF - 3), $(NF - 1); exit }
        }' "$tmp/$1.stats"
}
dump() {
    echo "---- last guest output ($1) ----"
    grep -v '^\[ *[0-9]' "$tmp/$1.out" | tail -n 25
    echo "---- moat device log ($1) ----"
    grep -v '^ *[0-9]' "$tmp/$1.dev" | tail -n 15
    echo "-------------------------"
}
# conns LOG ADDR:PORT: how many connections that server accepted there
conns() { grep -c "^conn $2 " "$tmp/$1.log"; }
# failed_fetch KEY: the fetch failed (status 4: no connection) and got no body
failed_fetch() { set -- $(v p "$1"); [ "${1:-}" = 4 ] && [ "${2:-}" = - ]; }

# ================= boot 1: the policy, no host_loopback
boot p policy --net user,guest_mac=52:54:00:91:00:02 --net-default deny \
    --net-allow 10.91.0.53/32,port=53 \
    --net-allow 10.91.0.2/32,port=8001-8002,proto=tcp \
    --net-deny 10.91.0.2/32,port=8002,proto=tcp \
    --net-allow 10.91.0.2/32,port=8004,proto=tcp \
    --net-allow-domain allowed.test,port=8003,proto=tcp \
    --net-allow-domain rebind.test,port=8003,proto=tcp
boot1_s=$boot_s
drc1=$drc
if [ $qrc -ne 0 ] || ! grep -qx 'NUT DONE' "$tmp/p.out"; then
    fail "boot 1: QEMU exited with $qrc (124: timeout) or the guest script did not finish"
    dump p
fi

# ---- dhcp
if [ "$(v p ADDR)" = 10.91.0.1/24 ] && [ "$(v p ROUTE)" = "10.91.0.2 eth0" ] && [ "$(v p DNS)" = 10.91.0.53 ]; then
    pass "dhcp: passt's lease gave eth0 10.91.0.1/24 (the host's address), default via 10.91.0.2, nameserver 10.91.0.53"
else
    fail "dhcp: address '$(v p ADDR)', route '$(v p ROUTE)', nameserver '$(v p DNS)' (want 10.91.0.1/24, '10.91.0.2 eth0', 10.91.0.53)"
fi

# ---- allow, deny
set -- $(v p ALLOW)
allow_ok=0
if [ "${1:-}" = 0 ] && [ "${2:-}" = "$want" ] && [ "$(conns b 10.91.0.2:8001)" -ge 1 ]; then
    allow_ok=1
    pass "allow: http://10.91.0.2:8001/file through passt, md5 $want matches"
else
    fail "allow: fetch '$(v p ALLOW)' (status md5 ...), want 0 $want; B's connections on 8001: $(conns b 10.91.0.2:8001)"
fi
# a failure means something only where the network works: each check that
# wants a fetch to fail needs its control (the same path allowed) to pass
if [ $allow_ok = 0 ]; then
    fail "deny: not judged: the allowed fetch on the same address failed too"
elif failed_fetch DENY && [ "$(conns b 10.91.0.2:8002)" = 0 ]; then
    pass "deny: http://10.91.0.2:8002/file fails (the deny rule beats the allow range), B saw no connection on 8002"
else
    fail "deny: fetch '$(v p DENY)' (want status 4, no body); B's connections on 8002: $(conns b 10.91.0.2:8002)"
fi

# ---- domain rules
set -- $(v p DOMAIN)
domain_ok=0
if [ "${1:-}" = 0 ] && [ "${2:-}" = "$want" ] && [ "$(conns b 203.0.113.10:8003)" -ge 1 ] &&
   grep -q '^dns allowed.test type 1 -> 203.0.113.10' "$tmp/b.log"; then
    domain_ok=1
    pass "domain: http://allowed.test:8003/file: resolved by B's DNS through passt, 203.0.113.10 learned, md5 matches"
else
    fail "domain: fetch '$(v p DOMAIN)', want 0 $want; B's connections on 203.0.113.10:8003: $(conns b 203.0.113.10:8003); DNS log: $(grep '^dns' "$tmp/b.log" | tr '\n' ';')"
fi
if [ $domain_ok = 0 ]; then
    fail "domain-port, domain-other, rebind: not judged: the allowed domain fetch failed"
elif failed_fetch DOMAIN_PORT && [ "$(conns b 203.0.113.10:8001)" = 0 ]; then
    pass "domain-port: http://allowed.test:8001/file fails: the learned address admits only its rule's port 8003"
else
    fail "domain-port: fetch '$(v p DOMAIN_PORT)' (want status 4, no body); B's connections on 203.0.113.10:8001: $(conns b 203.0.113.10:8001)"
fi
if [ $domain_ok = 0 ]; then
    :
elif failed_fetch DOMAIN_OTHER && [ "$(conns b 203.0.113.20:8003)" = 0 ] &&
   grep -q '^dns blocked.test type 1 -> 203.0.113.20' "$tmp/b.log"; then
    pass "domain-other: blocked.test resolves (203.0.113.20) but no rule names it: the fetch fails, no connection on B"
else
    fail "domain-other: fetch '$(v p DOMAIN_OTHER)' (want status 4, no body); B's connections on 203.0.113.20:8003: $(conns b 203.0.113.20:8003); DNS log: $(grep '^dns' "$tmp/b.log" | tr '\n' ';')"
fi
if [ $domain_ok = 0 ]; then
    :
elif failed_fetch REBIND && [ "$(conns b 10.91.0.2:8003)" = 0 ] &&
     grep -q '^dns rebind.test type 1 -> 10.91.0.2' "$tmp/b.log"; then
    pass "rebind: rebind.test -> 10.91.0.2 is learned, but the preset (RFC 1918) beats learned addresses: the fetch fails"
else
    fail "rebind: fetch '$(v p REBIND)' (want status 4, no body); B's connections on 10.91.0.2:8003: $(conns b 10.91.0.2:8003); DNS log: $(grep '^dns' "$tmp/b.log" | tr '\n' ';')"
fi

# ---- counters: which rule decided
bad=
ok_at_least() {    # KIND RULE N: frames-ok >= N
    set -- "$1" "$2" "$3" $(row p "$1" "$2")
    [ -n "${4:-}" ] && [ "$4" -ge "$3" ] || bad="$bad $1 '$2' allowed ${4:-no row} (want >= $3);"
}
drop_at_least() {  # KIND RULE N: frames-drop >= N
    set -- "$1" "$2" "$3" $(row p "$1" "$2")
    [ -n "${5:-}" ] && [ "$5" -ge "$3" ] || bad="$bad $1 '$2' dropped ${5:-no row} (want >= $3);"
}
ok_at_least step "link dhcpv4" 1
ok_at_least allow 10.91.0.53/32,port=53 3
ok_at_least allow 10.91.0.2/32,port=8001-8002,proto=tcp 3
ok_at_least allow 10.91.0.2/32,port=8004,proto=tcp 3
ok_at_least domain allowed.test,port=8003,proto=tcp 3
drop_at_least deny 10.91.0.2/32,port=8002,proto=tcp 1
drop_at_least preset 10.0.0.0/8 1
drop_at_least step "default deny" 2
set -- $(row p deny 10.91.0.2/32,port=8002,proto=tcp)
[ "${1:-x}" = 0 ] || bad="$bad the deny rule allowed '${1:-no row}' frames;"
set -- $(row p domain rebind.test,port=8003,proto=tcp)
[ "${1:-x}" = 0 ] || bad="$bad the rebind.test rule allowed '${1:-no row}' frames (the preset comes first);"
learned=$(sed -n 's/^dns: [0-9]* responses seen, \([0-9]*\) learned from.*/\1/p' "$tmp/p.stats")
[ "${learned:-0}" -ge 2 ] || bad="$bad learned from '${learned:-?}' DNS answers (want >= 2: allowed.test, rebind.test);"
grep -q '^  *203\.0\.113\.10  *allowed\.test,port=8003,proto=tcp' "$tmp/p.stats" ||
    bad="$bad 203.0.113.10 not in the learned table;"
if [ -z "$bad" ]; then
    d=$(row p deny 10.91.0.2/32,port=8002,proto=tcp)
    a=$(row p allow 10.91.0.2/32,port=8001-8002,proto=tcp)
    m=$(row p domain allowed.test,port=8003,proto=tcp)
    pr=$(row p preset 10.0.0.0/8)
    df=$(row p step "default deny")
    pass "counters (frames ok/dropped): deny 8002 ${d% *}/${d#* }, allow 8001-8002 ${a% *}/${a#* }, domain allowed.test ${m% *}/${m#* }, preset 10/8 ${pr% *}/${pr#* }, default ${df% *}/${df#* }; $learned DNS answers learned from"
else
    fail "counters:$bad"
    grep -E '^ *[0-9]+  (step|allow|deny|domain|preset) ' "$tmp/p.stats" | awk '$(NF-3) != 0 || $(NF-1) != 0'
    grep -E '^(dns|learned):' "$tmp/p.stats"
fi

# ---- identity: the guest's MAC (guest_mac=, QEMU's) and the address
# passt's DHCP gave it are pinned, and nothing the guest sent was dropped
# for its source
set -- $(row p step "source mac not the guest's") $(row p step "source address not the guest's") \
    $(row p step arp) $(row p step "link dhcpv4")
if grep '^guest: 1 MACs, 0 IPv4, 0 IPv6 addresses given; 10\.91\.0\.1 (DHCP)' "$tmp/p.stats" |
       grep -q '; 0 DHCP replies refused' &&
   [ "${2:-x}" = 0 ] && [ "${4:-x}" = 0 ] && [ "${5:-0}" -ge 1 ] && [ "${6:-x}" = 0 ] &&
   [ "${7:-0}" -ge 1 ] && [ "${8:-x}" = 0 ]; then
    pass "identity: MAC 52:54:00:91:00:02 and 10.91.0.1 (from passt's DHCPACK, sent from the default gateway 10.91.0.2) pinned; ARP and DHCP allowed ($5, $7), no frame dropped for its source"
else
    fail "identity: $(grep '^guest:' "$tmp/p.stats"); source mac / source address / arp / dhcpv4 rows (ok drop): ${1:-?} ${2:-?} / ${3:-?} ${4:-?} / ${5:-?} ${6:-?} / ${7:-?} ${8:-?}"
fi

# ---- gateway: without host_loopback the gateway address is B's
set -- $(v p GATEWAY)
if [ "${1:-}" = 0 ] && [ "${3:-}" = b-8004 ] && [ "$(conns a 127.0.0.1:8004)" = 0 ]; then
    pass "gateway: without host_loopback http://10.91.0.2:8004/id is the gateway's (b-8004); A's loopback saw nothing"
else
    fail "gateway: fetch '$(v p GATEWAY)' (want 0 md5 b-8004); A's loopback connections on 8004: $(conns a 127.0.0.1:8004)"
fi

# ================= boot 2: host_loopback
boot l loopback --net user,host_loopback --net-default deny --net-allow 10.91.0.2/32,port=8004,proto=tcp
boot2_s=$boot_s
drc2=$drc
if [ $qrc -ne 0 ] || ! grep -qx 'NUT DONE' "$tmp/l.out"; then
    fail "boot 2: QEMU exited with $qrc (124: timeout) or the guest script did not finish"
    dump l
fi
set -- $(v l LOOPBACK)
lo_ok=$1 lo_id=${3:-}
set -- $(v l LOOPBACK_DENY)
set -- ${1:-} ${2:-} $(row l allow 10.91.0.2/32,port=8004,proto=tcp) $(row l preset 10.0.0.0/8)
if [ "$(v l ADDR)" = 10.91.0.1/24 ] && [ "$lo_ok" = 0 ] && [ "$lo_id" = loopback-8004 ] &&
   [ "$(conns a 127.0.0.1:8004)" -ge 1 ] && [ "${1:-}" = 4 ] && [ "${2:-}" = - ] &&
   [ "$(conns a 127.0.0.1:8005)" = 0 ] && [ "${3:-0}" -ge 3 ] && [ "${6:-0}" -ge 1 ]; then
    pass "loopback: with host_loopback http://10.91.0.2:8004/id reaches A's 127.0.0.1:8004 (loopback-8004; the 8004 rule allowed $3 frames); 8005, which no rule allows, fails (the preset 10.0.0.0/8 dropped $6 frames), A saw no connection on it"
else
    fail "loopback: address '$(v l ADDR)'; 8004 '$(v l LOOPBACK)' (want 0 md5 loopback-8004), A's connections $(conns a 127.0.0.1:8004); 8005 '$(v l LOOPBACK_DENY)' (want 4 -), A's connections $(conns a 127.0.0.1:8005); 8004 rule ok/drop '${3:-} ${4:-}' (want >= 3 ok), preset 10.0.0.0/8 ok/drop '${5:-} ${6:-}' (want >= 1 dropped)"
fi

# ---- the servers
if [ "$drc1" = 0 ] && [ "$drc2" = 0 ] && ! grep -q broken "$tmp/p.dev" "$tmp/l.dev"; then
    pass "server: both devices outlived their frontend, found no queue broken, exited 0 on SIGTERM"
else
    fail "server: exit statuses '$drc1' and '$drc2'; $(grep -h -m 1 broken "$tmp/p.dev" "$tmp/l.dev")"
fi

echo "$L: $(($(now) - t0)) s (boots $boot1_s s and $boot2_s s)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
