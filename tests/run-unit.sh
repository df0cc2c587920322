#!/bin/sh
# Run Check test binaries; each prints its own Check summary. Exits non-zero
# if any binary fails. Usage: tests/run-unit.sh BIN...
export CK_FORK=yes
fail=0; pass=0
for t in "$@"; do
    if "$t"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: $t"; fi
done
echo "unit: $pass suites passed, $fail suites failed"
[ "$fail" -eq 0 ]
