# Image mode (docs/images.md, "Running an image"; docs/guest.md, "Image
# mode"): moat run --rootfs boots the ext4 checks.d/image-boot.host made
# (busybox, passwd with app:1000, group with extra:2000 listing app); /init
# switches to it and runs the command with the run config: user (id -u,
# id -g, id -G), environment (-e, PATH default, HOME from passwd,
# HOSTNAME), working directory (made if missing), --entrypoint and
# -- CMD, and the same from an OCI image config (--image-config: Docker's
# override rules), the exit status passed through, /proc, /dev, /dev/pts, /dev/shm
# mounted, /etc/hosts made, /etc/resolv.conf bound from what moat.net=
# static gave (a TAP in a namespace of the check's); an unknown user fails with 125 and a
# message; the image file is unchanged (sha256) after the guest wrote its
# root; a sandbox (moat create --rootfs) runs only the agent, from its
# tmpfs, with the image's environment, and moat exec reaches it; an OCI
# image (umoci) imported into a store on the host runs with --image, in
# moat run, as a sandbox (its cached root filesystem as drive 0) and as a
# template forked into a sandbox (how moat serve would start it).
if [ -f build/guest/bzImage ] && [ -f image-boot.ext4 ]; then
IB=/payload/image-boot.ext4
t image-boot-config sh -c '
    ./build/moat run --timeout 300 --rootfs '$IB' -u app -w /work/dir -e FOO="b a r" -e PATH=/bin -- \
        /bin/sh -c "echo uid=\$(id -u) gid=\$(id -g) groups=\$(id -G | tr \" \" ,) pwd=\$(pwd) foo=\$FOO \
home=\$HOME path=\$PATH hn=\$HOSTNAME/\$(hostname) motd=\$(cat /etc/motd); \
for m in /proc /sys /dev /dev/pts /dev/shm /run/moat; do grep -q \" \$m \" /proc/mounts && echo mounted:\$m; done; \
grep -q localhost /etc/hosts && echo hosts-ok; touch /etc/motd 2>/dev/null || echo etc-not-writable; exit 7" \
        >/tmp/ib1 2>&1; r=$?
    tr -d "\r" </tmp/ib1 >/tmp/ib1b; cat /tmp/ib1b; echo "rc $r"
    [ $r = 7 ] && grep -q "^uid=1000 gid=1000 groups=1000,2000 pwd=/work/dir foo=b a r home=/home/app path=/bin hn=moat/moat motd=from-image$" /tmp/ib1b &&
    for m in /proc /sys /dev /dev/pts /dev/shm /run/moat; do grep -qx "mounted:$m" /tmp/ib1b || exit 1; done &&
    grep -qx hosts-ok /tmp/ib1b && grep -qx etc-not-writable /tmp/ib1b'
t image-boot-default-path sh -c '
    ./build/moat run --timeout 300 --rootfs '$IB' -- sh -c "echo path=\$PATH home=\$HOME uid=\$(id -u) pwd=\$(pwd); \
echo written > /etc/motd && echo big > /big && sync && cat /etc/motd" >/tmp/ib2 2>&1; r=$?
    tr -d "\r" </tmp/ib2 >/tmp/ib2b; cat /tmp/ib2b
    [ $r = 0 ] && grep -q "^path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin home=/root uid=0 pwd=/$" /tmp/ib2b &&
    grep -qx written /tmp/ib2b'
t image-boot-entrypoint sh -c '
    ./build/moat run --timeout 300 --rootfs '$IB' --entrypoint /bin/echo -- one "two three" >/tmp/ib3 2>&1; r=$?
    ./build/moat run --timeout 300 --rootfs '$IB' -u 1000:2000 --entrypoint /bin/id >/tmp/ib3c 2>&1; r2=$?
    tr -d "\r" </tmp/ib3 >/tmp/ib3b; tr -d "\r" </tmp/ib3c >/tmp/ib3d; cat /tmp/ib3b /tmp/ib3d; echo "rc $r $r2"
    [ $r = 0 ] && grep -qx "one two three" /tmp/ib3b && [ $r2 = 0 ] &&
    grep -q "^uid=1000(app) gid=2000(extra) groups=2000(extra)$" /tmp/ib3d'
t image-boot-image-config sh -c '
    M="./build/moat run --timeout 300 --rootfs '$IB' --image-config image-boot.json"
    $M >/tmp/ic1 2>&1; r1=$?
    $M -- "echo override v=\$IMGVAR" >/tmp/ic2 2>&1; r2=$?
    $M --entrypoint /bin/echo -- hi there >/tmp/ic3 2>&1; r3=$?
    $M --entrypoint /bin/id -u root >/tmp/ic4 2>&1; r4=$?
    for f in 1 2 3 4; do tr -d "\r" </tmp/ic$f >/tmp/ic${f}b; cat /tmp/ic${f}b; done; echo "rc $r1 $r2 $r3 $r4"
    [ "$r1$r2$r3$r4" = 0000 ] &&
    grep -qx "cmd-ran uid=1000 pwd=/home/app v=from-config home=/home/app" /tmp/ic1b &&
    grep -qx "override v=from-config" /tmp/ic2b && grep -qx "hi there" /tmp/ic3b &&
    grep -q "^uid=0(root) gid=0(root)" /tmp/ic4b'
t image-boot-errors sh -c '
    ./build/moat run --timeout 300 --rootfs '$IB' -u nobody -- /bin/true >/tmp/ib4 2>&1; r1=$?
    ./build/moat run --timeout 300 --rootfs '$IB' -- /no/such >/tmp/ib5 2>&1; r2=$?
    tr -d "\r" </tmp/ib4 | tee /tmp/ib4b; tr -d "\r" </tmp/ib5 | tee /tmp/ib5b; echo "rc $r1 $r2"
    [ $r1 = 125 ] && grep -q "user nobody: no such user in the image.s /etc/passwd" /tmp/ib4b &&
    [ $r2 = 127 ] && grep -q "command not found" /tmp/ib5b'
t image-boot-sandbox sh -c '
    export MOAT_HOME=/tmp/ibs; rm -rf $MOAT_HOME
    M=./build/moat
    $M create ib1 --wait 600 --mem 128 --rootfs '$IB' -e FOO=sbx -w /srv; r1=$?
    cat $MOAT_HOME/ib1/config | tee /tmp/ib6c
    $M exec ib1 -- /bin/sh -c "id -u; cat /etc/motd; test -x /run/moat/moat-agent && echo agent-in-tmpfs; echo x > /new && cat /new; echo foo=\$FOO; test -d /srv && echo srv-made" >/tmp/ib6 2>&1; r2=$?
    cat /tmp/ib6; $M rm -f ib1; echo "rc $r1 $r2"
    [ $r1 = 0 ] && [ $r2 = 0 ] && grep -qx 0 /tmp/ib6 && grep -qx from-image /tmp/ib6 &&
    grep -qx agent-in-tmpfs /tmp/ib6 && grep -qx x /tmp/ib6 && grep -qx foo=sbx /tmp/ib6 && grep -qx srv-made /tmp/ib6 &&
    grep -q "^drive.0='$IB',overlay=$MOAT_HOME/ib1/disk0.overlay$" /tmp/ib6c &&
    grep -qx "arg=--image-root" /tmp/ib6c'
if [ -x ./ip ] && [ -c /dev/net/tun ] && ./ip netns list >/dev/null 2>&1; then
t image-boot-net sh -c '
    ns=moat-nested-ib-$$
    ./ip netns add $ns || exit 1
    trap "./ip netns delete $ns" EXIT
    ./ip -n $ns tuntap add dev ibtap0 mode tap && ./ip -n $ns addr add 10.87.1.1/24 dev ibtap0 &&
    ./ip -n $ns link set dev ibtap0 up || exit 1
    ./ip netns exec $ns ./build/moat run --timeout 300 --rootfs '$IB' --net tap=ibtap0 \
        --cmdline "console=ttyS0 reboot=k panic=-1 8250.nr_uarts=1 quiet moat.net=static:10.87.1.2/24,10.87.1.1,10.87.1.53" \
        -- /bin/sh -c "cat /etc/resolv.conf; grep -q \" /etc/resolv.conf \" /proc/mounts && echo resolv-bound" >/tmp/ibn 2>&1; r=$?
    tr -d "\r" </tmp/ibn >/tmp/ibnb; cat /tmp/ibnb; echo "rc $r"
    [ $r = 0 ] && grep -qx "nameserver 10.87.1.53" /tmp/ibnb && grep -qx resolv-bound /tmp/ibnb'
else
    echo "SKIPPED: image-boot-net: needs iproute2 ip in the payload (with ip netns) and /dev/net/tun"
fi
if [ -d ibhome ]; then
t image-boot-store sh -c '
    export MOAT_HOME=/payload/ibhome
    M=./build/moat
    $M run --timeout 300 --image ibtest:1 --disk-size 64M >/tmp/is1 2>&1; r1=$?
    $M create is1 --wait 600 --mem 128 --image ibtest:1 --disk-size 64M; r2=$?
    cat $MOAT_HOME/is1/config | tee /tmp/is2c
    $M exec is1 -- /bin/sh -c "echo v=\$IMGVAR; id -u" >/tmp/is2 2>&1; r3=$?
    $M rm -f is1
    tr -d "\r" </tmp/is1 >/tmp/is1b; cat /tmp/is1b /tmp/is2; echo "rc $r1 $r2 $r3"
    [ "$r1$r2$r3" = 000 ] && grep -qx "oci uid=1000 pwd=/home/app v=from-oci" /tmp/is1b &&
    grep -qx v=from-oci /tmp/is2 && grep -qx 0 /tmp/is2 &&
    grep -q "^drive.0=$MOAT_HOME/images/rootfs/[0-9a-f]*\.67108864\.ext4,overlay=$MOAT_HOME/is1/disk0.overlay$" /tmp/is2c &&
    grep -q "^arg=$MOAT_HOME/images/blobs/sha256/" /tmp/is2c'
t image-boot-template sh -c '
    export MOAT_HOME=/payload/ibhome
    M=./build/moat
    $M template create ibt --wait 600 --mem 128 --image ibtest:1 --disk-size 64M; r1=$?
    $M fork template.ibt --name ibf --wait 600; r2=$?
    $M exec ibf -- /bin/sh -c "echo v=\$IMGVAR; cat /etc/passwd | grep -c app; echo f > /forked; cat /forked" >/tmp/it 2>&1; r3=$?
    cat /tmp/it; $M rm -f ibf; $M template rm ibt; echo "rc $r1 $r2 $r3"
    [ "$r1$r2$r3" = 000 ] && grep -qx v=from-oci /tmp/it && grep -qx 1 /tmp/it && grep -qx f /tmp/it'
else
    echo "SKIPPED: image-boot-store: no imported image (umoci, moat image import on the host)"
fi
t image-boot-unchanged sh -c '
    sha256sum < '$IB' > /tmp/ib.sha; cat /tmp/ib.sha image-boot.sha256
    cmp /tmp/ib.sha image-boot.sha256 && ! ls /tmp/moat-rootfs-* 2>/dev/null'
else
    echo "SKIPPED: image-boot: no build/guest or no image-boot.ext4 (mke2fs -d and a static busybox on the host)"
fi
