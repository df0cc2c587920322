# A real distribution as a container image (docs/images.md, "Running an
# image"): the Debian root of `make rootfs-debian`, imported from its OCI
# layout as debian:moat (checks.d/image-debian.host; its root filesystem
# made there at 448 MiB), run with moat run --image as Docker would run
# `python3 -c 'print(6*7)'` in it: as root with the image's config (Cmd
# /bin/bash, Env PATH), and as the image's user nobody (65534, HOME
# /nonexistent from its /etc/passwd) in a working directory made for it.
# The host hook's failure (debootstrap, the mirror, the import) is this
# check's failure, with its reason.
if [ -f build/guest/bzImage ]; then
if [ -f image-debian.err ]; then
t image-debian-build sh -c 'cat image-debian.err; false'
fi
t image-debian-python sh -c '
    export MOAT_HOME=/payload/idhome
    M=./build/moat
    $M run --timeout 300 --mem 512 --image debian:moat --disk-size 448M -- python3 -c "print(6*7)" >/tmp/idp 2>&1; r1=$?
    $M run --timeout 300 --mem 512 --image debian:moat --disk-size 448M -u nobody -w /tmp/py -- \
        python3 -c "import os; print(6*7, os.getuid(), os.getcwd(), os.environ[\"HOME\"], os.environ[\"PATH\"])" >/tmp/idn 2>&1; r2=$?
    tr -d "\r" </tmp/idp >/tmp/idp2; tr -d "\r" </tmp/idn >/tmp/idn2; cat /tmp/idp2 /tmp/idn2; echo "rc $r1 $r2"
    [ "$r1$r2" = 00 ] && grep -qx 42 /tmp/idp2 &&
    grep -qx "42 65534 /tmp/py /nonexistent /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" /tmp/idn2'
else
    echo "SKIPPED: image-debian: no build/guest/bzImage (make guest)"
fi
