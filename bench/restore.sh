#!/usr/bin/env bash
# Restore-side benchmark (issue 14, items 4-6): working-set prefetch, fork
# fan-out and the sandbox commands' latency, all on the tiny wsread test
# guest (tests/guests/wsread.c) with 256 MiB of RAM:
#  - restore -> first KVM_RUN (--timings first_run), median / p99 over RUNS,
#    with the prefetch helper running (the working set recorded beforehand);
#  - restore -> the guest has read back its WS_MIB MiB working set
#    (--timings cmd_finished), with prefetch and with --no-prefetch,
#    alternating, RUNS_WS runs each; once with the memory file's page cache
#    warm, once evicted before every run (posix_fadvise DONTNEED: a snapshot
#    that has aged out of the cache);
#  - 20 forks (FORKS) -> all at their first instruction: `moat fork --count
#    20 --timings` of a sandbox, from the children's start to the last
#    child's first KVM_RUN, RUNS_FORK times;
#  - `moat start` of a stopped sandbox until it returns (its control socket
#    answers: the started moat says so over its ready pipe) and `moat stop`
#    (snapshot included), wall time of the commands, RUNS times;
#  - `moat create` of the tiny guest and from a template (`moat fork
#    template.T --name X`), RUNS times; `moat exec` of a stopped sandbox
#    (the default Linux guest: resume, run `true`), RUNS_EXEC times, only
#    where Linux user space runs under moat (kvm: a hardware host or the
#    nested L1; on PVM the line says why not).
# Results: build/bench/restore.json. Needs a usable KVM, PVM included
# (SKIPPED otherwise).
set -u
cd "$(dirname "$0")/.."
RUNS=${RUNS:-20}
RUNS_WS=${RUNS_WS:-5}
RUNS_FORK=${RUNS_FORK:-5}
RUNS_EXEC=${RUNS_EXEC:-10}
FORKS=${FORKS:-20}
WS_MIB=${WS_MIB:-32}
B=build/bench
MOAT=${MOAT_BIN:-build/moat}
GUEST=${GUEST:-build/guests/wsread.elf}
mkdir -p "$B"
[ -n "${BENCH_NO_BUILD:-}" ] || make -s build/moat "$GUEST" >/dev/null || exit 1
json=${JSON:-$B/restore.json}
kind=$(MOAT_BIN=$MOAT scripts/host-kind.sh) || exit 1
if [ "$kind" = none ]; then
    echo "SKIPPED: bench/restore: no usable KVM on this host ($(MOAT_BIN=$MOAT scripts/host-kind.sh --reason 2>/dev/null)); nothing measured"
    printf '{"skipped": "no usable KVM"}\n' > "$json"
    exit 0
fi
median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "null"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m}'; }
p99() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.99+0.999); if(i<1)i=1; if (NR==0) print "null"; else print a[i]}'; }
now_us() { date +%s%6N; }
field() { grep -o "\"$1\": [0-9]*" | head -n 1 | awk '{print $2}'; }   # from a --timings line
evict() { dd if="$1" iflag=nocache count=0 status=none; }   # GNU dd: posix_fadvise(DONTNEED) of the whole file
# remove sandboxes the bench made, or stop it: VMs left running would load every later figure
remove() { "$MOAT" rm -f "$@" >/dev/null || { echo "bench/restore: moat rm $* failed" >&2; exit 1; }; }

w=$(mktemp -d "${TMPDIR:-/tmp}/moat-bench-restore.XXXXXX")
export MOAT_HOME=$w/home
cleanup() { "$MOAT" rm -f $("$MOAT" ls 2>/dev/null | awk 'NR > 1 {print $1}') >/dev/null 2>&1; rm -rf "$w"; }
trap cleanup EXIT
printf r > "$w/r"

# The snapshot: WS_MIB MiB written, the guest waiting for 'r'.
snap() {    # DIR MIB
    mkdir -p "$1"
    "$MOAT" run --mem 256 --kernel "$GUEST" --cmdline "ws=$2" --snapshot-dir "$1" </dev/null >"$1.out" 2>"$1.err" &
    local pid=$!
    for _ in $(seq 1 6000); do grep -q filled "$1.out" 2>/dev/null && break; sleep 0.01; done
    kill -USR2 "$pid"; wait "$pid"
}
snap "$w/s" "$WS_MIB"

# The first restore records the working set: all of it read, then the end
# (--ws-record-ms: however long the read takes on this host).
t0=$(now_us)
"$MOAT" restore --ws-record-ms 3600000 "$w/s" <"$w/r" >/dev/null 2>"$w/record.err"
rec_ms=$(( ($(now_us) - t0) / 1000 ))
ws_kib=$(( $(stat -c %s "$w/s/memory.ws" 2>/dev/null || echo 0) ))
ws_pages=$(od -An -t u4 -j 32 -N 4 "$w/s/memory.ws" 2>/dev/null | awk '{print $1}')

# restore -> first KVM_RUN, prefetch running; the guest waits for input
# that never comes and --timeout ends it.
: > "$w/first.runs"
for _ in $(seq 1 "$RUNS"); do
    "$MOAT" restore --timings --timeout 0.3 "$w/s" </dev/null >/dev/null 2>"$w/first.err"
    field first_run < "$w/first.err" >> "$w/first.runs"
done
first_med=$(median < "$w/first.runs"); first_p99=$(p99 < "$w/first.runs")

# restore -> working set read back, with and without prefetch.
ws_runs() {     # COLD(0|1) OUT
    : > "$2.on"; : > "$2.off"
    for _ in $(seq 1 "$RUNS_WS"); do
        for m in on off; do
            [ "$1" = 1 ] && evict "$w/s/memory"
            flag=; [ $m = off ] && flag=--no-prefetch
            "$MOAT" restore --timings $flag "$w/s" <"$w/r" >"$w/ws.out" 2>"$w/ws.err"
            grep -q '^ok' "$w/ws.out" || { echo "bench/restore: the guest did not read its working set back ($m)" >&2; cat "$w/ws.err" >&2; }
            field cmd_finished < "$w/ws.err" >> "$2.$m"
        done
    done
}
ws_runs 0 "$w/warm"
ws_runs 1 "$w/cold"
warm_on=$(median < "$w/warm.on"); warm_off=$(median < "$w/warm.off")
cold_on=$(median < "$w/cold.on"); cold_off=$(median < "$w/cold.off")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "null" }'; }

# Sandboxes: start / stop, then fork fan-out.
snap "$w/s0" 0 >/dev/null
"$MOAT" create sb --wait 0 --mem 256 --kernel "$GUEST" --cmdline ws=0 >/dev/null || exit 1
: > "$w/start.runs"; : > "$w/stop.runs"
for _ in $(seq 1 "$RUNS"); do
    t0=$(now_us); "$MOAT" stop sb || exit 1; t1=$(now_us)
    "$MOAT" start --wait 0 sb || exit 1; t2=$(now_us)
    "$MOAT" ls | grep -q '^sb  *running' || echo "bench/restore: sb not running after start" >&2
    echo $((t1 - t0)) >> "$w/stop.runs"; echo $((t2 - t1)) >> "$w/start.runs"
done
stop_med=$(median < "$w/stop.runs"); stop_p99=$(p99 < "$w/stop.runs")
start_med=$(median < "$w/start.runs"); start_p99=$(p99 < "$w/start.runs")

# moat create, end to end: of the tiny guest (it boots; --wait 0: until
# its control socket answers) and from a template made of sb
# (`moat fork template.T --name X`: the template's snapshot mapped
# copy-on-write), each removed again, RUNS times.
"$MOAT" template create tb --from sb --no-agent >/dev/null || exit 1
: > "$w/create.runs"; : > "$w/tcreate.runs"
for i in $(seq 1 "$RUNS"); do
    t0=$(now_us); "$MOAT" create c$i --wait 0 --mem 256 --kernel "$GUEST" --cmdline ws=0 >/dev/null || exit 1; t1=$(now_us)
    "$MOAT" fork template.tb --name t$i --wait 0 >/dev/null || exit 1; t2=$(now_us)
    remove c$i t$i
    echo $((t1 - t0)) >> "$w/create.runs"; echo $((t2 - t1)) >> "$w/tcreate.runs"
done
create_med=$(median < "$w/create.runs"); create_p99=$(p99 < "$w/create.runs")
tcreate_med=$(median < "$w/tcreate.runs"); tcreate_p99=$(p99 < "$w/tcreate.runs")

# moat exec of a stopped sandbox (resume + run `true` + answer), the
# default Linux guest with its agent: only where Linux user space runs
# under moat (a kvm host or the nested L1; not PVM), RUNS_EXEC times,
# the sandbox stopped again between runs (not timed).
exec_med=null; exec_p99=null; exec_why=""
if [ "$kind" != kvm ]; then
    exec_why="not measured: Linux user space does not run under moat on a $kind host"
elif [ ! -f build/guest/bzImage ]; then
    exec_why="not measured: build/guest/bzImage missing (make guest)"
else
    "$MOAT" create lx --wait 600 >/dev/null || exit 1
    : > "$w/exec.runs"
    for _ in $(seq 1 "$RUNS_EXEC"); do
        "$MOAT" stop lx || exit 1
        t0=$(now_us); "$MOAT" exec lx -- true || exit 1; t1=$(now_us)
        echo $((t1 - t0)) >> "$w/exec.runs"
    done
    remove lx
    exec_med=$(median < "$w/exec.runs"); exec_p99=$(p99 < "$w/exec.runs")
fi

: > "$w/fork.runs"
for r in $(seq 1 "$RUNS_FORK"); do
    "$MOAT" fork sb --count "$FORKS" --prefix f$r --wait 0 --timings >/dev/null 2>"$w/fork.err" || { cat "$w/fork.err" >&2; exit 1; }
    t=$(grep '"command": "fork"' "$w/fork.err")
    echo "$(( $(echo "$t" | field first_run) - $(echo "$t" | field overlays) )) $(echo "$t" | field first_run) $(echo "$t" | field snapshot)" >> "$w/fork.runs"
    remove $(for i in $(seq 1 "$FORKS"); do echo "f$r-$i"; done)   # the children: PREFIX-N, N = 1..FORKS
done
fork_med=$(awk '{print $1}' "$w/fork.runs" | median); fork_p99=$(awk '{print $1}' "$w/fork.runs" | p99)
fork_total=$(awk '{print $2}' "$w/fork.runs" | median); fork_snap=$(awk '{print $3}' "$w/fork.runs" | median)

echo "host: $kind, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "working set recorded by the first restore: ${ws_pages:-?} ranges ($ws_kib bytes), that restore took $rec_ms ms"
echo "restore -> first KVM_RUN (prefetching), $RUNS runs: median ${first_med} us, p99 ${first_p99} us"
echo "restore -> ${WS_MIB} MiB working set read, $RUNS_WS runs each: warm cache: prefetch ${warm_on} us, none ${warm_off} us (ratio $(ratio "$warm_on" "$warm_off")); cold: prefetch ${cold_on} us, none ${cold_off} us (ratio $(ratio "$cold_on" "$cold_off"))"
echo "$FORKS forks -> all at first KVM_RUN, $RUNS_FORK runs: median ${fork_med} us from the children's start (p99 ${fork_p99}); whole command to the last first KVM_RUN ${fork_total} us (the parent's snapshot done at ${fork_snap} us)"
echo "moat start (stopped -> control socket answers), $RUNS runs: median ${start_med} us, p99 ${start_p99} us"
echo "moat stop (snapshot included), $RUNS runs: median ${stop_med} us, p99 ${stop_p99} us"
echo "moat create (tiny guest boots, --wait 0), $RUNS runs: median ${create_med} us, p99 ${create_p99} us"
echo "moat fork template.T --name X (create from a template, --wait 0), $RUNS runs: median ${tcreate_med} us, p99 ${tcreate_p99} us"
if [ -z "$exec_why" ]; then
    echo "moat exec of a stopped sandbox (Linux guest: resume + true), $RUNS_EXEC runs: median ${exec_med} us, p99 ${exec_p99} us"
else
    echo "moat exec of a stopped sandbox: $exec_why"
fi
cat > "$json" <<EOF2
{"host_kind": "$kind", "cpus": $(nproc), "mem_mib": 256, "ws_mib": $WS_MIB,
 "record_ms": $rec_ms, "ws_file_bytes": $ws_kib,
 "restore_first_run_us_median": ${first_med}, "restore_first_run_us_p99": ${first_p99}, "runs": $RUNS,
 "ws_runs": $RUNS_WS,
 "ws_warm_prefetch_us_median": ${warm_on}, "ws_warm_none_us_median": ${warm_off}, "ws_warm_ratio": $(ratio "$warm_on" "$warm_off"),
 "ws_cold_prefetch_us_median": ${cold_on}, "ws_cold_none_us_median": ${cold_off}, "ws_cold_ratio": $(ratio "$cold_on" "$cold_off"),
 "forks": $FORKS, "fork_runs": $RUNS_FORK, "forks_all_first_run_us_median": ${fork_med}, "forks_all_first_run_us_p99": ${fork_p99},
 "fork_command_to_last_first_run_us_median": ${fork_total},
 "start_us_median": ${start_med}, "start_us_p99": ${start_p99}, "stop_us_median": ${stop_med}, "stop_us_p99": ${stop_p99},
 "create_us_median": ${create_med}, "create_us_p99": ${create_p99},
 "create_from_template_us_median": ${tcreate_med}, "create_from_template_us_p99": ${tcreate_p99},
 "exec_stopped_us_median": ${exec_med}, "exec_stopped_us_p99": ${exec_p99}}
EOF2
echo "results: $json"
