#!/bin/sh
# tests/serve/node-check.sh [NODE]: exit 0 if NODE (default: node in PATH)
# can run the e2b SDK (Node.js >= 20.18.1, its engines.node); else print why
# on stdout and exit 1. Used by run.sh and scripts/serve-deps.sh. POSIX sh;
# one node start (about a second in the nested L1).
NODE=${1:-node}
command -v "$NODE" >/dev/null 2>&1 || { echo "no node in PATH (the e2b SDK needs Node.js >= 20.18.1)"; exit 1; }
v=$("$NODE" -e 'const [a, b, c] = process.versions.node.split(".").map(Number);
    console.log(process.versions.node);
    process.exit(a > 20 || (a === 20 && (b > 18 || (b === 18 && c >= 1))) ? 0 : 1)' 2>/dev/null)
r=$?
[ -n "$v" ] || { echo "$NODE does not run"; exit 1; }
[ $r = 0 ] || { echo "node $v is older than 20.18.1 (the e2b SDK needs it)"; exit 1; }
