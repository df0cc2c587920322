# Copy-on-write drives (docs/disk-overlay.md) with real KVM: the default
# Linux guest mounts an ext4 base through --drive BASE,overlay=O (created on
# first use), writes a file and reads a base file; the base is unchanged
# and moat disk export of the overlay holds the new file. Then a snapshot
# (SIGUSR2) between two writes and a restore: the snapshot records the
# overlay and the restore reopens base + overlay, so both files end up in
# the overlay and the base is still unchanged.
if [ -f build/guest/bzImage ] && [ -x ./mke2fs ] && [ -x ./debugfs ]; then
t overlay-run sh -c '
    d=/tmp/ovl; rm -rf $d; mkdir -p $d/root; echo from-base > $d/root/f
    ./mke2fs -q -F -t ext4 -d $d/root $d/base 16M || exit 1
    b0=$(md5sum < $d/base)
    ./build/moat run --timeout 600 --drive $d/base,overlay=$d/o -- /bin/sh -c "mkdir -p /m; mount /dev/vda /m; echo F \$(cat /m/f); echo written > /m/n; sync; umount /m; echo ov-done" >$d/a.out 2>&1; ra=$?
    ./build/moat disk info $d/o; ri=$?
    ./build/moat disk export $d/o $d/flat; re=$?
    ./debugfs -R "cat /n" $d/flat 2>/dev/null >$d/fn
    b1=$(md5sum < $d/base)
    echo "rc $ra $ri $re; n: $(cat $d/fn); base $b0 -> $b1"; tail -n 5 $d/a.out
    [ $ra = 0 ] && [ $ri = 0 ] && [ $re = 0 ] && grep -q "F from-base" $d/a.out && grep -q ov-done $d/a.out &&
    grep -qx written $d/fn && [ "$b0" = "$b1" ]'
t overlay-snapshot sh -c '
    d=/tmp/ovs; rm -rf $d; mkdir -p $d/s
    ./mke2fs -q -F -t ext4 $d/base 16M || exit 1
    b0=$(md5sum < $d/base)
    ./build/moat disk create --base $d/base $d/o || exit 1
    ./build/moat run --timeout 600 --drive $d/base,overlay=$d/o --snapshot-dir $d/s -- /bin/sh -c "mkdir -p /m; mount /dev/vda /m; echo one > /m/a; sync; echo snap-ready; sleep 3; echo two > /m/b; sync; umount /m" >$d/a.out 2>&1 &
    p=$!; n=0
    while ! grep -q snap-ready $d/a.out && [ $n -lt 1200 ]; do sleep 0.5; n=$((n + 1)); done
    kill -USR2 $p; wait $p; ra=$?
    ./build/moat restore --timeout 600 $d/s >$d/b.out 2>&1; rb=$?
    ./build/moat disk export $d/o $d/flat; re=$?
    ./debugfs -R "cat /a" $d/flat 2>/dev/null >$d/fa; ./debugfs -R "cat /b" $d/flat 2>/dev/null >$d/fb
    b1=$(md5sum < $d/base)
    echo "rc $ra $rb $re; a: $(cat $d/fa) b: $(cat $d/fb); base $b0 -> $b1"; tail -n 5 $d/a.out $d/b.out
    [ $ra = 0 ] && [ $rb = 0 ] && [ $re = 0 ] && grep -qx one $d/fa && grep -qx two $d/fb && [ "$b0" = "$b1" ]'
fi
