#!/bin/sh
# Install the E2B SDK the serve tests use (tests/serve/: package.json pins
# e2b 2.51.0, package-lock.json every dependency with its integrity hash)
# with `npm ci` into tests/serve/node_modules: the lockfile's exact versions
# from the npm registry, nothing global. Skipped (not re-run) when
# node_modules already matches the lockfile.
# Without node >= 20.18.1 (the SDK's requirement; Debian 12's nodejs is 18)
# or npm it prints SKIPPED and exits 0: the serve tests then say SKIPPED too.
# An npm ci that fails (e.g. the registry is not reachable) leaves no
# node_modules and says SKIPPED with npm's last lines: the tests skip too.
# The reason of a skip is kept in tests/serve/.serve-deps-skipped (removed
# once the SDK is installed): a test that finds no SDK and no such file
# fails, since then the install step did not run before it.
set -u
DIR=$(cd "$(dirname "$0")/../tests/serve" && pwd)
SKIPFILE=$DIR/.serve-deps-skipped
skip() {
    echo "$*" > "$SKIPFILE"
    echo "SKIPPED: serve-deps: $* (the serve tests will print SKIPPED)"; exit 0
}
why=$("$DIR/node-check.sh") || skip "$why"
command -v npm >/dev/null 2>&1 || skip "no npm in PATH"
# npm ci writes node_modules/.package-lock.json; newer than the lockfile: done.
stamp=$DIR/node_modules/.package-lock.json
if [ -f "$stamp" ] && [ ! "$DIR/package-lock.json" -nt "$stamp" ] && [ -f "$DIR/node_modules/e2b/package.json" ]; then
    rm -f "$SKIPFILE"
    exit 0
fi
echo "serve-deps: npm ci in tests/serve (e2b from package-lock.json)"
cd "$DIR" || exit 1
if ! npm ci --no-audit --no-fund --loglevel=error > npm-ci.log 2>&1; then
    tail -n 5 npm-ci.log
    rm -rf node_modules npm-ci.log
    skip "npm ci failed (is the npm registry reachable?)"
fi
rm -f npm-ci.log
rm -f "$SKIPFILE"
