# A real distribution in image mode (docs/images.md, "Running an image"):
# the Debian root of `make rootfs-debian` as moat run --rootfs, running
# python3 as Docker would run `python3 -c 'print(6*7)'` in it, as the
# image's user nobody (65534, HOME /nonexistent from its /etc/passwd) in a
# working directory made for it. Only when
# checks.d/image-debian.host found build/guest/debian.ext4.
if [ -f build/guest/bzImage ] && [ -f image-debian.ext4 ]; then
t image-debian-python sh -c '
    ./build/moat run --timeout 300 --mem 512 --rootfs /payload/image-debian.ext4 -u nobody -w /tmp/py -- \
        python3 -c "import os; print(6*7, os.getuid(), os.getcwd(), os.environ[\"HOME\"])" >/tmp/idp 2>&1; r=$?
    tr -d "\r" </tmp/idp >/tmp/idp2; cat /tmp/idp2; echo "rc $r"
    [ $r = 0 ] && grep -qx "42 65534 /tmp/py /nonexistent" /tmp/idp2'
else
    echo "SKIPPED: image-debian: no build/guest/debian.ext4 (make rootfs-debian)"
fi
