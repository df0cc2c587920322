#!/bin/sh
# tests/symbols.sh LIB.so HEADER [LIB.a]: the shared library (and the
# static one, if given) exports exactly the functions its public header
# declares (no internal symbol, nothing the header promises missing from
# the version script). Prints one PASS or FAIL line per library and
# problem; exits 1 on any.
so=${1:-build/libmoat.so} hdr=${2:-include/moat.h} ar=${3:-}
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
if [ -n "$ar" ]; then
    [ -f "$ar" ] || { echo "FAIL: symbols: $ar missing"; exit 1; }
    # Global symbols an object of the archive defines (nm prints
    # "name type value size" with -P; undefined ones are U).
    nm -P -g --defined-only "$ar" 2>/dev/null | awk 'NF >= 2 && $1 !~ /:$/ && $1 !~ /\]$/ { print $1 }' |
        sort -u > "$tmp/ar_exported"
    aextra=$(comm -23 "$tmp/ar_exported" "$tmp/declared")
    amissing=$(comm -13 "$tmp/ar_exported" "$tmp/declared")
    afail=0
    if [ -n "$aextra" ]; then
        echo "FAIL: symbols: $ar has global symbols $hdr does not declare:" $aextra
        afail=1
    fi
    if [ -n "$amissing" ]; then
        echo "FAIL: symbols: $hdr declares what $ar does not define:" $amissing
        afail=1
    fi
    an=$(wc -l < "$tmp/ar_exported")
    [ "$afail" = 0 ] && echo "PASS: symbols: $ar has the $an functions of $hdr as its only global symbols"
    [ "$afail" = 0 ] || fail=1
    # An embedder whose own functions have moat's internal names links and
    # runs (with every internal symbol global, the link fails: duplicates).
    cat > "$tmp/clash.c" <<'EOF_C'
#include "moat.h"
int seterr(void) { return 1; }
int log_msg(void) { return 2; }
int vm_alloc(void) { return 3; }
int snap_parse(void) { return 4; }
int main(void) { return moat_version()[0] && seterr() + log_msg() + vm_alloc() + snap_parse() == 10 ? 0 : 1; }
EOF_C
    # LDLIBS: the library's own link flags (the Makefile passes them; liburing is optional)
    if ${CC:-cc} -Iinclude -o "$tmp/clash" "$tmp/clash.c" "$ar" ${LDLIBS:--lpthread -lm -lxxhash -lseccomp -ljansson} 2> "$tmp/clash.err" &&
        "$tmp/clash"; then
        echo "PASS: symbols: a program defining seterr, log_msg, vm_alloc and snap_parse links with $ar"
    else
        echo "FAIL: symbols: a program defining moat's internal names does not link with $ar:" \
            "$(head -c 400 "$tmp/clash.err")"
        fail=1
    fi
fi
exit "$fail"
