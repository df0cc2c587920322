#!/bin/sh
# Snapshot/restore side by side: moat vs QEMU's own save/restore, same
# guest (bench/guest/wait.S: PVH ELF, 256 MiB, waits on its UART), same run.
#   moat: `moat run --snapshot-dir` + SIGUSR1 x RUNS (snapshot, go on:
#         state file + sparse memory file, durable), then SIGUSR2 (the
#         same, and stop); restore = `moat restore DIR`.
#   QEMU: -M microvm -enable-kvm, QMP `migrate` x RUNS to "exec:cat > FILE"
#         (its snapshot-to-file; QEMU 7.2 has no file: URI; not fsync'ed);
#         restore = `-incoming "exec:cat FILE"`.
# A restore run is timed from process start until the VMM has exited: the
# restored guest is fed bytes on its UART (`yes |`) and exits at once, so
# this is process start -> state loaded -> guest running -> exit.
# Snapshot time: moat's own measurement (whole call, and the guest's
# pause); QEMU's "total-time" and "downtime" of the migration
# (query-migrate). Medians and p99 over RUNS. POSIX sh (runs in the nested
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

p99() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.99+0.999); if(i<1)i=1; if (NR==0) print "null"; else print a[i]}'; }
median3() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "null"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f\n", m}'; }
nlines() { c=$(grep -c "$2" "$1" 2>/dev/null); echo "${c:-0}"; }

# ---- moat: RUNS snapshots of the running guest (SIGUSR1: snapshot, go
# on; into the same directory), then one that stops it (SIGUSR2)
"$MOAT" run --pvh --mem 256 --kernel "$GUEST" --snapshot-dir "$d" </dev/null >"$d/m.out" 2>"$d/m.err" &
pid=$!
waitfor "$d/m.out" W || { echo "moat: guest did not start" >&2; cat "$d/m.err" >&2; exit 1; }
i=1
while [ $i -le "$RUNS" ]; do
    kill -USR1 $pid
    n=0; while [ "$(nlines "$d/m.err" 'snapshot written')" -lt $i ]; do
        n=$((n + 1)); [ $n -gt 6000 ] && { echo "moat: snapshot $i did not finish" >&2; exit 1; }; sleep 0.01
    done
    i=$((i + 1))
done
kill -USR2 $pid; wait $pid
grep 'snapshot written' "$d/m.err" | head -n "$RUNS" |
    sed -n 's/.* in \([0-9.]*\) ms (guest paused \([0-9.]*\) ms.*/\1 \2/p; t; s/.* in \([0-9.]*\) ms.*/\1 \1/p' > "$d/m.snaps"
m_snap=$(awk '{print $1}' "$d/m.snaps" | median3); m_snap99=$(awk '{print $1}' "$d/m.snaps" | p99)
m_pause=$(awk '{print $2}' "$d/m.snaps" | median3); m_pause99=$(awk '{print $2}' "$d/m.snaps" | p99)
m_stop=$(grep 'snapshot written' "$d/m.err" | tail -n 1 | sed 's/.* in \([0-9.]*\) ms.*/\1/')
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
# QEMU's KVM setup writes IA32_ARCH_CAPABILITIES, which PVM refuses (QEMU
# then aborts): leave that feature out there.
cpu=host
[ "$kind" = pvm ] && cpu=host,-arch-capabilities
QA="-M microvm -enable-kvm -cpu ${QEMU_CPU:-$cpu} -m 256 -nodefaults -no-user-config -display none \
 -kernel $GUEST -device isa-debug-exit,iobase=0xf4,iosize=0x04 ${QEMU_ARGS:-}"
qmp() { socat -t 1 - "UNIX-CONNECT:$d/q.sock"; }
# shellcheck disable=SC2086
$QEMU $QA -serial "file:$d/q.out" -qmp "unix:$d/q.sock,server=on,wait=off" 2>"$d/q.err" &
qpid=$!
waitfor "$d/q.out" W || { echo "qemu: guest did not start" >&2; cat "$d/q.err" >&2; exit 1; }
# RUNS migrations to a file of the running guest, one after the other
# (`cont` after each: the guest stays stopped after a migration), with the
# bandwidth limit lifted (QEMU 7.2's default caps a migration at 128 MiB/s);
# each one's total-time and downtime (the time the guest was stopped) from
# query-migrate.
printf '{"execute":"qmp_capabilities"}\n{"execute":"migrate-set-parameters","arguments":{"max-bandwidth":107374182400}}\n' | qmp >/dev/null
: > "$d/q.snaps"
i=1
while [ $i -le "$RUNS" ]; do
    rm -f "$d/vm.mig"
    printf '{"execute":"qmp_capabilities"}\n{"execute":"migrate","arguments":{"uri":"exec:cat > %s/vm.mig"}}\n' "$d" | qmp >/dev/null
    n=0; done_=0
    while [ $n -lt 600 ]; do
        st=$(printf '{"execute":"qmp_capabilities"}\n{"execute":"query-migrate"}\n' | qmp)
        if echo "$st" | grep -q '"status": "completed"'; then
            tt=$(echo "$st" | grep -o '"total-time": [0-9]*' | awk '{print $2}')
            dt=$(echo "$st" | grep -o '"downtime": [0-9]*' | awk '{print $2}')
            echo "$tt ${dt:-$tt}" >> "$d/q.snaps"; done_=1
            printf '{"execute":"qmp_capabilities"}\n{"execute":"cont"}\n' | qmp >/dev/null; break
        fi
        echo "$st" | grep -q '"status": "failed"' && break
        n=$((n + 1)); sleep 0.02
    done
    [ $done_ = 1 ] || break
    i=$((i + 1))
done
printf '{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n' | qmp >/dev/null; wait $qpid
[ -s "$d/q.snaps" ] || { echo "qemu: migration to file did not complete" >&2; exit 1; }
q_snap=$(awk '{print $1}' "$d/q.snaps" | median3); q_snap99=$(awk '{print $1}' "$d/q.snaps" | p99)
q_down=$(awk '{print $2}' "$d/q.snaps" | median3)
q_nsnap=$(wc -l < "$d/q.snaps")
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
sratio=$(awk -v a="$m_snap" -v b="$q_snap" 'BEGIN{ if (b>0) printf "%.3f", a/b; else print "null"}')
echo "snapshot of the same 256 MiB guest, medians (p99) of $RUNS: moat ${m_snap} ms (${m_snap99}), guest paused ${m_pause} ms (${m_pause99}), memory file ${m_file} KiB allocated; stopping snapshot ${m_stop} ms"
echo "  QEMU migrate-to-file, $q_nsnap runs: ${q_snap} ms (${q_snap99}), downtime ${q_down} ms, stream ${q_file} KiB; moat/QEMU ${sratio}"
echo "restore -> guest runs -> exit, $RUNS runs, medians: moat ${m_med} us (failed ${m_bad}), QEMU ${q_med} us (failed ${q_bad}), moat/QEMU ${ratio}"
cat > "$JSON" <<EOF2
{"runs": $RUNS, "mem_mib": 256, "moat_snapshot_ms": ${m_snap:-null}, "moat_snapshot_ms_p99": ${m_snap99:-null},
 "moat_paused_ms": ${m_pause:-null}, "moat_paused_ms_p99": ${m_pause99:-null}, "moat_stop_snapshot_ms": ${m_stop:-null},
 "moat_memory_file_kib": $m_file,
 "qemu_snapshot_ms": $q_snap, "qemu_snapshot_ms_p99": $q_snap99, "qemu_downtime_ms": $q_down,
 "qemu_stream_kib": $q_file, "ratio_snapshot": $sratio,
 "moat_restore_wall_us_median": $m_med, "moat_failed": $m_bad,
 "qemu_restore_wall_us_median": $q_med, "qemu_failed": $q_bad, "ratio_restore_wall": $ratio}
EOF2
echo "results: $JSON"
