#!/bin/sh
# rootfs-debian.sh OUTDIR: a Debian bookworm root filesystem (debootstrap,
# minbase + python3 and friends), written twice:
#   OUTDIR/debian.ext4: the root as an ext4 file, for --rootfs or a drive:
#     moat run --rootfs build/guest/debian.ext4 -- python3 -c 'print(42)'
#   OUTDIR/debian-oci/: the same root as an OCI image layout (one gzip
#     layer; config Cmd ["/bin/bash"] and Env PATH, as the official debian
#     image has), tagged debian, for the image store:
#     moat image import build/guest/debian-oci --tag debian:moat
#     moat run --image debian:moat -- python3 -c 'print(42)'
# Does nothing when both outputs are newer than this script (delete them
# to rebuild). Uses the Debian mirror apt is configured with
# (DEBIAN_MIRROR overrides it). Needs root (debootstrap) and umoci.
set -eu
out=${1:?usage: rootfs-debian.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
ext4=$out/debian.ext4 oci=$out/debian-oci
if [ "$(find "$ext4" "$oci/index.json" -newer "$here/rootfs-debian.sh" 2>/dev/null | wc -l)" = 2 ]; then
    echo "rootfs-debian: $ext4 and $oci are up to date"
    exit 0
fi
PKGS=${ROOTFS_PACKAGES:-python3,python3-pip,python3-venv,ca-certificates,curl,git,procps,less}
mirror=${DEBIAN_MIRROR:-$(grep -hoE '^(deb|URIs:) *\[?[^]]*\]? *https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
         | grep -oE 'https?://[^ ]+' | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}
need=""
command -v debootstrap >/dev/null || need="$need debootstrap"
command -v umoci >/dev/null || need="$need umoci"
if [ -n "$need" ]; then
    apt-get update -q >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need >/dev/null
fi
mkdir -p "$out"
root=$out/debian-root
rm -rf "$root" "$ext4" "$oci" "$oci.tmp" "$out/debian-layer.tar"
mkdir -p "$root"
debootstrap --variant=minbase --include="$PKGS" bookworm "$root" "$mirror" ||
    { echo "rootfs-debian: debootstrap of bookworm from $mirror failed" >&2; exit 1; }
echo moat > "$root/etc/hostname"
rm -rf "$root/var/cache/apt/archives"/*.deb "$root/var/lib/apt/lists"/*
"$here/mkimage.sh" "$root" "$ext4"
# The OCI layout: built beside, renamed into place when complete.
tar --numeric-owner --xattrs -C "$root" -cf "$out/debian-layer.tar" .
umoci init --layout "$oci.tmp"
umoci new --image "$oci.tmp:debian"
umoci raw add-layer --image "$oci.tmp:debian" --history.created_by "rootfs-debian.sh (debootstrap bookworm)" \
    "$out/debian-layer.tar"
umoci config --image "$oci.tmp:debian" --no-history --config.cmd /bin/bash \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
umoci gc --layout "$oci.tmp"
rm -f "$out/debian-layer.tar"
mv "$oci.tmp" "$oci"
echo "rootfs-debian: $ext4 and $oci"
