/* What the virtio-net test guest (net.c) and its host side
 * (tests/integration/test_net.c) agree on. Plain C constants only.
 *
 * The guest finds virtio-net in the first virtio-mmio slot that holds one,
 * takes its settings from the kernel command line
 *   net.ip=A.B.C.D net.peer=A.B.C.D net.peermac=XX:..:XX net.port=N
 *   [net.mac=XX:..:XX] [net.mrg=0|1] [net.mtu=N] [net.count=N] [net.window=N]
 *   [net.wait=N] [net.csum=1]
 * (net.mac / net.mtu: what the device's config space must say; net.mrg=1:
 * negotiate mergeable receive buffers and post small ones, so that a large
 * frame spans several; without it each receive chain is two descriptors,
 * the header and then the rest of a 2 KiB buffer; net.wait: how long each
 * wait for the device or the peer may last, in 10^9 TSC cycles, default 60,
 * ~20 s at 3 GHz: a test that expects no answer sets less), answers ARP requests for
 * net.ip, and then, from UDP port NET_GUEST_PORT to net.peer:net.port:
 *  1. sends NET_PING "0" and waits for it to come back (NET_OK_PING);
 *  2. asks for net.peer's MAC by ARP: the answer must be net.peermac
 *     (NET_OK_ARP);
 *  3. sends NET_PING "1" .. "count", at most `window` unanswered, each
 *     reply the next one in order (NET_OK_BULK);
 *  4. sends one NET_BIG_LEN-byte datagram (NET_OK_BIG);
 *  5. sends a chain shorter than the virtio-net header and an Ethernet
 *     header: the device must hand it back (used length 0), and then one
 *     more NET_PING must come back (NET_OK_BAD);
 * so the echo side sees exactly NET_DATAGRAMS(count) datagrams. Every reply
 * must be exactly what was sent, with valid IPv4 and UDP checksums. Exits 0
 * after NET_OK_ALL, else with a code listed in net.c.
 *
 * net.csum=1 runs another script instead (checksum offload, docs/net.md):
 * it negotiates VIRTIO_NET_F_CSUM, answers nothing and sends three UDP
 * datagrams to net.peer:net.port through net.peermac (a router), each with
 * NEEDS_CSUM in its virtio-net header and a payload starting NET_CSUM:
 *  - NET_CSUM_GOOD: csum_start at the UDP header, csum_offset 6, the
 *    checksum field holding the pseudo-header sum (as Linux sends them):
 *    must leave, with a valid UDP checksum;
 *  - NET_CSUM_ADDR: csum_start at the last two bytes of the IPv4
 *    destination, csum_offset 0, the payload made so that the checksum the
 *    host would write there turns the address into ...^0x00ff (a host the
 *    policy denies); its UDP checksum 0 (none);
 *  - NET_CSUM_PORT: the same with the UDP destination port, made 22;
 * the last two must not leave. Prints NET_OK_CSUM once all three chains came
 * back, then waits ~0.3 s (frames reach the host) and exits 0. */
#ifndef MOAT_GUEST_NET_PROTO_H
#define MOAT_GUEST_NET_PROTO_H

#define NET_GUEST_PORT   40000
#define NET_PING         "moat-net-ping "      /* + the decimal sequence number */
#define NET_BIG          "moat-net-big "       /* + number, a space, then pattern bytes */
#define NET_BIG_LEN      1200                  /* UDP payload bytes of the large datagram */
#define NET_COUNT_MAX    100000
#define NET_WAIT_MAX     600                   /* net.wait=, 10^9 TSC cycles */
#define NET_DATAGRAMS(count) ((count) + 3u)    /* what the echo side receives */

#define NET_NODEV        3
#define NET_OK_PING      "net: ping ok\n"
#define NET_OK_ARP       "net: arp ok\n"
#define NET_OK_BULK      "net: bulk ok\n"
#define NET_OK_BIG       "net: big ok\n"
#define NET_OK_BAD       "net: bad chain ok\n"
#define NET_OK_ALL       "net: all ok\n"
#define NET_CSUM         "moat-csum-"          /* net.csum=1: payloads; + one of: */
#define NET_CSUM_GOOD    NET_CSUM "good"
#define NET_CSUM_ADDR    NET_CSUM "addr"
#define NET_CSUM_PORT    NET_CSUM "port"
#define NET_CSUM_NEWPORT 22                    /* what NET_CSUM_PORT's checksum would make the port */
#define NET_OK_CSUM      "net: csum frames sent\n"
/* Printed last: "net: arp-answered N rx-frames N max-buffers N\n" */
#define NET_ARP_ANSWERED "arp-answered "
#define NET_MAX_BUFFERS  "max-buffers "

#endif
