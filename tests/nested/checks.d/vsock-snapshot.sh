# Snapshots of a Linux guest with a vsock device (docs/vsock.md): the CLI
# snapshots it (SIGUSR2), two restores of that one snapshot on their own
# sockets (restore --vsock) each run commands through the agent, get the
# host's wall clock back (the snapshot is >= 6 s old by then) and read
# different bytes from /dev/urandom (the fix-up reseeded each); then the
# library: moat_put_file/moat_get_file and a restore with vsock_uds while
# the original runs (tests/nested/vsock_snap_api.c).
if [ -f build/guest/bzImage ]; then
t vsock-snapshot-cli sh -c '
    d=/tmp/vsnap; rm -rf $d; mkdir -p $d/s
    ./build/moat run --timeout 900 --vsock $d/v.sock --snapshot-dir $d/s >$d/g.out 2>&1 &
    g=$!
    ./build/moat exec --vsock $d/v.sock --wait 600 -- /bin/sh -c "echo before-snap; head -c 16 /dev/urandom >/dev/null" >$d/e0.out 2>&1; r0=$?
    kill -USR2 $g; wait $g; rg=$?
    ls -la $d/s; sleep 6
    for i in 1 2; do
        ./build/moat restore --timeout 900 --vsock $d/r$i.sock $d/s >$d/r$i.out 2>&1 &
        p=$!; hb=$(date +%s)
        ./build/moat exec --vsock $d/r$i.sock --wait 120 -- /bin/sh -c "date +%s; head -c 32 /dev/urandom | md5sum" >$d/x$i.out 2>&1; rx=$?
        ha=$(date +%s)
        echo "restore $i: exec rc $rx host $hb..$ha"; cat $d/x$i.out
        eval "rx$i=$rx; hb$i=$hb; ha$i=$ha"
        ./build/moat exec --vsock $d/r$i.sock -- /sbin/reboot -f >$d/b$i.out 2>&1; rb=$?
        # Teardown, not what is checked: a restore still up 60 s after the
        # reboot exec (seen once in a full suite run, cause unknown: the
        # exec output below says whether the reboot ran) is stopped.
        k=0; while kill -0 $p 2>/dev/null && [ $k -lt 600 ]; do sleep 0.1; k=$((k + 1)); done
        if kill -0 $p 2>/dev/null; then
            echo "restore $i: still running 60 s after reboot -f (exec rc $rb: $(head -c 300 $d/b$i.out)): SIGTERM"
            kill -TERM $p
        fi
        wait $p
        echo "restore $i output:"; tail -n 5 $d/r$i.out
    done
    echo "boot exec rc $r0 (snapshot run rc $rg)"; cat $d/e0.out
    t1=$(sed -n 1p $d/x1.out | tr -d "\r"); t2=$(sed -n 1p $d/x2.out | tr -d "\r")
    m1=$(sed -n 2p $d/x1.out); m2=$(sed -n 2p $d/x2.out)
    echo "guest clock: $t1 in [$hb1-2, $ha1+2]? $t2 in [$hb2-2, $ha2+2]? urandom: $m1 / $m2"
    grep -i "fix-up" $d/r1.out $d/r2.out
    rm -f $d/s/memory   # L1 /tmp is small: the outputs stay for a look
    [ $r0 = 0 ] && grep -q before-snap $d/e0.out && [ $rg = 0 ] && [ -f $d/s/state ] &&
    [ $rx1 = 0 ] && [ $rx2 = 0 ] && [ -n "$m1" ] && [ -n "$m2" ] && [ "$m1" != "$m2" ] &&
    [ $t1 -ge $((hb1 - 2)) ] && [ $t1 -le $((ha1 + 2)) ] && [ $t2 -ge $((hb2 - 2)) ] && [ $t2 -le $((ha2 + 2)) ] &&
    ! grep -qi "fix-up" $d/r1.out $d/r2.out'
if [ -x build/tests/vsock_snap_api ]; then
t vsock-snapshot-api sh -c '
    d=/tmp/vsnapi; rm -rf $d; mkdir -p $d
    ./build/tests/vsock_snap_api build/guest/bzImage build/guest/initramfs.cpio $d; r=$?
    rm -f $d/memory $d/blob*; exit $r'
else
t vsock-snapshot-api sh -c 'echo "build/tests/vsock_snap_api was not built (vsock-snapshot.host: see the output before L1 booted)"; exit 1'
fi
fi
