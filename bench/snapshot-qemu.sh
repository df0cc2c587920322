#!/bin/sh
# Snapshot/restore side by side: moat vs QEMU's own save/restore, same
# guest (bench/guest/wait.S: PVH ELF, 256 MiB, waits on its UART), same run.
#   moat: `moat run --snapshot-dir` + SIGUSR2 (pause, state file + sparse
#         memory file, fsync); restore = `moat restore DIR`.
#   QEMU: -M microvm -enable-kvm, QMP `migrate` to "exec:cat > FILE" (its
#         snapshot-to-file; QEMU 7.2 has no file: URI); restore =
#         `-incoming "exec:cat FILE"`.
# A restore run is timed from process start until the VMM has exited: the
# restored guest is fed bytes on its UART (`yes |`) and exits at once, so
# this is process start -> state loaded -> guest running -> exit.
# Snapshot time: moat's own measurement; QEMU's "total-time" of the
# migration (query-migrate). Medians over RUNS. POSIX sh (runs in the nested
# L1 too). Needs a usable KVM (PVM included), QEMU and socat; SKIPPED otherwise.
# Env: MOAT_BIN, QEMU, QEMU_ARGS, RUNS (10), JSON (build/bench/snapshot-qemu.json), DATE
set -u
MOAT=${MOAT_BIN:-build/moat}
QEMU=${QEMU:-qemu-system-x86_64}
RUNS=${RUNS:-10}
GUEST=${GUEST:-build/bench/wait.elf}
JSON=${JSON:-build/bench/snapshot-qemu.json}
mkdir -p "$(dirname "$JSON")"
skip() { echo "SKIPPED: bench/snapshot-qemu: $1; nothing measured"; printf '{"skipped": "%s"}\n' "$1" > "$JSON"; exit 0; }
[ -x "$MOAT" ] || { echo "bench/snapshot-qemu: $MOAT missing (make)" >&2; exit 1; }
kind=$(MOAT_BIN=$MOAT "$(dirname "$0")/../scripts/host-kind.sh") || exit 1   # the host probe (docs/host.md)
[ "$kind" != none ] || skip "no usable KVM on this host ($("$MOAT" host --reason 2>/dev/null))"
command -v "$QEMU" >/dev/null 2>&1 || skip "$QEMU not installed"
command -v socat >/dev/null 2>&1 || skip "socat not installed"
[ -r "$GUEST" ] || { echo "bench/snapshot-qemu: $GUEST missing (make bench-tools)" >&2; exit 1; }

# busybox sh may run its own date applet (no %N) before PATH: DATE=/path/to/coreutils/date
now_us() { "${DATE:-date}" +%s%6N; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "null"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.0f\n", m}'; }
d=$(mktemp -d "${TMPDIR:-/tmp}/moat-snapq.XXXXXX")
trap 'rm -rf "$d"' EXIT
waitfor() {  # file pattern: up to 60 s
    n=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        n=$((n + 1)); [ $n -gt 1200 ] && return 1; sleep 0.05
    done
}

# ---- moat
"$MOAT" run --pvh --mem 256 --kernel "$GUEST" --snapshot-dir "$d" </dev/null >"$d/m.out" 2>"$d/m.err" &
pid=$!
waitfor "$d/m.out" W || { echo "moat: guest did not start" >&2; cat "$d/m.err" >&2; exit 1; }
kill -USR2 $pid; wait $pid
m_snap=$(grep -o 'in [0-9.]* ms' "$d/m.err" | awk '{print $2}')
m_file=$(du -k "$d/memory" | awk '{print $1}')
: > "$d/m.runs"; m_bad=0
i=0
while [ $i -lt "$RUNS" ]; do
    t0=$(now_us); yes | "$MOAT" restore "$d" >/dev/null 2>"$d/mr.err"; rc=$?; t1=$(now_us)
    [ $rc = 0 ] || m_bad=$((m_bad + 1))
    echo $((t1 - t0)) >> "$d/m.runs"; i=$((i + 1))
done

# ---- QEMU
# shellcheck disable=SC2086
QA="-M microvm -enable-kvm -cpu host -m 256 -nodefaults -no-user-config -display none \
 -kernel $GUEST -device isa-debug-exit,iobase=0xf4,iosize=0x04 ${QEMU_ARGS:-}"
qmp() { socat -t 1 - "UNIX-CONNECT:$d/q.sock"; }
# shellcheck disable=SC2086
$QEMU $QA -serial "file:$d/q.out" -qmp "unix:$d/q.sock,server=on,wait=off" 2>"$d/q.err" &
qpid=$!
waitfor "$d/q.out" W || { echo "qemu: guest did not start" >&2; cat "$d/q.err" >&2; exit 1; }
printf '{"execute":"qmp_capabilities"}\n{"execute":"migrate","arguments":{"uri":"exec:cat > %s/vm.mig"}}\n' "$d" | qmp >/dev/null
n=0; q_snap=null
while [ $n -lt 600 ]; do
    st=$(printf '{"execute":"qmp_capabilities"}\n{"execute":"query-migrate"}\n' | qmp)
    if echo "$st" | grep -q '"status": "completed"'; then
        q_snap=$(echo "$st" | grep -o '"total-time": [0-9]*' | awk '{print $2}'); break
    fi
    echo "$st" | grep -q '"status": "failed"' && break
    n=$((n + 1)); sleep 0.05
done
printf '{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n' | qmp >/dev/null; wait $qpid
[ "$q_snap" != null ] || { echo "qemu: migration to file did not complete" >&2; exit 1; }
q_file=$(du -k "$d/vm.mig" | awk '{print $1}')
: > "$d/q.runs"; q_bad=0
i=0
while [ $i -lt "$RUNS" ]; do
    # shellcheck disable=SC2086
    t0=$(now_us); yes | $QEMU $QA -serial stdio -incoming "exec:cat $d/vm.mig" >/dev/null 2>"$d/qr.err"; rc=$?; t1=$(now_us)
    [ $rc = 1 ] || q_bad=$((q_bad + 1))     # isa-debug-exit: (0 << 1) | 1
    echo $((t1 - t0)) >> "$d/q.runs"; i=$((i + 1))
done

m_med=$(median < "$d/m.runs"); q_med=$(median < "$d/q.runs")
ratio=$(awk -v a="$m_med" -v b="$q_med" 'BEGIN{ if (b>0) printf "%.3f", a/b; else print "null"}')
echo "snapshot of the same 256 MiB guest: moat ${m_snap} ms (memory file ${m_file} KiB allocated), QEMU migrate-to-file ${q_snap} ms (stream ${q_file} KiB)"
echo "restore -> guest runs -> exit, $RUNS runs, medians: moat ${m_med} us (failed ${m_bad}), QEMU ${q_med} us (failed ${q_bad}), moat/QEMU ${ratio}"
cat > "$JSON" <<EOF2
{"runs": $RUNS, "mem_mib": 256, "moat_snapshot_ms": ${m_snap:-null}, "moat_memory_file_kib": $m_file,
 "qemu_snapshot_ms": $q_snap, "qemu_stream_kib": $q_file,
 "moat_restore_wall_us_median": $m_med, "moat_failed": $m_bad,
 "qemu_restore_wall_us_median": $q_med, "qemu_failed": $q_bad, "ratio_restore_wall": $ratio}
EOF2
echo "results: $JSON"
