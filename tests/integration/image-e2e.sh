#!/bin/bash
# Registry -> moat image pull -> moat image rootfs, end to end, no KVM:
# images made from files by tests/integration/image_e2e.py (an OCI layout:
# gzip, zstd and uncompressed layers; devices, a FIFO, setuid/setgid,
# owners, xattrs (security.capability, user.*), hardlinks within and across
# layers, a symlink chain, whiteouts, an opaque directory, PAX long and
# non-ASCII names, a 1 GiB GNU sparse file), pushed to a loopback
# docker-registry (skopeo copy; the zstd/uncompressed image as is through
# the registry API), pulled with --insecure, converted, then checked inside
# the ext4 with debugfs and e2fsck -fn. Hostile images (../, a symlink then
# a file through it, a hardlink out, a 10 GiB zstd bomb, a device number
# past ext4's range) refused with a
# message and nothing cached in images/rootfs/; a multi-arch index picks
# linux/amd64.
#   MOAT_BIN=build/moat tests/integration/image-e2e.sh
SUITE=image-e2e
MOAT=${MOAT_BIN:-build/moat}
case $MOAT in /*) ;; *) MOAT=$PWD/$MOAT ;; esac
fails=0
HERE=$(dirname "$0")
. "$HERE/checks.sh"
. "$HERE/registry.sh"
[ -x "$MOAT" ] || { echo "FAIL: $SUITE: no $MOAT (make build/moat)"; exit 1; }
reg_need
need_tools debugfs e2fsck zstd
reg_init || { echo "FAIL: $SUITE: cannot make the test CA"; exit 1; }
export HOME=$REG_TMP/home MOAT_HOME=$REG_TMP/moat
unset REGISTRY_AUTH_FILE DOCKER_CONFIG
mkdir -p "$HOME"
G=$REG_TMP/gen
mkdir -p "$G"
python3 "$HERE/image_e2e.py" "$G" >"$G/digests" 2>"$G/err" ||
    { echo "FAIL: $SUITE: cannot make the test images: $(cat "$G/err")"; exit 1; }
digest() { awk -v t="$1" '$1 == t { print $2 }' "$G/digests"; }

reg_start plain || { echo "FAIL: $SUITE: docker-registry did not start"; exit 1; }
R=$REG_ADDR/e2e/img
push_ok=1
reg_push "oci:$G/oci:multi" "$R:multi" --all || push_ok=0
reg_push "oci:$G/oci:multi" "$R:v2s2" --all --format v2s2 || push_ok=0
for t in dotdot symout symnone linkout devwrap; do reg_push "oci:$G/oci:$t" "$R:$t" || push_ok=0; done
for t in main bomb; do   # skopeo would recompress the zstd and plain layers: pushed as they are
    python3 "$REG_AUX" pushdir "$REG_ADDR" "e2e/img:$t" "$G/dir-$t" >/dev/null || push_ok=0
done
check "the test images pushed to the loopback registry" [ $push_ok = 1 ] || exit 1

OUT=$REG_TMP/out
pull() { "$MOAT" image pull --insecure "$R:$1" >"$OUT" 2>&1; }
rootfs() { "$MOAT" image rootfs "$R:$1" "${@:2}" >"$OUT" 2>&1; }
out_has() { grep -q -- "$1" "$OUT" || { sed 's/^/    /' "$OUT"; return 1; }; }

# ---- the main image: three layers (gzip, zstd, uncompressed) ----
check "pull the 3-layer image (gzip, zstd, uncompressed)" pull main
check "  the manifest digest pushed" out_has "$(digest main)"
t0=$(date +%s%N)
check "moat image rootfs of it" rootfs main
echo "    (rootfs: $((($(date +%s%N) - t0) / 1000000)) ms)"
IMG=$(tail -1 "$OUT")
export IMG
check "  cached under images/rootfs/" bash -c '[[ $0 == "$1"/images/rootfs/*.ext4 ]] && [ -f "$0" ]' "$IMG" "$MOAT_HOME"
check "  e2fsck -fn: clean" bash -c 'e2fsck -fn "$0" >/dev/null 2>&1' "$IMG"
dbg() { debugfs -R "$1" "$IMG" 2>/dev/null; }
st() { dbg "stat \"$1\""; }
has() {   # has PATH PATTERN: stat PATH shows PATTERN
    st "$1" | grep -q -- "$2" || { echo "    stat $1: $(st "$1" | head -4 | tr '\n' ' ')"; return 1; }
}
cat_is() { [ "$(dbg "cat \"$1\"")" = "$2" ] || { echo "    cat $1: '$(dbg "cat \"$1\"")'"; return 1; }; }
absent() { ! st "$1" | grep -q 'Inode:'; }
dev_is() {   # dev_is PATH MAJOR MINOR
    local m; m=$(st "$1" | sed -n 's/.*Device major\/minor number: *\([0-9]*\):\([0-9]*\) .*/\1 \2/p')
    set -- "$1" "$2" "$3" $m
    [ $# = 5 ] && [ $((10#$4)) = "$2" ] && [ $((10#$5)) = "$3" ] || { echo "    $1: major/minor '$m'"; return 1; }
}
check "  setuid: /usr/bin/su 04755 root:root" has /usr/bin/su "Mode:  04755"
check "  setgid: /usr/bin/wall 02755 group 5" bash -c "$(declare -f dbg st has); has /usr/bin/wall 'Mode:  02755' &&
    has /usr/bin/wall 'Group:     5'"
check "  sticky /tmp 01777" has /tmp "Mode:  01777"
check "  owner 1000:1000, 0640: /home/u/file" has /home/u/file "User:  1000   Group:  1000"
check "  /home/u 0750 1000:1000 (its parent /home made implicitly)" has /home/u "Mode:  0750"
check "  owner 165536:165537 (ids past 16 bits): /home/u/high" has /home/u/high "User: 165536   Group: 165537"
check "  /secret 0700 1000:1000 and its file mode 0000" bash -c "$(declare -f dbg st has); has /secret 'Mode:  0700' &&
    has /secret/none 'Mode:  0000'"
check "  an empty file" has /empty "Size: 0"
check "  mtime from the tar (2023-11-14 22:13:20 UTC)" has /etc/passwd "mtime: 0x6553f100"
check "  a 3 MiB file's content (sha256 of a debugfs dump)" bash -c '
    debugfs -R "dump /big.bin $0" "$IMG" >/dev/null 2>&1 && [ "$(sha256sum <"$0" | cut -c1-64)" = "$1" ]' \
    "$REG_TMP/big.bin" "$(digest big.bin)"
check "  owner 65534:65534 0700 from the uncompressed layer" has /usr/bin/late "User: 65534   Group: 65534"
check "  char device /dev/null 1:3" dev_is /dev/null 1 3
check "  block device /dev/sda1 8:1, group 6" dev_is /dev/sda1 8 1
check "  char device /dev/big 511:1048575 (a 20-bit minor)" dev_is /dev/big 511 1048575
check "  /dev/null: a character device 0666" has /dev/null "Type: character special    Mode:  0666"
check "  /dev/sda1: a block device 0660" has /dev/sda1 "Type: block special    Mode:  0660"
check "  FIFO /run/fifo 0620 7:8" bash -c "$(declare -f dbg st has); has /run/fifo 'Type: FIFO    Mode:  0620' &&
    has /run/fifo 'User:     7   Group:     8'"
check "  xattr security.capability (cap_net_raw+ep) on /usr/bin/ping" \
    bash -c "debugfs -R 'ea_list /usr/bin/ping' '$IMG' 2>/dev/null | grep -q 'security.capability (20) = 01 00 00 02 00 20 00 00'"
check "  xattr user.moat = e2e-value" \
    bash -c "debugfs -R 'ea_list /usr/bin/ping' '$IMG' 2>/dev/null | grep -q 'user.moat (9) = \"e2e-value\"'"
check "  hardlinks: busybox, ls, sh (layer 2) = 3 links after layer 3's .wh.cat" has /bin/busybox "Links: 3"
check "  /bin/sh is busybox's inode" bash -c '[ -n "$0" ] && [ "$0" = "$1" ]' \
    "$(dbg 'stat /bin/sh' | sed -n 's/^Inode: \([0-9]*\).*/\1/p')" "$(dbg 'stat /bin/busybox' | sed -n 's/^Inode: \([0-9]*\).*/\1/p')"
check "  /bin/cat whited out by layer 3" absent /bin/cat
check "  symlink chain: /lib -> usr/lib -> lib64" bash -c "$(declare -f dbg st has); has /lib 'Fast link dest: \"usr/lib\"' &&
    has /usr/lib 'Fast link dest: \"lib64\"'"
check "  /chain -> /lib/target, and the chain's end has its file" bash -c "$(declare -f dbg st has cat_is)
    has /chain 'Fast link dest: \"/lib/target\"' && cat_is /usr/lib64/target 'end of the chain'"
LONG=/deep/$(printf 'd%.0s' $(seq 90))/$(printf 'e%.0s' $(seq 90))/$(printf 'n%.0s' $(seq 200))
check "  a PAX long name (a 200-byte component, ${#LONG} bytes)" cat_is "$LONG" long
check "  a PAX long symlink target (a slow symlink)" cat_is /longlink "$LONG"
check "  a non-ASCII name: /données/ファイル-ü.txt, owner 1000" bash -c "$(declare -f dbg st has cat_is)
    cat_is '/données/ファイル-ü.txt' 'non-ASCII ✓' && has '/données/ファイル-ü.txt' 'User:  1000'"
check "  whiteout: /etc/motd absent" absent /etc/motd
check "  whiteout: /wh/x absent, /wh/y kept" bash -c "$(declare -f dbg st absent cat_is); absent /wh/x && cat_is /wh/y y"
check "  whiteout of a directory: /whdir and its tree absent" bash -c "$(declare -f dbg st absent)
    absent /whdir && absent /whdir/inner/f"
check "  opaque /opq: layer 1's a and sub/ gone, layer 2's new there" bash -c "$(declare -f dbg st absent cat_is)
    absent /opq/a && absent /opq/sub && cat_is /opq/new new"
check "  replaced file /etc/hostname: layer 2's content and mode 0600" bash -c "$(declare -f dbg st has cat_is)
    cat_is /etc/hostname layer2 && has /etc/hostname 'Mode:  0600'"
check "  a file of layer 1 replaced by a directory in layer 2 (/swap/inner)" cat_is /swap/inner inner
check "  layer 3's file" cat_is /layer3 3
check "  a file hardlinked by layer 2, rewritten by layer 3: the link keeps v1" bash -c "$(declare -f dbg st has cat_is)
    cat_is /hl/orig v2 && cat_is /hl/link v1 && has /hl/orig 'Links: 1' && has /hl/link 'Links: 1'"
check "  an opaque marker after its layer's own file: that file kept, the lower one gone" bash -c "$(declare -f dbg st absent cat_is)
    cat_is /opq2/new2 new2 && absent /opq2/old"
check "  a directory given again by layer 2: its new mode and owner, layer 1's file kept" bash -c "$(declare -f dbg st has cat_is)
    has /meta 'Mode:  0711' && has /meta 'User:     5   Group:     6' && cat_is /meta/kept kept"
check "  ls -l / lists the tree" bash -c "debugfs -R 'ls -l /' '$IMG' 2>/dev/null | grep -q ' sparse1g'"
check "  sparse file /sparse1g: 1 GiB" has /sparse1g "Size: 1073741824"
blocks=$(st /sparse1g | sed -n 's/.*Blockcount: \([0-9]*\).*/\1/p')
check "  sparse file: two 4 KiB chunks allocated (Blockcount $blocks <= 32 sectors)" \
    bash -c '[ -n "$0" ] && [ "$0" -le 32 ]' "$blocks"
check "  sparse file: extents only at 512 MiB and at the last block" \
    bash -c "$(declare -f dbg st); st /sparse1g | grep -Eq '^\(131072\):[0-9]+, \(262143\):[0-9]+$'"
check "  sparse file: its data there (M at 512 MiB, E at the end)" bash -c "
    debugfs -R 'bd -f /sparse1g 131072' \"\$IMG\" 2>/dev/null | grep -q '^0000  4d4d 4d4d' &&
    debugfs -R 'bd -f /sparse1g 262143' \"\$IMG\" 2>/dev/null | grep -q '^0000  4545 4545'"
alloc=$(du -k "$IMG" | cut -f1)
check "  the ext4 file ($(stat -c %s "$IMG") bytes) allocates ${alloc} KiB (< 32 MiB)" [ "$alloc" -lt 32768 ]

# ---- the multi-arch index ----
check "pull a multi-arch index (amd64 + arm64)" pull multi
check "  linux/amd64's manifest picked" out_has "$(digest amd64)"
check "  its root holds /arch-amd64, not /arch-arm64" bash -c '
    "$0" image rootfs "$1" >"$2" 2>&1 && img=$(tail -1 "$2") &&
    [ "$(debugfs -R "cat /arch-amd64" "$img" 2>/dev/null)" = amd64 ] &&
    ! debugfs -R "stat /arch-arm64" "$img" 2>/dev/null | grep -q Inode:' "$MOAT" "$R:multi" "$OUT"

check "a Docker manifest list (skopeo --format v2s2) gives the amd64 root too" bash -c '
    "$0" image pull --insecure "$1" >"$2" 2>&1 && "$0" image rootfs "$1" >"$2" 2>&1 && img=$(tail -1 "$2") &&
    [ "$(debugfs -R "cat /arch-amd64" "$img" 2>/dev/null)" = amd64 ]' "$MOAT" "$R:v2s2" "$OUT"
check "  its manifest is Docker's schema 2" bash -c '
    curl -s -H "Accept: application/vnd.docker.distribution.manifest.list.v2+json" "http://$0/v2/e2e/img/manifests/v2s2" |
    grep -q "manifest.list.v2+json"' "$REG_ADDR"

# ---- hostile images: refused by pull or rootfs, nothing cached ----
rm -rf "$MOAT_HOME/images/rootfs"
refused() {   # refused TAG PATTERN [rootfs options]: pull then rootfs fails naming PATTERN
    if ! pull "$1"; then out_has "$2"; return; fi
    ! rootfs "$1" && out_has "$2"
}
shown() {   # the refusal's message, and that no line of it is a raw library code
    sed 's/^/    /' "$OUT"; [ -n "${1:-}" ] && echo "    $1"
    check "  its message has no untranslated library error ('Unknown code ...')" bash -c '! grep -q "Unknown code" "$0"' "$OUT"
}
check "../escape refused" refused dotdot '".." component'
shown
check "a symlink to nowhere then a file through it refused" refused symnone 'resolves to nothing'
shown
check "a hardlink to ../../../etc/passwd refused" refused linkout '".." component'
shown
t0=$(date +%s)
check "a zstd layer of a 10 GiB file of zeros ($(stat -c %s "$G"/dir-bomb/* | sort -n | tail -1) bytes) refused" \
    refused bomb "decompression bomb"
shown "($(($(date +%s) - t0)) s)"
check "nothing of the refused images in images/rootfs/ (not even a temporary)" \
    bash -c '[ -z "$(ls -A "$0/images/rootfs" 2>/dev/null | grep -v "^\.*lock")" ]' "$MOAT_HOME"
check "a symlink to /etc then a file through it: lands in the image's /etc" bash -c '
    "$0" image pull --insecure "$1" >/dev/null 2>&1 && "$0" image rootfs "$1" >"$2" 2>&1 && img=$(tail -1 "$2") &&
    [ "$(debugfs -R "cat /etc/moat-e2e-owned" "$img" 2>/dev/null)" = "owned?" ] && [ ! -e /etc/moat-e2e-owned ]' \
    "$MOAT" "$R:symout" "$OUT"
check "  /evil is still the symlink" bash -c "debugfs -R 'stat /evil' \"\$(tail -1 '$OUT')\" 2>/dev/null |
    grep -q 'Fast link dest: \"/etc\"'"
check "nothing written on this host by any of them" bash -c '[ ! -e /tmp/moat-e2e-out ] && [ ! -e "$0/escape" ] &&
    [ ! -e "$0/../escape" ]' "$MOAT_HOME/images"
check "a device number ext4 cannot hold (char 1:1048577) refused, not wrapped (to 1:1, /dev/mem)" \
    refused devwrap "device"
shown
echo "$SUITE: $fails failed"
exit $((fails > 0))
