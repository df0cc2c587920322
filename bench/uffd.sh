#!/bin/sh
# Restore with a uffd memory backend against moat's own MAP_PRIVATE
# restore (docs/uffd.md): POSIX sh. The dirty test guest (MEM_MIB, 256)
# writes DIRTY_MIB (64) MiB and is snapshotted; then RUNS (5) times each:
#   file: moat restore --timings S
#   uffd: build/tests/uffd_handler serving S/memory, moat restore
#         --mem-backend uffd:SOCK --timings S
# with "wq" on the console: the restored guest writes its DIRTY_MIB MiB
# again (every page faults in, from the file or from the handler), then
# reads them all back and exits 0. Figures are moat's --timings: process
# start -> first KVM_RUN ("restore -> first instruction"), and -> guest
# exit (restore + DIRTY_MIB MiB touched twice). Prints medians and the
# uffd/file ratios.
# Needs a usable KVM, PVM included, and userfaultfd (SKIPPED otherwise).
MOAT=${MOAT_BIN:-build/moat}
HANDLER=${MOAT_UFFD_HANDLER:-build/tests/uffd_handler}
GUEST=${DIRTY_GUEST:-build/guests/dirty.elf}
MIB=${DIRTY_MIB:-64}
MEM=${MEM_MIB:-256}
RUNS=${RUNS:-5}
for f in "$MOAT" "$HANDLER"; do
    [ -x "$f" ] || { echo "bench/uffd: $f missing (make all build/tests/uffd_handler)" >&2; exit 1; }
done
kind=$(MOAT_BIN=$MOAT "$(dirname "$0")/../scripts/host-kind.sh") || exit 1
if [ "$kind" = none ]; then
    echo "SKIPPED: bench/uffd: no usable KVM on this host; nothing measured"
    exit 0
fi
d=$(mktemp -d "${TMPDIR:-/tmp}/moat-bench-uffd.XXXXXX")
trap 'rm -rf "$d"' EXIT
fail() { echo "bench/uffd: $*" >&2; cat "$d/err" "$d/rerr" "$d/herr" 2>/dev/null | tail -20 >&2; exit 1; }
wait_for() {    # FILE PATTERN: 60 s
    i=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        sleep 0.1; i=$((i + 1)); [ $i -gt 600 ] && return 1
    done
    return 0
}
mkfifo "$d/in"
mkdir "$d/s"
"$MOAT" run --mem "$MEM" --kernel "$GUEST" --cmdline "dirty=$MIB" --snapshot-dir "$d/s" <"$d/in" >"$d/out" 2>"$d/err" &
pid=$!
exec 3>"$d/in"
wait_for "$d/out" "round 1" || fail "the guest did not write its memory"
kill -USR2 "$pid"; wait "$pid" || fail "moat run exited $?"
exec 3>&-
printf wq >"$d/wq"
field() { grep -o "\"$1\": [0-9]*" "$2" | awk '{print $2}'; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
: >"$d/file.first"; : >"$d/file.exit"; : >"$d/uffd.first"; : >"$d/uffd.exit"
n=0
while [ $n -lt "$RUNS" ]; do
    "$MOAT" restore --timings "$d/s" <"$d/wq" >"$d/rout" 2>"$d/rerr" || fail "file restore: exit $?"
    grep -q '^ok' "$d/rout" || fail "file restore: the guest did not check its memory"
    field first_run "$d/rerr" >>"$d/file.first"; field exit "$d/rerr" >>"$d/file.exit"
    rm -f "$d/h.sock"
    "$HANDLER" "$d/h.sock" "$d/s/memory" 2>"$d/herr" &
    hp=$!
    i=0; while [ ! -S "$d/h.sock" ]; do sleep 0.05; i=$((i + 1)); [ $i -gt 200 ] && fail "no handler socket"; done
    "$MOAT" restore --mem-backend "uffd:$d/h.sock" --timings "$d/s" <"$d/wq" >"$d/rout" 2>"$d/rerr" ||
        fail "uffd restore: exit $?"
    wait "$hp" || fail "handler exited $?"
    grep -q '^ok' "$d/rout" || fail "uffd restore: the guest did not check its memory"
    field first_run "$d/rerr" >>"$d/uffd.first"; field exit "$d/rerr" >>"$d/uffd.exit"
    n=$((n + 1))
done
ff=$(median <"$d/file.first") fe=$(median <"$d/file.exit")
uf=$(median <"$d/uffd.first") ue=$(median <"$d/uffd.exit")
pages=$(sed 's/.*copied \([0-9]*\) zero \([0-9]*\).*/\1 copied, \2 zero/' "$d/herr")
echo "uffd restore vs MAP_PRIVATE restore (${MEM} MiB guest, ${MIB} MiB written, then read back; median of $RUNS; host $kind):"
echo "  file: first KVM_RUN ${ff} us, guest exit ${fe} us"
echo "  uffd: first KVM_RUN ${uf} us, guest exit ${ue} us (handler: last run $pages pages)"
awk -v a="$uf" -v b="$ff" -v c="$ue" -v e="$fe" \
    'BEGIN { printf "  uffd/file: first KVM_RUN %.2f, guest exit %.2f\n", a / b, c / e }'
