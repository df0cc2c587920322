#!/bin/bash
# tests/nested/run.sh: run COMMAND inside an L1 Linux guest that QEMU emulates
# in software (TCG) with AMD SVM, so that /dev/kvm exists there even on a host
# without KVM. See tests/nested/README.md.
#
#   tests/nested/run.sh [options] PAYLOAD_DIR -- COMMAND [ARG...]
#
# PAYLOAD_DIR ("-" for none) is copied (symlinks followed) to /payload in L1, together with
# the shared libraries its ELF files need (found with ldd on this host), and
# COMMAND runs there with cwd /payload and PATH starting with /payload.
# L1's console is streamed to stdout; the exit status is COMMAND's.
# Exit 123: L1 stalled (--stall); 124: timed out; 125: harness failure (no
# KVM in L1, QEMU failed, ...).
#
# Options:
#   --timeout S    kill QEMU after S seconds (default 600)
#   --stall S      call L1 stalled, print a diagnosis (QEMU threads, its
#                  monitor's registers and LAPIC) and exit 123 when neither
#                  its console nor its heartbeat (ttyS1) has grown for S
#                  seconds (default 120, or $NESTED_STALL; 0: no watchdog)
#   --smp N        L1 vCPUs (default 1). N>1 uses tcg,thread=single: with
#                  multi-threaded TCG an L1 with 2 vCPUs froze in ~1 of 4 runs
#   --mem MB       L1 memory (default 2048)
#   --cpu MODEL    QEMU -cpu model (default max; must include svm)
#   --accel A      QEMU -accel value (default tcg, or tcg,thread=single if N>1)
#   --append ARGS  extra kernel command line (e.g. kvm_amd.npt=0)
#   --log FILE     also write L1's console to FILE
#   --no-libs      do not copy shared libraries (payload is static)
#   -v             print the QEMU command line
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NESTED=${NESTED_DIR:-$ROOT/build/nested}
timeout_s=600 stall_s=${NESTED_STALL:-120} smp=${NESTED_SMP:-1} mem=2048 cpu=${NESTED_CPU:-max} accel=${NESTED_ACCEL:-} append="" log="" libs=1 verbose=0

die() { echo "nested: $*" >&2; exit 125; }
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) timeout_s=$2; shift 2 ;;
        --stall) stall_s=$2; shift 2 ;;
        --smp) smp=$2; shift 2 ;;
        --mem) mem=$2; shift 2 ;;
        --cpu) cpu=$2; shift 2 ;;
        --accel) accel=$2; shift 2 ;;
        --append) append="$append $2"; shift 2 ;;
        --log) log=$2; shift 2 ;;
        --no-libs) libs=0; shift ;;
        -v) verbose=1; shift ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        --) break ;;
        -?*) die "unknown option $1" ;;
        *) break ;;
    esac
done
[ $# -ge 3 ] && [ "$2" = "--" ] || die "usage: run.sh [options] PAYLOAD_DIR -- COMMAND [ARG...]"
payload=$1
shift 2
[ "$payload" = - ] || [ -d "$payload" ] || die "payload dir $payload not found"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not installed"

"$ROOT/scripts/nested-setup.sh" 2>/dev/null || "$ROOT/scripts/nested-setup.sh" ||
    die "scripts/nested-setup.sh failed"

work=$(mktemp -d "${TMPDIR:-/tmp}/nested.XXXXXX")
pid=""
cleanup() { if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

st=$work/root
mkdir -p "$st/payload" "$st/nested"
[ "$payload" = - ] || cp -rL "$payload/." "$st/payload/"

# Shared libraries (and the ELF interpreter) of every dynamic ELF in the
# payload, and those moat loads at run time rather than through its ELF's
# needs: libmicrohttpd and its own (dlopen'ed when moat vmm's API or moat
# serve starts, vmm/api/mhd_dyn.c).
if [ "$libs" = 1 ]; then
    mhd=$(ldconfig -p 2>/dev/null | awk '/libmicrohttpd\.so\.[0-9]+ .*x86-64/ { p = $NF } END { if (p) print p }' || true)
    { find "$st/payload" -type f; if [ -n "$mhd" ]; then echo "$mhd"; fi; } | while read -r f; do
        [ "$(head -c 4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ] || continue
        if [ "$f" = "$mhd" ]; then echo "$f"; fi
        { ldd "$f" 2>/dev/null || true; } | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (0x.*/\1/p'
    done | sort -u | while read -r lib; do
        [ -f "$lib" ] || continue
        mkdir -p "$st$(dirname "$lib")"
        cp -L "$lib" "$st$lib"
    done
fi

# The command, each argument single-quoted for L1's busybox sh.
{
    printf 'export NESTED_L1=1\n'
    for a in "$@"; do
        printf "'%s' " "$(printf '%s' "$a" | sed "s/'/'\\\\''/g")"
    done
    printf '\n'
} > "$st/nested/cmd"

"$ROOT/tests/nested/mkcpio.sh" "$st" "$work/payload.cpio"
cat "$NESTED/base.cpio" "$work/payload.cpio" > "$work/initrd"
rm -rf "$st"

if [ -z "$accel" ]; then
    accel=tcg
    [ "$smp" -gt 1 ] && accel=tcg,thread=single
fi
# ttyS0: the console (stdout). ttyS1: L1's heartbeat, one line every 5 s
# from a loop in its /init that needs L1's timers to fire: the watchdog
# below calls L1 stalled when neither grows for --stall seconds. The
# monitor socket is only for the stall diagnosis.
hb=$work/heartbeat mon=$work/monitor.sock
# L1's timer: a periodic tick (nohz=off highres=off), not one-shot. QEMU 7.2's
# TCG loses, now and then, the signal that an APIC interrupt is pending when
# the vCPU thread updates cs->interrupt_request without the iothread lock
# while the main loop sets CPU_INTERRUPT_POLL for the APIC timer (its SVM
# VMRUN helper sets CPU_INTERRUPT_VIRQ that way; L1 runs VMRUN for every L2
# exit). The timer interrupt then stays pending in the IRR with nothing to
# deliver it, and with a one-shot timer L1 never arms another: L1 stops for
# good (the stall of tests/nested/README.md). With a periodic timer QEMU
# re-arms the timer itself and the next tick signals again. NESTED_L1_TIMER
# overrides this (e.g. empty, for the old one-shot behaviour).
L1_TIMER=${NESTED_L1_TIMER-nohz=off highres=off}
: > "$hb"
qemu=(qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -m "$mem" -smp "$smp"
      -nodefaults -no-reboot -display none
      -monitor "unix:$mon,server=on,wait=off" -pidfile "$work/qemu.pid"
      -serial stdio -serial "file:$hb"
      -kernel "$NESTED/vmlinuz" -initrd "$work/initrd"
      -append "console=ttyS0 panic=-1 loglevel=4 mitigations=off $L1_TIMER$append")
# shellcheck disable=SC2206
[ -z "${NESTED_QEMU_EXTRA:-}" ] || qemu+=($NESTED_QEMU_EXTRA)   # extra QEMU options, for experiments
[ "$verbose" = 1 ] && echo "nested: ${qemu[*]}" >&2

out=$work/console.log
: > "$out"
start=$(date +%s.%N)
set +e
{ timeout -k 5 "$timeout_s" "${qemu[@]}" </dev/null 2>&1; echo $? > "$work/qrc"; } |
    stdbuf -oL tr -d '\r' | tee "$out" ${log:+"$log"} &
pipe=$!

# QEMU's pid (from its -pidfile), and its CPU time in clock ticks.
qemu_pid() { cat "$work/qemu.pid" 2>/dev/null; }
cpu_ticks() { [ -r "/proc/$1/stat" ] && awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
diagnose() { # $1: pid; everything to stderr
    echo "nested: STALLED: no console output and no heartbeat from L1 for ${stall_s}s" \
         "(L1 up $(echo "$(date +%s.%N) - $start" | bc | cut -d. -f1)s; QEMU CPU ticks $(cpu_ticks "$1"))"
    echo "nested: last console lines:"; tail -n 15 "$out" | sed 's/^/nested:   /'
    echo "nested: last heartbeat: $(tail -n 1 "$hb")"
    echo "nested: QEMU threads (state, wchan):"
    for t in /proc/"$1"/task/*; do
        echo "nested:   $(cat "$t/comm" 2>/dev/null) $(awk '{ sub(/^.*\) /, ""); print $1 }' "$t/stat" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"
    done
    if command -v socat >/dev/null && [ -S "$mon" ]; then
        echo "nested: QEMU monitor:"
        printf 'info cpus\ninfo registers\ninfo lapic\ninfo pic\ninfo irq\n' |
            timeout 10 socat -t 5 - "UNIX-CONNECT:$mon" 2>&1 | tr -d '\r' | grep -v '^(qemu)' |
            sed 's/\x1b\[[0-9;]*[A-Za-z]//g; s/^/nested:   /' | head -120
    fi
} >&2
stalled=0
last_out=0 last_hb=0 last_change=$(date +%s) pid=""
while kill -0 "$pipe" 2>/dev/null; do
    sleep 2
    [ -n "$pid" ] || pid=$(qemu_pid)
    now=$(date +%s)
    o=$(stat -c %s "$out" 2>/dev/null || echo 0); h=$(stat -c %s "$hb" 2>/dev/null || echo 0)
    if [ "$o" != "$last_out" ] || [ "$h" != "$last_hb" ]; then
        last_out=$o last_hb=$h last_change=$now
    elif [ "$stall_s" -gt 0 ] && [ $((now - last_change)) -ge "$stall_s" ] && [ -n "$pid" ]; then
        stalled=1
        diagnose "$pid"
        kill -KILL "$pid" 2>/dev/null
        break
    fi
done
wait "$pipe"
pid=""   # QEMU is gone; its pid may be someone else's by now
set -e
qrc=$(cat "$work/qrc" 2>/dev/null || echo 125)
secs=$(echo "$(date +%s.%N) - $start" | bc)
if [ "$stalled" = 1 ]; then
    echo "nested: L1 STALLED after ${secs}s (see above); exit 123" >&2
    exit 123
fi

rc=$(sed -n 's/^NESTED-EXIT=\([0-9]*\)$/\1/p' "$out" | head -1)
if [ -n "$rc" ]; then
    echo "nested: L1 done in ${secs}s, command exit status $rc" >&2
    exit "$rc"
fi
if [ "$qrc" = 124 ] || { [ "$qrc" = 137 ] && [ "${secs%.*}" -ge "$timeout_s" ]; }; then
    echo "nested: TIMEOUT after ${timeout_s}s (no NESTED-EXIT marker)" >&2
    exit 124
fi
if [ "$qrc" -gt 128 ]; then
    echo "nested: QEMU killed by signal $((qrc - 128)) after ${secs}s (OOM? someone else's pkill?)" >&2
else
    echo "nested: L1 ended after ${secs}s without NESTED-EXIT marker (qemu status $qrc)" >&2
fi
exit 125
