#!/bin/sh
# Prepare the nested-KVM harness (tests/nested/): fetch Debian's kernel
# package, extract vmlinuz + kvm/kvm-amd/irqbypass modules (and tun, for
# virtio-net's TAP tests) into build/nested/, build the static kvmprobe and the
# base L1 initramfs (busybox + /init + modules + kvmprobe). Idempotent: does nothing when everything is current.
# Needs: apt-get (Debian mirrors), dpkg, busybox-static, cpio, gcc, xz-utils,
# zstd (only if the modules are .ko.zst). Does not touch the host /boot.
#
#   scripts/nested-setup.sh            # default: linux-image-cloud-amd64
#   NESTED_FLAVOUR=amd64 scripts/nested-setup.sh   # the generic kernel
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${NESTED_DIR:-$ROOT/build/nested}
FLAVOUR=${NESTED_FLAVOUR:-cloud-amd64}
BUSYBOX=${BUSYBOX:-/usr/bin/busybox}
CC=${CC:-gcc}
mkdir -p "$OUT"

# Modules L1 must have (its /init loads them in this order; a failure ends
# the run), and those it loads when present: tun gives L1 /dev/net/tun for
# test_net (without it that test prints SKIPPED in L1). A kernel that builds
# an optional one in (=y) ships no file for it and needs none.
MODS="irqbypass kvm kvm-amd"
OPT_MODS="tun"

# 1. Kernel + modules (skipped if present; an older build/nested without the
# optional modules' record is fetched again).
if [ ! -f "$OUT/vmlinuz" ] || [ ! -f "$OUT/modules/kvm-amd.ko" ] ||
   [ "$(cat "$OUT/optional-modules" 2>/dev/null)" != "$OPT_MODS" ]; then
    meta=linux-image-$FLAVOUR
    pkg=$(apt-cache depends "$meta" 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -1)
    if [ -z "$pkg" ]; then
        echo "nested-setup: apt-get update (no candidate for $meta)" >&2
        apt-get update -q >/dev/null
        pkg=$(apt-cache depends "$meta" | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -1)
    fi
    [ -n "$pkg" ] || { echo "nested-setup: cannot resolve $meta" >&2; exit 1; }
    echo "nested-setup: fetching $pkg" >&2
    rm -rf "$OUT/dl" "$OUT/x" "$OUT/modules"
    mkdir -p "$OUT/dl" "$OUT/modules"
    # apt-get download drops privileges to _apt; let it write here.
    chmod 777 "$OUT/dl" 2>/dev/null || true
    (cd "$OUT/dl" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
        (cd "$OUT/dl" && apt-get download "$pkg")
    dpkg -x "$OUT"/dl/*.deb "$OUT/x"
    kver=$(ls "$OUT/x/lib/modules" | head -1)
    for m in $MODS $OPT_MODS; do
        f=$(find "$OUT/x/lib/modules/$kver" -name "$m.ko*" | head -1)
        if [ -z "$f" ]; then
            case " $OPT_MODS " in
                *" $m "*) echo "nested-setup: note: no $m.ko in $pkg (built in, or L1 goes without)" >&2
                          continue ;;
            esac
            echo "nested-setup: $m.ko not in $pkg" >&2; exit 1
        fi
        case "$f" in
            *.ko.xz) xz -dc "$f" > "$OUT/modules/$m.ko" ;;
            *.ko.zst) zstd -qdc "$f" > "$OUT/modules/$m.ko" ;;
            *.ko.gz) gzip -dc "$f" > "$OUT/modules/$m.ko" ;;
            *) cp "$f" "$OUT/modules/$m.ko" ;;
        esac
    done
    # /init insmods exactly these files: each one's dependencies must be
    # among them (modinfo is kmod's; no check without it).
    if command -v modinfo >/dev/null 2>&1; then
        for f in "$OUT"/modules/*.ko; do
            for d in $(modinfo -F depends "$f" | tr , ' '); do
                [ -f "$OUT/modules/$d.ko" ] || [ -f "$OUT/modules/$(echo "$d" | tr _ -).ko" ] || {
                    echo "nested-setup: $(basename "$f") needs $d.ko, which is not extracted" >&2; exit 1; }
            done
        done
    fi
    cp "$OUT"/x/boot/vmlinuz-* "$OUT/vmlinuz.tmp"
    echo "$pkg $kver" > "$OUT/kernel-version"
    echo "$OPT_MODS" > "$OUT/optional-modules"
    rm -rf "$OUT/x" "$OUT/dl"
    mv "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
fi

# 2. kvmprobe (static, so it needs no libraries in L1).
if [ ! -x "$OUT/kvmprobe" ] || [ "$ROOT/tests/nested/kvmprobe.c" -nt "$OUT/kvmprobe" ]; then
    $CC -std=gnu11 -Wall -Wextra -Werror -O2 -static -pthread \
        -o "$OUT/kvmprobe" "$ROOT/tests/nested/kvmprobe.c"
fi

# 3. Base initramfs (rebuilt when an input is newer).
base=$OUT/base.cpio
need=0
[ -f "$base" ] || need=1
for f in "$ROOT/tests/nested/init" "$OUT/kvmprobe" "$OUT/modules/kvm-amd.ko" "$BUSYBOX"; do
    [ "$need" = 1 ] || [ ! "$f" -nt "$base" ] || need=1
done
if [ "$need" = 1 ]; then
    [ -x "$BUSYBOX" ] || { echo "nested-setup: $BUSYBOX missing (busybox-static)" >&2; exit 1; }
    ldd "$BUSYBOX" >/dev/null 2>&1 && {
        echo "nested-setup: $BUSYBOX must be static (busybox-static)" >&2; exit 1; }
    st=$OUT/base-root
    rm -rf "$st"
    mkdir -p "$st/bin" "$st/lib/nested-modules" "$st/dev" "$st/proc" "$st/sys" \
             "$st/tmp" "$st/root" "$st/payload" "$st/nested" "$st/etc"
    cp "$BUSYBOX" "$st/bin/busybox"
    ln -s busybox "$st/bin/sh"
    cp "$ROOT/tests/nested/init" "$st/init"
    chmod 755 "$st/init"
    cp "$OUT/kvmprobe" "$st/bin/kvmprobe"
    cp "$OUT"/modules/*.ko "$st/lib/nested-modules/"
    echo "root:x:0:0:root:/root:/bin/sh" > "$st/etc/passwd"
    echo "root:x:0:" > "$st/etc/group"
    "$ROOT/tests/nested/mkcpio.sh" "$st" "$base.tmp"
    mv "$base.tmp" "$base"
    rm -rf "$st"
fi
echo "nested-setup: ready in $OUT ($(cat "$OUT/kernel-version"))" >&2
