# A " -- " in the caller's kernel command line starts init's arguments:
# moat's own parameters (the drives' virtio_mmio.device=, Firecracker's
# root=) must go before it, or the kernel never sees the drive and init
# gets them as arguments. The default Linux guest with a drive and a
# command line ending in "-- /bin/sh -c ... x one two": the guest sees
# /dev/vda and the command gets exactly its two arguments. Through
# `moat run --cmdline` and through `moat vmm --no-api --config-file`
# (boot_args, is_root_device; checks.d/cmdline-init-args.host writes the file).
if [ -f build/guest/bzImage ]; then
t cmdline-init-args-run sh -c '
    d=/tmp/cir; rm -rf $d; mkdir -p $d; dd if=/dev/zero of=$d/img bs=1M count=1 2>/dev/null
    ./build/moat run --timeout 300 --drive $d/img --cmdline "console=ttyS0 reboot=k panic=-1 8250.nr_uarts=1 -- /bin/sh -c \"test -b /dev/vda && echo vda-ok; echo n=\$# args=\$1,\$2\" x one two" >$d/out 2>&1; r=$?
    cat $d/out; tr -d "\r" <$d/out >$d/o2
    [ $r = 0 ] && grep -q "^vda-ok" $d/o2 && grep -q "^n=2 args=one,two" $d/o2'
t cmdline-init-args-fc sh -c '
    d=/tmp/cia; rm -rf $d; mkdir -p $d; dd if=/dev/zero of=$d/img bs=1M count=1 2>/dev/null
    timeout 300 ./build/moat vmm --no-api --config-file cmdline-fc.json >$d/out 2>&1; r=$?
    cat $d/out; tr -d "\r" <$d/out >$d/o2
    [ $r = 0 ] && grep -q "^vda-ok" $d/o2 && grep -q "^n=2 args=one,two" $d/o2'
fi
