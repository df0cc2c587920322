#!/bin/sh
# Diff-snapshot benchmark (issue 5): POSIX sh (it also runs in the nested
# L1's busybox). The dirty test guest (256 MiB) writes DIRTY_MIB (64) MiB,
# then `moat run --diff-snapshots` takes, on SIGUSR1/SIGUSR2:
#   D/0  a full snapshot (the guest has written DIRTY_MIB MiB once),
#   D/1  a diff after it rewrote the same DIRTY_MIB MiB,
#   D/2  a diff with nothing written by the guest since D/1,
#   D/3  another such diff, and the VM stops;
# times are moat's own (pause + write + fsync + rename, "snapshot written
# in X ms"), sizes the allocated bytes of each memory file. Then D is
# restored (the chain D/3 -> D/0) and the guest checks that every page holds
# its last value (exit 0), and D/0 alone is restored for comparison:
# process start -> first KVM_RUN and -> guest exit (moat --timings).
# Prints a summary and, with JSON=FILE, writes the numbers there.
# Needs a usable KVM, PVM included (`moat host`; SKIPPED otherwise).
MOAT=${MOAT_BIN:-build/moat}
GUEST=${DIRTY_GUEST:-build/guests/dirty.elf}
MIB=${DIRTY_MIB:-64}
MEM=${MEM_MIB:-256}
[ -x "$MOAT" ] || { echo "bench/snapshot-diff: $MOAT missing (make)" >&2; exit 1; }
kind=$(MOAT_BIN=$MOAT "$(dirname "$0")/../scripts/host-kind.sh") || exit 1   # the host probe
if [ "$kind" = none ]; then
    case "${MOAT_REQUIRE_KVM:-0}" in 0) ;; *) echo "bench/snapshot-diff: no usable KVM and MOAT_REQUIRE_KVM is set" >&2; exit 1 ;; esac
    echo "SKIPPED: bench/snapshot-diff: no usable KVM on this host ($("$MOAT" host --reason 2>/dev/null)); nothing measured"
    [ -n "${JSON:-}" ] && printf '{"skipped": "no usable KVM"}\n' > "$JSON"
    exit 0
fi
d=$(mktemp -d "${TMPDIR:-/tmp}/moat-bench-diff.XXXXXX")
trap 'rm -rf "$d"' EXIT
mkfifo "$d/in"
"$MOAT" run --mem "$MEM" --kernel "$GUEST" --cmdline "dirty=$MIB" --snapshot-dir "$d/s" --diff-snapshots \
    <"$d/in" >"$d/out" 2>"$d/err" &
pid=$!
exec 3>"$d/in"
fail() { echo "bench/snapshot-diff: $*" >&2; cat "$d/err" >&2; kill "$pid" 2>/dev/null; exit 1; }
# wait_n FILE PATTERN N: until PATTERN occurs N times in FILE (60 s, x MOAT_TEST_SLOW)
wait_n() {
    i=0 lim=$((600 * ${MOAT_TEST_SLOW:-1}))
    while [ "$(grep -c "$2" "$1" 2>/dev/null)" -lt "$3" ]; do
        sleep 0.1; i=$((i + 1)); [ $i -gt $lim ] && return 1
    done
    return 0
}
ms_of() { grep 'snapshot written' "$d/err" | sed -n "${1}p" | sed 's/.* in \([0-9.]*\) ms.*/\1/'; }
kib_of() { du -k "$d/s/$1/memory" | awk '{print $1}'; }

wait_n "$d/out" "round 1" 1 || fail "the guest did not write its memory"
kill -USR1 "$pid"; wait_n "$d/err" "snapshot written" 1 || fail "no full snapshot"
printf w >&3
wait_n "$d/out" "round 2" 1 || fail "the guest did not rewrite its memory"
kill -USR1 "$pid"; wait_n "$d/err" "snapshot written" 2 || fail "no diff snapshot"
kill -USR1 "$pid"; wait_n "$d/err" "snapshot written" 3 || fail "no second diff snapshot"
kill -USR2 "$pid"; wait "$pid" || fail "moat run exited $?"
exec 3>&-
[ -f "$d/s/3/state" ] || fail "no $d/s/3"
grep -q "full snapshot in .*/s/0" "$d/err" && grep -q "diff snapshot in .*/s/3" "$d/err" || fail "unexpected snapshot kinds"
full_ms=$(ms_of 1) diff_ms=$(ms_of 2) diff0_ms=$(ms_of 3) diff00_ms=$(ms_of 4)
full_kib=$(kib_of 0) diff_kib=$(kib_of 1) diff0_kib=$(kib_of 2)
state_b=$(wc -c <"$d/s/1/state")

printf q >"$d/q"
"$MOAT" restore --timings "$d/s" <"$d/q" >"$d/rout" 2>"$d/rerr" || fail "restore of the chain: exit $?"
grep -q '^ok' "$d/rout" || fail "restored guest did not check its memory"
"$MOAT" restore --timings --state "$d/s/0/state" --mem "$d/s/0/memory" <"$d/q" >"$d/r0out" 2>"$d/r0err" ||
    fail "restore of the full snapshot: exit $?"
field() { grep -o "\"$1\": [0-9]*" "$2" | awk '{print $2}'; }
c_first=$(field first_run "$d/rerr") c_exit=$(field exit "$d/rerr")
f_first=$(field first_run "$d/r0err") f_exit=$(field exit "$d/r0err")

echo "diff snapshots (${MEM} MiB dirty guest, ${MIB} MiB written between snapshots):"
echo "  full snapshot:                ${full_ms} ms, memory file ${full_kib} KiB allocated"
echo "  diff, ${MIB} MiB rewritten:       ${diff_ms} ms, memory file ${diff_kib} KiB allocated, state file ${state_b} bytes"
echo "  diff, nothing written:        ${diff0_ms} ms (next: ${diff00_ms} ms), memory file ${diff0_kib} KiB allocated"
echo "  restore of the chain (3 diffs): first KVM_RUN ${c_first} us, guest exit ${c_exit} us (checked all pages)"
echo "  restore of the full snapshot:   first KVM_RUN ${f_first} us, guest exit ${f_exit} us"
if [ -n "${JSON:-}" ]; then
    cat >"$JSON" <<EOF2
{"mem_mib": $MEM, "dirty_mib": $MIB, "full_snapshot_ms": ${full_ms:-null}, "full_memory_kib": $full_kib,
 "diff_snapshot_ms": ${diff_ms:-null}, "diff_memory_kib": $diff_kib, "diff_state_bytes": $state_b,
 "diff_nothing_written_ms": ${diff0_ms:-null}, "diff_nothing_written_memory_kib": $diff0_kib,
 "restore_chain3_first_run_us": ${c_first:-null}, "restore_chain3_exit_us": ${c_exit:-null},
 "restore_full_first_run_us": ${f_first:-null}, "restore_full_exit_us": ${f_exit:-null}}
EOF2
fi
