#!/bin/sh
# mkimage.sh DIR IMAGE [SIZE]: an ext4 image holding DIR's tree (mke2fs -d),
# for `moat run --drive IMAGE`. SIZE (mke2fs syntax, e.g. 64M, 2G) defaults
# to the tree's size plus 25% and 16 MiB. Files are owned as in DIR; run as
# root to keep ownership. An existing IMAGE is replaced.
set -eu
[ $# -ge 2 ] || { echo "usage: mkimage.sh DIR IMAGE [SIZE]" >&2; exit 2; }
dir=$1 img=$2 size=${3:-}
[ -d "$dir" ] || { echo "mkimage: $dir is not a directory" >&2; exit 2; }
MKE2FS=$(command -v mke2fs || echo /sbin/mke2fs)
if [ -z "$size" ]; then
    kib=$(du -sk "$dir" | awk '{print $1}')
    size=$(( (kib + kib / 4) / 1024 + 16 ))M
fi
rm -f "$img"
"$MKE2FS" -q -F -t ext4 -L moat-root -d "$dir" "$img" "$size"
echo "mkimage: $img ($size) from $dir"
