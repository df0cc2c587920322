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
# Exit 124: timed out; 125: harness failure (no KVM in L1, QEMU failed, ...).
#
# Options:
#   --timeout S    kill QEMU after S seconds (default 600)
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
timeout_s=600 smp=${NESTED_SMP:-1} mem=2048 cpu=${NESTED_CPU:-max} accel=${NESTED_ACCEL:-} append="" log="" libs=1 verbose=0

die() { echo "nested: $*" >&2; exit 125; }
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) timeout_s=$2; shift 2 ;;
        --smp) smp=$2; shift 2 ;;
        --mem) mem=$2; shift 2 ;;
        --cpu) cpu=$2; shift 2 ;;
        --accel) accel=$2; shift 2 ;;
        --append) append="$append $2"; shift 2 ;;
        --log) log=$2; shift 2 ;;
        --no-libs) libs=0; shift ;;
        -v) verbose=1; shift ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
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
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

st=$work/root
mkdir -p "$st/payload" "$st/nested"
[ "$payload" = - ] || cp -rL "$payload/." "$st/payload/"

# Shared libraries (and the ELF interpreter) of every dynamic ELF in the payload.
if [ "$libs" = 1 ]; then
    find "$st/payload" -type f | while read -r f; do
        [ "$(head -c 4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ] || continue
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
qemu=(qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -m "$mem" -smp "$smp"
      -nodefaults -no-reboot -display none -monitor none -serial stdio
      -kernel "$NESTED/vmlinuz" -initrd "$work/initrd"
      -append "console=ttyS0 panic=-1 loglevel=4 mitigations=off$append")
[ "$verbose" = 1 ] && echo "nested: ${qemu[*]}" >&2

out=$work/console.log
start=$(date +%s.%N)
set +e
timeout -k 5 "$timeout_s" "${qemu[@]}" </dev/null 2>&1 | tr -d '\r' | tee "$out" ${log:+"$log"}
qrc=${PIPESTATUS[0]}
set -e
secs=$(echo "$(date +%s.%N) - $start" | bc)

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
