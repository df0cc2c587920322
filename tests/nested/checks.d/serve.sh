# moat serve driven by the real E2B SDK (tests/serve/e2b-test.mjs through
# tests/serve/run.sh; docs/testing.md): create from `base`, commands, files,
# pause/connect, setTimeout expiry, two sandboxes, wrong key and token. node
# and the SDK come from serve.host; moat serve listens on L1's loopback.
if [ -f tests/serve/SKIPPED ]; then
    echo "SKIPPED: serve: $(cat tests/serve/SKIPPED)"
elif [ -f build/guest/bzImage ]; then
    # L1's /init leaves lo down (on the host, --native, it is up already).
    # L1 is moat serve's alone: its default ports, and no node run to pick free ones.
    # The network checks (passt, copied in by serve.host as serve-bin/passt,
    # named by MOAT_PASST): passt wants an
    # interface with a default route (a TAP nobody holds, 10.0.2.15/24 via
    # 10.0.2.2), and e2b-test.mjs listens on 203.0.113.10 (L1's loopback:
    # a host address to passt) for the sandboxes to reach. passt's sandbox
    # does pivot_root and makes a user namespace, which L1's initramfs root
    # refuses (pivot_root: EINVAL) and a plain chroot too (EPERM): the
    # checks run in a mount namespace whose root is a bind mount of /
    # moved over / (as switch_root does).
    in_root=''
    if [ -n "${NESTED_L1:-}" ]; then
        ip link set lo up
        export SERVE_API_PORT=3000 SERVE_ENVD_PORT=49983
        if [ -x serve-bin/passt ] && /payload/ip tuntap add dev moatup0 mode tap 2>/dev/null &&
            /payload/ip addr add 10.0.2.15/24 dev moatup0 && /payload/ip link set moatup0 up &&
            /payload/ip route add default via 10.0.2.2 dev moatup0 onlink &&
            /payload/ip addr add 203.0.113.10/32 dev lo; then
            [ -f /etc/resolv.conf ] || echo "nameserver 10.0.2.3" > /etc/resolv.conf
            export SERVE_NET_TARGET=203.0.113.10:8080 MOAT_PASST=/payload/serve-bin/passt
            in_root='unshare -m sh -c "mkdir -p /nr && mount -o rbind / /nr && cd /nr && mount -o move /nr / && exec chroot . sh -c \"cd /payload && PATH=/payload:\$PATH tests/serve/run.sh\""'
        else
            echo "serve: no passt or no TAP in L1: the network checks print SKIPPED"
        fi
    fi
    export SERVE_IN_ROOT="${in_root:-tests/serve/run.sh}"
    # Only --native (a host with hardware KVM, no TAP set up here) may skip
    # the network checks; in L1 they must run.
    if [ -n "${NESTED_L1:-}" ]; then export SERVE_SKIP_OK='^$'; else export SERVE_SKIP_OK='^SKIPPED: serve: network checks'; fi
    # serve.host checked node, the SDK and moat serve: a SKIPPED in here is a failure.
    T_LIMIT=900; t serve-e2b sh -c '
        read -r u0 _ </proc/uptime
        [ -d tests/serve/node_modules ] || tar -C tests/serve -xf tests/serve/node_modules.tar || exit 1
        read -r u1 _ </proc/uptime
        echo "serve: node_modules unpacked in $(awk -v a=$u0 -v b=$u1 "BEGIN { printf \"%.1f\", b - a }") s"
        eval "$SERVE_IN_ROOT" >$0 2>&1; r=$?; cat $0
        [ $r = 0 ] && grep -q "^PASS: serve:" $0 && [ -z "$(grep "^SKIPPED" $0 | grep -v -e "$SERVE_SKIP_OK")" ]' /tmp/serve-e2b.out
    if [ -f tests/serve/BENCH ]; then
        # Without a network (MOAT_PASST names no passt: base is built
        # without --net user), as the bench's first measurement: passt
        # needs the mount namespace serve-e2b runs in, and its start
        # (up to 5 s in L1) would dominate the create it measures.
        T_LIMIT=1800; t serve-bench sh -c '
            [ -d tests/serve/node_modules ] || tar -C tests/serve -xf tests/serve/node_modules.tar || exit 1
            MOAT_PASST=/nonexistent SERVE_API_PORT= SERVE_ENVD_PORT= BENCH_NO_BUILD=1 SERVE_BENCH_JSON=/tmp/serve-bench.json sh bench/serve.sh >$0 2>&1; r=$?; cat $0
            [ $r = 0 ] && ! grep -q "^SKIPPED" $0 && cat /tmp/serve-bench.json' /tmp/serve-bench.out
    fi
fi
