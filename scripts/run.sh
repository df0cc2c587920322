#!/bin/sh
# `make run`: moat's main job on the built-in default guest — boot the
# default Linux guest and run a command in it. Where this host has no usable
# /dev/kvm, say so and do it inside the nested-KVM L1 (tests/nested/: Linux
# under QEMU TCG with emulated SVM — slow, but real KVM).
set -eu
cd "$(dirname "$0")/.."
CMD='echo hello from the moat guest; uname -sr; cat /proc/cpuinfo | grep -c ^processor'
if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
    exec build/moat run --timeout 120 --timings -- /bin/sh -c "$CMD"
fi
echo "run: no usable /dev/kvm on this host; running moat inside the nested-KVM VM (tests/nested/README.md)" >&2
pl=$(mktemp -d "${TMPDIR:-/tmp}/moat-run.XXXXXX")
trap 'rm -rf "$pl"' EXIT
mkdir -p "$pl/guest"
cp build/moat "$pl/"
cp build/guest/bzImage build/guest/initramfs.cpio "$pl/guest/"
printf '%s\n' "$CMD" > "$pl/cmd"
tests/nested/run.sh --timeout 600 "$pl" -- /bin/sh -c \
    './moat run --timeout 300 --timings -- /bin/sh -c "$(cat cmd)"'
