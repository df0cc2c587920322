#!/bin/sh
# tests/funclen_test.sh: tests/funclen.sh itself, in a scratch tree: it
# passes on a short function and on an allowed long one, and fails on a
# long function not allowed, on an entry whose function is now short, and
# on an entry whose function is gone. Run from the repository root.
script=$(pwd)/tests/funclen.sh
if ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
    echo "SKIPPED: funclen_test: universal-ctags is not installed (make deps installs it)"
    exit 0
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/vmm/x" "$tmp/tests"
fail=0
func() {   # func NAME LINES: a C function of LINES lines in all
    echo "static int $1(int a)"
    echo "{"
    i=3; while [ "$i" -lt "$2" ]; do echo "    a += $i;"; i=$((i + 1)); done
    echo "}"
}
expect() {   # expect NAME RC PATTERN: funclen.sh exits RC and prints PATTERN
    out=$(cd "$tmp" && "$script" 2>&1); rc=$?
    if [ "$rc" -eq "$2" ] && echo "$out" | grep -q -- "$3"; then
        echo "PASS: funclen_test: $1"
    else
        echo "FAIL: funclen_test: $1 (exit $rc, wanted $2 and '$3'):"
        echo "$out" | sed 's/^/    /'
        fail=1
    fi
}
{ func fshort 120; func flong 121; } > "$tmp/vmm/x/a.c"
: > "$tmp/tests/funclen.allow"
expect "a 121-line function not allowed fails" 1 "^    vmm/x/a.c:121 flong 121$"
echo "vmm/x/a.c flong" > "$tmp/tests/funclen.allow"
expect "an allowed 121-line function and a 120-line one pass" 0 "^PASS: funclen: no function over 120"
echo "vmm/x/a.c fshort" >> "$tmp/tests/funclen.allow"
expect "an entry whose function is 120 lines fails" 1 "vmm/x/a.c fshort: now 120 lines"
echo "vmm/x/a.c flong" > "$tmp/tests/funclen.allow"
echo "vmm/x/b.c gone" >> "$tmp/tests/funclen.allow"
expect "an entry whose function is gone fails" 1 "vmm/x/b.c gone: no such function"
exit "$fail"
