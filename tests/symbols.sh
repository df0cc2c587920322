#!/bin/sh
# tests/symbols.sh LIB.so HEADER: the shared library exports exactly the
# functions its public header declares (no internal symbol, nothing the
# header promises missing from the version script). Prints one PASS or
# FAIL line per problem; exits 1 on any.
so=${1:-build/libmoat.so} hdr=${2:-include/moat.h}
[ -f "$so" ] || { echo "FAIL: symbols: $so missing"; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# Exported: defined dynamic symbols, without version suffix or the version
# nodes themselves (absolute symbols).
nm -D --defined-only "$so" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u > "$tmp/exported"
# Declared: the names of the functions the header declares (a name followed
# by '(' at the start of a declaration, after its return type).
sed -e 's|/\*.*\*/||g' "$hdr" | tr '\n' ' ' | tr ';' '\n' |
    grep -o '[A-Za-z_][A-Za-z0-9_]*[ ]*(' | sed 's/[ (]*$//' |
    grep '^moat_' | sort -u > "$tmp/declared.all"
# Keep the names that are functions (not a typedef'd pointer like
# moat_log_fn, which appears as "(*moat_log_fn)").
grep -o '(\*[ ]*moat_[A-Za-z0-9_]*)' "$hdr" | tr -d '(*) ' | sort -u > "$tmp/fnptr"
comm -23 "$tmp/declared.all" "$tmp/fnptr" > "$tmp/declared"
fail=0
extra=$(comm -23 "$tmp/exported" "$tmp/declared")
missing=$(comm -13 "$tmp/exported" "$tmp/declared")
if [ -n "$extra" ]; then
    echo "FAIL: symbols: $so exports what $hdr does not declare:" $extra
    fail=1
fi
if [ -n "$missing" ]; then
    echo "FAIL: symbols: $hdr declares what $so does not export (vmm/libmoat.map?):" $missing
    fail=1
fi
n=$(wc -l < "$tmp/exported")
[ "$fail" = 0 ] && echo "PASS: symbols: $so exports the $n functions of $hdr and nothing else"
exit "$fail"
