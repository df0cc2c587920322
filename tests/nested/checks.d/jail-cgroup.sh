# moat jail --cgroup, enforced by a real cgroup v2 (L1's /init mounts it at
# /sys/fs/cgroup; with --native, the host's if it is v2): jail.sh's cgroup v2
# branch, then memory.max (OOM kill / enough), pids.max (threads refused /
# enough), cpu.max (throttled). tests/nested/jail-cgroup.sh has the details.
if [ "$(id -u)" = 0 ] && [ -e /sys/fs/cgroup/cgroup.controllers ]; then
    t jail-cgroup-jail-sh sh jail-cgroup.sh jail-sh
    t jail-cgroup-memory sh jail-cgroup.sh memory
    t jail-cgroup-pids sh jail-cgroup.sh pids
    t jail-cgroup-cpu sh jail-cgroup.sh cpu
else
    case jail-cgroup in $ONLY) echo "SKIPPED: jail-cgroup: needs root and cgroup v2 at /sys/fs/cgroup" ;; esac
fi
