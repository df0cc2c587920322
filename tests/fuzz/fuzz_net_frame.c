/* Fuzz the Ethernet frame parser and the egress policy over the parsed
 * frames: a sequence of frames sent and received, so that the policy's
 * state (tracked fragments and DNS queries, learned addresses, expiry) is
 * driven too.
 *
 * Input: [0] config: bit0 default allow, bit1 preset off, bit2 the guest's
 *        MAC pinned (02:00:00:00:00:02), bit3 its addresses given, bit4 no
 *        DHCP server named (else 10.0.2.2)
 *        (10.0.2.15, 2001:db8::15; without them DHCP may pin the IPv4 one).
 *        Then records: u8 dir (bit0: 1 = received, fed to net_policy_rx;
 *        0 = sent, parsed and fed to net_policy_tx_parsed), u8 dt (seconds
 *        the clock moves before this frame), le16 len, len frame bytes (a
 *        short last record takes what is left).
 *        A sent record with dir bit1 set starts with a virtio-net header
 *        (flags, gso_type, le16 hdr_len, gso_size, csum_start, csum_offset:
 *        10 bytes) before its frame, checked with net_vhdr_check against
 *        the parse (offloads: dir bits 2..4 = NF_OFF_*; MTU 1500 with bit5,
 *        else none).
 * The policy: allow 10.0.2.3 and 2001:db8::3 port 53 (the resolvers),
 * 93.184.216.0/24 tcp 443, 2606:4700::/32 icmp; deny 93.184.216.34 and
 * 198.51.100.0/24 ports 1000-2000; domains *.pypi.org and example.org tcp
 * 443; host address 192.0.2.1; 16 learned entries, TTL 5..100 s.
 * Seeds: tests/fuzz/corpus/net_frame/ (tests/fuzz/gen_seeds.c). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/net_backend.h"
#include "devices/net/net_policy.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_frame(const uint8_t *b, size_t n, const struct net_frame *f, int r)
{
    FUZZ_ASSERT((r == 0) == (f->err == NF_E_OK) && (r == 0 || r == -EBADMSG));
    FUZZ_ASSERT((unsigned)f->err < NF_E__COUNT);
    FUZZ_ASSERT(net_frame_strerror(f->err) != NULL);
    struct net_frame g;
    int r2 = net_frame_parse(b, n, &g, NULL);
    FUZZ_ASSERT(r2 == r && memcmp(&g, f, sizeof g) == 0);     /* deterministic */
    if (r)
        return;
    FUZZ_ASSERT(f->n_vlan <= NF_VLAN_MAX && f->l3_off == NF_ETH_HLEN + 4u * f->n_vlan);
    FUZZ_ASSERT(f->l3_off <= n);
    if (f->l3 != NF_L3_IPV4 && f->l3 != NF_L3_IPV6) {
        FUZZ_ASSERT(f->flags == 0);
        return;
    }
    FUZZ_ASSERT(f->src.family == (f->l3 == NF_L3_IPV4 ? 4 : 6) && f->dst.family == f->src.family);
    FUZZ_ASSERT(f->ip_len <= n - f->l3_off);
    FUZZ_ASSERT(f->ip_len >= (f->l3 == NF_L3_IPV4 ? 20u : 40u));
    size_t end = f->l3_off + f->ip_len;
    FUZZ_ASSERT(f->payload_off <= end && f->payload_len <= end - f->payload_off);
    FUZZ_ASSERT(f->l4_off <= f->payload_off);
    if (f->flags & NF_F_FRAG_FIRST)
        FUZZ_ASSERT((f->flags & NF_F_FRAG) && f->frag_off == 0);
    if ((f->flags & NF_F_FRAG) && f->frag_off)
        FUZZ_ASSERT(!(f->flags & (NF_F_L4 | NF_F_PORTS | NF_F_FRAG_FIRST)));
    if (f->flags & NF_F_FRAG)
        FUZZ_ASSERT(f->frag_off + (end - f->l4_off) <= 65535 + 0u);
    if (f->flags & NF_F_PORTS)
        FUZZ_ASSERT((f->flags & NF_F_L4) &&
                    (f->proto == NF_IPPROTO_TCP || f->proto == NF_IPPROTO_UDP));
    if (f->flags & NF_F_L4)
        FUZZ_ASSERT(f->payload_off - f->l4_off >= 8);
    volatile uint8_t sum = 0;       /* every payload byte readable (ASan) */
    for (size_t i = 0; i < f->payload_len; i++)
        sum = (uint8_t)(sum + b[f->payload_off + i]);
    (void)sum;
}

/* The header check: what it lets through agrees with the parse. */
static void check_vhdr(const uint8_t *hb, uint8_t dir, const struct net_frame *f, size_t n)
{
    struct net_vhdr h = { .flags = hb[0], .gso_type = hb[1], .hdr_len = (uint16_t)(hb[2] | hb[3] << 8),
                          .gso_size = (uint16_t)(hb[4] | hb[5] << 8), .csum_start = (uint16_t)(hb[6] | hb[7] << 8),
                          .csum_offset = (uint16_t)(hb[8] | hb[9] << 8), .num_buffers = 0xffff };
    unsigned offl = (dir >> 2) & 7, mtu = dir & 0x20 ? 1500 : 0;
    struct net_vhdr o, o2;
    enum nf_vhdr_err e, e2;
    const char *why = NULL;
    int r = net_vhdr_check(&h, f, n, offl, mtu, &o, &e, &why);
    FUZZ_ASSERT((r == 0) == (e == NF_VH_OK) && (r == 0 || (r == -EBADMSG && why)));
    FUZZ_ASSERT((unsigned)e < NF_VH__COUNT && strcmp(net_vhdr_errname(e), "unknown") != 0);
    FUZZ_ASSERT(net_vhdr_check(&h, f, n, offl, mtu, &o2, &e2, NULL) == r && e2 == e);
    if (!net_vhdr_active(&h))
        FUZZ_ASSERT(net_vhdr_check(&h, NULL, n, offl, mtu, &o2, &e2, NULL) == r && e2 == e);
    if (r)
        return;
    FUZZ_ASSERT((o.flags & ~NF_VHDR_F_NEEDS_CSUM) == 0 && o.num_buffers == 0 && o.hdr_len <= n);
    if (o.flags & NF_VHDR_F_NEEDS_CSUM) {
        /* the checksum lands in the TCP / UDP header the policy saw, after
         * every IP header, and nowhere else */
        FUZZ_ASSERT(offl & NF_OFF_CSUM);
        FUZZ_ASSERT(f->err == NF_E_OK && (f->l3 == NF_L3_IPV4 || f->l3 == NF_L3_IPV6));
        FUZZ_ASSERT((f->flags & NF_F_PORTS) && !(f->flags & NF_F_FRAG));
        FUZZ_ASSERT(o.csum_start == f->l4_off && f->l4_off >= f->l3_off + (f->l3 == NF_L3_IPV4 ? 20u : 40u));
        FUZZ_ASSERT((size_t)o.csum_start + o.csum_offset + 2 <= f->payload_off);
        FUZZ_ASSERT(o.csum_offset == (f->proto == NF_IPPROTO_TCP ? 16 : 6));
    } else {
        FUZZ_ASSERT(o.csum_start == 0 && o.csum_offset == 0);
    }
    if (o.gso_type != NF_VHDR_GSO_NONE) {
        FUZZ_ASSERT(o.gso_type == (f->l3 == NF_L3_IPV4 ? NF_VHDR_GSO_TCPV4 : NF_VHDR_GSO_TCPV6));
        FUZZ_ASSERT(f->proto == NF_IPPROTO_TCP && (o.flags & NF_VHDR_F_NEEDS_CSUM));
        FUZZ_ASSERT(o.gso_size >= NF_VHDR_GSO_MIN && o.hdr_len == f->payload_off);
        FUZZ_ASSERT(f->l4_off - f->l3_off + 20 + o.gso_size <= (mtu ? mtu : 65535u));
    } else {
        FUZZ_ASSERT(o.gso_size == 0 && o.hdr_len == 0);
    }
}

static struct net_policy *policy(uint8_t cfg)
{
    static const char *const allow[] = { "10.0.2.3,port=53", "2001:db8::3,port=53",
                                         "93.184.216.0/24,port=443,proto=tcp",
                                         "2606:4700::/32,proto=icmp" };
    static const char *const deny[] = { "93.184.216.34", "198.51.100.0/24,port=1000-2000" };
    static const char *const dom[] = { "*.pypi.org", "example.org,port=443,proto=tcp" };
    static const struct nf_addr host = { 4, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1 } };
    static const uint8_t mac[1][6] = { { 2, 0, 0, 0, 0, 2 } };
    static const uint32_t dhcp_server = 0x0a000202;        /* 10.0.2.2 */
    static const struct nf_addr guest[2] = {
        { 4, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15 } },
        { 6, { 0x20, 0x01, 0x0d, 0xb8, [15] = 0x15 } },
    };
    struct np_conf c = { .default_allow = cfg & 1, .no_preset = (cfg & 2) != 0,
                         .allow = allow, .n_allow = 4, .deny = deny, .n_deny = 2,
                         .allow_domain = dom, .n_allow_domain = 2, .host = &host, .n_host = 1,
                         .ttl_min_s = 5, .ttl_max_s = 100, .learn_max = 16,
                         .guest_mac = mac, .n_guest_mac = (cfg & 4) ? 1 : 0,
                         .guest = guest, .n_guest = (cfg & 8) ? 2 : 0,
                         .dhcp_server = &dhcp_server, .n_dhcp_server = (cfg & 16) ? 0 : 1 };
    struct net_policy *p = NULL;
    char why[128];
    FUZZ_ASSERT(net_policy_new(&c, &p, why, sizeof why) == 0 && p);
    return p;
}

static void totals(const struct net_policy *p, uint64_t *frames, uint64_t *bytes)
{
    struct np_rule_info ri;
    *frames = *bytes = 0;
    for (size_t i = 0; net_policy_rule(p, i, &ri) == 0; i++) {
        *frames += ri.c.frames_allowed + ri.c.frames_dropped;
        *bytes += ri.c.bytes_allowed + ri.c.bytes_dropped;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct net_policy *p = policy(data[0]);
    uint64_t now = 1000000000ull, ntx = 0, btx = 0;
    size_t i = 1;
    /* the MAC the policy holds the guest to: given (bit 2), else the first
     * unicast source of a frame that reaches the check */
    uint8_t pin[6] = { 2, 0, 0, 0, 0, 2 };
    bool have_pin = (data[0] & 4) != 0;
    while (i + 4 <= size) {
        uint8_t dir = data[i];
        now += (uint64_t)data[i + 1] * 1000000000ull;
        size_t len = (size_t)data[i + 2] | (size_t)data[i + 3] << 8;
        i += 4;
        if (len > size - i)
            len = size - i;
        /* a copy of exactly len bytes, so ASan sees any read past it */
        uint8_t *b = malloc(len ? len : 1);
        FUZZ_ASSERT(b);
        memcpy(b, data + i, len);
        i += len;
        if (dir & 1) {
            struct np_stats st;
            unsigned n = net_policy_rx(p, b, len, now);
            net_policy_stats(p, &st);
            FUZZ_ASSERT(n <= DNS_ADDR_MAX * 2u);
            FUZZ_ASSERT(st.learned <= st.learn_max && st.learn_max == 16);
        } else {
            struct net_frame f;
            struct np_result r;
            uint8_t hb[10] = { 0 };
            bool with_hdr = (dir & 2) && len >= sizeof hb;
            if (with_hdr) {             /* the header, then the frame in a copy of its own */
                memcpy(hb, b, sizeof hb);
                len -= sizeof hb;
                memmove(b, b + sizeof hb, len);
                uint8_t *nb = realloc(b, len ? len : 1);
                FUZZ_ASSERT(nb);
                b = nb;
            }
            int pr = net_frame_parse(b, len, &f, NULL);
            check_frame(b, len, &f, pr);
            if (with_hdr)
                check_vhdr(hb, dir, &f, len);
            enum np_verdict v = net_policy_tx_parsed(p, b, len, &f, now, &r);
            FUZZ_ASSERT(v == r.verdict && r.rule < net_policy_rule_count(p));
            FUZZ_ASSERT(v == NP_DROP || v == NP_ALLOW || v == NP_METADATA);
            FUZZ_ASSERT((pr != 0) == (r.rule == NP_B_MALFORMED));
            FUZZ_ASSERT((v == NP_METADATA) == (r.rule == NP_B_METADATA));
            if (f.n_vlan && pr == 0)
                FUZZ_ASSERT(r.rule == NP_B_VLAN && v == NP_DROP);
            if (r.rule == NP_B_ARP)
                FUZZ_ASSERT(f.l3 == NF_L3_ARP);
            if (r.rule == NP_B_SRC_MAC || r.rule == NP_B_SRC_ADDR || r.rule == NP_B_SRCROUTE)
                FUZZ_ASSERT(v == NP_DROP);
            if (pr == 0 && !f.n_vlan) {
                bool odd = (f.src_mac[0] & 1) || !memcmp(f.src_mac, "\0\0\0\0\0\0", 6);
                if (!odd && !have_pin) {
                    memcpy(pin, f.src_mac, 6);
                    have_pin = true;
                }
                FUZZ_ASSERT((r.rule == NP_B_SRC_MAC) == (odd || memcmp(f.src_mac, pin, 6) != 0));
            }
            if (v != NP_DROP)
                FUZZ_ASSERT(have_pin && memcmp(f.src_mac, pin, 6) == 0);
            if (r.rule == NP_B_ND6 || r.rule == NP_B_DHCP4 || r.rule == NP_B_SRC_ADDR)
                FUZZ_ASSERT(f.l3 == NF_L3_IPV4 || f.l3 == NF_L3_IPV6);
            if (r.rule == NP_B_DEFAULT)
                FUZZ_ASSERT(v == (net_policy_default_allow(p) ? NP_ALLOW : NP_DROP));
            struct np_rule_info ri;
            FUZZ_ASSERT(net_policy_rule(p, r.rule, &ri) == 0);
            if (ri.kind == NP_K_DENY || ri.kind == NP_K_PRESET)
                FUZZ_ASSERT(v == NP_DROP);
            if (ri.kind == NP_K_DOMAIN)
                FUZZ_ASSERT(v == NP_ALLOW);
            ntx++;
            btx += len;
        }
        free(b);
    }
    uint64_t fr, by;
    totals(p, &fr, &by);
    FUZZ_ASSERT(fr == ntx && by == btx);

    char small[64], *big = malloc(1 << 16);
    FUZZ_ASSERT(big);
    size_t need = net_policy_render(p, now, big, 1 << 16);
    FUZZ_ASSERT(need < (1 << 16) && strlen(big) == need);
    FUZZ_ASSERT(net_policy_render(p, now, small, sizeof small) == need);
    FUZZ_ASSERT(strlen(small) == (need < sizeof small ? need : sizeof small - 1));
    free(big);

    /* carry everything into the same policy built again: nothing lost */
    struct net_policy *q = policy(data[0]);
    net_policy_carry(q, p, now);
    uint64_t fr2, by2;
    totals(q, &fr2, &by2);
    FUZZ_ASSERT(fr2 == fr && by2 == by);
    struct np_stats a, b2;
    net_policy_stats(p, &a);
    net_policy_stats(q, &b2);
    FUZZ_ASSERT(b2.learned <= a.learned && b2.dns_seen == a.dns_seen);
    net_policy_free(q);
    net_policy_free(p);
    return 0;
}
