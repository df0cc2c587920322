#!/bin/sh
# The guest side of bench/net.sh (packed into its bench initramfs as
# /netbench.sh, run as the guest's command):
#   /netbench.sh HOST SECS PINGS
# One ping to HOST first (ARP, not counted), then PINGS pings 0.2 s apart
# (busybox ping, between the NETBENCH-PING markers), then two iperf3 TCP
# tests of SECS seconds after 1 s omitted (slow start): the guest sends to
# HOST port 5201 (tx), HOST sends to the guest through port 5202 (rx, -R);
# a connection not made within 10 s is given up. Each prints
# "NETBENCH-tx BITS_PER_SECOND" (or -rx): the receiver's figure (iperf3 -J,
# end.sum_received), or the JSON's error line; "NETBENCH-tx-retr N" (-rx-)
# the sender's TCP retransmissions (end.sum_sent.retransmits).
h=$1
secs=$2
n=$3
ping -c 1 -W 10 "$h" > /dev/null
echo NETBENCH-PING-BEGIN
ping -c "$n" -i 0.2 "$h"
echo NETBENCH-PING-END
for d in tx rx; do
    if [ $d = tx ]; then
        set -- -p 5201
    else
        set -- -p 5202 -R
    fi
    iperf3 -c "$h" "$@" -t "$secs" -O 1 -i 0 -J --connect-timeout 10000 > /tmp/$d.json 2>&1
    echo "NETBENCH-$d-rc $?"
    awk -v d=$d '/"sum_received"/ { f = 1 }
        f && /"bits_per_second"/ { gsub(/[^0-9.]/, "", $2); print "NETBENCH-" d " " $2; exit }' /tmp/$d.json
    awk -v d=$d '/"sum_sent"/ { f = 1 }
        f && /"retransmits"/ { gsub(/[^0-9]/, "", $2); print "NETBENCH-" d "-retr " $2; exit }' /tmp/$d.json
    grep '"error"' /tmp/$d.json
done
