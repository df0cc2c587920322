# Diff snapshots through the CLI (docs/snapshot-format.md#diff-snapshots):
# `moat run --diff-snapshots` of the dirty test guest takes a full snapshot
# and three diffs (the first after the guest rewrote 16 MiB), `moat restore
# D` restores the last through the chain and the guest checks every page it
# wrote ("ok", exit 0); the full snapshot alone restores too. With moat and
# moat-san (bench/snapshot-diff.sh prints the times).
t snapshot-diff-cli env DIRTY_MIB=16 MOAT_BIN=build/moat sh bench/snapshot-diff.sh
t snapshot-diff-cli-san env DIRTY_MIB=16 MOAT_BIN=build/moat-san sh bench/snapshot-diff.sh
# A Linux guest with an ext4 drive: a full snapshot (SIGUSR1) after it
# mounted the drive, then it reads a 2 MB file (virtio-blk fills its page
# cache: device writes into guest memory, which KVM's dirty log does not
# see), then a diff (SIGUSR2, stop). Restored from the diff, the guest
# reads the file again from its page cache: same md5 as the host's.
if [ -f build/guest/bzImage ] && [ -x ./mke2fs ] && [ -x ./debugfs ]; then
t linux-snapshot-diff sh -c '
    d=/tmp/ldiff; rm -rf $d; mkdir -p $d
    ./mke2fs -q -F -t ext4 $d/img 16M || exit 1
    head -c 2000000 /dev/urandom >$d/blob
    ./debugfs -w -R "write $d/blob data" $d/img >/dev/null 2>&1
    want=$(md5sum <$d/blob | cut -d" " -f1)
    ./build/moat run --timeout 600 --drive $d/img --snapshot-dir $d/s --diff-snapshots -- /bin/sh -c "mkdir -p /m; mount /dev/vda /m; echo base-ready; sleep 4; md5sum /m/data; echo read-ready; sleep 4; echo again; md5sum /m/data; umount /m" >$d/a.out 2>$d/a.err &
    p=$!; n=0
    while ! grep -q base-ready $d/a.out && [ $n -lt 1200 ]; do sleep 0.5; n=$((n + 1)); done
    kill -USR1 $p; n=0
    while ! grep -q "snapshot written" $d/a.err && [ $n -lt 600 ]; do sleep 0.5; n=$((n + 1)); done
    n=0
    while ! grep -q read-ready $d/a.out && [ $n -lt 1200 ]; do sleep 0.5; n=$((n + 1)); done
    kill -USR2 $p; wait $p; ra=$?
    ./build/moat restore --timeout 600 $d/s >$d/b.out 2>&1; rb=$?
    echo "first run ($ra):"; cat $d/a.out $d/a.err; echo "restored ($rb):"; cat $d/b.out; ls -ls $d/s/0 $d/s/1
    s1=$(grep /m/data $d/a.out | cut -d" " -f1); s2=$(grep /m/data $d/b.out | cut -d" " -f1)
    echo "host $want, before $s1, after restore $s2"
    [ $ra = 0 ] && [ $rb = 0 ] && [ -f $d/s/1/state ] && grep -q "diff snapshot in" $d/a.err &&
        [ "$s1" = "$want" ] && [ "$s2" = "$want" ] && grep -q again $d/b.out && ! grep -q again $d/a.out'
fi
