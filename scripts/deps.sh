#!/bin/sh
# Install the Debian 12 packages moat needs to build, test and benchmark.
# Idempotent: only missing packages are installed. Needs root (or sudo).
set -eu
PKGS="build-essential pkg-config git ca-certificates
 liburing-dev libfdt-dev check libxxhash-dev libseccomp-dev libjansson-dev libmicrohttpd-dev zlib1g-dev nettle-dev
 clang llvm libclang-rt-14-dev
 linux-source-6.1 bc flex bison libelf-dev libssl-dev dwarves xz-utils cpio kmod
 busybox-static qemu-system-x86 e2fsprogs xfsprogs lz4 zstd
 socat hyperfine procps curl iproute2 python3
 passt iperf3 universal-ctags
 libcurl4-openssl-dev libarchive-dev libext2fs-dev libzstd-dev
 docker-registry umoci skopeo apache2-utils python3-cryptography"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "deps: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing >/dev/null
