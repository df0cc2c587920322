#!/bin/sh
# tests/funclen.sh: no product function over 120 lines (issue 25). Lists
# every function of the product's C (vmm/, devices/, boot/, guest/; not
# tests/ or bench/) longer than that, as FILE:LINE NAME LENGTH, a function's
# length counted from the line of its name to its closing brace (universal
# ctags' line: and end: fields).
#
# tests/funclen.allow lists the functions still too long, one "PATH NAME" a
# line ('#' starts a comment): those pass. A long function not on it fails,
# and so does an entry whose function is now short enough or gone, so the
# list stays exact and only shrinks. One PASS or FAIL line per rule; exits
# 1 on any failure. Run from the repository root (tests/funclen_test.sh
# runs it in a scratch tree).
MAX=120
allow=tests/funclen.allow
fail=0
check() {   # check NAME OUTPUT: OUTPUT empty -> PASS
    if [ -z "$2" ]; then
        echo "PASS: funclen: $1"
    else
        echo "FAIL: funclen: $1:"
        echo "$2" | sed 's/^/    /'
        fail=1
    fi
}
if ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
    echo "SKIPPED: funclen: universal-ctags is not installed (make deps installs it)"
    exit 0
fi
srcs=$(find vmm devices boot guest -name '*.[ch]' 2>/dev/null | LC_ALL=C sort)
if [ -z "$srcs" ]; then
    check "sources found" "no *.c or *.h under vmm/ devices/ boot/ guest/"
    exit "$fail"
fi
# Every function definition: PATH LINE NAME LENGTH.
# shellcheck disable=SC2086
all=$(ctags --language-force=C --kinds-C=f --fields=+ne -o - $srcs |
      awk -F'\t' '{ l = e = 0
                    for (i = 4; i <= NF; i++) {
                        if ($i ~ /^line:/) l = substr($i, 6) + 0
                        if ($i ~ /^end:/) e = substr($i, 5) + 0
                    }
                    if (l > 0 && e >= l) print $2, l, $1, e - l + 1
                    else print $2, l, $1, "?" }')
check "every function's end is known" "$(echo "$all" | awk '$4 == "?" { print $1 ":" $2 " " $3 }')"
long=$(echo "$all" | awk -v max=$MAX '$4 != "?" && $4 > max { print $1 ":" $2, $3, $4 }' |
       sort -t' ' -k3,3nr -k1,1)
entries=""
[ -f "$allow" ] && entries=$(sed 's/#.*//' "$allow" | awk 'NF { print $1, $2 }')
check "$allow lines are PATH NAME" \
    "$( [ -f "$allow" ] && sed 's/#.*//' "$allow" | awk 'NF && NF != 2')"
check "$allow has no duplicate" "$(echo "$entries" | sort | uniq -d)"
# A long function is allowed when its PATH NAME is an entry.
check "no function over $MAX lines but those in $allow" \
    "$(echo "$long" | awk -v entries="$entries" '
        BEGIN { n = split(entries, e, "\n"); for (i = 1; i <= n; i++) ok[e[i]] = 1 }
        NF { split($1, p, ":"); if (!((p[1] " " $2) in ok)) print $0 }')"
# Every entry still names a long function.
check "every function in $allow is still over $MAX lines" \
    "$(echo "$entries" | awk -v long="$long" -v all="$all" '
        BEGIN { n = split(long, l, "\n")
                for (i = 1; i <= n; i++) { split(l[i], f, " "); split(f[1], p, ":"); big[p[1] " " f[2]] = 1 }
                n = split(all, a, "\n")
                for (i = 1; i <= n; i++) { split(a[i], f, " "); len[f[1] " " f[3]] = f[4] } }
        NF && !(($1 " " $2) in big) {
            if (($1 " " $2) in len) print $1 " " $2 ": now " len[$1 " " $2] " lines: remove it from the list"
            else print $1 " " $2 ": no such function: remove it from the list" }')"
echo "funclen: $(echo "$long" | awk 'NF' | wc -l) function(s) over $MAX lines; $(echo "$entries" | awk 'NF' | wc -l) entries in $allow:"
echo "$long" | awk 'NF { print "    " $0 }'
exit "$fail"
