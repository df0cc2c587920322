#!/bin/sh
# End-to-end test of `moat device vsock` (moat's virtio-vsock over
# vhost-user) with Linux's real virtio_vsock driver and the guest agent: the
# default guest (build/guest/{bzImage,initramfs.cpio}) boots under QEMU TCG
# on microvm with -device vhost-user-vsock-device connected to moat's socket
# and moat.agent=1024 on its command line (no command: /init keeps the guest
# up for the agent). The host side is moat's hybrid vsock socket ($tmp/v.sock).
#
#   tests/vhost/vsock.sh            (after `make all guest`)
#
# Checks (each prints PASS or FAIL; a final "N passed, N failed" line; exit
# status 1 if any failed; SKIPPED and exit 0 without QEMU or build/guest):
#   exec        moat exec --wait: stdout and stderr arrive separately, the
#               command's exit status is returned
#   timeout     --timeout 2 -- sleep 60 is killed: status 137, well under 60 s
#   cp-in       1 MiB of random data copied host -> guest (moat cp), the
#               guest's md5sum matches
#   cp-out      1 MiB made in the guest copied guest -> host, md5s match
#   concurrent  20 moat exec at once, each with its own output and status
#   cid         the guest's CID (IOCTL_VM_SOCKETS_GET_LOCAL_CID) is --cid,
#               i.e. QEMU took it from the backend's config space
#   handshake   Firecracker hybrid vsock: "CONNECT 5000\n" and 64 KiB of
#               payload in one write; the reply starts "OK <hostport>\n" and
#               the guest's echo server sends the payload back intact
#   no-listener CONNECT to a port nobody listens on: the socket is closed
#               without an OK
#   guest-conn  a guest connection to CID 2 port 5001 reaches the host's
#               listener on $tmp/v.sock_5001, both directions
#   disconnect  when the guest goes away (reboot -f: QEMU exits), running
#               execs end instead of waiting forever (the backend recreates
#               the device, closing every host connection)
#   reconnect   a second QEMU on the same backend works
#   server      the backend outlives the frontend and exits 0 on SIGTERM
# handshake, no-listener, cid and guest-conn use a small static helper
# (tests/vhost/vsock_tool.c, appended to the initramfs as /bin/vsock-tool,
# since busybox has no vsock tool) and python3 on the host; without a static
# C toolchain or python3 they are SKIPPED (loudly).
#
# QEMU notes (see tests/vhost/run.sh and docs/vhost-user.md): microvm with
# acpi=off and auto-kernel-cmdline=off, virtio_mmio.device= written by hand,
# modern virtio-mmio, guest RAM a shared memfd. vhost-user-vsock keeps the
# event queue in QEMU and gives the backend rx and tx only.
# Env: B (build dir), QEMU (binary), TIMEOUT (seconds for the whole guest,
#      default 240), MOAT (the moat binary, default $B/moat), CC.
set -u
B=${B:-build}
QEMU=${QEMU:-qemu-system-x86_64}
TIMEOUT=${TIMEOUT:-240}
MOAT=${MOAT:-$B/moat}
CC=${CC:-cc}
BZ=$B/guest/bzImage
INITRD=$B/guest/initramfs.cpio
CID=7
passed=0
failed=0

if ! command -v "$QEMU" >/dev/null 2>&1; then
    echo "SKIPPED: vhost-vsock: $QEMU not installed"
    echo "0 passed, 0 failed"
    exit 0
fi
if [ ! -f "$BZ" ] || [ ! -f "$INITRD" ]; then
    echo "SKIPPED: vhost-vsock: $BZ or $INITRD missing (run make guest)"
    echo "0 passed, 0 failed"
    exit 0
fi
if [ ! -x "$MOAT" ]; then
    echo "FAIL: vhost-vsock: $MOAT missing (run make all)"
    echo "0 passed, 1 failed"
    exit 1
fi

tmp=$(mktemp -d)
dpid=
qpid=
cleanup() {
    [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

pass() { echo "PASS: vhost-vsock: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: vhost-vsock: $1"; failed=$((failed + 1)); }
skip() { echo "SKIPPED: vhost-vsock: $1"; }
now() { date +%s; }
t0=$(now)
UDS=$tmp/v.sock
mexec() { "$MOAT" exec --vsock "$UDS" "$@"; }

# ---- the guest helper, appended to the initramfs (a second cpio archive)
tool=0
initrd=$INITRD
if "$CC" -std=gnu11 -O2 -static -s -Wall -Wextra -o "$tmp/vsock-tool" tests/vhost/vsock_tool.c \
        > "$tmp/cc.log" 2>&1 && command -v cpio >/dev/null 2>&1; then
    mkdir -p "$tmp/extra/bin"
    cp "$tmp/vsock-tool" "$tmp/extra/bin/"
    (cd "$tmp/extra" && printf 'bin/vsock-tool\n' | cpio -o -H newc -R 0:0 --quiet) > "$tmp/extra.cpio"
    cat "$INITRD" "$tmp/extra.cpio" > "$tmp/initrd.cpio"
    initrd=$tmp/initrd.cpio
    tool=1
else
    skip "no static C build of tests/vhost/vsock_tool.c or no cpio ($(tail -n 1 "$tmp/cc.log")): cid, handshake, no-listener, guest-conn not run"
fi
py=0
command -v python3 >/dev/null 2>&1 && py=1
[ $py = 1 ] || skip "python3 not installed: handshake, no-listener, guest-conn not run"

# ---- backend + guest
"$MOAT" device vsock --socket "$tmp/vhu.sock" --uds "$UDS" --cid $CID -v > "$tmp/dev.log" 2>&1 &
dpid=$!
i=0
while [ ! -S "$tmp/vhu.sock" ] && [ $i -lt 50 ]; do
    sleep 0.1
    i=$((i + 1))
done
# boot: start the guest in the background ($qpid), output in $tmp/guest.out
boot() {
    timeout "$TIMEOUT" "$QEMU" -M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg \
        -m 256 -nographic -no-reboot -device i8042 \
        -object memory-backend-memfd,id=m,size=256M,share=on -machine memory-backend=m \
        -global virtio-mmio.force-legacy=false \
        -chardev socket,id=c,path="$tmp/vhu.sock" -device vhost-user-vsock-device,chardev=c \
        -kernel "$BZ" -initrd "$initrd" \
        -append "console=ttyS0 reboot=k panic=-1 virtio_mmio.device=512@0xfeb00e00:12 moat.agent=1024" \
        < /dev/null > "$tmp/guest.out" 2>&1 &
    qpid=$!
}

# qemu_gone: wait up to 30 s for QEMU to exit (then kill it)
qemu_gone() {
    i=0
    while kill -0 "$qpid" 2>/dev/null && [ $i -lt 300 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kill "$qpid" 2>/dev/null
    wait "$qpid" 2>/dev/null
    qpid=
}
boot

dump() {
    echo "---- last guest output ----"
    tr -d '\r' < "$tmp/guest.out" | grep -v '^\[ *[0-9]' | tail -n 10
    echo "---- moat device log ----"
    tail -n 10 "$tmp/dev.log"
    echo "-------------------------"
}

# ---- exec: separate streams, exit status (--wait covers the boot)
mexec --wait 120 -- /bin/sh -c 'echo to-stdout; echo to-stderr >&2; exit 7' \
    > "$tmp/e.out" 2> "$tmp/e.err"
rc=$?
if [ $rc = 7 ] && [ "$(cat "$tmp/e.out")" = to-stdout ] && [ "$(cat "$tmp/e.err")" = to-stderr ]; then
    pass "exec: status 7, stdout and stderr separate (guest up after $(($(now) - t0)) s)"
else
    fail "exec: status $rc, stdout '$(head -c 200 "$tmp/e.out")', stderr '$(head -c 200 "$tmp/e.err")'"
    dump
    echo "(the guest agent is not reachable: the other checks are not run)"
    echo "$passed passed, $((failed + 1)) failed"
    exit 1
fi

# ---- timeout: the agent kills the command
s=$(now)
mexec --timeout 2 -- sleep 60 > /dev/null 2>&1
rc=$?
el=$(($(now) - s))
if [ $rc = 137 ] && [ $el -lt 30 ]; then
    pass "timeout: --timeout 2 -- sleep 60: status 137 after $el s"
else
    fail "timeout: status $rc after $el s (want 137, < 30 s)"
fi

# ---- cp-in: host -> guest
head -c 1048576 /dev/urandom > "$tmp/blob"
want=$(md5sum < "$tmp/blob" | cut -d' ' -f1)
"$MOAT" cp --vsock "$UDS" "$tmp/blob" :/tmp/blob > "$tmp/cp.log" 2>&1
rc=$?
got=$(mexec -- md5sum /tmp/blob 2>/dev/null | cut -d' ' -f1)
if [ $rc = 0 ] && [ "$got" = "$want" ]; then
    pass "cp-in: 1 MiB host -> guest, guest md5 $got matches"
else
    fail "cp-in: cp status $rc ($(head -c 200 "$tmp/cp.log")), guest md5 '$got', want $want"
fi

# ---- cp-out: guest -> host (data made in the guest)
gsum=$(mexec -- /bin/sh -c 'dd if=/dev/urandom of=/tmp/gblob bs=65536 count=16 2>/dev/null && md5sum /tmp/gblob' 2>/dev/null | cut -d' ' -f1)
"$MOAT" cp --vsock "$UDS" :/tmp/gblob "$tmp/gblob" > "$tmp/cp2.log" 2>&1
rc=$?
hsum=$(md5sum < "$tmp/gblob" 2>/dev/null | cut -d' ' -f1)
if [ $rc = 0 ] && [ -n "$gsum" ] && [ "$hsum" = "$gsum" ] && [ "$(stat -c %s "$tmp/gblob")" = 1048576 ]; then
    pass "cp-out: 1 MiB guest -> host, md5 $hsum matches"
else
    fail "cp-out: cp status $rc ($(head -c 200 "$tmp/cp2.log")), guest md5 '$gsum', host md5 '$hsum'"
fi

# ---- concurrent: 20 execs at once
s=$(now)
pids=
for i in $(seq 1 20); do
    mexec -- /bin/sh -c "echo job-$i; echo err-$i >&2; exit $((i % 6))" \
        > "$tmp/c$i.out" 2> "$tmp/c$i.err" &
    pids="$pids $!"
done
bad=
i=0
for p in $pids; do
    i=$((i + 1))
    wait "$p"
    rc=$?
    if [ $rc != $((i % 6)) ] || [ "$(cat "$tmp/c$i.out")" != "job-$i" ] ||
       [ "$(cat "$tmp/c$i.err")" != "err-$i" ]; then
        bad="$bad $i(status $rc, '$(head -c 80 "$tmp/c$i.out")')"
    fi
done
if [ -z "$bad" ]; then
    pass "concurrent: 20 execs at once, all right outputs and statuses ($(($(now) - s)) s)"
else
    fail "concurrent: wrong:$bad"
fi

# ---- cid: the guest got the backend's CID from the config space
if [ $tool = 1 ]; then
    got=$(mexec -- /bin/vsock-tool cid 2>&1)
    if [ "$got" = $CID ]; then
        pass "cid: the guest's CID is $CID (from the backend's config space)"
    else
        fail "cid: guest says '$got', want $CID"
    fi
fi

# ---- handshake: CONNECT line + payload pipelined in one write
if [ $tool = 1 ] && [ $py = 1 ]; then
    mexec -- /bin/sh -c '/bin/vsock-tool echo 5000 </dev/null >/dev/null 2>&1 &' > /dev/null 2>&1
    python3 - "$UDS" > "$tmp/hs.log" 2>&1 <<'EOF'
import os, re, socket, sys, time
uds = sys.argv[1]
payload = os.urandom(65536)
for attempt in range(50):       # the echo server may not be listening yet
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(uds)
    s.sendall(b"CONNECT 5000\n" + payload)    # one write, payload right after the line
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    if data:
        break
    time.sleep(0.2)
m = re.match(rb"OK ([0-9]+)\n", data)
if not m:
    print("no OK line: %r" % data[:60]); sys.exit(1)
rest = data[m.end():]
if rest != payload:
    print("echo mismatch: %d bytes back, want %d" % (len(rest), len(payload))); sys.exit(1)
print("OK %s, %d bytes echoed (attempt %d)" % (m.group(1).decode(), len(rest), attempt + 1))
EOF
    if [ $? = 0 ]; then
        pass "handshake: CONNECT + 64 KiB in one write: $(cat "$tmp/hs.log")"
    else
        fail "handshake: $(cat "$tmp/hs.log")"
    fi

    python3 - "$UDS" > "$tmp/nl.log" 2>&1 <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(b"CONNECT 5999\n")
data = s.recv(100)
if data:
    print("got %r" % data); sys.exit(1)
print("closed without a reply")
EOF
    if [ $? = 0 ]; then
        pass "no-listener: CONNECT 5999: $(cat "$tmp/nl.log")"
    else
        fail "no-listener: $(cat "$tmp/nl.log")"
    fi

    # ---- guest-conn: guest -> host CID 2 port 5001 -> $UDS_5001
    python3 - "${UDS}_5001" > "$tmp/gc.log" 2>&1 <<'EOF' &
import os, socket, sys
path = sys.argv[1]
l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
l.bind(path)
l.listen(1)
l.settimeout(60)
c, _ = l.accept()
c.settimeout(20)
data = b""
while True:
    b = c.recv(4096)
    if not b:
        break
    data += b
c.sendall(b"pong:" + data)
c.close()
print("host got %r" % data)
EOF
    lpid=$!
    i=0
    while [ ! -S "${UDS}_5001" ] && [ $i -lt 50 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    got=$(mexec -- /bin/vsock-tool connect 2 5001 ping-from-guest 2>&1)
    rc=$?
    wait $lpid
    lrc=$?
    if [ $rc = 0 ] && [ $lrc = 0 ] && [ "$got" = pong:ping-from-guest ]; then
        pass "guest-conn: guest -> CID 2 port 5001 -> ${UDS##*/}_5001 and back ($(cat "$tmp/gc.log"))"
    else
        fail "guest-conn: guest status $rc, output '$got'; host listener $lrc: $(cat "$tmp/gc.log")"
    fi
fi

# ---- shut the guest down with a command still running: when the frontend
# goes away, host clients must be closed (not left waiting for a dead guest)
mexec -- sleep 1000 > /dev/null 2>&1 &
spid=$!
sleep 1
timeout 60 "$MOAT" exec --vsock "$UDS" -- /sbin/reboot -f > /dev/null 2>&1 &
rpid=$!
qemu_gone
s=$(now)
i=0
while { kill -0 "$spid" 2>/dev/null || kill -0 "$rpid" 2>/dev/null; } && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
if kill -0 "$spid" 2>/dev/null || kill -0 "$rpid" 2>/dev/null; then
    fail "disconnect: host clients still waiting 10 s after the guest went away"
    kill "$spid" "$rpid" 2>/dev/null
else
    wait "$spid"
    src=$?
    pass "disconnect: running execs ended (sleep 1000: status $src) within $(($(now) - s)) s of the guest going away"
fi
wait "$rpid" 2>/dev/null

# ---- reconnect: a second guest on the same backend
boot
got=$(mexec --wait 120 -- /bin/sh -c 'echo second-guest' 2>&1)
rc=$?
if [ $rc = 0 ] && [ "$got" = second-guest ]; then
    pass "reconnect: a second QEMU on the same backend runs commands"
else
    fail "reconnect: status $rc, output '$(echo "$got" | head -c 200)'"
    dump
fi
timeout 60 "$MOAT" exec --vsock "$UDS" -- /sbin/reboot -f > /dev/null 2>&1
qemu_gone
if kill -0 "$dpid" 2>/dev/null; then
    kill "$dpid"
    wait "$dpid"
    drc=$?
else
    wait "$dpid"
    drc="gone before SIGTERM ($?)"
fi
dpid=
if [ "$drc" = 0 ]; then
    pass "server: outlived the frontend, exited 0 on SIGTERM"
else
    fail "server: exited with $drc"
    dump
fi

echo "vhost-vsock: $(($(now) - t0)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
