#!/bin/sh
# tests/serve/run.sh: start `moat serve` on a $MOAT_HOME of its own (a fresh
# API key, free loopback ports), run a Node.js script that drives it through
# the real E2B SDK, stop it and remove every sandbox it left.
#
#   tests/serve/run.sh [SCRIPT.mjs [ARG...]]     default: tests/serve/e2b-test.mjs
#   tests/serve/run.sh --check    only the checks below: exit 0 if it could run
#                                 here, else 3 with the SKIPPED line
#
# Exit: the script's status (e2b-test.mjs: 1 when a check failed); 0 with a
# `SKIPPED: serve: <reason>` line when node (>= 20.18.1, e2b's requirement),
# tests/serve/node_modules (`make serve-deps`: npm ci) or `moat serve` is
# missing; 1 when moat serve does not come up. It needs a host where Linux
# guests run (hardware KVM, or the nested L1: tests/nested/checks.d/serve.sh);
# docs/testing.md says which runs where.
# Env: MOAT_BIN (default build/moat), NODE (default node), MOAT_TEST_SLOW,
# SERVE_API_PORT / SERVE_ENVD_PORT (default: free ports chosen by node),
# SERVE_KEEP=1 keeps the work directory (serve's log, $MOAT_HOME).
# POSIX sh: it also runs under busybox in the nested L1.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MOAT=${MOAT_BIN:-$ROOT/build/moat}
NODE=${NODE:-node}
check_only=0
if [ "${1:-}" = --check ]; then check_only=1; shift; fi
script=${1:-$ROOT/tests/serve/e2b-test.mjs}
[ $# -gt 0 ] && shift
skip() { echo "SKIPPED: serve: $*"; [ $check_only = 1 ] && exit 3; exit 0; }

why=$("$ROOT/tests/serve/node-check.sh" "$NODE") || skip "$why"
[ -f "$ROOT/tests/serve/node_modules/e2b/package.json" ] ||
    skip "tests/serve/node_modules is not installed (make serve-deps: npm ci from the lockfile)"
[ -x "$MOAT" ] && "$MOAT" serve --help >/dev/null 2>&1 ||
    skip "moat serve not built ($MOAT serve --help fails)"
[ $check_only = 1 ] && exit 0

work=$(mktemp -d "${TMPDIR:-/tmp}/moat-serve-test.XXXXXX") || exit 1
spid=""
cleanup() {
    if [ -n "$spid" ]; then
        kill "$spid" 2>/dev/null
        n=0; while kill -0 "$spid" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
        kill -KILL "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
    fi
    # Whatever sandboxes serve left (it may keep them on purpose, across a restart).
    for s in $("$MOAT" ls 2>/dev/null | awk 'NR > 1 { print $1 }'); do "$MOAT" rm -f "$s" >/dev/null 2>&1; done
    if [ -n "${SERVE_KEEP:-}" ]; then echo "serve: work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export MOAT_HOME="$work/home"
mkdir -p "$MOAT_HOME"
key=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s' "$key" > "$work/api-key"   # no newline: the file is the key
chmod 600 "$work/api-key"
# Two free loopback ports unless both are given: bound to port 0 by node, then let go.
if [ -n "${SERVE_API_PORT:-}" ] && [ -n "${SERVE_ENVD_PORT:-}" ]; then
    api=$SERVE_API_PORT envd=$SERVE_ENVD_PORT
else
    ports=$("$NODE" -e 'const net = require("net"); const a = net.createServer().listen(0, "127.0.0.1", () => {
        const b = net.createServer().listen(0, "127.0.0.1", () => {
            console.log(a.address().port, b.address().port); a.close(); b.close(); }); });') || exit 1
    api=${SERVE_API_PORT:-${ports% *}} envd=${SERVE_ENVD_PORT:-${ports#* }}
fi

"$MOAT" serve --api "127.0.0.1:$api" --envd "127.0.0.1:$envd" --api-key-file "$work/api-key" \
    > "$work/serve.log" 2>&1 &
spid=$!
export E2B_API_URL="http://127.0.0.1:$api" E2B_SANDBOX_URL="http://127.0.0.1:$envd" E2B_API_KEY="$key"
# Up when both ports accept connections (limit 30 s x MOAT_TEST_SLOW).
lim=$((30 * ${MOAT_TEST_SLOW:-1}))
if ! "$NODE" -e 'const net = require("net"); const end = Date.now() + process.argv[1] * 1000;
    const up = (p) => new Promise((r) => { const s = net.connect(p, "127.0.0.1", () => { s.end(); r(true); });
        s.on("error", () => r(false)); });
    (async () => { for (;;) {
        if (await up(+process.argv[2]) && await up(+process.argv[3])) process.exit(0);
        if (Date.now() > end) process.exit(1);
        await new Promise((r) => setTimeout(r, 200)); } })();' "$lim" "$api" "$envd" ||
   ! kill -0 "$spid" 2>/dev/null; then
    echo "FAIL: serve: moat serve did not come up on 127.0.0.1:$api and :$envd in ${lim}s"
    echo "serve: its log:"; tail -n 40 "$work/serve.log"
    exit 1
fi
echo "serve: moat serve up (api :$api, envd :$envd, MOAT_HOME $MOAT_HOME)"
"$NODE" "$script" "$@"
rc=$?
if ! kill -0 "$spid" 2>/dev/null; then
    echo "FAIL: serve: moat serve exited during the run"
    rc=1
fi
if [ "$rc" != 0 ]; then
    echo "serve: moat serve's log (last 60 lines):"; tail -n 60 "$work/serve.log"
fi
exit "$rc"
