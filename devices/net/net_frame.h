/* Ethernet frames, pure: no sockets, no guest memory, no clock. The guest
 * controls every byte of the frames it sends; this parser is the only code
 * that reads them before the egress policy (devices/net/net_policy.h).
 *
 * What it reads (every length checked against the bytes present):
 *   Ethernet II (an 802.3 length field in place of the EtherType is reported
 *     as "other", not parsed);
 *   up to two VLAN tags: one 802.1Q tag, or QinQ (an outer tag, TPID 0x88a8
 *     or 0x8100, then an inner one); a third tag is malformed;
 *   ARP for IPv4 over Ethernet (anything else under EtherType 0x0806 is
 *     malformed);
 *   IPv4: version, IHL >= 5 and within the frame, total length >= IHL*4 and
 *     within the frame (bytes after it are link padding), the option list
 *     (every option's length within the header), fragments (MF/offset, no
 *     datagram past 65535 bytes, non-last fragments a multiple of 8 bytes);
 *     the header checksum is NOT verified (checksum offload leaves it to the
 *     host);
 *   IPv6: version, payload length within the frame, and the extension
 *     header chain (hop-by-hop first only, routing, fragment at most once,
 *     destination options, AH), at most NF_IP6_EXT_MAX headers, each within
 *     the payload; hop-by-hop and destination options are walked TLV by TLV;
 *   L4 in unfragmented datagrams and first fragments: TCP (data offset >= 5
 *     and within the segment), UDP (length >= 8 and, unless a first
 *     fragment, within the datagram), ICMP / ICMPv6 (8 bytes). A first
 *     fragment must hold the whole L4 header (RFC 1858, RFC 7112);
 *     non-first fragments carry no L4 header and are not looked into.
 *
 * IPv6 fragment headers with offset 0 and M = 0 ("atomic fragments", RFC
 * 6946) are not fragments. Source routing (IPv4 LSRR/SSRR options, an IPv6
 * routing header with segments left) is reported in NF_F_SRCROUTE: the
 * destination address is then not the final one. */
#ifndef MOAT_NET_FRAME_H
#define MOAT_NET_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NF_ETH_HLEN        14u
#define NF_VLAN_MAX        2u      /* one 802.1Q tag, or QinQ's two */
#define NF_IP6_EXT_MAX     8u      /* IPv6 extension headers walked at most */

#define NF_ETHERTYPE_IPV4  0x0800u
#define NF_ETHERTYPE_ARP   0x0806u
#define NF_ETHERTYPE_VLAN  0x8100u
#define NF_ETHERTYPE_QINQ  0x88a8u
#define NF_ETHERTYPE_IPV6  0x86ddu

/* IP protocol / next-header numbers */
#define NF_IPPROTO_HOPOPTS  0u
#define NF_IPPROTO_ICMP     1u
#define NF_IPPROTO_TCP      6u
#define NF_IPPROTO_UDP      17u
#define NF_IPPROTO_ROUTING  43u
#define NF_IPPROTO_FRAGMENT 44u
#define NF_IPPROTO_ESP      50u
#define NF_IPPROTO_AH       51u
#define NF_IPPROTO_ICMPV6   58u
#define NF_IPPROTO_NONE     59u
#define NF_IPPROTO_DSTOPTS  60u

/* An IP address: family 4 or 6 (0: none). An IPv4 address is kept in its
 * IPv4-mapped form ::ffff:a.b.c.d, so b[12..15] are its four bytes; the
 * family, not the form, says which it is (an IPv6 packet may carry a
 * ::ffff:... address and stays family 6). */
struct nf_addr {
    uint8_t family;
    uint8_t b[16];
};

enum nf_l3 {
    NF_L3_OTHER = 0,    /* EtherType neither ARP, IPv4 nor IPv6 (or an 802.3 length) */
    NF_L3_ARP,
    NF_L3_IPV4,
    NF_L3_IPV6,
};

/* flags */
#define NF_F_FRAG        0x01u  /* a fragment (IPv4 MF or offset, IPv6 fragment header with either) */
#define NF_F_FRAG_FIRST  0x02u  /* ... and the first one (offset 0): it has the L4 header */
#define NF_F_L4          0x04u  /* the L4 header was parsed: TCP, UDP, ICMP or ICMPv6 */
#define NF_F_PORTS       0x08u  /* sport/dport are valid (TCP or UDP) */
#define NF_F_SRCROUTE    0x10u  /* IPv4 LSRR/SSRR option, or IPv6 routing header with segments left */

enum nf_err {
    NF_E_OK = 0,
    NF_E_ETH_SHORT,         /* fewer than 14 bytes */
    NF_E_VLAN_SHORT,        /* a VLAN tag cut short */
    NF_E_VLAN_DEPTH,        /* a third VLAN tag */
    NF_E_ARP_SHORT,         /* fewer than 28 ARP bytes */
    NF_E_ARP_FORMAT,        /* not Ethernet/IPv4 ARP (htype, ptype, hlen, plen) */
    NF_E_IP4_SHORT,         /* fewer than 20 bytes */
    NF_E_IP4_VERSION,       /* version != 4 under EtherType IPv4 */
    NF_E_IP4_IHL,           /* IHL < 5 */
    NF_E_IP4_IHL_TRUNC,     /* IHL*4 beyond the frame */
    NF_E_IP4_TOTLEN,        /* total length < IHL*4 */
    NF_E_IP4_TRUNC,         /* total length beyond the frame */
    NF_E_IP4_OPT,           /* an option overruns the header (or has length < 2) */
    NF_E_IP4_FRAG,          /* offset + length > 65535, or a non-last fragment not a multiple of 8 */
    NF_E_IP6_SHORT,         /* fewer than 40 bytes */
    NF_E_IP6_VERSION,       /* version != 6 under EtherType IPv6 */
    NF_E_IP6_TRUNC,         /* payload length beyond the frame */
    NF_E_IP6_EXT_TRUNC,     /* an extension header overruns the payload */
    NF_E_IP6_EXT_MANY,      /* more than NF_IP6_EXT_MAX extension headers */
    NF_E_IP6_HBH_POS,       /* hop-by-hop options not right after the fixed header */
    NF_E_IP6_FRAG_DUP,      /* a second fragment header */
    NF_E_IP6_FRAG,          /* offset + length > 65535, or a non-last fragment not a multiple of 8 */
    NF_E_IP6_OPT,           /* a hop-by-hop / destination option overruns its header */
    NF_E_ICMP_SHORT,        /* ICMP / ICMPv6 message under 8 bytes */
    NF_E_TCP_SHORT,         /* fewer than 20 TCP bytes */
    NF_E_TCP_DOFF,          /* data offset < 5 */
    NF_E_TCP_DOFF_TRUNC,    /* data offset beyond the segment */
    NF_E_UDP_SHORT,         /* fewer than 8 UDP bytes */
    NF_E_UDP_LEN,           /* UDP length < 8 */
    NF_E_UDP_LEN_TRUNC,     /* UDP length beyond the datagram (not a first fragment) */
    NF_E__COUNT
};

struct net_frame {
    enum nf_err err;            /* NF_E_OK, or why the frame is malformed */
    uint32_t flags;             /* NF_F_* */

    /* Ethernet */
    uint8_t dst_mac[6], src_mac[6];
    uint16_t ethertype;         /* after the VLAN tags */
    uint8_t n_vlan;             /* 0, 1 or 2 */
    uint16_t vlan_tpid[NF_VLAN_MAX], vlan_tci[NF_VLAN_MAX];   /* outer first */
    enum nf_l3 l3;
    size_t l3_off;              /* where the ARP / IP header starts */

    /* ARP (l3 == NF_L3_ARP): src/dst below are the sender/target protocol
     * addresses (family 4) */
    uint16_t arp_op;
    uint8_t arp_sha[6], arp_tha[6];

    /* IP (l3 == NF_L3_IPV4 / NF_L3_IPV6) */
    struct nf_addr src, dst;
    uint8_t ttl;                /* TTL / hop limit */
    uint8_t proto;              /* upper-layer protocol: after the IPv6 extension headers */
    size_t ip_len;              /* the datagram's bytes: header + payload (frame padding excluded) */
    uint32_t frag_id;           /* NF_F_FRAG: IPv4 identification (16 bits) or IPv6 (32 bits) */
    uint32_t frag_off;          /* NF_F_FRAG: offset of this fragment's data, in bytes */
    bool frag_more;             /* NF_F_FRAG: more fragments follow (MF / M) */

    /* L4 (NF_F_L4) */
    size_t l4_off;              /* where the L4 header starts (the fragment data, for non-first fragments) */
    uint16_t sport, dport;      /* NF_F_PORTS */
    uint8_t tcp_flags;          /* TCP: the flags byte (FIN 0x01 .. CWR 0x80) */
    uint8_t icmp_type, icmp_code;
    size_t payload_off, payload_len;   /* L4 payload (after the TCP/UDP/ICMP header;
                                          the whole upper-layer data when not parsed);
                                          UDP: per its length field, cut to the datagram */
};

/* Parse the len bytes of an Ethernet frame at b (no virtio-net header).
 * Returns 0 with *f filled, or -EBADMSG with f->err set (never NF_E_OK)
 * and *why (if why is not NULL) pointing to a static sentence; on -EBADMSG
 * the fields parsed before the fault are kept (e.g. the addresses of an IP
 * packet whose TCP header is bad). An EtherType other than ARP/IPv4/IPv6 is
 * not an error: l3 = NF_L3_OTHER. */
int net_frame_parse(const uint8_t *b, size_t len, struct net_frame *f, const char **why);

/* A static sentence for e ("unknown frame error" outside the enum). */
const char *net_frame_strerror(enum nf_err e);

/* A short name for e ("ip4-ihl", ...), for counters and logs. */
const char *net_frame_errname(enum nf_err e);

/* Format a as text (dotted quad / RFC 5952 IPv6) into buf; returns buf
 * ("-" for family 0). n >= NF_ADDR_STRLEN always suffices. */
#define NF_ADDR_STRLEN 46u
const char *nf_addr_str(const struct nf_addr *a, char *buf, size_t n);

/* Fill a from 4 bytes (family 4, mapped) / 16 bytes (family 6). */
void nf_addr_v4(struct nf_addr *a, const uint8_t b4[4]);
void nf_addr_v6(struct nf_addr *a, const uint8_t b16[16]);

/* ---- the virtio-net header of a frame the guest sends ----
 *
 * Its offload fields make the host (the TAP's kernel, or a NIC after it)
 * write into the frame after the egress policy looked at it: with
 * NEEDS_CSUM, a checksum at csum_start + csum_offset; with GSO, new
 * headers for each segment. So they must agree with what net_frame_parse
 * found, or a guest chooses 16 bits anywhere in the frame (the destination
 * address or port of a frame the policy allowed). net_vhdr_check allows:
 *   flags: 0 or NEEDS_CSUM only (DATA_VALID is the device's, on receive;
 *     unknown bits refused);
 *   hdr_len: at most the frame's length (a hint: the header handed on
 *     carries the parsed header length for GSO, 0 without);
 *   NEEDS_CSUM: only with NF_OFF_CSUM negotiated, on a frame that parsed
 *     (err NF_E_OK) as IPv4 / IPv6 carrying TCP or UDP, not a fragment;
 *     csum_start = l4_off (the L4 header the parser found, after any
 *     VLAN tags, IPv4 options and IPv6 extension headers), csum_offset 16
 *     (TCP) or 6 (UDP) (so the checksum field lies within the L4 header
 *     the parser found in the datagram);
 *   gso_type: NONE, or TCPV4 / TCPV6 when NF_OFF_TSO4 / NF_OFF_TSO6 was
 *     negotiated, with NEEDS_CSUM, on TCP over IPv4 / IPv6 as parsed; no
 *     ECN bit (VIRTIO_NET_F_HOST_ECN is not offered), no UDP (UFO / USO
 *     are not offered); gso_size from NF_VHDR_GSO_MIN (Linux's smallest
 *     TCP MSS, tcp_min_snd_mss: a smaller one only multiplies the segments
 *     the host makes of one frame) to what fits the MTU: the IP and TCP
 *     headers (with the frame's TCP options) + gso_size <= mtu.
 * Fields the flags do not use are not looked at; *out is the header to hand
 * on: the checked fields, the unused ones zero (num_buffers too). */
#define NF_VHDR_F_NEEDS_CSUM  0x01u
#define NF_VHDR_F_DATA_VALID  0x02u
#define NF_VHDR_GSO_NONE      0u
#define NF_VHDR_GSO_TCPV4     1u
#define NF_VHDR_GSO_UDP       3u
#define NF_VHDR_GSO_TCPV6     4u
#define NF_VHDR_GSO_UDP_L4    5u
#define NF_VHDR_GSO_ECN       0x80u
#define NF_VHDR_GSO_MIN       48u     /* the smallest gso_size taken */

/* offloads the driver negotiated (net_vhdr_check's offl) */
#define NF_OFF_CSUM  0x1u       /* VIRTIO_NET_F_CSUM */
#define NF_OFF_TSO4  0x2u       /* VIRTIO_NET_F_HOST_TSO4 */
#define NF_OFF_TSO6  0x4u       /* VIRTIO_NET_F_HOST_TSO6 */

enum nf_vhdr_err {
    NF_VH_OK = 0,
    NF_VH_FLAGS,            /* a flag other than NEEDS_CSUM */
    NF_VH_HDR_LEN,          /* hdr_len beyond the frame */
    NF_VH_CSUM_OFFLOAD,     /* NEEDS_CSUM without VIRTIO_NET_F_CSUM */
    NF_VH_CSUM_FRAME,       /* NEEDS_CSUM on a frame that is not unfragmented TCP/UDP over IP */
    NF_VH_CSUM_START,       /* csum_start not the L4 header's offset */
    NF_VH_CSUM_OFFSET,      /* csum_offset not TCP's 16 / UDP's 6 */
    NF_VH_GSO_TYPE,         /* ECN bit, UDP or unknown GSO type */
    NF_VH_GSO_OFFLOAD,      /* TCPV4 / TCPV6 without HOST_TSO4 / HOST_TSO6 */
    NF_VH_GSO_CSUM,         /* GSO without NEEDS_CSUM */
    NF_VH_GSO_FRAME,        /* GSO type not the frame's (IPv4 / IPv6 TCP, unfragmented) */
    NF_VH_GSO_SIZE,         /* gso_size below NF_VHDR_GSO_MIN, or segments past the MTU */
    NF_VH__COUNT
};

struct net_vhdr;

/* Check the header h of the len-byte frame that net_frame_parse parsed
 * into f (either result), for a device with MTU mtu (0: 65535) whose driver
 * negotiated offl (NF_OFF_*). 0 with *out (may be h) the header to hand
 * on, or -EBADMSG with *err (may be NULL) and *why (may be NULL: a static
 * sentence) saying why; *out is then untouched. */
int net_vhdr_check(const struct net_vhdr *h, const struct net_frame *f, size_t len, unsigned offl, unsigned mtu,
                   struct net_vhdr *out, enum nf_vhdr_err *err, const char **why);

/* Does h ask for anything (a flag or a GSO type)? If not, net_vhdr_check
 * needs no parse of the frame: f may be NULL. */
bool net_vhdr_active(const struct net_vhdr *h);

/* A short name for e ("csum-start", ...), for logs and tests. */
const char *net_vhdr_errname(enum nf_vhdr_err e);

#endif
