#!/bin/sh
# `make run`: moat's main job on the built-in default guest — boot the
# default Linux guest and run a command in it. On hardware KVM moat runs it
# directly. Where Linux cannot reach user space under this host's KVM (PVM),
# or there is no usable KVM, say why in one line and do it inside the
# nested-KVM L1 instead (tests/nested/: Linux under QEMU TCG with emulated
# SVM — slow, but real KVM). The host kind comes from scripts/host-kind.sh.
set -eu
cd "$(dirname "$0")/.."
CMD='echo hello from the moat guest; uname -sr; cat /proc/cpuinfo | grep -c ^processor'
kind=$(scripts/host-kind.sh)
if [ "$kind" = kvm ]; then
    exec build/moat run --timeout 120 --timings -- /bin/sh -c "$CMD"
fi
case "$kind" in
pvm) why="this host's KVM is PVM, where Linux never reaches user space" ;;
*) why="no usable KVM here ($(scripts/host-kind.sh --reason))" ;;
esac
echo "run: $why; running moat inside the nested-KVM VM instead (slow; tests/nested/README.md)" >&2
pl=$(mktemp -d "${TMPDIR:-/tmp}/moat-run.XXXXXX")
trap 'rm -rf "$pl"' EXIT
mkdir -p "$pl/guest"
cp build/moat "$pl/"
cp build/guest/bzImage build/guest/initramfs.cpio "$pl/guest/"
printf '%s\n' "$CMD" > "$pl/cmd"
tests/nested/run.sh --timeout 600 "$pl" -- /bin/sh -c \
    './moat run --timeout 300 --timings -- /bin/sh -c "$(cat cmd)"'
