#!/usr/bin/env bash
# make test's runner: every layer in order, each a make target, timed; at the
# end one line per layer with its wall time and its pass/fail/skip counts,
# and a total (docs/testing.md). Every layer runs even after one has failed,
# so one run shows everything; the exit status is 1 if any failed.
#
#   tests/layers.sh NAME:TARGET[,TARGET...] ...
#
# Counting, from each layer's output (kept in build/test-logs/NAME.log):
# pass/fail from Check summaries ("Checks: N, Failures: F, Errors: E") and
# PASS:/FAIL: lines, for the nested layer only from its NESTED-CHECK lines
# (the suites it runs inside L1 print their own summaries too); skip is the
# number of SKIPPED: lines (one line may stand for several tests, and a
# Check test that skips part of itself also counts as passed). A layer
# whose make fails with no failure counted counts one. If the first layer
# (the build) fails, the others are not run: each would only retry the
# build. The table also goes to build/test-times.txt.
set -u
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
logs=build/test-logs
mkdir -p "$logs"
# The host kind, from the probe once moat is built (after the build layer).
kind=""
probe() {
    [ -z "$kind" ] || return 0
    kind=$(scripts/host-kind.sh 2>/dev/null) || { kind=""; return 0; }
    echo "test: host kind $kind ($(scripts/host-kind.sh --reason 2>/dev/null)); $(nproc) CPUs"
}
probe

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
count() { grep -cE "$1" "$2"; }   # lines matching ERE $1 in file $2

names=() times=() passes=() fails=() skips=() results=()
any_fail=0 t_all=0 p_all=0 f_all=0 s_all=0
first=1 build_failed=0
for spec in "$@"; do
    name=${spec%%:*}
    targets=${spec#*:}
    log=$logs/$name.log
    if [ "$build_failed" = 1 ]; then
        echo "=== test layer $name: not run (the build failed)"
        names+=("$name") times+=(0) passes+=(0) fails+=(1) skips+=(0) results+=("not run")
        f_all=$((f_all + 1))
        continue
    fi
    echo "=== test layer $name: make ${targets//,/ }"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    $MAKE --no-print-directory ${targets//,/ } 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    secs=$(( $(date +%s) - t0 ))
    if [ "$name" = nested ]; then
        p=$(count '^NESTED-CHECK PASS' "$log")
        f=$(count '^NESTED-CHECK FAIL' "$log")
    else
        read -r cp cf < <(sed -n 's/.*Checks: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\).*/\1 \2 \3/p' "$log" |
                          awk '{ c += $1; f += $2 + $3 } END { print c + 0, f + 0 }')
        p=$(( cp - cf + $(count '^PASS:' "$log") ))
        f=$(( cf + $(count '^FAIL:' "$log") ))
    fi
    s=$(count '^SKIPPED:' "$log")
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
    res=ok
    if [ "$rc" != 0 ]; then res=FAIL; any_fail=1; [ "$first" = 1 ] && build_failed=1; fi
    first=0
    names+=("$name") times+=("$secs") passes+=("$p") fails+=("$f") skips+=("$s") results+=("$res")
    t_all=$((t_all + secs)) p_all=$((p_all + p)) f_all=$((f_all + f)) s_all=$((s_all + s))
    probe
done

# Before the table (CI keeps mostly the tail of the output): for each
# failed layer, its failing lines, at most 20, each cut to 300 characters.
fail_re='^FAIL:|^[^ ]+:[0-9]+:[FE]:|^NESTED-CHECK FAIL|^make(\[[0-9]+\])?: \*\*\*.*Error'
for i in "${!names[@]}"; do
    [ "${results[$i]}" = FAIL ] || continue
    log=$logs/${names[$i]}.log
    [ -f "$log" ] || { echo "test: layer ${names[$i]} failed (${results[$i]}), no log"; continue; }
    n=$(count "$fail_re" "$log")
    echo
    if [ "$n" = 0 ]; then
        echo "test: layer ${names[$i]} failed, no failing line in $log; its last 5 lines:"
        tail -n 5 "$log"
    else
        echo "test: layer ${names[$i]} failed, $n failing line(s) in $log$([ "$n" -gt 20 ] && echo ", the first 20"):"
        grep -E -m 20 "$fail_re" "$log"
    fi | cut -c1-300 | sed '2,$s/^/  /'
done

{
    echo
    echo "test: time per layer (host kind ${kind:-unknown}, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ))"
    printf '  %-12s %8s %6s %6s %6s  %s\n' layer time pass fail skip result
    for i in "${!names[@]}"; do
        printf '  %-12s %8s %6s %6s %6s  %s\n' "${names[$i]}" "$(fmt_time "${times[$i]}")" \
            "${passes[$i]}" "${fails[$i]}" "${skips[$i]}" "${results[$i]}"
    done
    printf '  %-12s %8s %6s %6s %6s  %s\n' total "$(fmt_time "$t_all")" "$p_all" "$f_all" "$s_all" \
        "$([ "$any_fail" = 0 ] && echo PASS || echo FAIL)"
} | tee build/test-times.txt
[ "$any_fail" = 0 ]
