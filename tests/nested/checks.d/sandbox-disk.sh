# Sandboxes with copy-on-write disks (docs/sandboxes.md, docs/disk-overlay.md):
# create --drive BASE gives the sandbox its own overlay; a tag pins the disk;
# moat diff --against names the files changed since; reset --to brings the
# old disk back (with memory); fork gives each child its own overlay clone;
# the base is never written. The checks run in order and share $MOAT_HOME.
if [ -f build/guest/bzImage ] && [ -x ./mke2fs ] && [ -x ./debugfs ]; then
export MOAT_HOME=/tmp/sbd
rm -rf $MOAT_HOME /tmp/sbdd; mkdir -p /tmp/sbdd/root; echo from-base > /tmp/sbdd/root/f
./mke2fs -q -F -t ext4 -d /tmp/sbdd/root /tmp/sbdd/base 32M
md5sum < /tmp/sbdd/base > /tmp/sbdd/base.md5
# sbd_cat O F: file F as the guest's disk in overlay O holds it (debugfs on an
# export). The guest's ext4 is still mounted (stop snapshots it as it runs),
# so the image is a live filesystem's: what `sync` committed may sit in the
# journal, not yet checkpointed, and a block bitmap may not match its
# checksum in the group descriptor yet. Plain debugfs then refuses the image
# ("Inode bitmap checksum does not match bitmap": the intermittent
# sandbox-disk-on-host failure, about 1 run in 7, with an empty file read);
# so checksums are not verified (-n) and the journal is replayed first
# (journal_run), as a mount would.
printf '%s\n' 'rm -f /tmp/sbdd/x; ./build/moat disk export "$1" /tmp/sbdd/x >/dev/null && ./debugfs -n -w -R journal_run /tmp/sbdd/x >/dev/null 2>&1; ./debugfs -n -R "cat $2" /tmp/sbdd/x 2>/dev/null; rm -f /tmp/sbdd/x' > /tmp/sbdd/cat.sh
t sandbox-disk-create sh -c '
    M=./build/moat
    $M create sd1 --wait 600 --mem 128 --drive /tmp/sbdd/base; r1=$?
    cat $MOAT_HOME/sd1/config
    $M exec sd1 -- /bin/sh -c "mkdir -p /m && mount /dev/vda /m && cat /m/f && echo one > /m/work.txt && echo keep > /m/keep.txt && sync" >/tmp/sbdd/o1 2>&1; r2=$?
    cat /tmp/sbdd/o1
    echo "rc $r1 $r2"
    [ $r1 = 0 ] && [ $r2 = 0 ] && grep -q from-base /tmp/sbdd/o1 &&
    grep -q "^drive.0=/tmp/sbdd/base,overlay=$MOAT_HOME/sd1/disk0.overlay$" $MOAT_HOME/sd1/config &&
    [ -f $MOAT_HOME/sd1/disk0.overlay ]'
t sandbox-disk-tag-diff sh -c '
    M=./build/moat
    $M snapshot sd1 --tag t1; r1=$?
    ls -l $MOAT_HOME/sd1/tags/t1
    $M exec sd1 -- /bin/sh -c "echo two > /m/work.txt && rm /m/keep.txt && echo new > /m/added.txt && sync"; r2=$?
    PATH="$PWD:$PATH" $M diff sd1 --against t1 --files >/tmp/sbdd/diff 2>&1; r3=$?
    cat /tmp/sbdd/diff; echo "rc $r1 $r2 $r3"
    [ $r1 = 0 ] && [ -f $MOAT_HOME/sd1/tags/t1/disk0.overlay ] && [ $r2 = 0 ] && [ $r3 = 0 ] &&
    grep -q "block(s) of 4 KiB differ" /tmp/sbdd/diff && ! grep -q "^0 block(s)" /tmp/sbdd/diff &&
    grep -q "file: /work.txt" /tmp/sbdd/diff && grep -q "file: /added.txt" /tmp/sbdd/diff'
t sandbox-disk-reset sh -c '
    M=./build/moat
    $M reset --wait 600 sd1 --to t1; r1=$?
    o=$($M exec sd1 -- /bin/sh -c "sync; echo 3 > /proc/sys/vm/drop_caches; cat /m/work.txt /m/keep.txt; ls /m"); r2=$?
    echo "rc $r1 $r2 out $o"
    # The guest may have written metadata since (superblock, journal), but
    # none of the files changed before the reset.
    PATH="$PWD:$PATH" $M diff sd1 --against t1 --files 2>&1 | tee /tmp/sbdd/diff2
    [ $r1 = 0 ] && [ $r2 = 0 ] && echo "$o" | grep -qx one && echo "$o" | grep -qx keep &&
    ! echo "$o" | grep -q added.txt && grep -q "block(s) of 4 KiB differ" /tmp/sbdd/diff2 &&
    ! grep -q "file: /work.txt" /tmp/sbdd/diff2 && ! grep -q "file: /added.txt" /tmp/sbdd/diff2'
t sandbox-disk-fork sh -c '
    M=./build/moat
    $M fork sd1 --count 2 --prefix sdk --wait 600; r1=$?; $M ls
    grep drive. $MOAT_HOME/sdk-1/config $MOAT_HOME/sdk-2/config
    $M exec sdk-1 -- /bin/sh -c "echo c1 > /m/child.txt && sync"; r2=$?
    $M exec sdk-2 -- /bin/sh -c "echo c2 > /m/child.txt && sync"; r3=$?
    $M exec sd1 -- /bin/sh -c "echo p > /m/parent.txt && sync"; r4=$?
    a=$($M exec sdk-1 -- /bin/sh -c "echo 3 > /proc/sys/vm/drop_caches; cat /m/child.txt; ls /m")
    b=$($M exec sdk-2 -- /bin/sh -c "echo 3 > /proc/sys/vm/drop_caches; cat /m/child.txt; ls /m")
    c=$($M exec sd1 -- /bin/sh -c "ls /m")
    echo "rc $r1 $r2 $r3 $r4 out [$a] [$b] [$c]"
    [ $r1 = 0 ] && [ $r2 = 0 ] && [ $r3 = 0 ] && [ $r4 = 0 ] &&
    [ -f $MOAT_HOME/sdk-1/disk0.overlay ] && [ -f $MOAT_HOME/sdk-2/disk0.overlay ] &&
    echo "$a" | grep -qx c1 && echo "$b" | grep -qx c2 && ! echo "$a" | grep -q parent.txt &&
    ! echo "$c" | grep -q child.txt && echo "$c" | grep -q parent.txt'
t sandbox-disk-on-host sh -c '
    M=./build/moat
    $M stop sd1 && $M stop sdk-1 && $M stop sdk-2; r1=$?
    p=$(sh /tmp/sbdd/cat.sh $MOAT_HOME/sd1/disk0.overlay /parent.txt); pc=$(sh /tmp/sbdd/cat.sh $MOAT_HOME/sd1/disk0.overlay /child.txt)
    w=$(sh /tmp/sbdd/cat.sh $MOAT_HOME/sd1/disk0.overlay /work.txt)
    c1=$(sh /tmp/sbdd/cat.sh $MOAT_HOME/sdk-1/disk0.overlay /child.txt); c2=$(sh /tmp/sbdd/cat.sh $MOAT_HOME/sdk-2/disk0.overlay /child.txt)
    c1p=$(sh /tmp/sbdd/cat.sh $MOAT_HOME/sdk-1/disk0.overlay /parent.txt)
    t1=$(sh /tmp/sbdd/cat.sh $MOAT_HOME/sd1/tags/t1/disk0.overlay /work.txt)
    echo "rc $r1 parent [$p] [$pc] [$w] children [$c1] [$c2] [$c1p] tag [$t1]"
    md5sum < /tmp/sbdd/base | cmp -s - /tmp/sbdd/base.md5; r2=$?
    echo "base unchanged: $r2"
    ok=0; [ $r1 = 0 ] && [ "$p" = p ] && [ -z "$pc" ] && [ "$w" = one ] && [ "$c1" = c1 ] && [ "$c2" = c2 ] &&
    [ -z "$c1p" ] && [ "$t1" = one ] && [ $r2 = 0 ] && ok=1
    if [ $ok = 0 ]; then
        # Keep what would explain a failure (it was once intermittent:
        # a live image debugfs refused, see sbd_cat).
        echo "== L1 /tmp and memory (ENOSPC in the overlays?)"; df -k /tmp; free -m
        for n in sdk-1 sdk-2; do
            echo "== $n: files"; ls -la $MOAT_HOME/$n $MOAT_HOME/$n/snap 2>&1
            echo "== $n: guest I/O errors"; grep -i -m 5 "error\|EXT4-fs" $MOAT_HOME/$n/console.log 2>&1
            echo "== $n: moat.log"; tail -n 30 $MOAT_HOME/$n/moat.log 2>&1
            echo "== $n: overlay"; ./build/moat disk info $MOAT_HOME/$n/disk0.overlay 2>&1
            ./build/moat disk export $MOAT_HOME/$n/disk0.overlay /tmp/sbdd/y >/dev/null 2>&1 &&
                ./debugfs -n -R "ls -l /" /tmp/sbdd/y 2>&1 | tail -n 12; rm -f /tmp/sbdd/y
        done
    fi
    [ $ok = 1 ]'
# A stopped sandbox: a tag copies its overlay; a fork starts from its snap
# and a copy of its overlay.
t sandbox-disk-stopped-tag-fork sh -c '
    M=./build/moat
    $M snapshot sd1 --tag t2; r1=$?
    PATH="$PWD:$PATH" $M diff sd1 --against t2 >/tmp/sbdd/diff3 2>&1; r2=$?; cat /tmp/sbdd/diff3
    $M fork sd1 --count 1 --prefix sds --wait 600; r3=$?
    o=$($M exec sds-1 -- /bin/sh -c "cat /m/parent.txt; echo s > /m/stopped-fork.txt; sync"); r4=$?
    $M rm -f sds-1
    x=$(sh /tmp/sbdd/cat.sh $MOAT_HOME/sd1/disk0.overlay /stopped-fork.txt)
    echo "rc $r1 $r2 $r3 $r4 out [$o] parent [$x] state $($M ls | awk "\$1 == \"sd1\" { print \$2 }")"
    [ $r1 = 0 ] && [ -f $MOAT_HOME/sd1/tags/t2/disk0.overlay ] && [ $r2 = 0 ] && grep -q "^0 block(s)" /tmp/sbdd/diff3 &&
    [ $r3 = 0 ] && [ $r4 = 0 ] && [ "$o" = p ] && [ -z "$x" ]'
t sandbox-disk-start-after-stop sh -c '
    M=./build/moat
    $M start --wait 600 sdk-1; r1=$?
    o=$($M exec sdk-1 -- cat /m/child.txt); r2=$?
    echo "rc $r1 $r2 out $o"
    [ $r1 = 0 ] && [ $r2 = 0 ] && [ "$o" = c1 ]'
# L1's /tmp is RAM: leave nothing behind for the next checks.
for n in sd1 sdk-1 sdk-2 sds-1; do [ -d $MOAT_HOME/$n ] && ./build/moat rm -f $n >/dev/null 2>&1; done
rm -rf $MOAT_HOME /tmp/sbdd
fi
