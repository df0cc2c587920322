#!/bin/sh
# bench/serve.sh: moat serve through the real E2B SDK (issue 15 item 6):
# Sandbox.create -> first commands.run result, median and p99 over RUNS (20),
# and CONCURRENT (10) creates at once (bench/serve-bench.mjs, started by
# tests/serve/run.sh, which brings up moat serve on a MOAT_HOME of its own).
# Results: build/bench/serve.json (SERVE_BENCH_JSON). No peer runs here:
# E2B's hosted service is not reachable from a test host (docs/BENCHMARKS.md).
# Needs a host where Linux guests run: hardware KVM, or the nested L1
# (tests/nested/checks.d/serve.sh runs it there with NESTED_SERVE_BENCH=1).
# Elsewhere, and without node >= 20.18.1, tests/serve/node_modules or moat
# serve, it prints SKIPPED. POSIX sh (busybox in L1).
cd "$(dirname "$0")/.." || exit 1
MOAT=${MOAT_BIN:-build/moat}
# BENCH_NO_BUILD=1: use what is there (in L1 there is no make).
[ -n "${BENCH_NO_BUILD:-}" ] || make -s build/moat guest serve-deps >/dev/null || exit 1
kind=$(MOAT_BIN=$MOAT scripts/host-kind.sh) || exit 1
if [ "$kind" != kvm ]; then
    echo "SKIPPED: bench/serve: Linux guests do not run on this host (kind $kind: $(MOAT_BIN=$MOAT scripts/host-kind.sh --reason 2>/dev/null)); run it on hardware KVM or in the nested L1"
    exit 0
fi
echo "bench/serve: host kind $kind, $(uname -r), $(nproc) CPUs"
exec tests/serve/run.sh "$(pwd)/bench/serve-bench.mjs"
