# Linux's virtio_net on moat's own virtio-net device (moat run --net tap=,
# in-process virtio-mmio) with real KVM: the default Linux guest with
# moat.net=static on a TAP in a network namespace this check makes (the
# host's iproute2 ip, copied in by test-moat.sh; L1's /init loaded tun.ko)
# pings the TAP's address and fetches a 300 kB file from a busybox httpd
# there with moat-fetch; the md5 must match. On PVM hosts Linux guests do
# not reach user space under moat, so this is where that path runs. The
# namespace is removed however the check ends.
if [ -f build/guest/bzImage ]; then
    if [ -x ./ip ] && [ -c /dev/net/tun ] && ./ip netns list >/dev/null 2>&1; then
    t linux-net-tap sh -c '
        ns=moat-nested-net-$$; d=/tmp/lnet; rm -rf $d; mkdir -p $d/www
        head -c 300000 /dev/urandom > $d/www/blob
        ./ip netns add $ns || exit 1
        h=
        trap "[ -n \"\$h\" ] && kill \$h; ./ip netns delete $ns" EXIT
        ./ip -n $ns tuntap add dev mtap0 mode tap &&
        ./ip -n $ns addr add 10.87.0.1/24 dev mtap0 &&
        ./ip -n $ns link set dev mtap0 up &&
        ./ip -n $ns link set dev lo up || exit 1
        ./ip netns exec $ns busybox httpd -f -p 10.87.0.1:8080 -h $d/www & h=$!
        ./ip netns exec $ns ./build/moat run --timeout 300 --net tap=mtap0,mac=52:54:00:0a:57:02 \
            --cmdline "console=ttyS0 reboot=k panic=-1 8250.nr_uarts=1 quiet moat.net=static:10.87.0.2/24" \
            -- /bin/sh -c "ping -c 3 -W 10 10.87.0.1 && echo NET-PING-OK; moat-fetch -q -T 30 -O /tmp/b http://10.87.0.1:8080/blob && echo NET-MD5 \$(md5sum < /tmp/b)" >$d/out 2>&1; r=$?
        cat $d/out
        want=$(md5sum < $d/www/blob | cut -d" " -f1)
        echo "moat: $r; host md5: $want"
        [ $r = 0 ] && grep -q NET-PING-OK $d/out && grep -qF "NET-MD5 $want" $d/out'
    else
        echo "SKIPPED: linux-net-tap: needs iproute2 ip in the payload (with ip netns) and /dev/net/tun"
    fi
fi
