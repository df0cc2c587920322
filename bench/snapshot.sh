#!/usr/bin/env bash
# Snapshot benchmark (issue 5): a 256 MiB counter test guest.
#  - snapshot time (moat's own measurement, SIGUSR2 = pause + snapshot);
#  - restore latency: moat process start -> first KVM_RUN (--timings
#    first_run) and wall time of `moat restore` until the guest exits,
#    median and p99 over RUNS;
#  - 20 forks: 20 `moat restore` of the same snapshot started together,
#    total wall time until all have exited.
#  - diff snapshots (bench/snapshot-diff.sh): full vs diff snapshot time
#    and size with 64 MiB written in between, restore through the chain.
#  - snapshot writing (bench/snapshot-write.sh): 1 MiB touched, 64 and
#    256 MiB dirty, 64 MiB diffs; the whole call and the guest's pause.
# QEMU's own save/restore of a guest both can run: bench/snapshot-qemu.sh, run at the end,
# and the ratios of the snapshot times to QEMU's migrate-to-file.
# Results: build/bench/snapshot.json. Needs a usable KVM, PVM included (SKIPPED otherwise).
set -u
cd "$(dirname "$0")/.."
RUNS=${RUNS:-20}
FORKS=${FORKS:-20}
B=build/bench
MOAT=${MOAT_BIN:-build/moat}
GUEST=${GUEST:-build/guests/counter.elf}
mkdir -p "$B"
[ -n "${BENCH_NO_BUILD:-}" ] || make -s "$B/runstat" "$B/wait.elf" build/moat test-guests >/dev/null || exit 1
json="$B/snapshot.json"
kind=$(MOAT_BIN=$MOAT scripts/host-kind.sh) || exit 1   # the host probe: kvm, pvm, none
if [ "$kind" = none ]; then
    echo "SKIPPED: bench/snapshot: no usable KVM on this host ($(MOAT_BIN=$MOAT scripts/host-kind.sh --reason 2>/dev/null)); nothing measured"
    printf '{"skipped": "no usable KVM"}\n' > "$json"
    exit 0
fi
median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "null"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m}'; }
p99() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.99+0.999); if(i<1)i=1; if (NR==0) print "null"; else print a[i]}'; }
now_us() { date +%s%6N; }

snap=$(mktemp -d "${TMPDIR:-/tmp}/moat-bench-snap.XXXXXX")
trap 'rm -rf "$snap"' EXIT
# The guest ticks every 1000 iterations and stops at a 'q' on its console.
"$MOAT" run --mem 256 --kernel "$GUEST" --cmdline spin=1000 --snapshot-dir "$snap" \
    </dev/null >"$snap/run.out" 2>"$snap/run.err" &
pid=$!
for _ in $(seq 1 600); do grep -q "tick 3" "$snap/run.out" 2>/dev/null && break; sleep 0.05; done
kill -USR2 "$pid"; wait "$pid"
snap_ms=$(grep -o 'in [0-9.]* ms' "$snap/run.err" | awk '{print $2}')
mem_alloc_kib=$(du -k "$snap/memory" | awk '{print $1}')
printf q > "$snap/q"

: > "$snap/restore.runs"
for _ in $(seq 1 "$RUNS"); do
    t0=$(now_us)
    "$MOAT" restore --timings "$snap" <"$snap/q" >/dev/null 2>"$snap/restore.err"; rc=$?
    t1=$(now_us)
    fr=$(grep -o '"first_run": [0-9]*' "$snap/restore.err" | awk '{print $2}')
    echo "$((t1 - t0)) ${fr:-0} $rc" >> "$snap/restore.runs"
done
r_wall=$(awk '{print $1}' "$snap/restore.runs" | median)
r_first=$(awk '{print $2}' "$snap/restore.runs" | median)
r_first99=$(awk '{print $2}' "$snap/restore.runs" | p99)
r_bad=$(awk '$3 != 0' "$snap/restore.runs" | wc -l)

t0=$(now_us)
pids=()
for i in $(seq 1 "$FORKS"); do
    "$MOAT" restore "$snap" <"$snap/q" >/dev/null 2>&1 & pids+=($!)
done
fbad=0
for p in "${pids[@]}"; do wait "$p" || fbad=$((fbad + 1)); done
t1=$(now_us)
forks_ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", (b-a)/1000}')

echo "snapshot (256 MiB counter guest): write ${snap_ms} ms, memory file ${mem_alloc_kib} KiB allocated (sparse)"
echo "restore, $RUNS runs: process start -> first KVM_RUN median ${r_first} us, p99 ${r_first99} us; wall to guest exit median ${r_wall} us; failed ${r_bad}"
echo "$FORKS forks started together: all exited after ${forks_ms} ms; failed ${fbad}"
cat > "$json" <<EOF2
{"runs": $RUNS, "mem_mib": 256, "snapshot_ms": ${snap_ms:-null}, "memory_file_kib": $mem_alloc_kib,
 "restore_first_run_us_median": $r_first, "restore_first_run_us_p99": $r_first99,
 "restore_wall_us_median": $r_wall, "restore_failed": $r_bad,
 "forks": $FORKS, "forks_total_ms": $forks_ms, "forks_failed": $fbad}
EOF2
echo "results: $json"

# Diff snapshots: 64 MiB written between snapshots (bench/snapshot-diff.sh).
MOAT_BIN="$MOAT" JSON="$B/snapshot-diff.json" sh bench/snapshot-diff.sh && echo "results: $B/snapshot-diff.json"

# Snapshot writing: 1 MiB touched, 64 / 256 MiB dirty, 64 MiB diffs, total
# and pause separately (bench/snapshot-write.sh).
MOAT_BIN="$MOAT" JSON="$B/snapshot-write.json" sh bench/snapshot-write.sh

# Side by side with QEMU's own save/restore, same guest (bench/snapshot-qemu.sh).
MOAT_BIN="$MOAT" JSON="$B/snapshot-qemu.json" sh bench/snapshot-qemu.sh

# The issue-14 targets against QEMU's migrate-to-file of this run.
jget() { grep -o "\"$2\": [0-9.]*" "$1" 2>/dev/null | head -n 1 | awk '{print $2}'; }
t1=$(jget "$B/snapshot-write.json" touched1_total_ms_median)
qs=$(jget "$B/snapshot-qemu.json" qemu_snapshot_ms)
ms=$(jget "$B/snapshot-qemu.json" moat_snapshot_ms)
if [ -n "$t1" ] && [ -n "$qs" ]; then
    r1=$(awk -v a="$t1" -v b="$qs" 'BEGIN{printf "%.3f", a/b}')
    r2=$(awk -v a="$ms" -v b="$qs" 'BEGIN{printf "%.3f", a/b}')
    echo "snapshot / QEMU migrate-to-file (${qs} ms), medians: 256 MiB guest with 1 MiB touched ${t1} ms = ${r1}x; the same (wait) guest ${ms} ms = ${r2}x"
    printf '{"touched1_total_ms_median": %s, "moat_wait_snapshot_ms": %s, "qemu_snapshot_ms": %s, "ratio_touched1_vs_qemu": %s, "ratio_same_guest_vs_qemu": %s}\n' \
        "$t1" "$ms" "$qs" "$r1" "$r2" > "$B/snapshot-ratios.json"
    echo "results: $B/snapshot-ratios.json"
fi
