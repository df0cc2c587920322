#!/bin/sh
# moat run --image / --rootfs / --image-config on the host (docs/images.md,
# "Running an image"), the parts that need no KVM: an OCI image made with
# umoci and imported; its root filesystem built on first use into
# images/rootfs/HEX.SIZE.ext4 (img_rootfs_get), e2fsck-clean, holding the image's files, reused
# by the next run and built once by two at a time; the usage errors. On a
# host with KVM the runs boot too (the guest's side is the nested suite's:
# tests/nested/checks.d/image-boot.sh).
#   MOAT_BIN=build/moat tests/integration/image-run.sh
set -u
M=${MOAT_BIN:-build/moat}
fail=0
pass() { echo "PASS: image-run: $1"; }
bad() { echo "FAIL: image-run: $1"; fail=1; }
for t in umoci e2fsck debugfs; do
    PATH=/sbin:/usr/sbin:$PATH command -v $t >/dev/null || { echo "SKIPPED: image-run: no $t here"; exit 0; }
done
[ -x "$M" ] || { echo "FAIL: image-run: $M missing"; exit 1; }
W=$(mktemp -d /tmp/moat-image-run.XXXXXX)
trap 'rm -rf "$W"' EXIT
export MOAT_HOME=$W/home PATH=/sbin:/usr/sbin:$PATH

# The image: one layer with /etc/motd and /etc/passwd, a config.
(
    set -e
    cd "$W"
    umoci init --layout oci >/dev/null
    umoci new --image oci:t >/dev/null
    umoci unpack --image oci:t bundle >/dev/null
    mkdir -p bundle/rootfs/etc
    echo from-image >bundle/rootfs/etc/motd
    printf 'root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n' >bundle/rootfs/etc/passwd
    umoci repack --image oci:t bundle >/dev/null
    umoci config --image oci:t --config.user app --config.env A=1 --config.cmd /bin/true >/dev/null
) || { bad "umoci could not make the test image"; exit 1; }
"$M" image import --tag run-test:1 "$W/oci" >/dev/null 2>"$W/err" || { cat "$W/err"; bad "import"; exit 1; }

# The first run builds the base (then boots, or stops at /dev/kvm: 125).
"$M" run --timeout 60 --image run-test:1 --disk-size 64M -- /bin/true >"$W/out1" 2>&1; r=$?
base=$(ls "$MOAT_HOME"/images/rootfs/* 2>/dev/null)
case "$base" in
*/[0-9a-f]*.67108864.ext4) pass "the base is cached as rootfs/HEX.SIZE.ext4 (run exit $r)" ;;
*) cat "$W/out1"; bad "no base in $MOAT_HOME/images/rootfs ($base, exit $r)" ;;
esac
[ "$r" = 0 ] || [ "$r" = 125 ] || { cat "$W/out1"; bad "the run's exit status $r"; }
if [ -n "$base" ] && e2fsck -fn "$base" >/dev/null 2>&1 &&
    debugfs -R "cat /etc/motd" "$base" 2>/dev/null | grep -qx from-image; then
    pass "the base is a clean ext4 with the image's files"
else
    bad "the base is not a clean ext4 holding /etc/motd"
fi
ls -ld --time-style=+%s.%N "$base" >"$W/stat1" 2>/dev/null
ls -i "$base" >>"$W/stat1" 2>/dev/null
"$M" run --timeout 60 --image run-test:1 --disk-size 64M -- /bin/true >/dev/null 2>&1
ls -ld --time-style=+%s.%N "$base" >"$W/stat2" 2>/dev/null
ls -i "$base" >>"$W/stat2" 2>/dev/null
cmp -s "$W/stat1" "$W/stat2" && pass "a second run reuses the base" || bad "a second run rebuilt the base"

# Two at once, another size: built once (one file, no temporary left).
"$M" run --timeout 60 --image run-test:1 --disk-size 32M -- /bin/true >/dev/null 2>&1 &
"$M" run --timeout 60 --image run-test:1 --disk-size 32M -- /bin/true >/dev/null 2>&1
wait
n=$(ls "$MOAT_HOME"/images/rootfs | grep -c '\.33554432\.ext4$')
left=$(ls -A "$MOAT_HOME"/images/rootfs | grep -Evc '^[0-9a-f]{64}\.[0-9]+\.ext4$')
[ "$n" = 1 ] && [ "$left" = 0 ] && pass "two runs at once build one base" ||
    { ls -la "$MOAT_HOME"/images/rootfs; bad "two runs at once: $n bases, $left other files"; }

# Usage errors: exit 2 with a sentence.
usage() {   # usage NAME PATTERN ARGS...
    n=$1 p=$2; shift 2
    "$M" run "$@" >"$W/u" 2>&1; r=$?
    if [ $r = 2 ] && grep -q "$p" "$W/u"; then pass "usage: $n"; else cat "$W/u"; bad "usage: $n (exit $r)"; fi
}
usage "unknown image" "no image nosuch:1" --image nosuch:1 -- true
usage "--disk-size without --image" "disk-size is for --image" --disk-size 1G --rootfs "$base" -- true
usage "--image with --rootfs" "two roots" --image run-test:1 --rootfs "$base" -- true
usage "bad --disk-size" "invalid --disk-size" --image run-test:1 --disk-size 12Q -- true
usage "-e without image mode" "need --rootfs or --image-root" -e A=1 -- true
usage "relative -w" "not an absolute path" --rootfs "$base" -w rel -- true
echo '{"config":{}}' >"$W/bad.json"
usage "a malformed --image-config" "image-config .*bad.json" --rootfs "$base" --image-config "$W/bad.json" -- true
[ -z "$(ls -d "${TMPDIR:-/tmp}"/moat-rootfs-?????? 2>/dev/null)" ] &&
    pass "no temporary overlay left" || bad "a temporary overlay left in ${TMPDIR:-/tmp}"
exit $fail
