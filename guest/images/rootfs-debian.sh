#!/bin/sh
# rootfs-debian.sh OUTDIR: a Debian bookworm root filesystem (debootstrap,
# minbase + python3 and friends) as OUTDIR/debian.ext4, for sandboxes that
# want a real distribution:
#   moat run --mem 512 --drive build/guest/debian.ext4 -- /bin/sh -c \
#     "mkdir -p /mnt && mount /dev/vda /mnt && chroot /mnt python3 -c 'print(42)'"
# Uses the Debian mirror apt is configured with. Needs root (debootstrap).
set -eu
out=${1:?usage: rootfs-debian.sh OUTDIR}
PKGS=${ROOTFS_PACKAGES:-python3,python3-pip,python3-venv,ca-certificates,curl,git,procps,less}
mirror=${DEBIAN_MIRROR:-$(grep -hoE '^(deb|URIs:) *\[?[^]]*\]? *https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
         | grep -oE 'https?://[^ ]+' | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || { apt-get update -q >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; }
root=$out/debian-root
rm -rf "$root"
mkdir -p "$root"
debootstrap --variant=minbase --include="$PKGS" bookworm "$root" "$mirror"
echo moat > "$root/etc/hostname"
rm -rf "$root/var/cache/apt/archives"/*.deb "$root/var/lib/apt/lists"/*
"$(dirname "$0")/mkimage.sh" "$root" "$out/debian.ext4"
