#!/usr/bin/env bash
# Boot benchmark: moat against QEMU (-M microvm, KVM), same guest, same run.
#
# 1. tiny guest (bench/guest/tiny.S, booted by both through its PVH note):
#    process start -> first guest instruction -> exit. Wall time per run,
#    peak RSS, and moat's own --timings (first KVM_RUN, first instruction).
# 2. on hardware KVM: Linux (build/guest bzImage + initramfs) to /init and
#    back out (`-- /bin/true`, reboot=k), moat vs QEMU microvm.
#
# Medians over RUNS runs (default 20); results: build/bench/boot.json.
# Without a usable KVM (`moat host`) it says SKIPPED and writes the reason into the JSON.
set -u
cd "$(dirname "$0")/.."
RUNS=${RUNS:-20}
B=build/bench
MOAT=${MOAT_BIN:-build/moat}
mkdir -p "$B"
# BENCH_NO_BUILD=1: use what is there (e.g. inside the nested-KVM L1, which has no make).
[ -n "${BENCH_NO_BUILD:-}" ] || make -s "$B/runstat" "$B/tiny.elf" build/moat >/dev/null || exit 1
QEMU=${QEMU:-qemu-system-x86_64}
read -r -a QEMU_EXTRA <<< "${QEMU_ARGS:-}"   # e.g. QEMU_ARGS="-L /path/to/firmware"
json="$B/boot.json"

kind=$(MOAT_BIN=$MOAT scripts/host-kind.sh) || exit 1   # the host probe: kvm, pvm, none
if [ "$kind" = none ]; then
    why=$(MOAT_BIN=$MOAT scripts/host-kind.sh --reason 2>/dev/null)
    echo "SKIPPED: bench/boot: no usable KVM on this host ($why); nothing measured"
    printf '{"skipped": "no usable KVM", "host": "%s"}\n' "$(uname -r)" > "$json"
    exit 0
fi
pvm=0; [ "$kind" = pvm ] && pvm=1
# QEMU's KVM setup writes IA32_ARCH_CAPABILITIES, which PVM refuses (QEMU
# then aborts at start): leave that feature out there, as
# bench/snapshot-qemu.sh does.
qcpu=host; [ "$pvm" = 1 ] && qcpu=host,-arch-capabilities
qcpu=${QEMU_CPU:-$qcpu}

median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "null"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m}'; }
col() { awk -v c="$1" '{print $c}'; }
p99() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.99); if(i<1)i=1; print a[i]}'; }

run_set() {  # name, then the command; leaves $B/<name>.runs and .err
    local name=$1; shift
    rm -f "$B/$name.runs" "$B/$name.err"
    RUNSTAT_ERR="$B/$name.err" "$B/runstat" "$RUNS" "$@" > "$B/$name.runs"
}
timing_median() {  # file, key
    grep -o "\"$2\": [0-9]*" "$1" | awk '{print $2}' | median
}

# 1. tiny guest
run_set moat-tiny "$MOAT" run --pvh --mem 256 --timings --kernel "$B/tiny.elf"
QEMU_TINY=("$QEMU" "${QEMU_EXTRA[@]}" -M microvm -enable-kvm -cpu "$qcpu" -m 256 -nodefaults -no-user-config
           -display none -kernel "$B/tiny.elf" -device isa-debug-exit,iobase=0xf4,iosize=0x04)
run_set qemu-tiny "${QEMU_TINY[@]}"
m_wall=$(col 1 < "$B/moat-tiny.runs" | median); q_wall=$(col 1 < "$B/qemu-tiny.runs" | median)
m_rss=$(col 2 < "$B/moat-tiny.runs" | median); q_rss=$(col 2 < "$B/qemu-tiny.runs" | median)
m_first=$(timing_median "$B/moat-tiny.err" first_run)
m_ready=$(timing_median "$B/moat-tiny.err" kvm_ready)
m_insn=$(timing_median "$B/moat-tiny.err" init_reached)
m_bad=$(awk '$3 != 0' "$B/moat-tiny.runs" | wc -l); q_bad=$(awk '$3 != 1' "$B/qemu-tiny.runs" | wc -l)
ratio=$(awk -v a="$m_wall" -v b="$q_wall" 'BEGIN{ if (b>0) printf "%.3f", a/b; else print "null"}')
echo "tiny guest, $RUNS runs each (medians):"
echo "  moat: wall ${m_wall} us, kvm_ready ${m_ready} us, first KVM_RUN ${m_first} us, first guest insn ${m_insn} us, max RSS ${m_rss} KiB, failed runs ${m_bad}"
echo "  qemu: wall ${q_wall} us, max RSS ${q_rss} KiB, failed runs ${q_bad}"
echo "  moat/qemu wall: ${ratio}"

# 2. Linux, hardware KVM only
linux='"skipped": "PVM host: Linux cannot reach user space"'
if [ "${BENCH_LINUX:-1}" = 0 ]; then
    linux='"skipped": "BENCH_LINUX=0"'
elif [ "$pvm" = 0 ] && [ -r build/guest/bzImage ] && [ -r build/guest/initramfs.cpio ]; then
    CMDL="console=ttyS0 reboot=k panic=-1 8250.nr_uarts=1 quiet"
    run_set moat-linux "$MOAT" run --timings --kernel build/guest/bzImage --initrd build/guest/initramfs.cpio \
        --cmdline "$CMDL" -- /bin/true
    run_set qemu-linux "$QEMU" "${QEMU_EXTRA[@]}" -M microvm,auto-kernel-cmdline=off -enable-kvm -cpu "$qcpu" -m 256 \
        -nodefaults -no-user-config -display none -no-reboot -serial null \
        -kernel build/guest/bzImage -initrd build/guest/initramfs.cpio -append "$CMDL -- /bin/true"
    ml=$(col 1 < "$B/moat-linux.runs" | median); ql=$(col 1 < "$B/qemu-linux.runs" | median)
    mi=$(timing_median "$B/moat-linux.err" init_reached)
    mip99=$(grep -o '"init_reached": [0-9]*' "$B/moat-linux.err" | awk '{print $2}' | p99)
    lr=$(awk -v a="$ml" -v b="$ql" 'BEGIN{ if (b>0) printf "%.3f", a/b; else print "null"}')
    echo "linux /bin/true, $RUNS runs each (medians): moat wall ${ml} us (init reached ${mi} us, p99 ${mip99}), qemu wall ${ql} us, ratio ${lr}"
    linux="\"moat_wall_us\": $ml, \"moat_init_reached_us\": $mi, \"moat_init_reached_p99_us\": $mip99, \"qemu_wall_us\": $ql, \"ratio\": $lr"
fi

cat > "$json" <<EOF2
{"runs": $RUNS, "host_kernel": "$(uname -r)", "pvm": $pvm,
 "tiny": {"moat_wall_us": $m_wall, "moat_kvm_ready_us": $m_ready, "moat_first_run_us": $m_first,
          "moat_first_insn_us": $m_insn, "moat_maxrss_kib": $m_rss, "moat_failed_runs": $m_bad,
          "qemu_wall_us": $q_wall, "qemu_maxrss_kib": $q_rss, "qemu_failed_runs": $q_bad, "ratio_wall": $ratio},
 "linux": {$linux}}
EOF2
echo "results: $json"
