#!/bin/sh
# Benchmark: TCP throughput and round-trip time of the same Linux guest
# (build/guest) under QEMU TCG (microvm), with
#   A  moat's virtio-net over vhost-user: `moat device net,tap=TAP --socket S`
#      behind QEMU's -netdev vhost-user + -device virtio-net-device;
#   B  QEMU's own virtio-net on the same TAP: -netdev tap,vhost=off;
#   C  as A with an egress policy of 100 rules (policy="default allow;
#      no-preset; ..."): 50 deny and 49 allow rules that match none of the
#      benchmark's frames, then `allow HOST/32`, which matches them all, so
#      every frame the guest sends is compared with all 100 rules.
# Results and the exact command: docs/BENCHMARKS.md.
#
#   bench/net.sh          (after `make all guest bench-tools`; `make bench-net`)
#
# Everything stays in a network namespace the script makes (and always
# deletes): one TAP there (10.90.0.1/24) is used by each case in turn, so
# moat (A, C) and QEMU (B) both run inside the namespace; the guest is
# 10.90.0.2 with the same MAC in every case. The iperf3 servers run there
# too (one-shot, fresh for every boot): port 5201 receives what the guest
# sends (tx), port 5202 sends to the guest (rx, iperf3 -R).
# The guest (bench/guest/netbench.sh) pings 10.90.0.1 (PINGS times, 0.2 s
# apart, after one unmeasured ping for ARP) and runs iperf3 -c for SECS s
# each way after 1 s omitted. Debian's iperf3 is dynamically linked: it is
# copied with the libraries ldd lists and the ELF interpreter into a cpio
# appended to the default initramfs ($B/bench/net-initrd.cpio).
#
# ROUNDS rounds; each boots the guest once per case, the order of the cases
# rotating from round to round (A B C, B C A, C A B, ...) so that load from
# other work on the host spreads over all of them. Per boot: tx and rx in
# Mbit/s (the receiver's figure), RTT = the median of its PINGS ping times,
# and the host CPU time of the boot: QEMU's (all its threads, the emulated
# vCPU included; from the shell's `times`) and the moat device's (from
# /proc/PID/stat), "CPU s" their sum.
# Printed: the median over the rounds of each and the min..max spread;
# A/B and C/A as the median of the per-round ratios (the cases of one round
# run within a minute of each other: load that drifts over the run
# cancels) with their range and the ratio of the medians; each target
# checked on the median of the per-round ratios, and per-boot tx/rx TCP
# retransmissions. Under TCG the guest CPU is emulated, so this compares
# the two devices' paths (vhost-user + moat's I/O thread vs QEMU's
# virtio-net + tap in its main loop), not real networks.
#
# The guest's clock: the guest's TSC calibration against the emulated PIT
# fails when the host is busy, leaving it on 4 ms jiffies; the command line
# therefore gives it the host's TSC rate (tsc_early_khz=, measured by
# $B/bench/tsc_khz; TCG's TSC is the host's) and tsc=reliable.
#
# Needs root (ip netns, a TAP), /dev/net/tun, iproute2, QEMU, iperf3, cpio:
# without one it prints SKIPPED and exits 0. Exit 1 if a case gave no
# result (its guest output and device log are printed).
# Env: B, QEMU, MOAT, ROUNDS (5), BENCH_SECS (5), PINGS (20),
#      TSC_KHZ (default: measured), CASES (default "A B C"),
#      BENCH_KEEP (a directory: every boot's guest output, device log and
#      iperf3 server log are copied there at the end).
set -u
B=${B:-build}
QEMU=${QEMU:-qemu-system-x86_64}
MOAT=${MOAT:-$B/moat}
ROUNDS=${ROUNDS:-5}
SECS=${BENCH_SECS:-5}
PINGS=${PINGS:-20}
CASES=${CASES:-A B C}
PATH=$PATH:/sbin:/usr/sbin
HERE=$(dirname "$0")
HOST_IP=10.90.0.1
GUEST_IP=10.90.0.2
MAC=52:54:00:5a:00:02
TAP=nbtap0              # inside the namespace: no clash with the host's

skip() {
    echo "SKIPPED: bench/net: $1; nothing measured"
    exit 0
}
command -v "$QEMU" >/dev/null 2>&1 || skip "$QEMU not installed"
command -v iperf3 >/dev/null 2>&1 || skip "iperf3 not installed (apt-get install iperf3; scripts/deps.sh)"
for t in ip cpio ldd; do
    command -v $t >/dev/null 2>&1 || skip "$t not installed"
done
[ "$(id -u)" = 0 ] || skip "needs root (ip netns, a TAP device)"
[ -c /dev/net/tun ] || skip "no /dev/net/tun"
ip netns list >/dev/null 2>&1 || skip "this ip has no 'ip netns' (busybox's?)"
for f in "$MOAT" "$B/guest/bzImage" "$B/guest/initramfs.cpio" "$B/bench/tsc_khz"; do
    if [ ! -e "$f" ]; then
        echo "bench/net: $f missing (make all guest bench-tools)" >&2
        exit 1
    fi
done
TCK=$(getconf CLK_TCK 2>/dev/null) || TCK=100
KHZ=${TSC_KHZ:-$("$B/bench/tsc_khz")} || { echo "bench/net: $B/bench/tsc_khz failed" >&2; exit 1; }

NS=moat-bench-net-$$
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/moat-nbench.XXXXXX")
pids=
ns_made=0
cleanup() {
    for p in $pids; do
        kill "$p" 2>/dev/null
    done
    if [ $ns_made = 1 ]; then
        # whatever still runs in our namespace was started by this script
        for p in $(ip netns pids "$NS" 2>/dev/null); do
            kill "$p" 2>/dev/null
        done
        wait 2>/dev/null
        ip netns delete "$NS" 2>/dev/null
    fi
    wait 2>/dev/null
    if [ -n "${BENCH_KEEP:-}" ] && [ -d "$tmp" ]; then
        mkdir -p "$BENCH_KEEP" && cp -r "$tmp"/. "$BENCH_KEEP"/ && echo "bench/net: raw outputs in $BENCH_KEEP"
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# ---- the bench initramfs: the default one + iperf3, its libraries, the
# ELF interpreter and the guest script (a second cpio archive)
root=$B/bench/net-root
rm -rf "$root"
mkdir -p "$root/usr/bin" "$B/bench"
cp "$(command -v iperf3)" "$root/usr/bin/iperf3"
cp "$HERE/guest/netbench.sh" "$root/netbench.sh"
chmod 755 "$root/netbench.sh"
libs=$(ldd "$root/usr/bin/iperf3" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
[ -n "$libs" ] || { echo "bench/net: ldd lists nothing for iperf3" >&2; exit 1; }
for l in $libs; do
    mkdir -p "$root$(dirname "$l")"
    cp -L "$l" "$root$l"
done
sh "$HERE/../tests/nested/mkcpio.sh" "$root" "$B/bench/net-extra.cpio" || exit 1
cat "$B/guest/initramfs.cpio" "$B/bench/net-extra.cpio" > "$B/bench/net-initrd.cpio"
rm -rf "$root"

# ---- the namespace and its TAP
ip netns add "$NS" || { echo "bench/net: ip netns add $NS failed" >&2; exit 1; }
ns_made=1
nsx() { ip netns exec "$NS" "$@"; }
nsx ip link set lo up &&
    nsx ip tuntap add dev $TAP mode tap &&
    nsx ip addr add $HOST_IP/24 dev $TAP &&
    nsx ip link set $TAP up || { echo "bench/net: setting up $TAP in $NS failed" >&2; exit 1; }

# ---- case C's policy: 100 rules, only the last matches the traffic
POLICY="default allow; no-preset"
i=0
while [ $i -lt 25 ]; do
    POLICY="$POLICY; deny 10.91.$i.0/24; deny $HOST_IP/32,port=$((6000 + i)),proto=tcp"
    i=$((i + 1))
done
i=1
while [ $i -le 49 ]; do
    POLICY="$POLICY; allow 192.0.2.$i/32,port=443,proto=tcp"
    i=$((i + 1))
done
POLICY="$POLICY; allow $HOST_IP/32"
nrules=$(echo "$POLICY" | tr ';' '\n' | grep -c -E '^ *(allow|deny) ')
[ "$nrules" = 100 ] || { echo "bench/net: case C's policy has $nrules rules, not 100" >&2; exit 1; }

label() {
    case $1 in
    A) echo "A moat vhost-user-net" ;;
    B) echo "B QEMU virtio-net, tap" ;;
    C) echo "C moat, 100-rule policy" ;;
    esac
}

# median of the numbers on stdin (the lower middle one of an even count)
median() { sort -g | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}'; }

# wait_for COUNT COMMAND...: up to COUNT tenths of a second until COMMAND succeeds
wait_for() {
    n=$1
    shift
    i=0
    while ! "$@" 2>/dev/null && [ $i -lt "$n" ]; do
        sleep 0.1
        i=$((i + 1))
    done
}
listening() { [ "$(nsx ss -Hltn "( sport = :5201 or sport = :5202 )" | wc -l)" -ge 2 ]; }

# boot CASE ROUND: one guest; results appended to $tmp/CASE.{tx,rx,rtt}
boot() {
    c=$1
    out=$tmp/$c.$2
    # (not through nsx: a function in the background is a subshell, and
    # $! would be its pid, not the server's)
    ip netns exec "$NS" iperf3 -s -1 -B $HOST_IP -p 5201 > "$out.s1" 2>&1 &
    s1=$!
    ip netns exec "$NS" iperf3 -s -1 -B $HOST_IP -p 5202 > "$out.s2" 2>&1 &
    s2=$!
    pids="$s1 $s2"
    wait_for 50 listening
    dpid=
    pfx=
    if [ "$c" = B ]; then
        pfx="ip netns exec $NS"
        net="-netdev tap,id=n,ifname=$TAP,script=no,downscript=no,vhost=off"
    else
        opts="net,tap=$TAP,mac=$MAC"
        [ "$c" = C ] && opts="$opts,policy=\"$POLICY\""
        rm -f "$tmp/vhu.sock"
        ip netns exec "$NS" "$MOAT" device "$opts" --socket "$tmp/vhu.sock" -v > "$out.dev" 2>&1 &
        dpid=$!
        pids="$pids $dpid"
        wait_for 50 test -S "$tmp/vhu.sock"
        net="-chardev socket,id=c,path=$tmp/vhu.sock -netdev vhost-user,id=n,chardev=c"
    fi
    # in a subshell whose `times` then gives QEMU's CPU time (its children's)
    (
        # shellcheck disable=SC2086
        $pfx timeout $((120 + 2 * SECS)) "$QEMU" -M microvm,acpi=off,auto-kernel-cmdline=off -accel tcg \
            -m 256 -nographic -no-reboot -device i8042 \
            -object memory-backend-memfd,id=m,size=256M,share=on -machine memory-backend=m \
            -global virtio-mmio.force-legacy=false $net -device virtio-net-device,netdev=n,mac=$MAC \
            -kernel "$B/guest/bzImage" -initrd "$B/bench/net-initrd.cpio" \
            -append "console=ttyS0 reboot=k panic=-1 quiet tsc_early_khz=$KHZ tsc=reliable virtio_mmio.device=512@0xfeb00e00:12 moat.net=static:$GUEST_IP/24 -- /bin/sh /netbench.sh $HOST_IP $SECS $PINGS" \
            < /dev/null 2>&1 | tr -d '\r' > "$out"
        times > "$out.times"
    )
    qcpu=$(sed -n 2p "$out.times" | tr 'ms' '  ' | awk 'NF == 4 {printf "%.2f", $1 * 60 + $2 + $3 * 60 + $4}')
    mcpu=
    if [ -n "$dpid" ]; then
        # the device's user + system time (fields 14, 15 after the comm)
        mcpu=$(sed 's/.*) //' "/proc/$dpid/stat" 2>/dev/null | awk -v hz="$TCK" '{printf "%.2f", ($12 + $13) / hz}')
        kill "$dpid" 2>/dev/null
        wait "$dpid" 2>/dev/null
    fi
    kill "$s1" "$s2" 2>/dev/null
    wait "$s1" "$s2" 2>/dev/null
    pids=
    tx=$(sed -n 's/^NETBENCH-tx \([0-9.]*\)$/\1/p' "$out" | awk '{printf "%.1f", $1 / 1e6}')
    rx=$(sed -n 's/^NETBENCH-rx \([0-9.]*\)$/\1/p' "$out" | awk '{printf "%.1f", $1 / 1e6}')
    txr=$(sed -n 's/^NETBENCH-tx-retr \([0-9]*\)$/\1/p' "$out")
    rxr=$(sed -n 's/^NETBENCH-rx-retr \([0-9]*\)$/\1/p' "$out")
    rtt=$(sed -n '/^NETBENCH-PING-BEGIN/,/^NETBENCH-PING-END/s/.* time=\([0-9.]*\) ms$/\1/p' "$out" | median)
    nrtt=$(sed -n '/^NETBENCH-PING-BEGIN/,/^NETBENCH-PING-END/p' "$out" | grep -c ' time=')
    echo "  round $2 $(label "$c"): tx ${tx:-none} Mbit/s (${txr:-?} retr), rx ${rx:-none} Mbit/s (${rxr:-?} retr)," \
        "rtt ${rtt:-none} ms ($nrtt of $PINGS pings); CPU s: QEMU ${qcpu:-?}${mcpu:+, moat $mcpu}"
    if [ -z "$tx" ] || [ -z "$rx" ] || [ -z "$rtt" ]; then
        echo "  ---- guest output ($out) ----"
        grep -v '^\[ *[0-9]' "$out" | tail -n 15 | sed 's/^/  /'
        [ -f "$out.dev" ] && { echo "  ---- moat device log ----"; tail -n 10 "$out.dev" | sed 's/^/  /'; }
    fi
    [ -n "$tx" ] && echo "$tx" >> "$tmp/$c.tx" && echo "$2 $tx" >> "$tmp/$c.tx.r"
    [ -n "$rx" ] && echo "$rx" >> "$tmp/$c.rx" && echo "$2 $rx" >> "$tmp/$c.rx.r"
    [ -n "$rtt" ] && echo "$rtt" >> "$tmp/$c.rtt" && echo "$2 $rtt" >> "$tmp/$c.rtt.r"
    [ -n "$qcpu" ] && echo "$qcpu" >> "$tmp/$c.qcpu"
    [ -n "$mcpu" ] && echo "$mcpu" >> "$tmp/$c.mcpu"
    [ -n "$qcpu" ] && echo "$qcpu ${mcpu:-0}" | awk '{printf "%.2f\n", $1 + $2}' >> "$tmp/$c.cpu"
}

t0=$(date +%s)
echo "bench/net: $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPU(s), load $(cut -d' ' -f1-3 /proc/loadavg);" \
    "$("$QEMU" --version | head -n 1); $(iperf3 --version | head -n 1 | cut -d' ' -f1-2); guest TSC $KHZ kHz"
echo "bench/net: $ROUNDS rounds of cases $CASES; per boot: $PINGS pings, iperf3 TCP ${SECS} s tx + ${SECS} s rx (1 s omitted each)"
r=1
while [ $r -le "$ROUNDS" ]; do
    # rotate the order of the cases by the round number
    # shellcheck disable=SC2086
    set -- $CASES
    k=$(((r - 1) % $#))
    while [ "$k" -gt 0 ]; do
        f=$1
        shift
        set -- "$@" "$f"
        k=$((k - 1))
    done
    for c in "$@"; do
        boot "$c" $r
    done
    r=$((r + 1))
done

med() { [ -f "$tmp/$1.$2" ] && median < "$tmp/$1.$2"; }
spread() { [ -f "$tmp/$1.$2" ] && sort -g "$tmp/$1.$2" | awk 'NR == 1 {a = $1} {b = $1} END {print a ".." b}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b > 0) printf "%.2f", a / b; else printf "-" }'; }
# rratios X Y K: X/Y of figure K in each round that has both, one a line
rratios() {
    [ -f "$tmp/$1.$3.r" ] && [ -f "$tmp/$2.$3.r" ] &&
        awk 'NR == FNR {y[$1] = $2; next} ($1 in y) && y[$1] > 0 {printf "%.3f\n", $2 / y[$1]}' \
            "$tmp/$2.$3.r" "$tmp/$1.$3.r"
}
# check X Y K LIMIT ge|le TEXT: the median of the per-round ratios X/Y
# (both cases of a round ran within a minute of each other, so load that
# drifts over the run cancels), its range, the ratio of the medians, and
# the verdict on the former
check() {
    m=$(rratios "$1" "$2" "$3" | median)
    m=$(ratio "${m:-}" 1)
    n=$(rratios "$1" "$2" "$3" | wc -l | tr -d ' ')
    rg=$(rratios "$1" "$2" "$3" | sort -g | awk 'NR == 1 {a = $1} {b = $1} END {if (NR) printf "%.2f..%.2f", a, b}')
    echo "  $3 $1/$2 = $m (median of $n rounds' ratios, range ${rg:-none}; ratio of the medians" \
        "$(ratio "$(med "$1" "$3")" "$(med "$2" "$3")"))${6:+: target $6: $(verdict "$m" "$4" "$5")}"
}

echo
echo "bench/net: medians of $ROUNDS rounds ($(($(date +%s) - t0)) s; load $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
printf '%-26s %12s %12s %12s %10s %10s %10s\n' case "tx Mbit/s" "rx Mbit/s" "RTT ms" "CPU s" "QEMU" "moat"
missing=0
for c in $CASES; do
    printf '%-26s %12s %12s %12s %10s %10s %10s\n' "$(label "$c")" "$(med "$c" tx)" "$(med "$c" rx)" "$(med "$c" rtt)" \
        "$(med "$c" cpu)" "$(med "$c" qcpu)" "$(med "$c" mcpu)"
    for k in tx rx rtt; do
        [ -n "$(med "$c" $k)" ] || missing=1
    done
done
echo "spread over the rounds (min..max):"
for c in $CASES; do
    printf '%-26s %12s %12s %12s\n' "$(label "$c")" "$(spread "$c" tx)" "$(spread "$c" rx)" "$(spread "$c" rtt)"
done

# targets: moat >= 1.0x QEMU (throughput A/B >= 1, RTT A/B <= 1, i.e. moat's
# round trip no slower); the policy costs <= 5 % of throughput (C/A >= 0.95)
verdict() { awk -v x="$1" -v lim="$2" -v dir="$3" 'BEGIN {
    if (x == "-") print "no result";
    else if ((dir == "ge" && x >= lim) || (dir == "le" && x <= lim)) print "met";
    else print "not met" }'; }
has() { case " $CASES " in *" $1 "*) return 0 ;; esac; return 1; }
if has A && has B; then
    echo "moat/QEMU (A/B):"
    check A B tx 1 ge ">= 1.00"
    check A B rx 1 ge ">= 1.00"
    check A B rtt 1 le "<= 1.00 (moat's round trip no longer than QEMU's)"
fi
if has A && has C; then
    echo "policy cost (C/A):"
    check C A tx 0.95 ge ">= 0.95 (at most 5 % lost)"
    check C A rx 0.95 ge ">= 0.95 (at most 5 % lost)"
    check C A rtt 0 le ""
fi
if [ $missing = 1 ]; then
    echo "bench/net: some case gave no result (see above)"
    exit 1
fi
exit 0
