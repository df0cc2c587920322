#!/usr/bin/env bash
# make test-fuzz-ci: every libFuzzer target (build/fuzz/fuzz_X, clang,
# ASan+UBSan) for FUZZ_CI_RUNS executions (default 100000), FUZZ_CI_JOBS
# targets at a time (default 2), all of them within FUZZ_CI_BUDGET seconds
# of wall time (default 300). The budget is shared: a target may use at
# most its fair share of what is left when it starts (left x jobs / targets
# not yet started), so a slow target cannot starve the rest; targets run
# fastest first by the previous run's exec/s (build/fuzz/ci-eps), so the
# slow ones inherit what the fast ones left. Each starts from its
# committed corpus (tests/fuzz/corpus/X, read only) in a fresh scratch
# directory. docs/fuzzing.md.
#
# Per target one line: PASS (no finding; its runs, exec/s, coverage and
# features from -print_final_stats and the last status line), or FAIL (a
# crash, leak, timeout or out-of-memory: the input is copied into
# tests/fuzz/corpus/X/ as crash-ci-<sha1> so the replay test keeps it, and
# the log is in build/fuzz/ci/X.log). A target stopped by the budget before
# FUZZ_CI_RUNS executions passes with a NOTE saying so.
#   tests/fuzz/ci.sh [NAME ...]      (default: every target)
set -u
cd "$(dirname "$0")/../.."
RUNS=${FUZZ_CI_RUNS:-100000}
JOBS=${FUZZ_CI_JOBS:-2}
BUDGET=${FUZZ_CI_BUDGET:-300}
B=${B:-build}
out=$B/fuzz/ci
if [ "$#" -gt 0 ]; then
    names=("$@")
else
    names=()
    for f in tests/fuzz/fuzz_*.c; do
        n=${f#tests/fuzz/fuzz_}
        names+=("${n%.c}")
    done
fi
for n in "${names[@]}"; do
    if [ ! -x "$B/fuzz/fuzz_$n" ]; then
        echo "SKIPPED: fuzz-ci: $B/fuzz/fuzz_$n not built (clang with libFuzzer missing? scripts/deps.sh)"
        exit 0
    fi
done
# Fastest first, by the last run's exec/s (unknown ones first, by name).
eps_file=$B/fuzz/ci-eps
if [ -f "$eps_file" ]; then
    mapfile -t names < <(for n in "${names[@]}"; do
        e=$(awk -v n="$n" '$1 == n { print $2 }' "$eps_file")
        echo "${e:-999999999} $n"
    done | sort -k1,1nr -k2,2 | cut -d' ' -f2)
fi
rm -rf "$out"
mkdir -p "$out"
deadline=$(( $(date +%s) + BUDGET ))
total=${#names[@]}

one() {
    local n=$1 log=$out/$1.log left cap rc
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 5 ]; then
        echo "SKIPPED: fuzz_$n: the ${BUDGET}s budget was spent before it could start"
        return 0
    fi
    touch "$out/started-$n"
    local started
    started=$(find "$out" -maxdepth 1 -name 'started-*' | wc -l)
    cap=$(( left * JOBS / (total - started + 1) ))
    [ "$cap" -gt "$left" ] && cap=$left
    [ "$cap" -lt 5 ] && cap=5
    mkdir -p "$out/corpus-$n" "$out/art-$n"
    "$B/fuzz/fuzz_$n" -runs="$RUNS" -max_total_time="$cap" -timeout=25 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$out/art-$n/" \
        "$out/corpus-$n" "tests/fuzz/corpus/$n" >"$log" 2>&1
    rc=$?
    local runs eps cov ft secs
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    secs=$(( $(date +%s) - deadline + BUDGET ))
    local found
    found=$(find "$out/art-$n" -type f | head -1)
    if [ "$rc" != 0 ] || [ -n "$found" ]; then
        local kept=""
        if [ -n "$found" ]; then
            local sum
            sum=$(sha1sum "$found" | cut -c1-16)
            kept="tests/fuzz/corpus/$n/crash-ci-$sum"
            cp "$found" "$kept"
        fi
        echo "FAIL: fuzz_$n: exit $rc after ${runs:-?} runs; input kept as ${kept:-(none written)}; log $log"
        grep -m3 -E 'ERROR|SUMMARY|runtime error|FUZZ_ASSERT' "$log" | sed 's/^/    /'
        return 0
    fi
    echo "PASS: fuzz_$n: ${runs:-?} runs, ${eps:-?} exec/s, cov ${cov:-?}, ft ${ft:-?} (done at ${secs}s)"
    echo "$n ${eps:-0}" >>"$out/eps"
    if [ "${runs:-0}" -lt "$RUNS" ]; then
        echo "NOTE: fuzz_$n: its share of the budget (${cap}s) ended it after ${runs:-0} of $RUNS runs"
    fi
}
export -f one
export out deadline BUDGET RUNS B JOBS total

t0=$(date +%s)
printf '%s\n' "${names[@]}" | xargs -P "$JOBS" -I{} bash -c 'one "$@"' _ {} | tee "$out/summary.txt"
[ -s "$out/eps" ] && cp "$out/eps" "$eps_file"
echo "fuzz-ci: ${#names[@]} targets, $(( $(date +%s) - t0 ))s wall, $JOBS at a time, budget ${BUDGET}s, $RUNS runs each"
! grep -q '^FAIL:' "$out/summary.txt"
