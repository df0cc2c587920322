#!/bin/sh
# mkcpio.sh DIR OUT: pack DIR into a deterministic newc cpio archive
# (sorted names, mtime 0, root-owned, reproducible inode numbers).
set -eu
dir=$1
out=$(realpath -m "$2")
find "$dir" -exec touch -h -d @0 {} +
(cd "$dir" && find . -mindepth 1 | LC_ALL=C sort |
    cpio --quiet -o -H newc -R 0:0 --reproducible > "$out")
