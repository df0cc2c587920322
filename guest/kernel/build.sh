#!/bin/sh
# build.sh TARBALL FRAGMENT OUTDIR [JOBS]
# build.sh --extract TARBALL OUTDIR
# Builds the moat guest kernel: extracts TARBALL (Debian's linux-source-6.1)
# into OUTDIR/linux-6.1, configures it as allnoconfig + FRAGMENT, checks the
# result with check-config.sh, builds, and copies OUTDIR/vmlinux and
# OUTDIR/bzImage. The build log goes to OUTDIR/kernel-build.log; on failure
# its tail is printed. Reproducible: fixed build user, host and timestamp.
set -eu
extract_only=0
if [ "${1:-}" = "--extract" ]; then
    extract_only=1
    shift
    set -- "$1" /dev/null "$2"
fi
[ $# -ge 3 ] || { echo "usage: $0 TARBALL FRAGMENT OUTDIR [JOBS]" >&2; exit 2; }
tarball=$(realpath "$1")
frag=$(realpath "$2")
out=$3
jobs=${4:-2}
here=$(dirname "$(realpath "$0")")
mkdir -p "$out"
out=$(realpath "$out")
src=$out/linux-6.1
log=$out/kernel-build.log

fail() {
    echo "guest kernel: $1 (log: $log)" >&2
    [ -f "$log" ] && tail -n 40 "$log" >&2
    exit 1
}

# Extract once per tarball (identified by size and mtime).
id=$(stat -c '%s %Y' "$tarball")
if [ ! -f "$src/.moat-extracted" ] || [ "$(cat "$src/.moat-extracted")" != "$id" ]; then
    echo "guest kernel: extracting $tarball"
    rm -rf "$src" "$src.tmp"
    mkdir -p "$src.tmp"
    tar -C "$src.tmp" -xf "$tarball" || fail "extracting $tarball failed"
    top=$(ls "$src.tmp")
    [ "$(echo "$top" | wc -l)" -eq 1 ] || fail "unexpected tarball layout"
    mv "$src.tmp/$top" "$src"
    rmdir "$src.tmp"
    echo "$id" > "$src/.moat-extracted"
fi
[ "$extract_only" -eq 0 ] || exit 0

export ARCH=x86_64
export KBUILD_BUILD_USER=moat KBUILD_BUILD_HOST=moat
export KBUILD_BUILD_TIMESTAMP="Thu Jan  1 00:00:00 UTC 2015"
export KBUILD_BUILD_VERSION=1
unset CROSS_COMPILE || true
# The top-level make may export CFLAGS etc.; the kernel must not see them.
unset CFLAGS LDFLAGS MAKEFLAGS MFLAGS MAKELEVEL || true

: > "$log"
echo "guest kernel: configuring (allnoconfig + $(basename "$frag"))"
KCONFIG_ALLCONFIG=$frag make -C "$src" allnoconfig >> "$log" 2>&1 || fail "allnoconfig failed"
"$here/check-config.sh" "$frag" "$src/.config" >> "$log" 2>&1 || fail "config check failed"
echo "guest kernel: building with -j$jobs (log: $log)"
start=$(date +%s)
make -C "$src" -j"$jobs" bzImage >> "$log" 2>&1 || fail "build failed"
end=$(date +%s)
cp "$src/vmlinux" "$out/vmlinux.tmp" && mv "$out/vmlinux.tmp" "$out/vmlinux"
cp "$src/arch/x86/boot/bzImage" "$out/bzImage.tmp" && mv "$out/bzImage.tmp" "$out/bzImage"
cp "$src/.config" "$out/kernel.config"
echo "guest kernel: done in $((end - start))s: $(stat -c %s "$out/bzImage") bytes bzImage, $(stat -c %s "$out/vmlinux") bytes vmlinux"
