/* Ethernet frame parser (devices/net/net_frame.h): every accepted shape and
 * every malformed case, layer by layer. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/net_backend.h"
#include "devices/net/net_frame.h"

/* A frame under construction. */
static uint8_t fr[4096];
static size_t fl;

static void b8(unsigned v) { fr[fl++] = (uint8_t)v; }
static void b16(unsigned v) { b8(v >> 8); b8(v & 0xff); }
static void b32(uint32_t v) { b16(v >> 16); b16(v & 0xffff); }
static void bz(size_t n) { memset(fr + fl, 0, n); fl += n; }
static void set16(size_t off, unsigned v) { fr[off] = (uint8_t)(v >> 8); fr[off + 1] = (uint8_t)v; }
static void bip6(const char *s)
{
    ck_assert_int_eq(inet_pton(AF_INET6, s, fr + fl), 1);
    fl += 16;
}

static void eth(unsigned type)
{
    fl = 0;
    memset(fr, 0xee, sizeof fr);   /* bytes past the frame are never read as frame bytes */
    const uint8_t dst[6] = { 2, 0, 0, 0, 0, 1 }, src[6] = { 2, 0, 0, 0, 0, 2 };
    memcpy(fr, dst, 6);
    memcpy(fr + 6, src, 6);
    fl = 12;
    b16(type);
}

/* IPv4 header, IHL ihl words (options are zero = EOL); returns its offset.
 * Total length is fixed later with ip4_done. */
static size_t ip4(unsigned ihl, unsigned frag, unsigned proto, uint32_t src, uint32_t dst)
{
    size_t at = fl;
    b8(0x40 | ihl);
    b8(0);
    b16(0);             /* total length */
    b16(0x1234);        /* id */
    b16(frag);
    b8(64);
    b8(proto);
    b16(0);
    b32(src);
    b32(dst);
    if (ihl > 5)
        bz((ihl - 5) * 4);
    return at;
}
static void ip4_done(size_t at) { set16(at + 2, (unsigned)(fl - at)); }

static void tcp(unsigned sport, unsigned dport, unsigned doff, unsigned flags)
{
    b16(sport);
    b16(dport);
    b32(1);
    b32(0);
    b8(doff << 4);
    b8(flags);
    b16(0xffff);
    b16(0);
    b16(0);
    if (doff > 5)
        bz((doff - 5) * 4);
}
static void udp(unsigned sport, unsigned dport, unsigned len)
{
    b16(sport);
    b16(dport);
    b16(len);
    b16(0);
}
static size_t ip6(unsigned nh, const char *src, const char *dst)
{
    size_t at = fl;
    b32(0x60000000);
    b16(0);             /* payload length, ip6_done */
    b8(nh);
    b8(64);
    bip6(src);
    bip6(dst);
    return at;
}
static void ip6_done(size_t at) { set16(at + 4, (unsigned)(fl - at - 40)); }

static struct net_frame f;
static const char *why;

static int parse(void)
{
    why = NULL;
    return net_frame_parse(fr, fl, &f, &why);
}

static void expect_err(enum nf_err e)
{
    ck_assert_int_eq(parse(), -EBADMSG);
    ck_assert_msg(f.err == e, "err %s, want %s", net_frame_errname(f.err), net_frame_errname(e));
    ck_assert_ptr_nonnull(why);
    ck_assert_str_eq(why, net_frame_strerror(e));
}

static uint32_t v4(const struct nf_addr *a)
{
    ck_assert_int_eq(a->family, 4);
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    ck_assert_mem_eq(a->b, mapped, 12);
    return (uint32_t)a->b[12] << 24 | a->b[13] << 16 | a->b[14] << 8 | a->b[15];
}

START_TEST(ethernet)
{
    eth(0x1234);
    for (size_t n = 0; n < NF_ETH_HLEN; n++) {
        ck_assert_int_eq(net_frame_parse(fr, n, &f, &why), -EBADMSG);
        ck_assert_int_eq(f.err, NF_E_ETH_SHORT);
    }
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.l3, NF_L3_OTHER);
    ck_assert_int_eq(f.ethertype, 0x1234);
    ck_assert_int_eq(f.l3_off, 14);
    ck_assert_int_eq(f.dst_mac[5], 1);
    ck_assert_int_eq(f.src_mac[5], 2);
    eth(0x0040);        /* an 802.3 length field: not parsed, not an error */
    bz(64);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.l3, NF_L3_OTHER);
    ck_assert_int_eq(net_frame_parse(fr, fl, &f, NULL), 0);   /* why may be NULL */
}
END_TEST

START_TEST(vlan)
{
    eth(NF_ETHERTYPE_VLAN);
    b16(0x2064);
    b16(NF_ETHERTYPE_IPV4);
    size_t at = ip4(5, 0, 17, 0x0a000001, 0x0a000002);
    udp(1000, 2000, 8);
    ip4_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.n_vlan, 1);
    ck_assert_int_eq(f.vlan_tpid[0], NF_ETHERTYPE_VLAN);
    ck_assert_int_eq(f.vlan_tci[0], 0x2064);
    ck_assert_int_eq(f.l3, NF_L3_IPV4);
    ck_assert_int_eq(f.l3_off, 18);
    ck_assert_int_eq(f.dport, 2000);

    /* QinQ: 802.1ad outer, 802.1Q inner */
    eth(NF_ETHERTYPE_QINQ);
    b16(0x0005);
    b16(NF_ETHERTYPE_VLAN);
    b16(0x0007);
    b16(NF_ETHERTYPE_ARP);
    b16(1); b16(0x0800); b8(6); b8(4); b16(1);
    bz(20);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.n_vlan, 2);
    ck_assert_int_eq(f.vlan_tpid[0], NF_ETHERTYPE_QINQ);
    ck_assert_int_eq(f.vlan_tci[0], 5);
    ck_assert_int_eq(f.vlan_tci[1], 7);
    ck_assert_int_eq(f.l3, NF_L3_ARP);
    ck_assert_int_eq(f.l3_off, 22);

    /* a third tag */
    eth(NF_ETHERTYPE_VLAN);
    b16(1); b16(NF_ETHERTYPE_VLAN);
    b16(2); b16(NF_ETHERTYPE_QINQ);
    b16(3); b16(NF_ETHERTYPE_IPV4);
    bz(40);
    expect_err(NF_E_VLAN_DEPTH);

    /* cut inside the tag (TCI or the next EtherType missing) */
    eth(NF_ETHERTYPE_VLAN);
    b16(1);
    b16(NF_ETHERTYPE_IPV4);
    for (size_t n = 14; n < 18; n++) {
        ck_assert_int_eq(net_frame_parse(fr, n, &f, NULL), -EBADMSG);
        ck_assert_int_eq(f.err, NF_E_VLAN_SHORT);
    }
    eth(NF_ETHERTYPE_VLAN);
    b16(1); b16(NF_ETHERTYPE_VLAN);
    b16(2);
    expect_err(NF_E_VLAN_SHORT);
}
END_TEST

static void arp_frame(unsigned htype, unsigned ptype, unsigned hlen, unsigned plen)
{
    eth(NF_ETHERTYPE_ARP);
    b16(htype); b16(ptype); b8(hlen); b8(plen); b16(1);
    for (int i = 0; i < 6; i++) b8(0x10 + i);
    b32(0x0a000002);
    bz(6);
    b32(0x0a000001);
}

START_TEST(arp)
{
    arp_frame(1, 0x0800, 6, 4);
    size_t full = fl;
    bz(18);             /* padding to 60 bytes */
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.l3, NF_L3_ARP);
    ck_assert_int_eq(f.arp_op, 1);
    ck_assert_int_eq(f.arp_sha[5], 0x15);
    ck_assert_uint_eq(v4(&f.src), 0x0a000002);
    ck_assert_uint_eq(v4(&f.dst), 0x0a000001);
    for (size_t n = 14; n < full; n++) {
        ck_assert_int_eq(net_frame_parse(fr, n, &f, NULL), -EBADMSG);
        ck_assert_int_eq(f.err, NF_E_ARP_SHORT);
    }
    arp_frame(6, 0x0800, 6, 4);
    expect_err(NF_E_ARP_FORMAT);
    arp_frame(1, 0x86dd, 6, 4);
    expect_err(NF_E_ARP_FORMAT);
    arp_frame(1, 0x0800, 8, 4);
    expect_err(NF_E_ARP_FORMAT);
    arp_frame(1, 0x0800, 6, 16);
    expect_err(NF_E_ARP_FORMAT);
}
END_TEST

START_TEST(ipv4_tcp)
{
    eth(NF_ETHERTYPE_IPV4);
    size_t at = ip4(5, 0x4000, 6, 0x0a000002, 0x5db8d822);
    tcp(40000, 443, 5, 0x02);
    b32(0xdeadbeef);
    ip4_done(at);
    size_t full = fl;
    bz(10);             /* link padding after the datagram */
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.l3, NF_L3_IPV4);
    ck_assert_uint_eq(v4(&f.src), 0x0a000002);
    ck_assert_uint_eq(v4(&f.dst), 0x5db8d822);
    ck_assert_int_eq(f.proto, 6);
    ck_assert_int_eq(f.ttl, 64);
    ck_assert_int_eq(f.ip_len, full - 14);
    ck_assert_uint_eq(f.flags, NF_F_L4 | NF_F_PORTS);       /* DF is not a fragment */
    ck_assert_int_eq(f.sport, 40000);
    ck_assert_int_eq(f.dport, 443);
    ck_assert_int_eq(f.tcp_flags, 0x02);
    ck_assert_int_eq(f.l4_off, 34);
    ck_assert_int_eq(f.payload_off, 54);
    ck_assert_int_eq(f.payload_len, 4);        /* the padding is not payload */

    /* TCP options: data offset 8 */
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(5, 0, 6, 1, 2);
    tcp(1, 2, 8, 0x10);
    b8(0xaa);
    ip4_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.payload_off, 14 + 20 + 32);
    ck_assert_int_eq(f.payload_len, 1);

    /* truncated anywhere: the IPv4 header, then the total length */
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(5, 0, 6, 1, 2);
    tcp(1, 2, 5, 0);
    ip4_done(at);
    for (size_t n = 14; n < fl; n++) {
        ck_assert_int_eq(net_frame_parse(fr, n, &f, NULL), -EBADMSG);
        ck_assert_int_eq(f.err, n < 34 ? NF_E_IP4_SHORT : NF_E_IP4_TRUNC);
    }
}
END_TEST

START_TEST(ipv4_header_errors)
{
    eth(NF_ETHERTYPE_IPV4);
    size_t at = ip4(5, 0, 17, 1, 2);
    udp(1, 2, 8);
    ip4_done(at);
    fr[at] = 0x65;                      /* version 6 */
    expect_err(NF_E_IP4_VERSION);
    fr[at] = 0x44;                      /* IHL 4 */
    expect_err(NF_E_IP4_IHL);
    fr[at] = 0x40;
    expect_err(NF_E_IP4_IHL);
    fr[at] = 0x4f;                      /* IHL 15 = 60 bytes, 28 present */
    expect_err(NF_E_IP4_IHL_TRUNC);
    fr[at] = 0x45;
    set16(at + 2, 19);                  /* total length < 20 */
    expect_err(NF_E_IP4_TOTLEN);
    set16(at + 2, 29);                  /* one past the frame */
    expect_err(NF_E_IP4_TRUNC);
    set16(at + 2, 0xffff);
    expect_err(NF_E_IP4_TRUNC);
    set16(at + 2, 28);
    ck_assert_int_eq(parse(), 0);

    /* IHL 6 (4 option bytes) with total length 22: header beyond total length */
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(6, 0, 17, 1, 2);
    udp(1, 2, 8);
    set16(at + 2, 22);
    expect_err(NF_E_IP4_TOTLEN);
    /* and a header exactly as long as the datagram: no L4 bytes */
    set16(at + 2, 24);
    fr[at + 9] = 253;                   /* experimental protocol: opaque */
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.payload_len, 0);
}
END_TEST

/* IPv4 with the given option bytes (padded with EOL to a multiple of 4) */
static size_t ip4_opts(const uint8_t *o, size_t n)
{
    eth(NF_ETHERTYPE_IPV4);
    size_t words = 5 + (n + 3) / 4;
    size_t at = ip4((unsigned)words, 0, 17, 1, 2);
    memcpy(fr + at + 20, o, n);
    udp(1, 2, 8);
    ip4_done(at);
    return at;
}

START_TEST(ipv4_options)
{
    static const uint8_t nop_eol[] = { 1, 1, 0, 0 };
    ip4_opts(nop_eol, sizeof nop_eol);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.l4_off, 14 + 24);
    static const uint8_t rr[] = { 7, 7, 4, 0, 0, 0, 0, 1 };  /* record route, then NOP */
    ip4_opts(rr, sizeof rr);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags & NF_F_SRCROUTE, 0);
    static const uint8_t lsrr[] = { 131, 7, 4, 10, 0, 0, 9, 0 };
    ip4_opts(lsrr, sizeof lsrr);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags & NF_F_SRCROUTE, NF_F_SRCROUTE);
    static const uint8_t ssrr[] = { 1, 137, 3, 0 };
    ip4_opts(ssrr, sizeof ssrr);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags & NF_F_SRCROUTE, NF_F_SRCROUTE);

    static const uint8_t overrun[] = { 7, 9, 4, 0 };         /* length 9 in a 4-byte area */
    ip4_opts(overrun, sizeof overrun);
    expect_err(NF_E_IP4_OPT);
    static const uint8_t by_one[] = { 1, 1, 7, 3 };          /* length 3 where 2 bytes remain */
    ip4_opts(by_one, sizeof by_one);
    expect_err(NF_E_IP4_OPT);
    static const uint8_t len1[] = { 68, 1, 0, 0 };           /* length below 2 */
    ip4_opts(len1, sizeof len1);
    expect_err(NF_E_IP4_OPT);
    static const uint8_t len0[] = { 1, 1, 68, 0 };           /* length 0: would loop */
    ip4_opts(len0, sizeof len0);
    expect_err(NF_E_IP4_OPT);
    static const uint8_t no_len[] = { 1, 1, 1, 7 };          /* type in the last byte */
    ip4_opts(no_len, sizeof no_len);
    expect_err(NF_E_IP4_OPT);
    static const uint8_t exact[] = { 68, 4, 5, 0 };          /* fills the area exactly */
    ip4_opts(exact, sizeof exact);
    ck_assert_int_eq(parse(), 0);
}
END_TEST

START_TEST(ipv4_fragments)
{
    /* first fragment: MF, offset 0, with the TCP header */
    eth(NF_ETHERTYPE_IPV4);
    size_t at = ip4(5, 0x2000, 6, 1, 2);
    tcp(5000, 80, 5, 0x18);
    bz(4);
    ip4_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags, NF_F_FRAG | NF_F_FRAG_FIRST | NF_F_L4 | NF_F_PORTS);
    ck_assert(f.frag_more);
    ck_assert_int_eq(f.frag_off, 0);
    ck_assert_int_eq(f.frag_id, 0x1234);
    ck_assert_int_eq(f.dport, 80);

    /* a tiny first fragment that cuts the TCP header (RFC 1858) */
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(5, 0x2000, 6, 1, 2);
    bz(8);
    ip4_done(at);
    expect_err(NF_E_TCP_SHORT);
    ck_assert_uint_eq(v4(&f.dst), 2);   /* what was parsed stays */

    /* a non-first fragment: no L4 header, however its bytes look */
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(5, 0x2000 | 3, 6, 1, 2);
    bz(16);
    ip4_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags, NF_F_FRAG);
    ck_assert_int_eq(f.frag_off, 24);
    ck_assert_int_eq(f.proto, 6);
    ck_assert_int_eq(f.payload_off, 34);
    ck_assert_int_eq(f.payload_len, 16);
    ck_assert_int_eq(f.dport, 0);

    /* the last fragment: any length */
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(5, 3, 17, 1, 2);
    bz(5);
    ip4_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags, NF_F_FRAG);
    ck_assert(!f.frag_more);

    /* a non-last fragment not a multiple of 8 */
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(5, 0x2000 | 3, 17, 1, 2);
    bz(12);
    ip4_done(at);
    expect_err(NF_E_IP4_FRAG);

    /* offset + length past 65535 */
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(5, 0x1fff, 17, 1, 2);      /* offset 65528 */
    bz(8);
    ip4_done(at);
    expect_err(NF_E_IP4_FRAG);
    set16(at + 2, 27);                  /* 7 bytes: ends at 65535 */
    ck_assert_int_eq(parse(), 0);

    /* UDP first fragment: the UDP length covers the whole datagram */
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(5, 0x2000, 17, 1, 2);
    udp(53, 4000, 3000);
    bz(16);
    ip4_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.payload_len, 16);
    /* the same, not a fragment: a lie */
    set16(at + 6, 0);
    expect_err(NF_E_UDP_LEN_TRUNC);
}
END_TEST

START_TEST(tcp_errors)
{
    eth(NF_ETHERTYPE_IPV4);
    size_t at = ip4(5, 0, 6, 1, 2);
    tcp(1, 2, 5, 0);
    ip4_done(at);
    for (unsigned cut = 1; cut <= 20; cut++) {   /* 0..19 TCP bytes */
        set16(at + 2, 40 - cut);
        ck_assert_int_eq(net_frame_parse(fr, fl - cut, &f, NULL), -EBADMSG);
        ck_assert_int_eq(f.err, NF_E_TCP_SHORT);
    }
    set16(at + 2, 40);
    for (unsigned d = 0; d < 5; d++) {
        fr[at + 20 + 12] = (uint8_t)(d << 4);
        expect_err(NF_E_TCP_DOFF);
        ck_assert_uint_eq(v4(&f.dst), 2);
    }
    fr[at + 20 + 12] = 6 << 4;          /* 24 bytes, 20 present */
    expect_err(NF_E_TCP_DOFF_TRUNC);
    fr[at + 20 + 12] = 15 << 4;
    expect_err(NF_E_TCP_DOFF_TRUNC);
    fr[at + 20 + 12] = 5 << 4;
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.payload_len, 0);
}
END_TEST

START_TEST(udp_cases)
{
    eth(NF_ETHERTYPE_IPV4);
    size_t at = ip4(5, 0, 17, 1, 2);
    udp(1234, 53, 12);
    b32(0x01020304);
    ip4_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.sport, 1234);
    ck_assert_int_eq(f.dport, 53);
    ck_assert_int_eq(f.payload_off, 42);
    ck_assert_int_eq(f.payload_len, 4);
    set16(at + 20 + 4, 10);             /* UDP length shorter than the datagram */
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.payload_len, 2);
    set16(at + 20 + 4, 7);
    expect_err(NF_E_UDP_LEN);
    set16(at + 20 + 4, 0);
    expect_err(NF_E_UDP_LEN);
    set16(at + 20 + 4, 13);
    expect_err(NF_E_UDP_LEN_TRUNC);
    set16(at + 20 + 4, 12);
    for (unsigned cut = 5; cut <= 12; cut++) {   /* 0..7 UDP bytes */
        set16(at + 2, 32 - cut);
        ck_assert_int_eq(net_frame_parse(fr, fl - cut, &f, NULL), -EBADMSG);
        ck_assert_int_eq(f.err, NF_E_UDP_SHORT);
    }
}
END_TEST

START_TEST(icmp_cases)
{
    eth(NF_ETHERTYPE_IPV4);
    size_t at = ip4(5, 0, 1, 1, 2);
    b8(8); b8(0); b16(0); b32(0x00010001);
    ip4_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags, NF_F_L4);
    ck_assert_int_eq(f.icmp_type, 8);
    ck_assert_int_eq(f.payload_len, 0);
    set16(at + 2, 27);
    ck_assert_int_eq(net_frame_parse(fr, fl - 1, &f, NULL), -EBADMSG);
    ck_assert_int_eq(f.err, NF_E_ICMP_SHORT);
    /* ICMPv6's number under IPv4: opaque, not parsed */
    set16(at + 2, 28);
    fr[at + 9] = 58;
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags, 0);
    ck_assert_int_eq(f.payload_len, 8);

    eth(NF_ETHERTYPE_IPV6);
    size_t a6 = ip6(58, "fe80::2", "ff02::2");
    b8(133); b8(0); b16(0); b32(0);
    ip6_done(a6);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags, NF_F_L4);
    ck_assert_int_eq(f.icmp_type, 133);
    set16(a6 + 4, 7);
    fl--;
    expect_err(NF_E_ICMP_SHORT);
}
END_TEST

START_TEST(ipv6_basic)
{
    eth(NF_ETHERTYPE_IPV6);
    size_t at = ip6(17, "2001:db8::1", "2606:4700::6810:85e5");
    udp(5353, 53, 10);
    b16(0xabcd);
    ip6_done(at);
    bz(4);              /* padding */
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.l3, NF_L3_IPV6);
    ck_assert_int_eq(f.src.family, 6);
    ck_assert_int_eq(f.dst.family, 6);
    char t[NF_ADDR_STRLEN];
    ck_assert_str_eq(nf_addr_str(&f.dst, t, sizeof t), "2606:4700::6810:85e5");
    ck_assert_int_eq(f.ip_len, 50);
    ck_assert_int_eq(f.dport, 53);
    ck_assert_int_eq(f.payload_len, 2);
    ck_assert_int_eq(f.ttl, 64);

    size_t full = 14 + 50;
    for (size_t n = 14; n < full; n++) {
        ck_assert_int_eq(net_frame_parse(fr, n, &f, NULL), -EBADMSG);
        ck_assert_int_eq(f.err, n < 54 ? NF_E_IP6_SHORT : NF_E_IP6_TRUNC);
    }
    fr[at] = 0x40;
    expect_err(NF_E_IP6_VERSION);
    fr[at] = 0x60;
    set16(at + 4, 0xffff);
    expect_err(NF_E_IP6_TRUNC);

    /* ESP and "no next header": no L4 */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(50, "2001:db8::1", "2001:db8::2");
    bz(24);
    ip6_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.proto, 50);
    ck_assert_uint_eq(f.flags, 0);
    fr[at + 6] = 59;
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.proto, 59);
}
END_TEST

/* An extension header: next header nh, length field len (in its unit),
 * total bytes given (the rest zero = Pad1 options). */
static void ext(unsigned nh, unsigned len, size_t bytes)
{
    b8(nh);
    b8(len);
    bz(bytes - 2);
}

START_TEST(ipv6_extension_headers)
{
    /* HBH, DSTOPTS, ROUTING (segments left 0), DSTOPTS, TCP */
    eth(NF_ETHERTYPE_IPV6);
    size_t at = ip6(0, "2001:db8::1", "2001:db8::2");
    ext(60, 0, 8);
    ext(43, 1, 16);
    ext(60, 0, 8);
    ext(6, 0, 8);
    tcp(1, 22, 5, 2);
    ip6_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.proto, 6);
    ck_assert_int_eq(f.dport, 22);
    ck_assert_int_eq(f.l4_off, 14 + 40 + 40);
    ck_assert_uint_eq(f.flags & NF_F_SRCROUTE, 0);

    /* routing header with segments left: source routed */
    fr[14 + 40 + 8 + 16 + 3] = 2;
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags & NF_F_SRCROUTE, NF_F_SRCROUTE);

    /* hop-by-hop options, TLV by TLV (PadN, Pad1, unknown types) */
    static const uint8_t ok1[6] = { 1, 1, 0, 0x3e, 0, 0 };  /* PadN(1), type 0x3e len 0, Pad1 */
    static const uint8_t ok2[6] = { 0, 0, 0, 5, 1, 9 };     /* a 3-byte option ends exactly */
    static const uint8_t bad1[6] = { 0, 0, 0, 5, 3, 0 };    /* needs 2 bytes past the header */
    static const uint8_t bad2[6] = { 0, 0, 0, 0, 0, 7 };    /* a type with no length byte */
    static const uint8_t bad3[6] = { 1, 5, 0, 0, 0, 0 };    /* PadN longer than the header */
    const uint8_t *const cases[] = { ok1, ok2, bad1, bad2, bad3 };
    for (unsigned c = 0; c < 5; c++) {
        eth(NF_ETHERTYPE_IPV6);
        at = ip6(0, "::1", "::2");
        b8(17);
        b8(0);
        memcpy(fr + fl, cases[c], 6);
        fl += 6;
        udp(1, 2, 8);
        ip6_done(at);
        if (c < 2)
            ck_assert_int_eq(parse(), 0);
        else
            expect_err(NF_E_IP6_OPT);
    }
    /* the same walk for destination options */
    fr[14 + 6] = 60;
    expect_err(NF_E_IP6_OPT);

    /* hop-by-hop in second place */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(60, "::1", "::2");
    ext(0, 0, 8);
    ext(17, 0, 8);
    udp(1, 2, 8);
    ip6_done(at);
    expect_err(NF_E_IP6_HBH_POS);

    /* NF_IP6_EXT_MAX destination options headers pass, one more does not */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(60, "::1", "::2");
    for (unsigned i = 0; i < NF_IP6_EXT_MAX; i++)
        ext(i + 1 < NF_IP6_EXT_MAX ? 60 : 17, 0, 8);
    udp(1, 2, 8);
    ip6_done(at);
    ck_assert_int_eq(parse(), 0);
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(60, "::1", "::2");
    for (unsigned i = 0; i <= NF_IP6_EXT_MAX; i++)
        ext(i < NF_IP6_EXT_MAX ? 60 : 17, 0, 8);
    udp(1, 2, 8);
    ip6_done(at);
    expect_err(NF_E_IP6_EXT_MANY);

    /* an extension header overrunning the payload: by its length, or
     * fewer than 8 bytes left */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(60, "::1", "::2");
    ext(17, 4, 8);                      /* says 40 bytes */
    udp(1, 2, 8);
    ip6_done(at);
    expect_err(NF_E_IP6_EXT_TRUNC);
    for (size_t cut = 1; cut < 8; cut++) {
        eth(NF_ETHERTYPE_IPV6);
        at = ip6(60, "::1", "::2");
        bz(8 - cut);
        ip6_done(at);
        expect_err(NF_E_IP6_EXT_TRUNC);
    }
    /* AH: (len + 2) * 4 bytes */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(51, "::1", "::2");
    ext(6, 4, 24);
    tcp(1, 443, 5, 0);
    ip6_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(f.dport, 443);
    fr[14 + 40 + 1] = 5;                /* 28 bytes: runs into TCP, then TCP is short */
    ck_assert_int_eq(parse(), -EBADMSG);
    fr[14 + 40 + 1] = 20;               /* 88 bytes: past the payload */
    expect_err(NF_E_IP6_EXT_TRUNC);
}
END_TEST

static size_t frag6(unsigned nh, unsigned off_bytes, bool more, uint32_t id)
{
    b8(nh);
    b8(0);
    b16(off_bytes | (more ? 1 : 0));
    b32(id);
    return fl;
}

START_TEST(ipv6_fragments)
{
    /* first fragment with the UDP header */
    eth(NF_ETHERTYPE_IPV6);
    size_t at = ip6(44, "2001:db8::1", "2001:db8::2");
    frag6(17, 0, true, 0xcafe);
    udp(1000, 53, 2000);
    bz(8);
    ip6_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags, NF_F_FRAG | NF_F_FRAG_FIRST | NF_F_L4 | NF_F_PORTS);
    ck_assert_uint_eq(f.frag_id, 0xcafe);
    ck_assert_int_eq(f.dport, 53);

    /* a non-first one: the protocol from the fragment header, no L4 */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(44, "2001:db8::1", "2001:db8::2");
    frag6(6, 1280, true, 7);
    bz(16);
    ip6_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags, NF_F_FRAG);
    ck_assert_int_eq(f.proto, 6);
    ck_assert_int_eq(f.frag_off, 1280);
    ck_assert_int_eq(f.payload_off, 14 + 48);
    ck_assert_int_eq(f.payload_len, 16);

    /* not a multiple of 8 with M set; past 65535 */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(44, "::1", "::2");
    frag6(6, 8, true, 7);
    bz(12);
    ip6_done(at);
    expect_err(NF_E_IP6_FRAG);
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(44, "::1", "::2");
    frag6(6, 65528, false, 7);
    bz(8);
    ip6_done(at);
    expect_err(NF_E_IP6_FRAG);

    /* two fragment headers */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(44, "::1", "::2");
    frag6(44, 0, true, 7);
    frag6(17, 0, true, 8);
    udp(1, 2, 8);
    ip6_done(at);
    expect_err(NF_E_IP6_FRAG_DUP);

    /* an atomic fragment (offset 0, M 0) is not a fragment */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(44, "::1", "::2");
    frag6(6, 0, false, 9);
    tcp(1, 80, 5, 2);
    ip6_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags & NF_F_FRAG, 0);
    ck_assert_int_eq(f.dport, 80);

    /* a first fragment must hold the whole header chain (RFC 7112) */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(44, "::1", "::2");
    frag6(6, 0, true, 9);
    bz(8);
    ip6_done(at);
    expect_err(NF_E_TCP_SHORT);
}
END_TEST

START_TEST(errors_total)
{
    for (int i = 0; i < NF_E__COUNT; i++) {
        ck_assert_str_ne(net_frame_strerror((enum nf_err)i), "unknown frame error");
        ck_assert_str_ne(net_frame_errname((enum nf_err)i), "unknown");
        for (int j = 0; j < i; j++) {
            ck_assert_str_ne(net_frame_strerror((enum nf_err)i), net_frame_strerror((enum nf_err)j));
            ck_assert_str_ne(net_frame_errname((enum nf_err)i), net_frame_errname((enum nf_err)j));
        }
    }
    ck_assert_str_eq(net_frame_strerror(NF_E__COUNT), "unknown frame error");
    ck_assert_str_eq(net_frame_errname(NF_E__COUNT), "unknown");
}
END_TEST

START_TEST(addr_text)
{
    struct nf_addr a;
    char t[NF_ADDR_STRLEN];
    const uint8_t b4[4] = { 169, 254, 169, 254 };
    nf_addr_v4(&a, b4);
    ck_assert_str_eq(nf_addr_str(&a, t, sizeof t), "169.254.169.254");
    uint8_t b16[16];
    inet_pton(AF_INET6, "fd00:ec2::254", b16);
    nf_addr_v6(&a, b16);
    ck_assert_str_eq(nf_addr_str(&a, t, sizeof t), "fd00:ec2::254");
    a.family = 0;
    ck_assert_str_eq(nf_addr_str(&a, t, sizeof t), "-");
    nf_addr_v4(&a, b4);
    ck_assert_str_eq(nf_addr_str(&a, t, 4), "-");   /* too small a buffer */
}
END_TEST

/* ---- the virtio-net header (net_vhdr_check) ---- */

#define OFF_ALL (NF_OFF_CSUM | NF_OFF_TSO4 | NF_OFF_TSO6)

static struct net_vhdr vh(unsigned flags, unsigned gso, unsigned hdr_len, unsigned gso_size, unsigned start,
                          unsigned off)
{
    return (struct net_vhdr){ .flags = (uint8_t)flags, .gso_type = (uint8_t)gso, .hdr_len = (uint16_t)hdr_len,
                              .gso_size = (uint16_t)gso_size, .csum_start = (uint16_t)start,
                              .csum_offset = (uint16_t)off, .num_buffers = 0x5a5a };
}

/* net_vhdr_check on the frame in fr (parsed here, whatever the result) */
static enum nf_vhdr_err vcheck(struct net_vhdr h, unsigned offl, unsigned mtu, struct net_vhdr *out)
{
    parse();
    struct net_vhdr o = { .flags = 0xee, .num_buffers = 0xeeee }, before = o;
    enum nf_vhdr_err e = (enum nf_vhdr_err)-1;
    const char *w = NULL;
    int r = net_vhdr_check(&h, &f, fl, offl, mtu, &o, &e, &w);
    if (r == 0) {
        ck_assert_int_eq(e, NF_VH_OK);
        ck_assert_ptr_null(w);
    } else {
        ck_assert_int_eq(r, -EBADMSG);
        ck_assert_int_ne(e, NF_VH_OK);
        ck_assert_ptr_nonnull(w);
        ck_assert_mem_eq(&o, &before, sizeof o);       /* untouched */
    }
    if (out)
        *out = o;
    return e;
}

#define VH_EXPECT(h, offl, mtu, want)                                                                   \
    do {                                                                                                \
        enum nf_vhdr_err e_ = vcheck((h), (offl), (mtu), NULL);                                         \
        ck_assert_msg(e_ == (want), "line %d: %s, want %s", __LINE__, net_vhdr_errname(e_), net_vhdr_errname(want)); \
    } while (0)

/* IPv4 / TCP or UDP with n payload bytes, to 10.0.0.2; L4 at 34 */
static void v4_l4(unsigned proto, size_t n)
{
    eth(NF_ETHERTYPE_IPV4);
    size_t at = ip4(5, 0x4000, proto, 0x0a000001, 0x0a000002);
    if (proto == NF_IPPROTO_TCP)
        tcp(40000, 443, 5, 0x18);
    else if (proto == NF_IPPROTO_UDP)
        udp(40000, 53, (unsigned)(8 + n));
    else
        b32(0x08000000), b32(1);      /* ICMP echo */
    bz(n);
    ip4_done(at);
}

static void v6_l4(unsigned proto, size_t n)
{
    eth(NF_ETHERTYPE_IPV6);
    size_t at = ip6(proto, "2001:db8::1", "2001:db8::2");
    if (proto == NF_IPPROTO_TCP)
        tcp(40000, 443, 5, 0x18);
    else if (proto == NF_IPPROTO_UDP)
        udp(40000, 53, (unsigned)(8 + n));
    else
        b32(0x80000000), b32(1);      /* ICMPv6 echo */
    bz(n);
    ip6_done(at);
}

START_TEST(vhdr_plain)
{
    struct net_vhdr o;
    /* no flags, no GSO: nothing to parse (f may be NULL); the unused
     * fields are not handed on */
    v4_l4(NF_IPPROTO_TCP, 100);
    struct net_vhdr h = vh(0, 0, 0, 1234, 30, 0);
    ck_assert(!net_vhdr_active(&h));
    o = vh(0xff, 0xff, 1, 1, 1, 1);
    ck_assert_int_eq(net_vhdr_check(&h, NULL, fl, 0, 1500, &o, NULL, NULL), 0);
    ck_assert_uint_eq(o.flags | o.gso_type | o.hdr_len | o.gso_size | o.csum_start | o.csum_offset | o.num_buffers, 0);
    /* hdr_len: up to the frame (a hint), never past it */
    h.hdr_len = (uint16_t)fl;
    ck_assert_int_eq(net_vhdr_check(&h, NULL, fl, 0, 1500, &o, NULL, NULL), 0);
    VH_EXPECT(vh(0, 0, fl + 1, 0, 0, 0), 0, 1500, NF_VH_HDR_LEN);
    VH_EXPECT(vh(0, 0, 0xffff, 0, 0, 0), OFF_ALL, 1500, NF_VH_HDR_LEN);
    VH_EXPECT(vh(1, 0, fl + 1, 0, 34, 16), OFF_ALL, 1500, NF_VH_HDR_LEN);
    /* a frame that is not even parsed: fine without flags */
    eth(0x88b5);
    bz(50);
    VH_EXPECT(vh(0, 0, 0, 0, 0, 0), 0, 1500, NF_VH_OK);
    eth(NF_ETHERTYPE_IPV4);
    bz(3);                                  /* malformed IPv4 */
    VH_EXPECT(vh(0, 0, 0, 0, 0, 0), 0, 1500, NF_VH_OK);
}
END_TEST

START_TEST(vhdr_flags)
{
    v4_l4(NF_IPPROTO_TCP, 10);
    /* DATA_VALID is for receive only (the driver must not set it); RSC_INFO
     * and unknown bits: refused, alone or with NEEDS_CSUM */
    static const unsigned bad[] = { NF_VHDR_F_DATA_VALID, NF_VHDR_F_NEEDS_CSUM | NF_VHDR_F_DATA_VALID, 0x04, 0x08,
                                    0x10, 0x40, 0x80, 0xff };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        VH_EXPECT(vh(bad[i], 0, 0, 0, 34, 16), OFF_ALL, 1500, NF_VH_FLAGS);
        struct net_vhdr h = vh(bad[i], 0, 0, 0, 34, 16);
        ck_assert(net_vhdr_active(&h));
    }
}
END_TEST

START_TEST(vhdr_csum_good)
{
    struct net_vhdr o;
    /* TCP and UDP over IPv4: csum_start at the L4 header, 16 / 6 */
    v4_l4(NF_IPPROTO_TCP, 100);
    ck_assert_int_eq(vcheck(vh(1, 0, 0, 0, 34, 16), NF_OFF_CSUM, 1500, &o), NF_VH_OK);
    ck_assert_uint_eq(o.flags, 1);
    ck_assert_uint_eq(o.csum_start, 34);
    ck_assert_uint_eq(o.csum_offset, 16);
    ck_assert_uint_eq(o.gso_type | o.gso_size | o.hdr_len | o.num_buffers, 0);
    v4_l4(NF_IPPROTO_UDP, 100);
    VH_EXPECT(vh(1, 0, 0, 0, 34, 6), NF_OFF_CSUM, 1500, NF_VH_OK);
    /* Ethernet padding after the datagram: still fine */
    v4_l4(NF_IPPROTO_UDP, 2);
    bz(8);
    VH_EXPECT(vh(1, 0, 0, 0, 34, 6), NF_OFF_CSUM, 1500, NF_VH_OK);
    /* IPv4 options: L4 further on */
    eth(NF_ETHERTYPE_IPV4);
    size_t at = ip4(7, 0, NF_IPPROTO_TCP, 1, 2);
    tcp(1, 2, 5, 0x10);
    ip4_done(at);
    VH_EXPECT(vh(1, 0, 0, 0, 42, 16), NF_OFF_CSUM, 1500, NF_VH_OK);
    VH_EXPECT(vh(1, 0, 0, 0, 34, 16), NF_OFF_CSUM, 1500, NF_VH_CSUM_START);
    /* IPv6 */
    v6_l4(NF_IPPROTO_TCP, 10);
    VH_EXPECT(vh(1, 0, 0, 0, 54, 16), NF_OFF_CSUM, 1500, NF_VH_OK);
    v6_l4(NF_IPPROTO_UDP, 10);
    VH_EXPECT(vh(1, 0, 0, 0, 54, 6), NF_OFF_CSUM, 1500, NF_VH_OK);
    /* a VLAN tag: the offsets count it (the policy drops such frames;
     * the header check does not judge that) */
    eth(NF_ETHERTYPE_VLAN);
    b16(5);
    b16(NF_ETHERTYPE_IPV4);
    at = ip4(5, 0, NF_IPPROTO_TCP, 1, 2);
    tcp(1, 2, 5, 0x10);
    ip4_done(at);
    VH_EXPECT(vh(1, 0, 0, 0, 38, 16), NF_OFF_CSUM, 1500, NF_VH_OK);
    VH_EXPECT(vh(1, 0, 0, 0, 34, 16), NF_OFF_CSUM, 1500, NF_VH_CSUM_START);
    /* out may be the header itself */
    v4_l4(NF_IPPROTO_TCP, 10);
    parse();
    struct net_vhdr h = vh(1, 0, 7, 99, 34, 16);
    ck_assert_int_eq(net_vhdr_check(&h, &f, fl, NF_OFF_CSUM, 1500, &h, NULL, NULL), 0);
    ck_assert_uint_eq(h.csum_start, 34);
    ck_assert_uint_eq(h.hdr_len | h.gso_size | h.num_buffers, 0);
}
END_TEST

START_TEST(vhdr_csum_start_offset)
{
    /* csum_start anywhere but the L4 header: into the Ethernet header, the
     * IPv4 header (source, destination), the ports, the payload, past the
     * end */
    v4_l4(NF_IPPROTO_UDP, 20);
    static const unsigned starts[] = { 0, 6, 12, 14, 24, 26, 30, 32, 33, 35, 36, 40, 42, 60, 1000, 0xffff };
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++)
        for (unsigned off = 0; off <= 16; off += 2)
            VH_EXPECT(vh(1, 0, 0, 0, starts[i], off), NF_OFF_CSUM, 1500, NF_VH_CSUM_START);
    /* IPv6: the destination address, the case (fd00:ec2::254 written
     * over an allowed address) */
    v6_l4(NF_IPPROTO_TCP, 20);
    for (unsigned st = 14 + 24; st < 14 + 40; st += 2)
        VH_EXPECT(vh(1, 0, 0, 0, st, 0), NF_OFF_CSUM, 1500, NF_VH_CSUM_START);
    /* csum_offset other than the protocol's field */
    v4_l4(NF_IPPROTO_TCP, 20);
    static const unsigned toffs[] = { 0, 2, 6, 14, 15, 17, 18, 20, 0xffff };
    for (size_t i = 0; i < sizeof toffs / sizeof toffs[0]; i++)
        VH_EXPECT(vh(1, 0, 0, 0, 34, toffs[i]), NF_OFF_CSUM, 1500, NF_VH_CSUM_OFFSET);
    v4_l4(NF_IPPROTO_UDP, 20);
    static const unsigned uoffs[] = { 0, 2, 4, 5, 7, 8, 16, 0xfffe };
    for (size_t i = 0; i < sizeof uoffs / sizeof uoffs[0]; i++)
        VH_EXPECT(vh(1, 0, 0, 0, 34, uoffs[i]), NF_OFF_CSUM, 1500, NF_VH_CSUM_OFFSET);
    /* IPv6 extension headers between the IP header and L4: csum_start is
     * the L4 offset the parser found after them, not the first one */
    eth(NF_ETHERTYPE_IPV6);
    size_t at = ip6(0, "2001:db8::1", "2001:db8::2");
    ext(60, 0, 8);
    ext(6, 1, 16);
    tcp(1, 443, 5, 0x10);
    ip6_done(at);
    VH_EXPECT(vh(1, 0, 0, 0, 14 + 40 + 24, 16), NF_OFF_CSUM, 1500, NF_VH_OK);
    VH_EXPECT(vh(1, 0, 0, 0, 14 + 40, 16), NF_OFF_CSUM, 1500, NF_VH_CSUM_START);
    VH_EXPECT(vh(1, 0, 0, 0, 14 + 40 + 8, 16), NF_OFF_CSUM, 1500, NF_VH_CSUM_START);
    /* csum_start + csum_offset + 2 past the frame: a frame cut inside its
     * TCP header does not parse; one cut after it has the field inside */
    v4_l4(NF_IPPROTO_TCP, 0);
    fl = 14 + 20 + 17;
    set16(14 + 2, 20 + 17);
    VH_EXPECT(vh(1, 0, 0, 0, 34, 16), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    VH_EXPECT(vh(1, 0, 0, 0, fl - 1, 0), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    /* without VIRTIO_NET_F_CSUM negotiated */
    v4_l4(NF_IPPROTO_TCP, 20);
    VH_EXPECT(vh(1, 0, 0, 0, 34, 16), NF_OFF_TSO4 | NF_OFF_TSO6, 1500, NF_VH_CSUM_OFFLOAD);
}
END_TEST

START_TEST(vhdr_csum_frame)
{
    /* NEEDS_CSUM where there is no TCP/UDP checksum to fill: ICMP,
     * ICMPv6, ARP, another EtherType, a protocol not parsed, a malformed
     * frame, fragments (first, later; IPv4 and IPv6) */
    v4_l4(NF_IPPROTO_ICMP, 20);
    VH_EXPECT(vh(1, 0, 0, 0, 34, 2), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    v6_l4(NF_IPPROTO_ICMPV6, 20);
    VH_EXPECT(vh(1, 0, 0, 0, 54, 2), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    eth(NF_ETHERTYPE_ARP);
    b16(1), b16(0x0800), b8(6), b8(4), b16(1), bz(20);
    VH_EXPECT(vh(1, 0, 0, 0, 14, 0), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    eth(0x88b5);
    bz(60);
    VH_EXPECT(vh(1, 0, 0, 0, 14, 0), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    eth(NF_ETHERTYPE_IPV4);
    size_t at = ip4(5, 0, 47, 1, 2);          /* GRE */
    bz(40);
    ip4_done(at);
    VH_EXPECT(vh(1, 0, 0, 0, 34, 16), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    v4_l4(NF_IPPROTO_TCP, 20);
    fr[14 + 20 + 12] = 0x40;                    /* data offset 4: malformed */
    VH_EXPECT(vh(1, 0, 0, 0, 34, 16), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    /* IPv4 first fragment (MF, the UDP header in it), and a later one */
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(5, 0x2000, NF_IPPROTO_UDP, 1, 2);
    udp(1, 2, 100);
    bz(16);
    ip4_done(at);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(f.flags & NF_F_PORTS, NF_F_PORTS);
    VH_EXPECT(vh(1, 0, 0, 0, 34, 6), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    eth(NF_ETHERTYPE_IPV4);
    at = ip4(5, 3, NF_IPPROTO_UDP, 1, 2);
    bz(24);
    ip4_done(at);
    VH_EXPECT(vh(1, 0, 0, 0, 34, 6), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    /* IPv6 first fragment */
    eth(NF_ETHERTYPE_IPV6);
    at = ip6(44, "2001:db8::1", "2001:db8::2");
    b8(17), b8(0), b16(1), b32(9);               /* fragment header: offset 0, M */
    udp(1, 2, 100);
    bz(16);
    ip6_done(at);
    VH_EXPECT(vh(1, 0, 0, 0, 62, 6), NF_OFF_CSUM, 1500, NF_VH_CSUM_FRAME);
    /* an atomic fragment (offset 0, M 0) is no fragment (RFC 6946) */
    fr[14 + 40 + 3] = 0;
    set16(62 + 4, 24);                          /* (the UDP length: now the whole datagram) */
    VH_EXPECT(vh(1, 0, 0, 0, 62, 6), NF_OFF_CSUM, 1500, NF_VH_OK);
}
END_TEST

START_TEST(vhdr_gso)
{
    struct net_vhdr o;
    /* TSO over IPv4 and IPv6: the header handed on carries the parsed
     * header length as hdr_len */
    v4_l4(NF_IPPROTO_TCP, 3000);
    ck_assert_int_eq(vcheck(vh(1, NF_VHDR_GSO_TCPV4, 54, 1460, 34, 16), OFF_ALL, 1500, &o), NF_VH_OK);
    ck_assert_uint_eq(o.gso_type, NF_VHDR_GSO_TCPV4);
    ck_assert_uint_eq(o.gso_size, 1460);
    ck_assert_uint_eq(o.hdr_len, 54);
    ck_assert_uint_eq(o.num_buffers, 0);
    ck_assert_int_eq(vcheck(vh(1, NF_VHDR_GSO_TCPV4, 0, 1000, 34, 16), NF_OFF_CSUM | NF_OFF_TSO4, 0, &o), NF_VH_OK);
    ck_assert_uint_eq(o.hdr_len, 54);
    v6_l4(NF_IPPROTO_TCP, 3000);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV6, 74, 1440, 54, 16), NF_OFF_CSUM | NF_OFF_TSO6, 1500, NF_VH_OK);
    /* gso_size: below NF_VHDR_GSO_MIN (1 would make the host cut one frame
     * into thousands of segments), or segments past the MTU (IP + TCP
     * header + gso_size) */
    v4_l4(NF_IPPROTO_TCP, 3000);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 0, 34, 16), OFF_ALL, 1500, NF_VH_GSO_SIZE);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1, 34, 16), OFF_ALL, 1500, NF_VH_GSO_SIZE);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, NF_VHDR_GSO_MIN - 1, 34, 16), OFF_ALL, 1500, NF_VH_GSO_SIZE);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, NF_VHDR_GSO_MIN, 34, 16), OFF_ALL, 1500, NF_VH_OK);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1461, 34, 16), OFF_ALL, 1500, NF_VH_GSO_SIZE);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1360, 34, 16), OFF_ALL, 1400, NF_VH_OK);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1361, 34, 16), OFF_ALL, 1400, NF_VH_GSO_SIZE);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 65495, 34, 16), OFF_ALL, 0, NF_VH_OK);    /* no MTU: 65535 */
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 65496, 34, 16), OFF_ALL, 0, NF_VH_GSO_SIZE);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 0xffff, 34, 16), OFF_ALL, 0, NF_VH_GSO_SIZE);
    v6_l4(NF_IPPROTO_TCP, 3000);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV6, 0, 1441, 54, 16), OFF_ALL, 1500, NF_VH_GSO_SIZE);
    /* TCP options count in each segment: with timestamps (32 TCP bytes)
     * Linux's MSS on a 1500 MTU is 1448 */
    eth(NF_ETHERTYPE_IPV4);
    size_t at_opt = ip4(5, 0x4000, NF_IPPROTO_TCP, 0x0a000001, 0x0a000002);
    tcp(40000, 443, 8, 0x18);
    bz(3000);
    ip4_done(at_opt);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1448, 34, 16), OFF_ALL, 1500, NF_VH_OK);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1449, 34, 16), OFF_ALL, 1500, NF_VH_GSO_SIZE);
    ck_assert_int_eq(vcheck(vh(1, NF_VHDR_GSO_TCPV4, 0, 1448, 34, 16), OFF_ALL, 1500, &o), NF_VH_OK);
    ck_assert_uint_eq(o.hdr_len, 66);
    v6_l4(NF_IPPROTO_TCP, 3000);
    /* the type must be the frame's: TCPV4 on IPv6, TCPV6 on IPv4, UDP, ICMP,
     * a fragment */
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1000, 54, 16), OFF_ALL, 1500, NF_VH_GSO_FRAME);
    v4_l4(NF_IPPROTO_TCP, 3000);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV6, 0, 1000, 34, 16), OFF_ALL, 1500, NF_VH_GSO_FRAME);
    v4_l4(NF_IPPROTO_UDP, 3000);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1000, 34, 6), OFF_ALL, 1500, NF_VH_GSO_FRAME);
    v4_l4(NF_IPPROTO_ICMP, 3000);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1000, 34, 16), OFF_ALL, 1500, NF_VH_GSO_FRAME);
    eth(NF_ETHERTYPE_IPV4);
    size_t at = ip4(5, 0x2000, NF_IPPROTO_TCP, 1, 2);
    tcp(1, 2, 5, 0x10);
    bz(4);
    ip4_done(at);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1000, 34, 16), OFF_ALL, 1500, NF_VH_GSO_FRAME);
    /* ECN (HOST_ECN is not offered), UDP fragmentation / segmentation (not
     * offered), unknown types */
    v4_l4(NF_IPPROTO_TCP, 3000);
    static const unsigned types[] = { NF_VHDR_GSO_TCPV4 | NF_VHDR_GSO_ECN, NF_VHDR_GSO_TCPV6 | NF_VHDR_GSO_ECN,
                                      NF_VHDR_GSO_ECN, NF_VHDR_GSO_UDP, NF_VHDR_GSO_UDP_L4, 2, 6, 7, 0x7f, 0xff };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        VH_EXPECT(vh(1, types[i], 0, 1000, 34, 16), OFF_ALL, 1500, NF_VH_GSO_TYPE);
    v4_l4(NF_IPPROTO_UDP, 3000);
    VH_EXPECT(vh(1, NF_VHDR_GSO_UDP, 0, 1000, 34, 6), OFF_ALL, 1500, NF_VH_GSO_TYPE);
    VH_EXPECT(vh(1, NF_VHDR_GSO_UDP_L4, 0, 1000, 34, 6), OFF_ALL, 1500, NF_VH_GSO_TYPE);
    /* not negotiated; without NEEDS_CSUM; with a wrong checksum place */
    v4_l4(NF_IPPROTO_TCP, 3000);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1000, 34, 16), NF_OFF_CSUM | NF_OFF_TSO6, 1500, NF_VH_GSO_OFFLOAD);
    VH_EXPECT(vh(0, NF_VHDR_GSO_TCPV4, 0, 1000, 0, 0), OFF_ALL, 1500, NF_VH_GSO_CSUM);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1000, 30, 16), OFF_ALL, 1500, NF_VH_CSUM_START);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1000, 34, 6), OFF_ALL, 1500, NF_VH_CSUM_OFFSET);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, 0, 1000, 34, 16), NF_OFF_TSO4, 1500, NF_VH_CSUM_OFFLOAD);
    /* hdr_len nonsense with GSO */
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV4, fl + 1, 1000, 34, 16), OFF_ALL, 1500, NF_VH_HDR_LEN);
    v6_l4(NF_IPPROTO_TCP, 3000);
    VH_EXPECT(vh(1, NF_VHDR_GSO_TCPV6, 0, 1000, 54, 16), NF_OFF_CSUM | NF_OFF_TSO4, 1500, NF_VH_GSO_OFFLOAD);
}
END_TEST

START_TEST(vhdr_names)
{
    for (int i = 0; i < NF_VH__COUNT; i++) {
        ck_assert_str_ne(net_vhdr_errname((enum nf_vhdr_err)i), "unknown");
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(net_vhdr_errname((enum nf_vhdr_err)i), net_vhdr_errname((enum nf_vhdr_err)j));
    }
    ck_assert_str_eq(net_vhdr_errname(NF_VH__COUNT), "unknown");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("net_frame");
    TCase *t = tcase_create("frame");
    tcase_add_test(t, ethernet);
    tcase_add_test(t, vlan);
    tcase_add_test(t, arp);
    tcase_add_test(t, ipv4_tcp);
    tcase_add_test(t, ipv4_header_errors);
    tcase_add_test(t, ipv4_options);
    tcase_add_test(t, ipv4_fragments);
    tcase_add_test(t, tcp_errors);
    tcase_add_test(t, udp_cases);
    tcase_add_test(t, icmp_cases);
    tcase_add_test(t, ipv6_basic);
    tcase_add_test(t, ipv6_extension_headers);
    tcase_add_test(t, ipv6_fragments);
    tcase_add_test(t, errors_total);
    tcase_add_test(t, addr_text);
    tcase_add_test(t, vhdr_plain);
    tcase_add_test(t, vhdr_flags);
    tcase_add_test(t, vhdr_csum_good);
    tcase_add_test(t, vhdr_csum_start_offset);
    tcase_add_test(t, vhdr_csum_frame);
    tcase_add_test(t, vhdr_gso);
    tcase_add_test(t, vhdr_names);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
