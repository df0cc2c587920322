#!/bin/sh
# tests/nested/jail-cgroup.sh: the kernel enforcing moat jail's --cgroup
# limits (vmm/sandbox/jail.c; docs/security.md, "Jail"), where
# /sys/fs/cgroup is a real cgroup v2: L1 of the nested suite (tests/nested/
# init mounts it) or, with test-moat.sh --native, a cgroup v2 host. Run by
# checks.d/jail-cgroup.sh (copied into the payload by jail-cgroup.host);
# busybox sh is enough. Each part is one nested check:
#   jail-sh   tests/integration/jail.sh itself (bash, copied in), whose
#             "cgroup v2 host" branch runs here: the limits read back from
#             /sys/fs/cgroup/moat/ID, /proc/PID/cgroup, the cgroup removed
#             after exit, moat jail itself keeping the host's root;
#   memory    the dirty test guest writes 128 MiB of its 160: with
#             memory.max=48M the kernel's OOM killer ends the jailed moat
#             (status 137, oom_kill counted in /sys/fs/cgroup/moat/memory.events);
#             with 256M it finishes (status 0), its RAM charged to the per-VM
#             cgroup (memory.current >= 128 MiB while it runs) and
#             /proc/PID/cgroup 0::/moat/ID; each per-VM cgroup removed after;
#   pids      pids.max=1: the jailed moat cannot start its threads (a clear
#             error, status 125); pids.max=16: it runs (status 42);
#   cpu       the spinning timeout guest with cpu.max="20000 100000": the
#             cgroup is throttled (cpu.stat nr_throttled > 0) and gets at most
#             30% of a CPU (cpu.stat usage_usec over 2 s); with only
#             cpu.weight it gets at least half of one (in L1: 0.19-0.21 and
#             0.96-1.00). Not enforcement-tested: memory.high (without swap
#             it throttles rather than fails), memory.swap.max (L1 has no
#             swap), cpu.weight (relative; the unlimited reference here).
# Usage: jail-cgroup.sh PART (cwd: the payload: build/moat, build/guests).
# Prints what it saw; exit 0 when every condition of the part holds.
set -u
part=$1
# pivot_root(2) refuses a root on the initial ramfs (rootfs has no parent
# mount), which is L1's root: run in a chroot onto a recursive bind of /
# instead (same files, same /proc, /sys and /dev), as moat jail would run
# on a host booted from a disk.
if [ -z "${JCG_IN_ROOT:-}" ] && [ "$(awk '$2 == "/" { t = $3 } END { print t }' /proc/mounts)" = rootfs ]; then
    mkdir -p /jcg-root
    grep -q ' /jcg-root ' /proc/mounts || mount -o rbind / /jcg-root || exit 1
    exec chroot /jcg-root env JCG_IN_ROOT=1 sh -c 'cd "$1" && shift && exec sh "$@"' sh "$PWD" "$0" "$@"
fi
ROOT=$PWD
M=$ROOT/build/moat
G=$ROOT/build/guests
CG=/sys/fs/cgroup
J="--uid 65534 --gid 65534"
up() { read -r u _ </proc/uptime; echo "$u"; }
# A jail base: root-owned, on a mount that is not nodev (as jail.sh picks
# it; L1 has no findmnt but the copied one, and its rootfs is not nodev),
# removed at the end.
mkdir -p /var/tmp
for d in /var/tmp /srv /root; do
    [ -d $d ] && ! findmnt -no OPTIONS -T $d 2>/dev/null | tr , '\n' | grep -qx nodev && break
done
BASE=$(mktemp -d $d/moat-jcg.XXXXXX) && chmod 755 "$BASE" || exit 1
trap 'rm -rf "$BASE"' EXIT
# cg_wait ID: wait (up to 60 s) until the per-VM cgroup has a process;
# prints its pid.
cg_wait() {
    n=0
    while [ $n -lt 300 ]; do
        p=$(head -n 1 $CG/moat/$1/cgroup.procs 2>/dev/null)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.2; n=$((n + 1))
    done
    return 1
}
# gone ID: the per-VM cgroup was removed (else say what is left in it).
gone() {
    [ ! -e $CG/moat/$1 ] && return 0
    echo "$CG/moat/$1 left: procs [$(cat $CG/moat/$1/cgroup.procs)] threads [$(cat $CG/moat/$1/cgroup.threads)]" \
         "events [$(tr '\n' ' ' <$CG/moat/$1/cgroup.events)]"
    for p in $(cat $CG/moat/$1/cgroup.threads); do echo "  $p $(cat /proc/$p/comm)"; done
    sleep 1; rmdir $CG/moat/$1 && echo "  rmdir 1 s later: removed"
    return 1
}
ev() { awk -v k="$2" '$1 == k { print $2 }' "$1" 2>/dev/null; }   # ev FILE KEY

case "$part" in
jail-sh)
    # jail.sh as on a cgroup v2 host (its default build/moat and
    # build/guests: the payload's).
    echo "cgroup v2 at $CG: controllers $(cat $CG/cgroup.controllers)"
    # Its jailed-sandbox part runs on the host directly (JAIL_SANDBOXES:
    # tick-continuity checks that L1's console timing does not meet).
    JAIL_SANDBOXES=0 ./bash tests/integration/jail.sh
    ;;
memory)
    ok=0
    oom0=$(ev $CG/moat/memory.events oom_kill)
    printf q | $M jail --id jcg-m1 $J --chroot-base $BASE --cgroup memory.max=50331648 \
        -- moat run --kernel $G/dirty.elf --mem 160 --cmdline dirty=128 --timeout 300 >/tmp/jcg-m1 2>&1
    r1=$?
    oom1=$(ev $CG/moat/memory.events oom_kill)
    echo "memory.max=48 MiB: status $r1, moat/memory.events oom_kill ${oom0:-?} -> ${oom1:-?}; output:"
    cat /tmp/jcg-m1
    dmesg | grep -i "memory cgroup out of memory" | tail -n 2
    [ $r1 = 137 ] && [ "${oom1:-0}" -gt "${oom0:-0}" ] && gone jcg-m1 || ok=1
    # The same guest with room: it writes all 128 MiB, checks them ('q')
    # and exits 0. The 'q' is sent once it has written them, after
    # memory.current and /proc/PID/cgroup are read.
    { if p=$(cg_wait jcg-m2); then
          grep '^0::' /proc/$p/cgroup >/tmp/jcg-m2-cg
          n=0
          while ! grep -q "round 1" /tmp/jcg-m2 && [ $n -lt 1500 ]; do sleep 0.2; n=$((n + 1)); done
          cat $CG/moat/jcg-m2/memory.current >/tmp/jcg-m2-cur
          cat $CG/moat/jcg-m2/memory.max >/tmp/jcg-m2-max
      fi
      printf q; } |
        $M jail --id jcg-m2 $J --chroot-base $BASE --cgroup memory.max=268435456 \
            -- moat run --kernel $G/dirty.elf --mem 160 --cmdline dirty=128 --timeout 300 >/tmp/jcg-m2 2>&1
    r2=$?
    cur=$(cat /tmp/jcg-m2-cur 2>/dev/null)
    echo "memory.max=256 MiB ($(cat /tmp/jcg-m2-max 2>/dev/null)): status $r2, memory.current after the writes ${cur:-?}," \
         "/proc/PID/cgroup $(cat /tmp/jcg-m2-cg 2>/dev/null); output:"
    cat /tmp/jcg-m2
    [ $r2 = 0 ] && grep -q '^ok' /tmp/jcg-m2 && [ "${cur:-0}" -ge 134217728 ] &&
        [ "$(cat /tmp/jcg-m2-max)" = 268435456 ] && [ "$(cat /tmp/jcg-m2-cg)" = 0::/moat/jcg-m2 ] &&
        gone jcg-m2 || ok=1
    exit $ok
    ;;
pids)
    ok=0
    $M jail --id jcg-p1 $J --chroot-base $BASE --cgroup pids.max=1 \
        -- moat run --kernel $G/exitcode.elf --mem 64 --timeout 120 </dev/null >/tmp/jcg-p1 2>&1
    r1=$?
    echo "pids.max=1: status $r1; output:"; cat /tmp/jcg-p1
    [ $r1 = 125 ] && grep -q "Resource temporarily unavailable" /tmp/jcg-p1 &&
        ! grep -q "out of memory" /tmp/jcg-p1 && gone jcg-p1 || ok=1
    $M jail --id jcg-p2 $J --chroot-base $BASE --cgroup pids.max=16 \
        -- moat run --kernel $G/exitcode.elf --mem 64 --timeout 120 </dev/null >/tmp/jcg-p2 2>&1
    r2=$?
    echo "pids.max=16: status $r2; output:"; cat /tmp/jcg-p2
    [ $r2 = 42 ] && gone jcg-p2 || ok=1
    exit $ok
    ;;
cpu)
    # cpu_share ID CGROUP-ARG: run the spinning guest for 4 s; prints
    # "USAGE_FRACTION NR_THROTTLED" over 2 s of its run (L1's clock).
    cpu_share() {
        $M jail --id "$1" $J --chroot-base $BASE --cgroup "$2" \
            -- moat run --kernel $G/timeout.elf --mem 64 --timeout 4 </dev/null >/tmp/"$1" 2>&1 &
        jp=$!
        cg_wait "$1" >/dev/null; sleep 1
        t0=$(up); u0=$(ev $CG/moat/"$1"/cpu.stat usage_usec)
        sleep 2
        t1=$(up); u1=$(ev $CG/moat/"$1"/cpu.stat usage_usec); th=$(ev $CG/moat/"$1"/cpu.stat nr_throttled)
        wait $jp; echo "status $?" >>/tmp/"$1"
        awk -v a="${u0:-0}" -v b="${u1:-0}" -v t0="$t0" -v t1="$t1" -v th="${th:-0}" \
            'BEGIN { printf "%.2f %d\n", (b - a) / 1e6 / (t1 - t0), th }'
    }
    # shellcheck disable=SC2046 # two words, split on purpose
    set -- $(cpu_share jcg-c1 'cpu.max=20000 100000')
    f1=$1 th1=$2
    echo "cpu.max=20000 100000: $f1 of a CPU, nr_throttled $th1; $(tr '\n' ' ' </tmp/jcg-c1)"
    # shellcheck disable=SC2046
    set -- $(cpu_share jcg-c2 cpu.weight=100)
    f2=$1 th2=$2
    echo "cpu.weight=100 only: $f2 of a CPU, nr_throttled $th2; $(tr '\n' ' ' </tmp/jcg-c2)"
    awk -v a="$f1" -v b="$f2" -v t="$th1" 'BEGIN { exit !(t > 0 && a <= 0.3 && b >= 0.5) }' &&
        grep -q "status 124" /tmp/jcg-c1 && grep -q "status 124" /tmp/jcg-c2
    ;;
*)
    echo "jail-cgroup.sh: unknown part '$part'" >&2; exit 2 ;;
esac
