# moat serve driven by the real E2B SDK (tests/serve/e2b-test.mjs through
# tests/serve/run.sh; docs/testing.md): create from `base`, commands, files,
# pause/connect, setTimeout expiry, two sandboxes, wrong key and token. node
# and the SDK come from serve.host; moat serve listens on L1's loopback.
if [ -f tests/serve/SKIPPED ]; then
    echo "SKIPPED: serve: $(cat tests/serve/SKIPPED)"
elif [ -f build/guest/bzImage ]; then
    # L1's /init leaves lo down (on the host, --native, it is up already).
    # L1 is moat serve's alone: its default ports, and no node run to pick free ones.
    if [ -n "${NESTED_L1:-}" ]; then
        ip link set lo up
        export SERVE_API_PORT=3000 SERVE_ENVD_PORT=49983
    fi
    # serve.host checked node, the SDK and moat serve: a SKIPPED in here is a failure.
    T_LIMIT=900; t serve-e2b sh -c '
        read -r u0 _ </proc/uptime
        [ -d tests/serve/node_modules ] || tar -C tests/serve -xf tests/serve/node_modules.tar || exit 1
        read -r u1 _ </proc/uptime
        echo "serve: node_modules unpacked in $(awk -v a=$u0 -v b=$u1 "BEGIN { printf \"%.1f\", b - a }") s"
        tests/serve/run.sh >$0 2>&1; r=$?; cat $0
        [ $r = 0 ] && grep -q "^PASS: serve:" $0 && ! grep -q "^SKIPPED" $0' /tmp/serve-e2b.out
    if [ -f tests/serve/BENCH ]; then
        T_LIMIT=1800; t serve-bench sh -c '
            SERVE_API_PORT= SERVE_ENVD_PORT= BENCH_NO_BUILD=1 SERVE_BENCH_JSON=/tmp/serve-bench.json sh bench/serve.sh >$0 2>&1; r=$?; cat $0
            [ $r = 0 ] && ! grep -q "^SKIPPED" $0 && cat /tmp/serve-bench.json' /tmp/serve-bench.out
    fi
fi
