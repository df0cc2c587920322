/* Ethernet / VLAN / ARP / IPv4 / IPv6 / ICMP / TCP / UDP frame parser, pure. */
#include "devices/net/net_frame.h"
#include "vmm/base/bytes.h"

#include "devices/net/net_backend.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

static const struct {
    const char *name, *why;
} errs[NF_E__COUNT] = {
    [NF_E_OK] = { "ok", "ok" },
    [NF_E_ETH_SHORT] = { "eth-short", "frame shorter than an Ethernet header" },
    [NF_E_VLAN_SHORT] = { "vlan-short", "VLAN tag cut short" },
    [NF_E_VLAN_DEPTH] = { "vlan-depth", "more than two VLAN tags" },
    [NF_E_ARP_SHORT] = { "arp-short", "ARP packet shorter than 28 bytes" },
    [NF_E_ARP_FORMAT] = { "arp-format", "ARP not for IPv4 over Ethernet" },
    [NF_E_IP4_SHORT] = { "ip4-short", "IPv4 header shorter than 20 bytes" },
    [NF_E_IP4_VERSION] = { "ip4-version", "IPv4 EtherType with IP version not 4" },
    [NF_E_IP4_IHL] = { "ip4-ihl", "IPv4 header length (IHL) below 5" },
    [NF_E_IP4_IHL_TRUNC] = { "ip4-ihl-trunc", "IPv4 header length (IHL) beyond the frame" },
    [NF_E_IP4_TOTLEN] = { "ip4-totlen", "IPv4 total length below the header length" },
    [NF_E_IP4_TRUNC] = { "ip4-trunc", "IPv4 total length beyond the frame" },
    [NF_E_IP4_OPT] = { "ip4-opt", "IPv4 option overruns the header" },
    [NF_E_IP4_FRAG] = { "ip4-frag", "IPv4 fragment past 65535 bytes or not a multiple of 8" },
    [NF_E_IP6_SHORT] = { "ip6-short", "IPv6 header shorter than 40 bytes" },
    [NF_E_IP6_VERSION] = { "ip6-version", "IPv6 EtherType with IP version not 6" },
    [NF_E_IP6_TRUNC] = { "ip6-trunc", "IPv6 payload length beyond the frame" },
    [NF_E_IP6_EXT_TRUNC] = { "ip6-ext-trunc", "IPv6 extension header overruns the payload" },
    [NF_E_IP6_EXT_MANY] = { "ip6-ext-many", "too many IPv6 extension headers" },
    [NF_E_IP6_HBH_POS] = { "ip6-hbh-pos", "IPv6 hop-by-hop options not first" },
    [NF_E_IP6_FRAG_DUP] = { "ip6-frag-dup", "two IPv6 fragment headers" },
    [NF_E_IP6_FRAG] = { "ip6-frag", "IPv6 fragment past 65535 bytes or not a multiple of 8" },
    [NF_E_IP6_OPT] = { "ip6-opt", "IPv6 option overruns its extension header" },
    [NF_E_ICMP_SHORT] = { "icmp-short", "ICMP message shorter than 8 bytes" },
    [NF_E_TCP_SHORT] = { "tcp-short", "TCP header shorter than 20 bytes" },
    [NF_E_TCP_DOFF] = { "tcp-doff", "TCP data offset below 5" },
    [NF_E_TCP_DOFF_TRUNC] = { "tcp-doff-trunc", "TCP data offset beyond the segment" },
    [NF_E_UDP_SHORT] = { "udp-short", "UDP header shorter than 8 bytes" },
    [NF_E_UDP_LEN] = { "udp-len", "UDP length below 8" },
    [NF_E_UDP_LEN_TRUNC] = { "udp-len-trunc", "UDP length beyond the datagram" },
};

const char *net_frame_strerror(enum nf_err e)
{
    return (unsigned)e < NF_E__COUNT ? errs[e].why : "unknown frame error";
}

const char *net_frame_errname(enum nf_err e)
{
    return (unsigned)e < NF_E__COUNT ? errs[e].name : "unknown";
}


void nf_addr_v4(struct nf_addr *a, const uint8_t b4[4])
{
    memset(a->b, 0, 10);
    a->b[10] = a->b[11] = 0xff;
    memcpy(a->b + 12, b4, 4);
    a->family = 4;
}

void nf_addr_v6(struct nf_addr *a, const uint8_t b16[16])
{
    memcpy(a->b, b16, 16);
    a->family = 6;
}

const char *nf_addr_str(const struct nf_addr *a, char *buf, size_t n)
{
    if (n == 0)
        return buf;
    const char *r = NULL;
    if (a->family == 4)
        r = inet_ntop(AF_INET, a->b + 12, buf, (socklen_t)n);
    else if (a->family == 6)
        r = inet_ntop(AF_INET6, a->b, buf, (socklen_t)n);
    if (!r) {
        buf[0] = n > 1 ? '-' : 0;
        if (n > 1)
            buf[1] = 0;
    }
    return buf;
}

static int fail(struct net_frame *f, enum nf_err e, const char **why)
{
    f->err = e;
    if (why)
        *why = errs[e].why;
    return -EBADMSG;
}

/* The L4 header at b (n bytes of this datagram or first fragment). partial:
 * a first fragment, so lengths that cover the whole datagram (UDP's) may
 * exceed n. off: b's offset in the frame. */
static enum nf_err parse_l4(struct net_frame *f, const uint8_t *b, size_t n, size_t off, bool partial)
{
    f->l4_off = off;
    f->payload_off = off;
    f->payload_len = n;
    switch (f->proto) {
    case NF_IPPROTO_TCP: {
        if (n < 20)
            return NF_E_TCP_SHORT;
        size_t doff = (size_t)(b[12] >> 4) * 4;
        if (doff < 20)
            return NF_E_TCP_DOFF;
        if (doff > n)
            return NF_E_TCP_DOFF_TRUNC;
        f->sport = be16_load(b);
        f->dport = be16_load(b + 2);
        f->tcp_flags = b[13];
        f->payload_off = off + doff;
        f->payload_len = n - doff;
        f->flags |= NF_F_L4 | NF_F_PORTS;
        return NF_E_OK;
    }
    case NF_IPPROTO_UDP: {
        if (n < 8)
            return NF_E_UDP_SHORT;
        size_t ulen = be16_load(b + 4);
        if (ulen < 8)
            return NF_E_UDP_LEN;
        if (ulen > n && !partial)
            return NF_E_UDP_LEN_TRUNC;
        f->sport = be16_load(b);
        f->dport = be16_load(b + 2);
        f->payload_off = off + 8;
        f->payload_len = (ulen < n ? ulen : n) - 8;
        f->flags |= NF_F_L4 | NF_F_PORTS;
        return NF_E_OK;
    }
    case NF_IPPROTO_ICMP:
    case NF_IPPROTO_ICMPV6:
        /* ICMP under IPv4, ICMPv6 under IPv6; the other pairing is opaque */
        if ((f->proto == NF_IPPROTO_ICMP) != (f->l3 == NF_L3_IPV4))
            return NF_E_OK;
        if (n < 8)
            return NF_E_ICMP_SHORT;
        f->icmp_type = b[0];
        f->icmp_code = b[1];
        f->payload_off = off + 8;
        f->payload_len = n - 8;
        f->flags |= NF_F_L4;
        return NF_E_OK;
    default:
        return NF_E_OK;
    }
}

static enum nf_err parse_ip4(struct net_frame *f, const uint8_t *b, size_t n, size_t off)
{
    if (n < 20)
        return NF_E_IP4_SHORT;
    if (b[0] >> 4 != 4)
        return NF_E_IP4_VERSION;
    size_t ihl = (size_t)(b[0] & 15) * 4;
    if (ihl < 20)
        return NF_E_IP4_IHL;
    if (ihl > n)
        return NF_E_IP4_IHL_TRUNC;
    size_t tot = be16_load(b + 2);
    if (tot < ihl)
        return NF_E_IP4_TOTLEN;
    if (tot > n)
        return NF_E_IP4_TRUNC;
    f->ip_len = tot;
    f->ttl = b[8];
    f->proto = b[9];
    nf_addr_v4(&f->src, b + 12);
    nf_addr_v4(&f->dst, b + 16);

    /* options: EOL ends the list, NOP is one byte, others type+length */
    for (size_t i = 20; i < ihl;) {
        uint8_t t = b[i];
        if (t == 0)
            break;
        if (t == 1) {
            i++;
            continue;
        }
        if (i + 1 >= ihl || b[i + 1] < 2 || b[i + 1] > ihl - i)
            return NF_E_IP4_OPT;
        if (t == 131 || t == 137)           /* LSRR, SSRR */
            f->flags |= NF_F_SRCROUTE;
        i += b[i + 1];
    }

    uint16_t fw = be16_load(b + 6);
    size_t data = tot - ihl;
    f->frag_off = (uint32_t)(fw & 0x1fff) * 8;
    f->frag_more = (fw & 0x2000) != 0;
    if (f->frag_more || f->frag_off) {
        f->flags |= NF_F_FRAG;
        f->frag_id = be16_load(b + 4);
        if (f->frag_off + data > 65535 || (f->frag_more && data % 8))
            return NF_E_IP4_FRAG;
        if (f->frag_off == 0)
            f->flags |= NF_F_FRAG_FIRST;
    }
    if (f->frag_off) {          /* no L4 header in here */
        f->l4_off = f->payload_off = off + ihl;
        f->payload_len = data;
        return NF_E_OK;
    }
    return parse_l4(f, b + ihl, data, off + ihl, f->frag_more);
}

/* Hop-by-hop / destination options: TLVs in b[2..n). */
static bool ip6_opts_ok(const uint8_t *b, size_t n)
{
    for (size_t i = 2; i < n;) {
        if (b[i] == 0) {        /* Pad1 */
            i++;
            continue;
        }
        if (i + 2 > n || b[i + 1] > n - i - 2)
            return false;
        i += 2 + (size_t)b[i + 1];
    }
    return true;
}

static enum nf_err parse_ip6(struct net_frame *f, const uint8_t *b, size_t n, size_t off)
{
    if (n < 40)
        return NF_E_IP6_SHORT;
    if (b[0] >> 4 != 6)
        return NF_E_IP6_VERSION;
    size_t end = 40 + (size_t)be16_load(b + 4);
    if (end > n)
        return NF_E_IP6_TRUNC;
    f->ip_len = end;
    f->ttl = b[7];
    nf_addr_v6(&f->src, b + 8);
    nf_addr_v6(&f->dst, b + 24);

    uint8_t nh = b[6];
    size_t p = 40;
    unsigned count = 0;
    bool seen_frag = false;
    for (;;) {
        if (nh != NF_IPPROTO_HOPOPTS && nh != NF_IPPROTO_ROUTING && nh != NF_IPPROTO_FRAGMENT &&
            nh != NF_IPPROTO_DSTOPTS && nh != NF_IPPROTO_AH)
            break;
        if (++count > NF_IP6_EXT_MAX)
            return NF_E_IP6_EXT_MANY;
        if (nh == NF_IPPROTO_HOPOPTS && p != 40)
            return NF_E_IP6_HBH_POS;
        if (end - p < 8)
            return NF_E_IP6_EXT_TRUNC;
        const uint8_t *h = b + p;
        size_t hlen = nh == NF_IPPROTO_FRAGMENT ? 8
                    : nh == NF_IPPROTO_AH ? ((size_t)h[1] + 2) * 4
                    : ((size_t)h[1] + 1) * 8;
        if (hlen > end - p)
            return NF_E_IP6_EXT_TRUNC;
        if ((nh == NF_IPPROTO_HOPOPTS || nh == NF_IPPROTO_DSTOPTS) && !ip6_opts_ok(h, hlen))
            return NF_E_IP6_OPT;
        if (nh == NF_IPPROTO_ROUTING && h[3] != 0)
            f->flags |= NF_F_SRCROUTE;
        if (nh == NF_IPPROTO_FRAGMENT) {
            if (seen_frag)
                return NF_E_IP6_FRAG_DUP;
            seen_frag = true;
            uint16_t fo = be16_load(h + 2);
            uint32_t foff = fo & 0xfff8u;
            bool more = fo & 1;
            if (foff || more) {
                size_t data = end - p - 8;
                f->flags |= NF_F_FRAG;
                f->frag_off = foff;
                f->frag_more = more;
                f->frag_id = be32_load(h + 4);
                if (foff + data > 65535 || (more && data % 8))
                    return NF_E_IP6_FRAG;
                if (foff) {         /* no further headers in here */
                    f->proto = h[0];
                    f->l4_off = f->payload_off = off + p + 8;
                    f->payload_len = data;
                    return NF_E_OK;
                }
                f->flags |= NF_F_FRAG_FIRST;
            }
        }
        nh = h[0];
        p += hlen;
    }
    f->proto = nh;
    return parse_l4(f, b + p, end - p, off + p, f->frag_more);
}

static enum nf_err parse_arp(struct net_frame *f, const uint8_t *b, size_t n)
{
    if (n < 28)
        return NF_E_ARP_SHORT;
    if (be16_load(b) != 1 || be16_load(b + 2) != NF_ETHERTYPE_IPV4 || b[4] != 6 || b[5] != 4)
        return NF_E_ARP_FORMAT;
    f->arp_op = be16_load(b + 6);
    memcpy(f->arp_sha, b + 8, 6);
    nf_addr_v4(&f->src, b + 14);
    memcpy(f->arp_tha, b + 18, 6);
    nf_addr_v4(&f->dst, b + 24);
    return NF_E_OK;
}

int net_frame_parse(const uint8_t *b, size_t len, struct net_frame *f, const char **why)
{
    memset(f, 0, sizeof *f);
    if (len < NF_ETH_HLEN)
        return fail(f, NF_E_ETH_SHORT, why);
    memcpy(f->dst_mac, b, 6);
    memcpy(f->src_mac, b + 6, 6);
    size_t p = 12;
    uint16_t et = be16_load(b + p);
    while (et == NF_ETHERTYPE_VLAN || et == NF_ETHERTYPE_QINQ) {
        if (f->n_vlan == NF_VLAN_MAX)
            return fail(f, NF_E_VLAN_DEPTH, why);
        if (len - p < 6)        /* TPID, TCI, then the next EtherType */
            return fail(f, NF_E_VLAN_SHORT, why);
        f->vlan_tpid[f->n_vlan] = et;
        f->vlan_tci[f->n_vlan] = be16_load(b + p + 2);
        f->n_vlan++;
        p += 4;
        et = be16_load(b + p);
    }
    p += 2;
    f->ethertype = et;
    f->l3_off = p;
    enum nf_err e = NF_E_OK;
    switch (et) {
    case NF_ETHERTYPE_ARP:
        f->l3 = NF_L3_ARP;
        e = parse_arp(f, b + p, len - p);
        break;
    case NF_ETHERTYPE_IPV4:
        f->l3 = NF_L3_IPV4;
        e = parse_ip4(f, b + p, len - p, p);
        break;
    case NF_ETHERTYPE_IPV6:
        f->l3 = NF_L3_IPV6;
        e = parse_ip6(f, b + p, len - p, p);
        break;
    default:
        f->l3 = NF_L3_OTHER;
        break;
    }
    if (e != NF_E_OK)
        return fail(f, e, why);
    return 0;
}

/* ---- the virtio-net header ---- */

static const struct {
    const char *name, *why;
} vh_errs[NF_VH__COUNT] = {
    [NF_VH_OK] = { "ok", "ok" },
    [NF_VH_FLAGS] = { "flags", "virtio-net header flags other than NEEDS_CSUM" },
    [NF_VH_HDR_LEN] = { "hdr-len", "virtio-net header hdr_len beyond the frame" },
    [NF_VH_CSUM_OFFLOAD] = { "csum-offload", "NEEDS_CSUM without checksum offload negotiated" },
    [NF_VH_CSUM_FRAME] = { "csum-frame", "NEEDS_CSUM on a frame that is not unfragmented TCP or UDP over IP" },
    [NF_VH_CSUM_START] = { "csum-start", "csum_start is not where the TCP/UDP header starts" },
    [NF_VH_CSUM_OFFSET] = { "csum-offset", "csum_offset is not the TCP/UDP checksum field" },
    [NF_VH_GSO_TYPE] = { "gso-type", "GSO type not TCPv4 or TCPv6 without ECN" },
    [NF_VH_GSO_OFFLOAD] = { "gso-offload", "GSO type whose segmentation offload was not negotiated" },
    [NF_VH_GSO_CSUM] = { "gso-csum", "GSO without NEEDS_CSUM" },
    [NF_VH_GSO_FRAME] = { "gso-frame", "GSO type does not match the frame (TCP over IPv4 / IPv6, unfragmented)" },
    [NF_VH_GSO_SIZE] = { "gso-size", "gso_size below 48, or segments larger than the MTU" },
};

const char *net_vhdr_errname(enum nf_vhdr_err e)
{
    return (unsigned)e < NF_VH__COUNT ? vh_errs[e].name : "unknown";
}

bool net_vhdr_active(const struct net_vhdr *h)
{
    return h->flags || h->gso_type;
}

/* Is f an unfragmented TCP or UDP datagram over IP, its L4 header parsed? */
static bool l4_whole(const struct net_frame *f)
{
    return f && f->err == NF_E_OK && (f->l3 == NF_L3_IPV4 || f->l3 == NF_L3_IPV6) && (f->flags & NF_F_PORTS) &&
           !(f->flags & NF_F_FRAG) && (f->proto == NF_IPPROTO_TCP || f->proto == NF_IPPROTO_UDP);
}

static enum nf_vhdr_err vhdr_check(const struct net_vhdr *h, const struct net_frame *f, size_t len, unsigned offl,
                                   unsigned mtu)
{
    if (h->flags & ~NF_VHDR_F_NEEDS_CSUM)
        return NF_VH_FLAGS;
    if (h->hdr_len > len)
        return NF_VH_HDR_LEN;
    if (h->gso_type != NF_VHDR_GSO_NONE) {
        bool v4 = h->gso_type == NF_VHDR_GSO_TCPV4;
        if (!v4 && h->gso_type != NF_VHDR_GSO_TCPV6)
            return NF_VH_GSO_TYPE;          /* ECN, UDP, UDP_L4, unknown */
        if (!(offl & (v4 ? NF_OFF_TSO4 : NF_OFF_TSO6)))
            return NF_VH_GSO_OFFLOAD;
        if (!(h->flags & NF_VHDR_F_NEEDS_CSUM))
            return NF_VH_GSO_CSUM;
        if (!l4_whole(f) || f->proto != NF_IPPROTO_TCP || f->l3 != (v4 ? NF_L3_IPV4 : NF_L3_IPV6))
            return NF_VH_GSO_FRAME;
        /* each segment: the IP header (options, extension headers), the
         * TCP header with its options, gso_size bytes of data */
        size_t seg = (f->payload_off - f->l3_off) + (size_t)h->gso_size;
        if (h->gso_size < NF_VHDR_GSO_MIN || seg > (mtu ? mtu : 65535u))
            return NF_VH_GSO_SIZE;
    }
    if (h->flags & NF_VHDR_F_NEEDS_CSUM) {
        if (!(offl & NF_OFF_CSUM))
            return NF_VH_CSUM_OFFLOAD;
        if (!l4_whole(f))
            return NF_VH_CSUM_FRAME;
        if (h->csum_start != f->l4_off)
            return NF_VH_CSUM_START;
        if (h->csum_offset != (f->proto == NF_IPPROTO_TCP ? 16u : 6u))
            return NF_VH_CSUM_OFFSET;       /* (the parser saw 20 TCP / 8 UDP bytes there) */
    }
    return NF_VH_OK;
}

int net_vhdr_check(const struct net_vhdr *h, const struct net_frame *f, size_t len, unsigned offl, unsigned mtu,
                   struct net_vhdr *out, enum nf_vhdr_err *err, const char **why)
{
    enum nf_vhdr_err e = vhdr_check(h, f, len, offl, mtu);
    if (err)
        *err = e;
    if (e != NF_VH_OK) {
        if (why)
            *why = vh_errs[e].why;
        return -EBADMSG;
    }
    bool csum = h->flags & NF_VHDR_F_NEEDS_CSUM, gso = h->gso_type != NF_VHDR_GSO_NONE;
    *out = (struct net_vhdr){
        .flags = h->flags,
        .gso_type = h->gso_type,
        .hdr_len = gso ? (uint16_t)f->payload_off : 0,
        .gso_size = gso ? h->gso_size : 0,
        .csum_start = csum ? h->csum_start : 0,
        .csum_offset = csum ? h->csum_offset : 0,
    };
    return 0;
}
