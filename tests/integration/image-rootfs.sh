#!/bin/sh
# Layers made by GNU tar (gzip, zstd, plain) -> an ext4 root filesystem
# (build/tests/image_rootfs, vmm/image/rootfs.c), checked with debugfs and
# e2fsck -fn; a hostile layer refused with nothing left. Then `moat image
# rootfs` on an image umoci made and `moat image import` stored: the cached
# root (built once by two concurrent callers, read-only), --disk-size,
# --out, an unknown image. No KVM needed.
#   B=build MOAT_BIN=build/moat tests/integration/image-rootfs.sh
set -u
B=${B:-build}
CONV=${CONV:-$B/tests/image_rootfs}
MOAT=${MOAT_BIN:-$B/moat}
case $MOAT in /*) ;; *) MOAT=$PWD/$MOAT ;; esac
fail=0
pass() { echo "PASS: image-rootfs: $1"; }
bad() { echo "FAIL: image-rootfs: $1"; fail=1; }
for t in tar debugfs e2fsck zstd; do
    command -v $t >/dev/null || { echo "SKIPPED: image-rootfs: no $t here"; exit 0; }
done
[ -x "$CONV" ] || { echo "FAIL: image-rootfs: $CONV missing (make $CONV)"; exit 1; }
W=$(mktemp -d /tmp/moat-image-rootfs.XXXXXX)
trap 'rm -rf "$W"' EXIT

# Layer 1: a small tree, owners set by tar, a setuid file, a symlink, a
# hardlink, a 64 MiB sparse file.
mkdir -p "$W/l1/etc" "$W/l1/usr/bin" "$W/l1/old/sub"
echo "hello from layer 1" >"$W/l1/etc/motd"
printf 'binary' >"$W/l1/usr/bin/tool"
chmod 4755 "$W/l1/usr/bin/tool"
ln "$W/l1/usr/bin/tool" "$W/l1/usr/bin/tool-link"
ln -s usr/bin "$W/l1/bin"
echo gone >"$W/l1/old/sub/file"
truncate -s 64M "$W/l1/sparse"
printf 'tail' | dd of="$W/l1/sparse" bs=1 seek=$((32 << 20)) conv=notrunc 2>/dev/null
tar -C "$W/l1" --owner=1234 --group=4321 --numeric-owner -S --format=pax -czf "$W/l1.tar.gz" .
# Layer 2 (zstd): a whiteout, an opaque directory, a file through the bin symlink.
mkdir -p "$W/l2/etc" "$W/l2/old"
: >"$W/l2/etc/.wh.motd"
: >"$W/l2/old/.wh..wh..opq"
echo "new" >"$W/l2/old/new"
tar -C "$W/l2" --numeric-owner --format=pax -cf - . | zstd -q >"$W/l2.tar.zst"
# Layer 3 (plain): a hardlink to layer 1's file (tar links the second
# name to the first; the first is then deleted from the archive).
mkdir -p "$W/l3/usr/bin"
printf 'binary' >"$W/l3/usr/bin/tool"
ln "$W/l3/usr/bin/tool" "$W/l3/usr/bin/tool-again"
tar -C "$W/l3" --format=pax -cf "$W/l3.tar" usr/bin/tool usr/bin/tool-again
tar --delete -f "$W/l3.tar" usr/bin/tool

out="$W/root.ext4"
if "$CONV" "$out" --disk-size $((256 << 20)) "$W/l1.tar.gz" "$W/l2.tar.zst" "$W/l3.tar" >"$W/stats" 2>"$W/err"; then
    pass "3 layers (gzip, zstd, plain) converted: $(cat "$W/stats")"
else
    bad "conversion failed: $(cat "$W/err")"
fi
if e2fsck -fn "$out" >"$W/fsck" 2>&1; then pass "e2fsck -fn: clean"; else bad "e2fsck -fn: $(cat "$W/fsck")"; fi
dbg() { debugfs -R "$1" "$out" 2>/dev/null; }
stat_of() { dbg "stat $1"; }
stat_of /usr/bin/tool | grep -q "Mode:  04755" && pass "setuid mode kept" || bad "setuid mode: $(stat_of /usr/bin/tool | head -3)"
stat_of /usr/bin/tool | grep -q "User:  1234   Group:  4321" && pass "owners from the tar" \
    || bad "owners: $(stat_of /usr/bin/tool | grep User)"
stat_of /usr/bin/tool | grep -q "Links: 3" && pass "hardlinks within and across layers (3 links)" \
    || bad "links: $(stat_of /usr/bin/tool | grep Links)"
[ "$(dbg 'cat /usr/bin/tool-again')" = binary ] && pass "hardlink content" || bad "hardlink content"
stat_of /bin | grep -q 'Fast link dest: "usr/bin"' && pass "symlink kept" || bad "symlink: $(stat_of /bin | tail -2)"
dbg "ls /etc" | grep -q motd && bad "whiteout: /etc/motd still there" || pass "whiteout removed /etc/motd"
dbg "ls /old" | grep -q sub && bad "opaque: /old/sub still there" || pass "opaque dir dropped layer 1's /old/sub"
[ "$(dbg 'cat /old/new')" = new ] && pass "opaque dir keeps its own layer's file" || bad "/old/new"
blocks=$(stat_of /sparse | sed -n 's/.*Blockcount: \([0-9]*\).*/\1/p')
[ -n "$blocks" ] && [ "$blocks" -le 64 ] && pass "64 MiB sparse file takes $blocks sectors" \
    || bad "sparse file: Blockcount $blocks"
alloc=$(du -k "$out" | cut -f1)
[ "$alloc" -lt 32768 ] && pass "256 MiB image file allocates ${alloc} KiB" || bad "image allocates ${alloc} KiB"

# Layer 1 alone, dumped back out of the ext4 by debugfs: the same tree as
# tar -x makes of it (content, symlinks, permission bits; debugfs's rdump
# chowns after its chmod, which drops setuid: that bit is checked above).
"$CONV" "$W/one.ext4" "$W/l1.tar.gz" >/dev/null 2>&1
mkdir -p "$W/byTar" "$W/byDump"
tar -C "$W/byTar" -xzf "$W/l1.tar.gz"
debugfs -R "rdump / $W/byDump" "$W/one.ext4" >/dev/null 2>&1
rm -rf "$W/byDump/lost+found"
if diff -r --no-dereference "$W/byTar" "$W/byDump" >"$W/diff" 2>&1 &&
   [ "$(cd "$W/byTar" && find . -printf '%p %m\n' | sed 's/ [0-7]*\([0-7][0-7][0-7]\)$/ \1/' | sort)" = \
     "$(cd "$W/byDump" && find . -printf '%p %m\n' | sed 's/ [0-7]*\([0-7][0-7][0-7]\)$/ \1/' | sort)" ]; then
    pass "layer 1 dumped from the ext4 = tar -x of it (content, symlinks, permissions)"
else
    bad "layer 1 differs from tar -x: $(head -5 "$W/diff")"
fi
rm -rf "$W/byTar" "$W/byDump" "$W/one.ext4"

# Hostile: a path with .. (GNU tar keeps it with -P): refused, nothing left.
mkdir -p "$W/h/a"
echo evil >"$W/h/evil"
tar -C "$W/h/a" -P -cf "$W/hostile.tar" ../evil
rm -f "$W/root2.ext4"
if "$CONV" "$W/root2.ext4" "$W/hostile.tar" >/dev/null 2>"$W/err"; then
    bad "a layer with ../evil was converted"
else
    grep -q '".." component' "$W/err" && pass "../ refused: $(head -1 "$W/err")" || bad "../: $(cat "$W/err")"
fi
left=$(ls "$W" | grep -c 'root2')
[ "$left" = 0 ] && pass "nothing left behind by the refused layer" || bad "left behind: $(ls "$W" | grep root2)"

# moat image rootfs: an image of two layers made by umoci (a whiteout in
# the second), imported into a store of the test's own.
if ! command -v umoci >/dev/null || [ ! -x "$MOAT" ]; then
    echo "SKIPPED: image-rootfs: moat image rootfs: no umoci or no $MOAT"
    exit $fail
fi
export MOAT_HOME="$W/home"
(cd "$W" && umoci init --layout L && umoci new --image L:t && umoci unpack --rootless --image L:t U &&
 mkdir -p U/rootfs/etc U/rootfs/bin && echo one >U/rootfs/etc/one && echo two >U/rootfs/etc/two &&
 umoci repack --image L:t U && rm -rf U && umoci unpack --rootless --image L:t U && rm U/rootfs/etc/one &&
 echo three >U/rootfs/bin/three && umoci repack --image L:t U) >"$W/umoci.log" 2>&1 ||
    { bad "umoci could not make the image: $(tail -3 "$W/umoci.log")"; exit 1; }
"$MOAT" image import "$W/L" --tag localhost/rootfs:1 >/dev/null 2>"$W/err" || bad "import: $(cat "$W/err")"
"$MOAT" image rootfs localhost/rootfs:1 >"$W/p1" 2>"$W/e1" &
"$MOAT" image rootfs localhost/rootfs:1 >"$W/p2" 2>"$W/e2" &
wait
p1=$(cat "$W/p1") p2=$(cat "$W/p2")
if [ -n "$p1" ] && [ "$p1" = "$p2" ] && [ -f "$p1" ]; then
    pass "two concurrent moat image rootfs: one root, $p1"
else
    bad "concurrent rootfs: '$p1' '$p2' $(cat "$W/e1" "$W/e2")"
fi
case $p1 in "$MOAT_HOME"/images/rootfs/*.ext4) pass "cached under \$MOAT_HOME/images/rootfs/" ;;
*) bad "cached at $p1" ;; esac
[ "$(stat -c %a "$p1" 2>/dev/null)" = 444 ] && pass "the cached root is read-only (0444)" || bad "mode $(stat -c %a "$p1")"
n=$(ls "$MOAT_HOME/images/rootfs" | wc -l)
[ "$n" = 1 ] && pass "one file in rootfs/ (no temporary left)" || bad "rootfs/ holds: $(ls "$MOAT_HOME/images/rootfs")"
out=$p1
[ "$(dbg 'cat /etc/two')" = two ] && [ "$(dbg 'cat /bin/three')" = three ] && pass "both layers in the root" \
    || bad "layer content: $(dbg 'ls -l /etc')"
dbg "ls /etc" | grep -q ' one ' && bad "umoci's whiteout: /etc/one still there" || pass "umoci's whiteout applied"
e2fsck -fn "$p1" >/dev/null 2>&1 && pass "cached root: e2fsck -fn clean" || bad "cached root: e2fsck -fn"
t0=$(stat -c %Y "$p1")
[ "$("$MOAT" image rootfs localhost/rootfs:1)" = "$p1" ] && [ "$(stat -c %Y "$p1")" = "$t0" ] &&
    pass "a second call uses the cached root" || bad "second call"
ps=$("$MOAT" image rootfs localhost/rootfs:1 --disk-size 100M 2>"$W/err")
[ "$(stat -c %s "$ps" 2>/dev/null)" = $((100 << 20)) ] && [ "$ps" != "$p1" ] &&
    pass "--disk-size 100M: a root of its own, $(basename "$ps")" || bad "--disk-size: '$ps' $(cat "$W/err")"
po=$("$MOAT" image rootfs localhost/rootfs:1 --out "$W/own.ext4" 2>"$W/err")
[ "$po" = "$W/own.ext4" ] && e2fsck -fn "$W/own.ext4" >/dev/null 2>&1 && pass "--out FILE: a new file there" \
    || bad "--out: '$po' $(cat "$W/err")"
"$MOAT" image rootfs localhost/nothing:1 >/dev/null 2>"$W/err"
rc=$?
[ $rc = 1 ] && grep -q "moat: image rootfs:" "$W/err" && pass "an unknown image: exit 1, $(head -1 "$W/err")" \
    || bad "unknown image: exit $rc $(cat "$W/err")"
"$MOAT" image rootfs localhost/rootfs:1 --disk-size 12Q >/dev/null 2>&1
[ $? = 2 ] && pass "--disk-size 12Q: a usage error" || bad "--disk-size 12Q accepted"
"$MOAT" image prune --grace 0 >/dev/null 2>&1
[ -f "$p1" ] && [ -f "$ps" ] && pass "prune keeps the roots of a referenced image" || bad "prune removed a used root"
# A (stopped) sandbox booting from the default-size root, as moat create
# --image records it: its first drive is the store's root file. Once the
# image's reference is gone, prune keeps that root (the sandbox would not
# boot again without it) and removes the unused one.
cfgblob=$("$MOAT" image inspect localhost/rootfs:1 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["config"]["digest"].split(":")[1])' 2>/dev/null)
cfgblob=$MOAT_HOME/images/blobs/sha256/$cfgblob
mkdir -p "$MOAT_HOME/sbimg"
printf 'drive.0=%s,overlay=%s\narg=--image-config\narg=%s\n' "$p1" "$MOAT_HOME/sbimg/disk0.overlay" "$cfgblob" \
    > "$MOAT_HOME/sbimg/config"
"$MOAT" image rm localhost/rootfs:1 >/dev/null 2>&1 && "$MOAT" image prune --grace 0 >"$W/out" 2>&1
[ -f "$p1" ] && [ -f "$cfgblob" ] && [ ! -e "$ps" ] &&
    pass "rm + prune keep the root and config blob a sandbox boots from, remove the other root" ||
    bad "rm + prune with a sandbox on $p1 and $cfgblob: $(ls "$MOAT_HOME/images/rootfs") $(cat "$W/out")"
rm -rf "$MOAT_HOME/sbimg"
"$MOAT" image prune --grace 0 >/dev/null 2>&1
[ ! -e "$p1" ] && [ ! -e "$ps" ] && pass "the sandbox gone, prune removes its root" || bad "roots left: $(ls "$MOAT_HOME/images/rootfs")"
exit $fail
