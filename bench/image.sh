#!/bin/sh
# Container images (issue 26; docs/BENCHMARKS.md, "Container images").
#
# convert: an image's layers -> one ext4 root filesystem (vmm/image/rootfs.c,
# through build/tests/image_rootfs), against the same layers unpacked by
# `tar -x` onto this disk, and against `mke2fs -t ext4 -d DIR` of the
# unpacked tree. The layer set is made from this host's files: two gzip
# layers of directories under /usr (IMAGE_DIRS1, IMAGE_DIRS2; ~300 MB
# uncompressed with the defaults), kept in $WORK between runs. Each way runs
# RUNS times, interleaved (after one warm-up, page cache warm); medians are printed, with
# the throughput in MB/s of uncompressed layer bytes (the tar streams'
# sizes). Every way ends durable: the conversion fsyncs its image, tar -x
# and mke2fs are followed by `sync -f`; tar -x without the sync is printed
# too.
#
#   bench/image.sh [convert]      (after `make build/tests/image_rootfs`)
# Env: B (build), WORK (build/bench-image), RUNS (5), SIZE (4 GiB), IMAGE_DIRS1, IMAGE_DIRS2.
set -eu
B=${B:-build}
WORK=${WORK:-$B/bench-image}
RUNS=${RUNS:-5}
SIZE=${SIZE:-4294967296}        # the file system's size, both ways (the conversion's default here)
CONV=${CONV:-$B/tests/image_rootfs}
IMAGE_DIRS1=${IMAGE_DIRS1:-"usr/lib/python3.11 usr/share/vim usr/lib/git-core usr/share/perl"}
IMAGE_DIRS2=${IMAGE_DIRS2:-"usr/share/doc usr/share/icons usr/lib/python3"}

now_ms() { echo $(($(date +%s%N) / 1000000)); }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Time one shell command once (after prep, untimed); print ms.
once() {
    sh -c "$2"
    t0=$(now_ms)
    sh -c "$1" >/dev/null
    t1=$(now_ms)
    echo $((t1 - t0))
}

mbps() { awk -v b="$1" -v ms="$2" 'BEGIN { printf "%.0f", b / 1e6 / (ms / 1000) }'; }

layers() {
    mkdir -p "$WORK"
    for n in 1 2; do
        eval dirs=\$IMAGE_DIRS$n
        if [ ! -s "$WORK/layer$n.tar.gz" ]; then
            # shellcheck disable=SC2086
            tar -C / --ignore-failed-read -cf "$WORK/layer$n.tar" $dirs 2>/dev/null || true
            gzip -f "$WORK/layer$n.tar"
        fi
    done
}

convert() {
    [ -x "$CONV" ] || { echo "SKIPPED: convert: $CONV missing (make $CONV)"; return 0; }
    command -v mke2fs >/dev/null || { echo "SKIPPED: convert: no mke2fs (apt-get install e2fsprogs)"; return 0; }
    layers
    L1=$WORK/layer1.tar.gz L2=$WORK/layer2.tar.gz
    bytes=$(( $(gzip -dc "$L1" | wc -c) + $(gzip -dc "$L2" | wc -c) ))
    files=$(( $(tar -tzf "$L1" | wc -l) + $(tar -tzf "$L2" | wc -l) ))
    echo "convert: 2 gzip layers, $bytes bytes uncompressed, $files entries; $RUNS runs each, medians"
    out=$WORK/root.ext4 tree=$WORK/tree
    size=$SIZE
    conv="$CONV $out --disk-size $size $L1 $L2"
    untar="tar -C $tree -xzf $L1 && tar -C $tree -xzf $L2"
    fresh="rm -rf $tree $out $WORK/mke2fs.ext4; mkdir -p $tree; sync"
    mkfs="mke2fs -q -F -t ext4 -d $tree $WORK/mke2fs.ext4 $((size / 1024))k && sync -f $WORK"
    # The ways interleaved, run by run (a warm-up first): a busy host
    # slows them alike.
    : >"$WORK/times"
    i=0
    while [ $i -le "$RUNS" ]; do
        c=$(once "$conv" "$fresh")
        st=$(du -k "$out" | cut -f1)
        fsck=$(e2fsck -fn "$out" >/dev/null 2>&1 && echo clean || echo NOT-CLEAN)
        t=$(once "$untar" "$fresh")
        ts=$(once "$untar && sync -f $tree" "$fresh")
        m=$(once "$mkfs" "rm -f $WORK/mke2fs.ext4")
        [ $i -gt 0 ] && echo "$c $t $ts $m" >>"$WORK/times"
        i=$((i + 1))
    done
    col() { cut -d' ' -f"$1" "$WORK/times" | median; }
    t_conv=$(col 1) t_tar=$(col 2) t_tars=$(col 3) t_mke2fs=$(col 4)
    printf '%-44s %8s %8s\n' "way" "ms" "MB/s"
    printf '%-44s %8s %8s\n' "moat conversion (image_rootfs, fsync)" "$t_conv" "$(mbps $bytes $t_conv)"
    printf '%-44s %8s %8s\n' "tar -x of the layers, then sync -f" "$t_tars" "$(mbps $bytes $t_tars)"
    printf '%-44s %8s %8s\n' "tar -x of the layers (no sync)" "$t_tar" "$(mbps $bytes $t_tar)"
    printf '%-44s %8s %8s\n' "mke2fs -t ext4 -d TREE (tree already there)" "$t_mke2fs" "$(mbps $bytes $t_mke2fs)"
    printf '%-44s %8s %8s\n' "tar -x + sync, then mke2fs -d" "$((t_tars + t_mke2fs))" \
        "$(mbps $bytes $((t_tars + t_mke2fs)))"
    echo "image: $size bytes apparent, ${st} KiB allocated, e2fsck -fn: $fsck"
    awk -v c="$t_conv" -v t="$t_tars" -v u="$t_tar" 'BEGIN {
        printf "conversion / tar -x+sync throughput: %.2fx (target >= 0.8x: %s)\n", t / c, (t / c >= 0.8) ? "met" : "NOT met";
        printf "conversion / tar -x (no sync) throughput: %.2fx (target >= 0.8x: %s)\n", u / c, (u / c >= 0.8) ? "met" : "NOT met" }'
    rm -rf "$tree" "$out" "$WORK/mke2fs.ext4"
}

case "${1:-convert}" in
convert) convert ;;
*) echo "usage: $0 [convert]" >&2; exit 2 ;;
esac
