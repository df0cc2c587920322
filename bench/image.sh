#!/bin/bash
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
#
# pull: registry -> root filesystem. An image of 4 gzip layers made from
# this host's files (PULL_DIRS1..4 under /usr, ~300 MB uncompressed), kept
# in $WORK/pull-oci, pushed once with skopeo to a loopback docker-registry
# (tests/integration/registry.sh). Then, RUNS_PULL times each (3 by
# default, interleaved, after one warm-up, medians): `moat image pull
# --insecure` + `moat image rootfs --disk-size SIZE` with a fresh MOAT_HOME
# each run, against `skopeo copy docker://... oci:DIR` + `umoci unpack
# --rootless` + `mke2fs -t ext4 -d ROOTFS` (SIZE) + `sync -f`. Target:
# moat <= 1.0x.
#
#   bench/image.sh pull           (after `make build/moat`)
# Env: MOAT_BIN (build/moat), RUNS_PULL (3), PULL_DIRS1..PULL_DIRS4.
#
# run: what a cached image adds to a run. `moat run --image IMAGE -- true`
# (image mode: the store's lookup, the cached root as drive 0 on a
# throwaway overlay, the run config, /init switching root) against
# `moat run -- true` (the default guest), RUNS_RUN times each, interleaved
# after one warm-up each, medians and the difference. Needs a working
# /dev/kvm (hardware, or the nested L1). IMAGE in $MOAT_HOME's store, its
# root already built (`moat image rootfs IMAGE`); without IMAGE, a small
# image is made here (this host's static busybox, umoci) and imported into
# $WORK/run-home, its root built: that needs libext2fs and libarchive, so
# in L1 prepare the store on the host and pass MOAT_HOME and IMAGE.
# Target (issue 26): <= 5 ms more on hardware KVM; in L1 as a ratio.
#
#   bench/image.sh run            (after `make build/moat guest`)
#   bench/image.sh run-prepare    (makes that store here: MOAT_HOME, default $WORK/run-home)
# Env: MOAT_BIN (build/moat), RUNS_RUN (10), MOAT_HOME, IMAGE, RUN_DISK (the root's
# --disk-size, 64M: small enough for L1's payload cpio).
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

# An OCI layout of the layer files $WORK/pull$n.tar.gz (tag bench).
pull_layout() {
    python3 - "$1" "$WORK"/pull[1-4].tar.gz <<'PY'
import gzip, hashlib, json, os, shutil, sys
out, layers = sys.argv[1], sys.argv[2:]
os.makedirs(out + "/blobs/sha256", exist_ok=True)
def put(b):
    d = hashlib.sha256(b).hexdigest()
    open(out + "/blobs/sha256/" + d, "wb").write(b)
    return "sha256:" + d
descs, diffs = [], []
for l in layers:
    h, u = hashlib.sha256(), hashlib.sha256()
    with open(l, "rb") as f:
        for c in iter(lambda: f.read(1 << 20), b""):
            h.update(c)
    with gzip.open(l, "rb") as f:
        for c in iter(lambda: f.read(1 << 20), b""):
            u.update(c)
    shutil.copyfile(l, out + "/blobs/sha256/" + h.hexdigest())
    descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                  "digest": "sha256:" + h.hexdigest(), "size": os.path.getsize(l)})
    diffs.append("sha256:" + u.hexdigest())
cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
                  "rootfs": {"type": "layers", "diff_ids": diffs}}).encode()
man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(cfg),
                             "size": len(cfg)}, "layers": descs}).encode()
json.dump({"imageLayoutVersion": "1.0.0"}, open(out + "/oci-layout", "w"))
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
           "digest": put(man), "size": len(man),
           "annotations": {"org.opencontainers.image.ref.name": "bench"}}]}, open(out + "/index.json", "w"))
PY
}

pull() {
    MOAT=${MOAT_BIN:-$B/moat}
    case $MOAT in /*) ;; *) MOAT=$PWD/$MOAT ;; esac
    RUNS=${RUNS_PULL:-3}
    for t in docker-registry skopeo umoci mke2fs python3 curl; do
        command -v $t >/dev/null || { echo "SKIPPED: pull: no $t (scripts/deps.sh installs it)"; return 0; }
    done
    [ -x "$MOAT" ] || { echo "SKIPPED: pull: $MOAT missing (make build/moat)"; return 0; }
    PULL_DIRS1=${PULL_DIRS1:-"usr/lib/python3.11 usr/lib/git-core"}
    PULL_DIRS2=${PULL_DIRS2:-"usr/share/doc"}
    PULL_DIRS3=${PULL_DIRS3:-"usr/share/perl usr/share/vim usr/share/i18n"}
    PULL_DIRS4=${PULL_DIRS4:-"usr/lib/python3 usr/share/zoneinfo"}
    mkdir -p "$WORK"
    WORK=$(cd "$WORK" && pwd)
    for n in 1 2 3 4; do
        eval dirs=\$PULL_DIRS$n
        if [ ! -s "$WORK/pull$n.tar.gz" ]; then
            # shellcheck disable=SC2086
            tar -C / --ignore-failed-read -cf "$WORK/pull$n.tar" $dirs 2>/dev/null || true
            gzip -f "$WORK/pull$n.tar"
        fi
    done
    [ -s "$WORK/pull-oci/index.json" ] || { rm -rf "$WORK/pull-oci"; pull_layout "$WORK/pull-oci"; }
    SUITE=bench-pull
    . "$(dirname "$0")/../tests/integration/checks.sh"
    . "$(dirname "$0")/../tests/integration/registry.sh"
    reg_init && reg_start plain && reg_push "oci:$WORK/pull-oci:bench" "$REG_ADDR/bench/img:1" ||
        { echo "FAIL: pull: cannot start the registry or push the image"; return 1; }
    ref=$REG_ADDR/bench/img:1
    bytes=0
    for n in 1 2 3 4; do bytes=$((bytes + $(gzip -dc "$WORK/pull$n.tar.gz" | wc -c))); done
    gz=$(cat "$WORK"/pull[1-4].tar.gz | wc -c)
    echo "pull: 4 gzip layers, $gz bytes compressed, $bytes uncompressed; registry $REG_ADDR (loopback);" \
         "$RUNS runs each, medians; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    H=$WORK/pull-home
    moat_cmd="MOAT_HOME=$H $MOAT image pull --quiet --insecure $ref && MOAT_HOME=$H $MOAT image rootfs $ref --disk-size $SIZE"
    D=$WORK/pull-skopeo U=$WORK/pull-bundle F=$WORK/pull-mke2fs.ext4
    other_cmd="skopeo copy -q --src-tls-verify=false docker://$ref oci:$D:1 && umoci unpack --rootless --image $D:1 $U && mke2fs -q -F -t ext4 -d $U/rootfs $F $((SIZE / 1024))k && sync -f $F"
    # Interleaved run by run (a warm-up first), like convert.
    : >"$WORK/pull-times"
    i=0
    while [ $i -le "$RUNS" ]; do
        m=$(once "$moat_cmd" "chmod -R u+w $H 2>/dev/null; rm -rf $H")
        o=$(once "$other_cmd" "chmod -R u+w $D $U 2>/dev/null; rm -rf $D $U $F")
        [ $i -gt 0 ] && echo "$m $o" >>"$WORK/pull-times"
        i=$((i + 1))
    done
    t_moat=$(cut -d' ' -f1 "$WORK/pull-times" | median) t_other=$(cut -d' ' -f2 "$WORK/pull-times" | median)
    img=$(MOAT_HOME=$H "$MOAT" image rootfs "$ref" --disk-size "$SIZE")
    size=$(stat -c %s "$img")
    fsck=$(e2fsck -fn "$img" >/dev/null 2>&1 && echo clean || echo NOT-CLEAN)
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%-60s %8s %8s\n' "way" "ms" "MB/s"
    printf '%-60s %8s %8s\n' "moat image pull + moat image rootfs (fresh MOAT_HOME)" "$t_moat" "$(mbps $bytes $t_moat)"
    printf '%-60s %8s %8s\n' "skopeo copy + umoci unpack --rootless + mke2fs -d + sync" "$t_other" "$(mbps $bytes $t_other)"
    echo "moat's image: $size bytes apparent, $(du -k "$img" | cut -f1) KiB allocated, e2fsck -fn: $fsck"
    awk -v m="$t_moat" -v o="$t_other" 'BEGIN {
        printf "moat / (skopeo + umoci + mke2fs) time: %.2fx (target <= 1.0x: %s)\n", m / o, (m / o <= 1.0) ? "met" : "NOT met" }'
    chmod -R u+w "$H" "$D" "$U" 2>/dev/null
    rm -rf "$H" "$D" "$U" "$F"
}

# A small image (static busybox) imported into $MOAT_HOME as bench:run and
# its root built; prints nothing, fails loudly.
run_image() {
    local d=$WORK/run-oci r=$WORK/run-root
    rm -rf "$d" "$r" && mkdir -p "$r/bin" "$r/etc"
    cp "${BUSYBOX:-/bin/busybox}" "$r/bin/busybox"
    for a in sh true; do ln -s busybox "$r/bin/$a"; done
    echo 'root:x:0:0:root:/root:/bin/sh' > "$r/etc/passwd"
    echo 'root:x:0:' > "$r/etc/group"
    umoci init --layout "$d"
    umoci new --image "$d:run"
    tar --numeric-owner -C "$r" -cf "$WORK/run-layer.tar" .
    umoci raw add-layer --image "$d:run" "$WORK/run-layer.tar"
    umoci config --image "$d:run" --config.cmd /bin/true
    "$MOAT" image import "$d" --tag bench:run >/dev/null
    "$MOAT" image rootfs bench:run --disk-size "${RUN_DISK:-64M}" >/dev/null
}

run() {
    MOAT=${MOAT_BIN:-$B/moat}
    case $MOAT in /*) ;; *) MOAT=$PWD/$MOAT ;; esac
    [ -c /dev/kvm ] || { echo "SKIPPED: bench/image.sh run: no /dev/kvm (run it on a KVM host or in the nested L1)"; return 0; }
    mkdir -p "$WORK"
    if [ -z "${IMAGE:-}" ]; then
        export MOAT_HOME=$PWD/$WORK/run-home
        rm -rf "$MOAT_HOME"
        run_image
        IMAGE=bench:run
    fi
    local n=${RUNS_RUN:-10} i a=() b=()
    "$MOAT" run -- true >/dev/null || { echo "FAIL: bench/image.sh run: moat run -- true failed"; return 1; }
    "$MOAT" run --image "$IMAGE" --disk-size "${RUN_DISK:-64M}" -- true >/dev/null ||
        { echo "FAIL: bench/image.sh run: moat run --image $IMAGE -- true failed"; return 1; }
    for i in $(seq "$n"); do
        a+=("$(once "$MOAT run -- true" :)")
        b+=("$(once "$MOAT run --image $IMAGE --disk-size ${RUN_DISK:-64M} -- true" :)")
    done
    local ma mb
    ma=$(printf '%s\n' "${a[@]}" | median)
    mb=$(printf '%s\n' "${b[@]}" | median)
    echo "moat run -- true:                 median $ma ms (${a[*]})"
    echo "moat run --image $IMAGE -- true: median $mb ms (${b[*]})"
    awk -v a="$ma" -v b="$mb" 'BEGIN { printf "the cached image adds %d ms, %.2fx (target <= 5 ms on hardware KVM)\n", b - a, b / a }'
}

case "${1:-convert}" in
convert) convert ;;
pull) pull ;;
run) run ;;
run-prepare)    # the store of `run` made here, for a KVM host that lacks the libraries (L1)
    MOAT=${MOAT_BIN:-$B/moat}; case $MOAT in /*) ;; *) MOAT=$PWD/$MOAT ;; esac
    mkdir -p "$WORK"; export MOAT_HOME=${MOAT_HOME:-$PWD/$WORK/run-home}; run_image
    echo "MOAT_HOME=$MOAT_HOME IMAGE=bench:run" ;;
*) echo "usage: $0 [convert|pull|run|run-prepare]" >&2; exit 2 ;;
esac
