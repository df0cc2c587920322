#!/bin/sh
# The one host probe for moat's scripts, tests, benchmarks and Makefile:
# prints kvm, pvm or none — what `moat host --kind` says (docs/host.md).
#
#   scripts/host-kind.sh           the kind
#   scripts/host-kind.sh --reason  the one-line reason for it
#
# kvm: hardware KVM, everything runs; pvm: PVM, small guests run but Linux
# never reaches user space; none: no usable KVM. Exit 0 whatever the kind;
# 3 if the moat binary ($MOAT_BIN, default build/moat) is not built or gives
# no kind. POSIX sh: also runs under busybox (the nested L1's payload has
# it next to bench/).
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MOAT=${MOAT_BIN:-$ROOT/build/moat}
if [ ! -x "$MOAT" ]; then
    echo "host-kind: $MOAT is not built (make)" >&2
    exit 3
fi
case "${1:-}" in
--reason) "$MOAT" host --reason; exit 0 ;;
"") ;;
*) echo "usage: host-kind.sh [--reason]" >&2; exit 2 ;;
esac
kind=$("$MOAT" host --kind 2>/dev/null)
case "$kind" in
kvm|pvm|none) echo "$kind" ;;
*) echo "host-kind: '$MOAT host --kind' gave no kind ('$kind')" >&2; exit 3 ;;
esac
