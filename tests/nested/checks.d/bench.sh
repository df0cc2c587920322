# bench/snapshot.sh and bench/restore.sh in L1 (bench.host; NESTED_BENCH=1
# only). L1's figures are nested KVM under QEMU TCG: they show the benches
# run there and size things, they are not the targets' host. Fewer runs
# than on a host (RUNS=5): every run is ~50x slower here. Passes when both
# benches ran without SKIPPED and wrote their JSON.
if [ -f bench/RUN ]; then
    T_LIMIT=2400; t bench-snapshot sh -c '
        PATH=/payload/bench-bin:$PATH BENCH_NO_BUILD=1 RUNS=5 RUNS_BIG=3 DIFFS=3 FORKS=20 bash bench/snapshot.sh >$0 2>&1; r=$?; cat $0
        [ $r = 0 ] && ! grep "^SKIPPED" $0 | grep -v "^SKIPPED: bench/snapshot-qemu: " | grep -q . &&
            for j in snapshot snapshot-diff snapshot-write; do grep -H . build/bench/$j.json || exit 1; done' /tmp/bench-snapshot.out
    T_LIMIT=2400; t bench-restore sh -c '
        PATH=/payload/bench-bin:$PATH BENCH_NO_BUILD=1 RUNS=5 RUNS_WS=3 RUNS_FORK=3 bash bench/restore.sh >$0 2>&1; r=$?; cat $0
        [ $r = 0 ] && ! grep -q "^SKIPPED" $0 && grep -H . build/bench/restore.json' /tmp/bench-restore.out
fi
