#!/bin/sh
# The e2b JavaScript SDK (the version tests/serve pins) against moat serve's
# envd server on its own: build/tests/serve_envd_host with two guest agents
# run on the host (build/guest/agent --unix), so it runs on every host kind,
# no VM needed. The checks are tests/integration/serve-envd-sdk.mjs. Both
# agents see the host's file system: file isolation between sandboxes is
# for the VM-backed suite (tests/serve/); processes, tokens and envVars are
# checked apart here.
#
#   E2B_SDK=DIR (default tests/serve/node_modules/e2b) tests/integration/serve-envd-sdk.sh
set -u
B=${B:-build}
SDK=${E2B_SDK:-tests/serve/node_modules/e2b}
AGENT=${MOAT_AGENT:-$B/guest/agent}
HOST=$B/tests/serve_envd_host
case $SDK in /*) ;; *) SDK=$PWD/$SDK ;; esac
if ! command -v node >/dev/null; then echo "SKIPPED: serve-envd-sdk: node is not installed"; exit 0; fi
if [ ! -f "$SDK/dist/index.mjs" ]; then
    # make serve-deps runs before this (test-integration depends on it): with
    # no SDK it either said why it skipped (a host without node >= 20.18.1,
    # npm or the registry) or it did not run, which is a bug of the build.
    skipped=tests/serve/.serve-deps-skipped
    if [ -n "${E2B_SDK:-}" ]; then
        echo "SKIPPED: serve-envd-sdk: no e2b package at $SDK (E2B_SDK)"; exit 0
    elif [ -f "$skipped" ]; then
        echo "SKIPPED: serve-envd-sdk: no e2b package: serve-deps skipped: $(cat "$skipped")"; exit 0
    fi
    echo "FAIL: serve-envd-sdk: no e2b package at $SDK and make serve-deps did not say why: it must run before this check"
    exit 1
fi
for f in "$AGENT" "$HOST"; do
    if [ ! -x "$f" ]; then echo "SKIPPED: serve-envd-sdk: $f is not built"; exit 0; fi
done
T=$(mktemp -d /tmp/moat-envd-sdk.XXXXXX)
PIDS=""
cleanup() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT INT TERM
# The SDK runs every command as `/bin/bash -l -c`: a login shell, which
# here is the host's. HOME is an empty directory of the test's, so what
# the user running the tests keeps in ~/.profile (a pyenv or cargo set-up
# that blocks on a stale lock, say) is not part of the check.
mkdir -p "$T/home"
HOME="$T/home" "$AGENT" --unix "$T/a.sock" & PIDS="$PIDS $!"
HOME="$T/home" "$AGENT" --unix "$T/b.sock" & PIDS="$PIDS $!"
i=0
while [ ! -S "$T/a.sock" ] || [ ! -S "$T/b.sock" ]; do
    i=$((i + 1)); [ $i -gt 300 ] && { echo "FAIL: serve-envd-sdk: the agents did not start"; exit 1; }
    sleep 0.01
done
mkfifo "$T/in"
for try in 1 2 3 4 5; do
    PORT=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 20000 ))
    "$HOST" "$PORT" "$T/a.sock" "$T/b.sock" < "$T/in" > "$T/host.out" 2>&1 & HPID=$!
    exec 3> "$T/in"         # the server stops when this closes
    i=0
    while ! grep -q ready "$T/host.out" 2>/dev/null && kill -0 $HPID 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 500 ] && break; sleep 0.01
    done
    grep -q ready "$T/host.out" && break
    exec 3>&-; wait $HPID 2>/dev/null
done
grep -q ready "$T/host.out" || { echo "FAIL: serve-envd-sdk: the server did not start: $(cat "$T/host.out")"; exit 1; }
PIDS="$PIDS $HPID"
mkdir "$T/files"
E2B_SDK=$SDK ENVD_URL=http://127.0.0.1:$PORT TESTDIR=$T/files timeout 120 node tests/integration/serve-envd-sdk.mjs
rc=$?
exec 3>&-
wait $HPID 2>/dev/null || { echo "FAIL: serve-envd-sdk: the server did not stop cleanly: $(cat "$T/host.out")"; rc=1; }
exit $rc
