#!/bin/sh
# Snapshot writing benchmark (issue 14): how long `moat_snapshot` takes and
# how long the guest is paused by it, for the dirty test guest
# (tests/guests/dirty.c: writes every page of DIRTY MiB at 16 MiB, then
# waits on its UART):
#   touched  256 MiB guest, 1 MiB written (dirty=1)
#   dirty64  256 MiB guest, 64 MiB written
#   dirty256 288 MiB guest, 256 MiB written
#   diff64   256 MiB guest, `--diff-snapshots`: a full snapshot, then
#            DIFFS diffs, before each of which the guest rewrote its 64 MiB
# Each snapshot is a SIGUSR1 (snapshot, go on) into the same directory
# (the second and later ones replace the files of the one before, as a
# repeated `moat stop` does); moat prints its own figures: the whole call
# (until both files and the renames are durable) and the time the guest
# was paused ("guest paused": moat_get_snapshot_stats paused_us). The last
# snapshot of each guest is a SIGUSR2 (pause, snapshot, stop: paused for
# all of it), reported as stop_ms. The dirty64 snapshot is then restored
# and the guest checks every page (the numbers are of correct snapshots).
# Medians and p99 over RUNS (20) snapshots, RUNS_BIG (10) for dirty256.
# POSIX sh. Env: MOAT_BIN, DIRTY_GUEST, RUNS, RUNS_BIG, DIFFS (10, at most
# 15), JSON (build/bench/snapshot-write.json), TMPDIR (where the files go:
# the disk measured). Needs a usable KVM, PVM included (SKIPPED otherwise).
set -u
MOAT=${MOAT_BIN:-build/moat}
GUEST=${DIRTY_GUEST:-build/guests/dirty.elf}
RUNS=${RUNS:-20}
RUNS_BIG=${RUNS_BIG:-10}
DIFFS=${DIFFS:-10}
JSON=${JSON:-build/bench/snapshot-write.json}
mkdir -p "$(dirname "$JSON")"
[ -x "$MOAT" ] || { echo "bench/snapshot-write: $MOAT missing (make)" >&2; exit 1; }
[ -r "$GUEST" ] || { echo "bench/snapshot-write: $GUEST missing (make test-guests)" >&2; exit 1; }
[ "$DIFFS" -le 15 ] || { echo "bench/snapshot-write: DIFFS is at most 15 (a chain is 16 deep)" >&2; exit 1; }
kind=$(MOAT_BIN=$MOAT "$(dirname "$0")/../scripts/host-kind.sh") || exit 1   # the host probe
if [ "$kind" = none ]; then
    echo "SKIPPED: bench/snapshot-write: no usable KVM on this host ($("$MOAT" host --reason 2>/dev/null)); nothing measured"
    printf '{"skipped": "no usable KVM"}\n' > "$JSON"
    exit 0
fi
d=$(mktemp -d "${TMPDIR:-/tmp}/moat-bench-write.XXXXXX")
trap 'rm -rf "$d"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "null"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f\n", m}'; }
p99() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.99+0.999); if(i<1)i=1; if (NR==0) print "null"; else printf "%.3f\n", a[i]}'; }
# count FILE PATTERN: lines matching
count() { c=$(grep -c "$2" "$1" 2>/dev/null); echo "${c:-0}"; }
# wait_n FILE PATTERN N: until N lines match (60 s, x MOAT_TEST_SLOW)
wait_n() {
    i=0 lim=$((6000 * ${MOAT_TEST_SLOW:-1}))
    while [ "$(count "$1" "$2")" -lt "$3" ]; do
        sleep 0.01; i=$((i + 1)); [ $i -gt $lim ] && return 1
    done
    return 0
}
pid=
fail() {
    echo "bench/snapshot-write: $*" >&2; [ -f "$d/err" ] && tail -5 "$d/err" >&2
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    exit 1
}
# The figures of every "snapshot written" line of $d/err: total paused
figures() {
    # (a moat without the pause figure: paused for all of it)
    grep 'snapshot written' "$d/err" |
        sed -n 's/.* in \([0-9.]*\) ms (guest paused \([0-9.]*\) ms.*/\1 \2/p; t; s/.* in \([0-9.]*\) ms.*/\1 \1/p'
}

# run NAME MEM_MIB DIRTY_MIB N: N SIGUSR1 snapshots, then a SIGUSR2 one.
run() {
    name=$1 mem=$2 mib=$3 n=$4
    rm -rf "$d/s" "$d/in" "$d/out" "$d/err"
    mkdir "$d/s"
    mkfifo "$d/in"
    "$MOAT" run --mem "$mem" --kernel "$GUEST" --cmdline "dirty=$mib" --snapshot-dir "$d/s" \
        <"$d/in" >"$d/out" 2>"$d/err" &
    pid=$!
    exec 3>"$d/in"
    wait_n "$d/out" "round 1" 1 || fail "$name: the guest did not write its memory"
    k=1
    while [ $k -le "$n" ]; do
        kill -USR1 "$pid"
        wait_n "$d/err" "snapshot written" $k || fail "$name: snapshot $k"
        k=$((k + 1))
    done
    kill -USR2 "$pid"
    wait "$pid" || fail "$name: moat run exited $?"
    exec 3>&-
    figures > "$d/$name.all"
    head -n "$n" "$d/$name.all" > "$d/$name.runs"
    tail -n 1 "$d/$name.all" > "$d/$name.stop"
    du -k "$d/s/memory" | awk '{print $1}' > "$d/$name.kib"
    grep 'snapshot written' "$d/err" | tail -n 1 | sed 's/^moat: /  last: /' > "$d/$name.last"
}

run touched 256 1 "$RUNS"
run dirty64 256 64 "$RUNS"
# the dirty64 snapshot is a correct one: restored, the guest checks every page
printf q > "$d/q"
"$MOAT" restore "$d/s" <"$d/q" >"$d/rout" 2>"$d/rerr" || fail "restore of the dirty64 snapshot: exit $?"
grep -q '^ok' "$d/rout" || fail "the restored guest found a page it did not write"
run dirty256 288 256 "$RUNS_BIG"

# diff64: a full snapshot, then DIFFS x (the guest rewrites 64 MiB, a diff)
rm -rf "$d/s" "$d/in" "$d/out" "$d/err"
mkfifo "$d/in"
"$MOAT" run --mem 256 --kernel "$GUEST" --cmdline dirty=64 --snapshot-dir "$d/s" --diff-snapshots \
    <"$d/in" >"$d/out" 2>"$d/err" &
pid=$!
exec 3>"$d/in"
wait_n "$d/out" "round 1" 1 || fail "diff64: the guest did not write its memory"
kill -USR1 "$pid"; wait_n "$d/err" "snapshot written" 1 || fail "diff64: no full snapshot"
k=1
while [ $k -le "$DIFFS" ]; do
    printf w >&3
    wait_n "$d/out" "round $((k + 1))" 1 || fail "diff64: round $((k + 1))"
    kill -USR1 "$pid"; wait_n "$d/err" "snapshot written" $((k + 1)) || fail "diff64: diff $k"
    k=$((k + 1))
done
kill -USR2 "$pid"; wait "$pid" || fail "diff64: moat run exited $?"
exec 3>&-
[ "$(count "$d/err" 'diff snapshot in')" -ge "$DIFFS" ] || fail "diff64: fewer diffs than taken"
printf q > "$d/q"
"$MOAT" restore "$d/s" <"$d/q" >"$d/rout" 2>"$d/rerr" || fail "restore of the diff chain: exit $?"
grep -q '^ok' "$d/rout" || fail "the guest restored from the diff chain found a wrong page"
figures | sed -n "2,$((DIFFS + 1))p" > "$d/diff64.runs"
du -k "$d/s/1/memory" | awk '{print $1}' > "$d/diff64.kib"
echo null > "$d/diff64.stop"

# fig NAME WHAT: total / total99 / paused / paused99 (median, p99 of the
# runs), stop (the SIGUSR2 snapshot), kib (its memory file)
fig() {
    case $2 in
    total) awk '{print $1}' "$d/$1.runs" | median ;;
    total99) awk '{print $1}' "$d/$1.runs" | p99 ;;
    paused) awk '{print $2}' "$d/$1.runs" | median ;;
    paused99) awk '{print $2}' "$d/$1.runs" | p99 ;;
    stop) awk '{print $1}' "$d/$1.stop" ;;
    kib) cat "$d/$1.kib" ;;
    esac
}
line() {   # NAME LABEL
    printf '  %-44s %9s (%s) / %s (%s); stop %s; memory file %s KiB\n' "$2" "$(fig "$1" total)" \
        "$(fig "$1" total99)" "$(fig "$1" paused)" "$(fig "$1" paused99)" "$(fig "$1" stop)" "$(fig "$1" kib)"
}
json() {   # NAME KEY
    printf ' "%s_total_ms_median": %s, "%s_total_ms_p99": %s,\n "%s_paused_ms_median": %s, "%s_paused_ms_p99": %s,\n "%s_stop_ms": %s, "%s_memory_kib": %s' \
        "$2" "$(fig "$1" total)" "$2" "$(fig "$1" total99)" "$2" "$(fig "$1" paused)" "$2" "$(fig "$1" paused99)" \
        "$2" "$(fig "$1" stop)" "$2" "$(fig "$1" kib)"
}

fs=$(stat -f -c %T "$d")
echo "snapshot writing ($kind host, files on $fs in ${TMPDIR:-/tmp}), ms: median (p99) of the whole call / of the guest's pause"
line touched "256 MiB guest, 1 MiB touched, $RUNS runs:"
line dirty64 "256 MiB guest, 64 MiB dirty, $RUNS runs:"
line dirty256 "288 MiB guest, 256 MiB dirty, $RUNS_BIG runs:"
line diff64 "diff, 64 MiB rewritten, $DIFFS runs:"
cat "$d/touched.last" "$d/dirty64.last"
{
    printf '{"host_kind": "%s", "fs": "%s", "runs": %s, "runs_big": %s, "diffs": %s,\n' "$kind" "$fs" "$RUNS" "$RUNS_BIG" "$DIFFS"
    json touched touched1; printf ',\n'
    json dirty64 dirty64; printf ',\n'
    json dirty256 dirty256; printf ',\n'
    json diff64 diff64; printf '}\n'
} > "$JSON"
echo "results: $JSON"
