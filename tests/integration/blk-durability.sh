#!/bin/bash
# tests/integration/blk-durability.sh [--nested] [--san] [--overlay] [RUNS]
# virtio-blk durability: a guest (tests/guests/blk.c, "blkdur") writes
# numbered 512-byte records, each followed by a FLUSH, and prints "ack N"
# only after the flush completed; moat is SIGKILLed at a random moment
# (after 0-399 acks plus 0-3 ms); every acknowledged record must be in the
# image. RUNS defaults to 50. Prints one summary line; exit 0 if nothing lost.
#   --nested  run inside the QEMU-emulated L1 (tests/nested/run.sh) on a
#             host without /dev/kvm
#   --san     use build/moat-san
#   --overlay the drive is a base image with a copy-on-write overlay;
#             after every kill `moat disk export` must open the overlay,
#             and the records are checked in the guest's view it writes
# Needs `make all test-guests build/tests/test_blk`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
nested=0 bin=moat ovl=""
while [ $# -gt 0 ]; do
    case "$1" in
        --nested) nested=1; shift ;;
        --san) bin=moat-san; shift ;;
        --overlay) ovl=overlay; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
runs=${1:-50}
for f in build/$bin build/tests/test_blk build/guests/blk.elf; do
    [ -e "$f" ] || { echo "blk-durability: $f missing (make all test-guests build/tests/test_blk)" >&2; exit 2; }
done
if [ "$nested" = 0 ]; then
    exec env MOAT_BIN=build/$bin MOAT_GUESTS=build/guests MOAT_REQUIRE_KVM=1 \
        build/tests/test_blk --durability "$runs" $ovl
fi
pl=$(mktemp -d "${TMPDIR:-/tmp}/blkdur.XXXXXX")
trap 'rm -rf "$pl"' EXIT
mkdir -p "$pl/build/tests" "$pl/build/guests"
cp "build/$bin" "$pl/build/"
cp build/tests/test_blk "$pl/build/tests/"
cp build/guests/blk.elf "$pl/build/guests/"
tests/nested/run.sh --timeout $((60 + runs * 10)) "$pl" -- /bin/sh -c \
    "cd /payload && MOAT_BIN=build/$bin MOAT_GUESTS=build/guests MOAT_REQUIRE_KVM=1 build/tests/test_blk --durability $runs $ovl"
