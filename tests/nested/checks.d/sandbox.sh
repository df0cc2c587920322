# Named sandboxes (docs/sandboxes.md): create/ls/exec/cp/pause/resume,
# stop/start (and exec starting a stopped one), snapshot --tag/reset --to,
# fork, ephemeral, a dead process, rm. The checks run in order and share
# $MOAT_HOME; each prints what it saw.
if [ -f build/guest/bzImage ]; then
export MOAT_HOME=/tmp/sbx
M=./build/moat
sbx_state() { $M ls | awk -v n="$1" '$1 == n { print $2 }'; }
sbx_dump() { $M ls; for f in $MOAT_HOME/$1/moat.log $MOAT_HOME/$1/console.log; do [ -f $f ] && { echo "== $f"; tail -n 20 $f; }; done; }
rm -rf $MOAT_HOME
t sandbox-create sh -c '
    M=./build/moat
    $M create sb1 --wait 600; r=$?; $M ls
    [ $r = 0 ] && [ "$($M ls | awk "\$1 == \"sb1\" { print \$2 }")" = running ] &&
    [ -S $MOAT_HOME/sb1/ctl.sock ] && [ -S $MOAT_HOME/sb1/vsock.sock ] && [ -s $MOAT_HOME/sb1/pid ]'
t sandbox-exec-cp sh -c '
    M=./build/moat; d=/tmp/sbxf; rm -rf $d; mkdir -p $d
    $M exec sb1 -- /bin/sh -c "echo hello-sandbox; exit 3" >$d/o 2>&1; r1=$?
    head -c 50000 /dev/urandom >$d/blob
    $M cp $d/blob sb1:/tmp/blob; r2=$?
    $M exec sb1 -- md5sum /tmp/blob >$d/gmd5; r3=$?
    $M cp sb1:/tmp/blob $d/blob2; r4=$?
    echo "rc $r1 $r2 $r3 $r4"; cat $d/o $d/gmd5
    h1=$(md5sum <$d/blob | cut -d" " -f1); h2=$(md5sum <$d/blob2 | cut -d" " -f1); hg=$(cut -d" " -f1 $d/gmd5)
    [ $r1 = 3 ] && grep -q hello-sandbox $d/o && [ $r2 = 0 ] && [ $r3 = 0 ] && [ $r4 = 0 ] &&
    [ "$h1" = "$hg" ] && [ "$h1" = "$h2" ]'
t sandbox-pause-resume sh -c '
    M=./build/moat
    $M pause sb1; r1=$?; s1=$($M ls | awk "\$1 == \"sb1\" { print \$2 }")
    $M exec sb1 -- true 2>/tmp/sbx-pe; r2=$?; cat /tmp/sbx-pe
    $M resume sb1; r3=$?; s2=$($M ls | awk "\$1 == \"sb1\" { print \$2 }")
    $M exec sb1 -- echo after-resume; r4=$?
    echo "rc $r1 $r2 $r3 $r4 states $s1 $s2"
    [ $r1 = 0 ] && [ $s1 = paused ] && [ $r2 != 0 ] && grep -q paused /tmp/sbx-pe &&
    [ $r3 = 0 ] && [ $s2 = running ] && [ $r4 = 0 ]'
t sandbox-create-exists sh -c '
    M=./build/moat
    $M create sb1 --wait 5 2>/tmp/sbx-ce; r=$?; cat /tmp/sbx-ce
    [ $r != 0 ] && grep -q "already exists" /tmp/sbx-ce && $M exec sb1 -- true'
t sandbox-stop-start sh -c '
    M=./build/moat
    $M exec sb1 -- /bin/sh -c "echo kept-in-ram > /tmp/marker; echo console-before-stop > /dev/ttyS0"; r0=$?
    $M stop sb1; r1=$?; s1=$($M ls | awk "\$1 == \"sb1\" { print \$2 }")
    [ -f $MOAT_HOME/sb1/snap/state ] && [ -f $MOAT_HOME/sb1/snap/memory ] && [ ! -e $MOAT_HOME/sb1/pid ]; r2=$?
    $M start --wait 600 sb1; r3=$?; s2=$($M ls | awk "\$1 == \"sb1\" { print \$2 }")
    o=$($M exec sb1 -- /bin/sh -c "cat /tmp/marker; echo console-after-start > /dev/ttyS0"); r4=$?
    echo "rc $r0 $r1 $r2 $r3 $r4 states $s1 $s2 out $o"; ls -la $MOAT_HOME/sb1
    [ $r0 = 0 ] && [ $r1 = 0 ] && [ $s1 = stopped ] && [ $r2 = 0 ] && [ $r3 = 0 ] && [ $s2 = running ] &&
    [ $r4 = 0 ] && [ "$o" = kept-in-ram ] && grep -q console-before-stop $MOAT_HOME/sb1/console.log &&
    grep -q console-after-start $MOAT_HOME/sb1/console.log'
t sandbox-exec-starts-stopped sh -c '
    M=./build/moat
    $M stop sb1 && o=$($M exec sb1 -- cat /tmp/marker); r=$?
    echo "rc $r out $o"; [ $r = 0 ] && [ "$o" = kept-in-ram ]'
# A stop interrupted after its snapshot was written but before it was moved
# into place (simulated: snap renamed back to snap.new): start takes it.
t sandbox-interrupted-stop sh -c '
    M=./build/moat
    $M exec sb1 -- /bin/sh -c "echo after-interrupt > /tmp/marker2" && $M stop sb1; r1=$?
    mv $MOAT_HOME/sb1/snap $MOAT_HOME/sb1/snap.new
    $M start --wait 600 sb1; r2=$?; o=$($M exec sb1 -- cat /tmp/marker2); r3=$?
    echo "rc $r1 $r2 $r3 out $o"; ls -la $MOAT_HOME/sb1
    [ $r1 = 0 ] && [ $r2 = 0 ] && [ $r3 = 0 ] && [ "$o" = after-interrupt ] && [ ! -e $MOAT_HOME/sb1/snap.new ]'
t sandbox-tag-reset sh -c '
    M=./build/moat
    $M exec sb1 -- /bin/sh -c "echo v1 > /tmp/v" && $M snapshot sb1 --tag t1; r1=$?
    $M exec sb1 -- /bin/sh -c "echo v2 > /tmp/v"
    $M reset --wait 600 sb1 --to t1; r2=$?; o1=$($M exec sb1 -- cat /tmp/v)
    $M exec sb1 -- /bin/sh -c "echo v3 > /tmp/v"
    $M reset --wait 600 sb1 --to t1; r3=$?; o2=$($M exec sb1 -- cat /tmp/v)
    $M snapshot sb1 --tag t1 2>/dev/null; r4=$?
    $M reset sb1 --to nosuch 2>/dev/null; r5=$?
    echo "rc $r1 $r2 $r3 $r4 $r5 out $o1 $o2"
    [ $r1 = 0 ] && [ $r2 = 0 ] && [ $r3 = 0 ] && [ "$o1" = v1 ] && [ "$o2" = v1 ] && [ $r4 != 0 ] && [ $r5 != 0 ]'
t sandbox-fork sh -c '
    M=./build/moat
    $M fork sb1 --count 2 --prefix fk --wait 600; r1=$?; $M ls
    a=$($M exec fk-1 -- cat /tmp/v); b=$($M exec fk-2 -- cat /tmp/v)
    $M exec fk-1 -- /bin/sh -c "echo f1 > /tmp/v"
    c=$($M exec fk-1 -- cat /tmp/v); d=$($M exec fk-2 -- cat /tmp/v); e=$($M exec sb1 -- cat /tmp/v)
    $M fork sb1 --count 1 --prefix fk 2>/dev/null; r2=$?
    echo "rc $r1 $r2 out $a $b $c $d $e"
    [ $r1 = 0 ] && [ "$a" = v1 ] && [ "$b" = v1 ] && [ "$c" = f1 ] && [ "$d" = v1 ] && [ "$e" = v1 ] && [ $r2 != 0 ]'
# The control socket itself: bad requests, a silent client, idle
# connections, failed snapshots; the VM keeps running (sandbox_ctlprobe.c).
t sandbox-ctl-socket sh -c './ctlprobe $MOAT_HOME/sb1/ctl.sock && ./build/moat exec sb1 -- echo still-running'
t sandbox-ephemeral sh -c '
    M=./build/moat
    $M create e1 --ephemeral --wait 600 && $M exec e1 -- true; r1=$?
    $M stop e1; r2=$?
    echo "rc $r1 $r2"; $M ls
    [ $r1 = 0 ] && [ $r2 = 0 ] && [ ! -e $MOAT_HOME/e1 ]'
t sandbox-dead sh -c '
    M=./build/moat
    $M create d1 --wait 600 || exit 1
    p=$(cat $MOAT_HOME/d1/pid)
    $M exec d1 -- /sbin/reboot -f; n=0
    while kill -0 $p 2>/dev/null && [ $n -lt 300 ]; do sleep 0.2; n=$((n + 1)); done
    s=$($M ls | awk "\$1 == \"d1\" { print \$2 }")
    $M exec d1 -- true 2>/tmp/sbx-de; r1=$?; cat /tmp/sbx-de
    $M rm d1; r2=$?
    echo "state $s rc $r1 $r2"
    [ "$s" = dead ] && [ $r1 != 0 ] && grep -q dead /tmp/sbx-de && [ $r2 = 0 ] && [ ! -e $MOAT_HOME/d1 ]'
# A device given by type and options (--device) comes back from the
# sandbox's snapshot on start: its record is the options that made it.
t sandbox-device sh -c '
    M=./build/moat
    printf device-data >/tmp/sbx-dev-img; truncate -s 1M /tmp/sbx-dev-img
    $M create dv1 --wait 600 --device blk,path=/tmp/sbx-dev-img,ro,id=devdata || exit 1
    o1=$($M exec dv1 -- head -c 11 /dev/vda)
    $M stop dv1 && $M start --wait 600 dv1; r=$?
    o2=$($M exec dv1 -- head -c 11 /dev/vda)
    $M rm -f dv1
    echo "rc $r out $o1 $o2"
    [ "$o1" = device-data ] && [ $r = 0 ] && [ "$o2" = device-data ]'
# A moat killed with SIGKILL leaves its pid file and sockets: ls says dead,
# exec refuses, start restores its last stop snapshot over the stale
# sockets, rm cleans up.
t sandbox-killed sh -c '
    M=./build/moat
    $M create k1 --wait 600 && $M exec k1 -- /bin/sh -c "echo k1-state > /tmp/k" && $M stop k1 && $M start --wait 600 k1 || exit 1
    kill -9 $(cat $MOAT_HOME/k1/pid); sleep 1
    s1=$($M ls | awk "\$1 == \"k1\" { print \$2 }")
    $M exec k1 -- true 2>/dev/null; r1=$?
    $M start --wait 600 k1; r2=$?; s2=$($M ls | awk "\$1 == \"k1\" { print \$2 }")
    o=$($M exec k1 -- cat /tmp/k); r3=$?
    $M rm k1; r4=$?
    echo "states $s1 $s2 rc $r1 $r2 $r3 $r4 out $o"
    [ "$s1" = dead ] && [ $r1 != 0 ] && [ $r2 = 0 ] && [ "$s2" = running ] && [ $r3 = 0 ] && [ "$o" = k1-state ] &&
    [ $r4 = 0 ] && [ ! -e $MOAT_HOME/k1 ]'
# Forks of a sandbox with a drive written in place (overlay=none: no
# copy-on-write overlay) are refused; sandbox-disk.sh forks overlay drives.
t sandbox-fork-rw-drive sh -c '
    M=./build/moat
    dd if=/dev/zero of=/tmp/sbx-img bs=1M count=4 2>/dev/null
    $M create r1 --wait 600 --drive /tmp/sbx-img,overlay=none || exit 1
    $M fork r1 --count 1 2>/tmp/sbx-fe; r=$?; cat /tmp/sbx-fe
    $M rm -f r1
    [ $r != 0 ] && grep -q "writable drive" /tmp/sbx-fe && [ ! -e $MOAT_HOME/r1-1 ]'
# The same life cycle with the sanitizer build (the background process is moat-san too).
t sandbox-san sh -c '
    M=./build/moat-san
    $M create s1 --wait 600 && $M exec s1 -- /bin/sh -c "echo san > /tmp/s" && $M pause s1 && $M resume s1 &&
    $M snapshot s1 --tag a && $M stop s1 && o=$($M exec s1 -- cat /tmp/s) && $M reset s1 --to a &&
    $M fork s1 --count 1 --prefix sf && o2=$($M exec sf-1 -- cat /tmp/s) && $M ls; r=$?
    cat $MOAT_HOME/s1/moat.log $MOAT_HOME/sf-1/moat.log >/tmp/sbx-san-log; cat /tmp/sbx-san-log
    $M rm -f s1 sf-1; r2=$?
    echo "rc $r $r2 out $o $o2"
    [ $r = 0 ] && [ $r2 = 0 ] && [ "$o" = san ] && [ "$o2" = san ] && ! grep -q "Sanitizer\|runtime error" /tmp/sbx-san-log'
case sandbox-logs in $ONLY) for n in sb1 fk-1; do sbx_dump $n; done ;; esac
t sandbox-rm sh -c '
    M=./build/moat
    pids=$(cat $MOAT_HOME/*/pid 2>/dev/null)
    $M rm -f fk-1 fk-2 sb1; r=$?; $M ls; sleep 1
    alive=0; for p in $pids; do kill -0 $p 2>/dev/null && alive=1; done
    echo "rc $r alive $alive left: $(ls $MOAT_HOME)"
    [ $r = 0 ] && [ $alive = 0 ] && [ -z "$(ls $MOAT_HOME)" ]'
fi
