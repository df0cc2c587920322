/* Egress policy (devices/net/net_policy.h): rule and domain specs, the
 * evaluation order, the preset, link services, metadata, fragments, DNS
 * learning (expiry, TTL clamp, table bound, trust), counters, rendering,
 * carrying state into a new policy, and the per-frame cost with 100 rules
 * (printed, not asserted). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices/net/net_policy.h"
#include "devices/net/net_policy_text.h"

#define S(x) ((uint64_t)(x) * 1000000000ull)

/* ---- frames ---------------------------------------------------------- */

static uint8_t fb[4096];

struct fspec {
    const char *src, *dst;
    unsigned proto, sport, dport;       /* ICMP: sport = type, dport = code */
    const uint8_t *pl;
    size_t pln;
    int frag;                           /* 0: none, 1: first, 2: non-first */
    unsigned frag_off;                  /* bytes, non-first */
    uint32_t id;
    bool last;                          /* a fragment without MF/M */
    bool vlan, lsrr, segleft;
    unsigned ethertype;                 /* non-zero: a non-IP frame of this type */
    const uint8_t *smac;                /* the Ethernet source (NULL: GUEST_MAC) */
};

/* the guest of these tests: its MAC, another one */
static const uint8_t GUEST_MAC[6] = { 2, 0, 0, 0, 0, 2 };
static const uint8_t OTHER_MAC[6] = { 2, 0, 0, 0, 0, 0x99 };

static int fam(const char *s, uint8_t *b)
{
    if (inet_pton(AF_INET, s, b) == 1)
        return 4;
    ck_assert_msg(inet_pton(AF_INET6, s, b) == 1, "bad address %s", s);
    return 6;
}

static size_t n_;
static void p8(unsigned v) { fb[n_++] = (uint8_t)v; }
static void p16(unsigned v) { p8(v >> 8); p8(v & 0xff); }
static void p32(uint32_t v) { p16(v >> 16); p16(v & 0xffff); }
static void pmem(const void *b, size_t n) { memcpy(fb + n_, b, n); n_ += n; }

static size_t build(const struct fspec *s)
{
    static const uint8_t macs[12] = { 2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2 };
    n_ = 0;
    pmem(macs, 12);
    if (s->smac)
        memcpy(fb + 6, s->smac, 6);
    if (s->vlan) {
        p16(0x8100);
        p16(5);
    }
    if (s->ethertype) {
        p16(s->ethertype);
        for (int i = 0; i < 46; i++)
            p8(0);
        return n_;
    }
    uint8_t sa[16], da[16], l4[2048];
    int f = fam(s->src, sa);
    ck_assert_int_eq(fam(s->dst, da), f);
    size_t ln = 0;
    if (s->frag != 2) {
        if (s->proto == 6) {
            uint8_t t[20] = { (uint8_t)(s->sport >> 8), (uint8_t)s->sport,
                              (uint8_t)(s->dport >> 8), (uint8_t)s->dport, 0, 0, 0, 1,
                              0, 0, 0, 0, 5 << 4, 0x02, 0xff, 0xff };
            memcpy(l4, t, 20);
            ln = 20;
        } else if (s->proto == 17) {
            size_t ul = 8 + s->pln;
            uint8_t u[8] = { (uint8_t)(s->sport >> 8), (uint8_t)s->sport,
                             (uint8_t)(s->dport >> 8), (uint8_t)s->dport,
                             (uint8_t)(ul >> 8), (uint8_t)ul, 0, 0 };
            memcpy(l4, u, 8);
            ln = 8;
        } else if (s->proto == 1 || s->proto == 58) {
            uint8_t c[8] = { (uint8_t)s->sport, (uint8_t)s->dport };
            memcpy(l4, c, 8);
            ln = 8;
        }
    }
    if (s->pln)
        memcpy(l4 + ln, s->pl, s->pln);
    ln += s->pln;
    if (s->frag && !s->last)
        while (ln % 8)
            l4[ln++] = 0;
    if (f == 4) {
        p16(0x0800);
        unsigned ihl = s->lsrr ? 6 : 5;
        unsigned fw = s->frag == 0 ? 0x4000 : (s->last ? 0 : 0x2000) | (s->frag_off / 8);
        p8(0x40 | ihl);
        p8(0);
        p16(ihl * 4 + (unsigned)ln);
        p16(s->id);
        p16(fw);
        p8(64);
        p8(s->proto);
        p16(0);
        pmem(sa, 4);
        pmem(da, 4);
        if (s->lsrr) {
            p8(131); p8(3); p8(4); p8(0);
        }
    } else {
        p16(0x86dd);
        unsigned ext = (s->segleft ? 8 : 0) + (s->frag ? 8 : 0);
        p32(0x60000000);
        p16(ext + (unsigned)ln);
        p8(s->segleft ? 43 : s->frag ? 44 : s->proto);
        p8(64);
        pmem(sa, 16);
        pmem(da, 16);
        if (s->segleft) {
            p8(s->frag ? 44 : s->proto); p8(0); p8(4); p8(1);
            p32(0);
        }
        if (s->frag) {
            p8(s->proto); p8(0);
            p16((s->frag == 2 ? s->frag_off : 0) | (s->last ? 0 : 1));
            p32(s->id);
        }
    }
    pmem(l4, ln);
    return n_;
}

/* ---- DNS messages ---------------------------------------------------- */

static size_t dname(uint8_t *m, size_t at, const char *s)
{
    while (*s) {
        const char *dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);
        m[at++] = (uint8_t)n;
        memcpy(m + at, s, n);
        at += n;
        s += n + (dot ? 1 : 0);
    }
    m[at++] = 0;
    return at;
}

static size_t dnsq(uint8_t *m, unsigned id, const char *name)
{
    const uint8_t h[12] = { (uint8_t)(id >> 8), (uint8_t)id, 1, 0, 0, 1 };
    memcpy(m, h, 12);
    size_t n = dname(m, 12, name);
    m[n++] = 0; m[n++] = 1; m[n++] = 0; m[n++] = 1;
    return n;
}

/* A response: name (optionally CNAME -> cname) with n addresses, ttl. */
static size_t dnsr(uint8_t *m, unsigned id, unsigned rcode, const char *name, const char *cname,
                   const char *const *addrs, size_t na, uint32_t ttl)
{
    size_t ancount = na + (cname ? 1 : 0);
    const uint8_t h[12] = { (uint8_t)(id >> 8), (uint8_t)id, 0x81, (uint8_t)(0x80 | rcode), 0, 1,
                            (uint8_t)(ancount >> 8), (uint8_t)ancount };
    memcpy(m, h, 12);
    size_t n = dname(m, 12, name);
    m[n++] = 0; m[n++] = 1; m[n++] = 0; m[n++] = 1;
    size_t owner = 12;
    if (cname) {
        m[n++] = 0xc0; m[n++] = 12;
        m[n++] = 0; m[n++] = 5; m[n++] = 0; m[n++] = 1;
        m[n++] = (uint8_t)(ttl >> 24); m[n++] = (uint8_t)(ttl >> 16);
        m[n++] = (uint8_t)(ttl >> 8); m[n++] = (uint8_t)ttl;
        size_t rdl = n;
        n += 2;
        owner = n;
        n = dname(m, n, cname);
        m[rdl] = 0;
        m[rdl + 1] = (uint8_t)(n - owner);
    }
    for (size_t i = 0; i < na; i++) {
        uint8_t b[16];
        int f = fam(addrs[i], b);
        m[n++] = (uint8_t)(0xc0 | owner >> 8); m[n++] = (uint8_t)owner;
        m[n++] = 0; m[n++] = f == 4 ? 1 : 28; m[n++] = 0; m[n++] = 1;
        m[n++] = (uint8_t)(ttl >> 24); m[n++] = (uint8_t)(ttl >> 16);
        m[n++] = (uint8_t)(ttl >> 8); m[n++] = (uint8_t)ttl;
        m[n++] = 0; m[n++] = f == 4 ? 4 : 16;
        memcpy(m + n, b, f == 4 ? 4 : 16);
        n += f == 4 ? 4 : 16;
    }
    return n;
}

/* TCP DNS: the 2-byte length prefix */
static size_t tcp_wrap(uint8_t *out, const uint8_t *m, size_t n)
{
    out[0] = (uint8_t)(n >> 8);
    out[1] = (uint8_t)n;
    memcpy(out + 2, m, n);
    return n + 2;
}

/* A BOOTP message: op (1 request, 2 reply), xid, chaddr, yiaddr (host
 * order), DHCP message type (0: no option 53). */
static size_t bootp(uint8_t *m, unsigned op, uint32_t xid, const uint8_t chaddr[6], uint32_t yiaddr,
                    unsigned type)
{
    memset(m, 0, 300);
    m[0] = (uint8_t)op; m[1] = 1; m[2] = 6;
    m[4] = (uint8_t)(xid >> 24); m[5] = (uint8_t)(xid >> 16); m[6] = (uint8_t)(xid >> 8); m[7] = (uint8_t)xid;
    m[16] = (uint8_t)(yiaddr >> 24); m[17] = (uint8_t)(yiaddr >> 16);
    m[18] = (uint8_t)(yiaddr >> 8); m[19] = (uint8_t)yiaddr;
    memcpy(m + 28, chaddr, 6);
    m[236] = 0x63; m[237] = 0x82; m[238] = 0x53; m[239] = 0x63;
    size_t n = 240;
    if (type) {
        m[n++] = 53; m[n++] = 1; m[n++] = (uint8_t)type;
    }
    m[n++] = 255;
    return n;
}

/* An ARP frame from smac: op, sender hardware / protocol address. */
static size_t arpf(const uint8_t smac[6], unsigned op, const uint8_t sha[6], const char *spa)
{
    static const uint8_t bc[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
    n_ = 0;
    pmem(bc, 6);
    pmem(smac, 6);
    p16(0x0806);
    p16(1); p16(0x0800); p8(6); p8(4); p16(op);
    pmem(sha, 6);
    uint8_t a[4];
    ck_assert_int_eq(inet_pton(AF_INET, spa, a), 1);
    pmem(a, 4);
    for (int i = 0; i < 6; i++)
        p8(0);
    pmem(a, 4);             /* the target: itself (a probe / gratuitous) */
    return n_;
}

/* An NS / NA body: the target, then a source (1) or target (2) link-layer
 * address option for mac (opt 0: none). */
static size_t ndbody(uint8_t *m, const char *target, unsigned opt, const uint8_t mac[6])
{
    ck_assert_int_eq(inet_pton(AF_INET6, target, m), 1);
    size_t n = 16;
    if (opt) {
        m[n++] = (uint8_t)opt; m[n++] = 1;
        memcpy(m + n, mac, 6);
        n += 6;
    }
    return n;
}

/* ---- policies -------------------------------------------------------- */

static struct np_result res;
static char why[256];

static struct net_policy *mk(const struct np_conf *c)
{
    struct net_policy *p = NULL;
    why[0] = 0;
    int r = net_policy_new(c, &p, why, sizeof why);
    ck_assert_msg(r == 0, "net_policy_new: %d %s", r, why);
    ck_assert_ptr_nonnull(p);
    return p;
}

static enum np_verdict tx(struct net_policy *p, const struct fspec *s, uint64_t now)
{
    size_t n = build(s);
    return net_policy_tx(p, fb, n, now, &res);
}

/* TCP/UDP/ICMP from the guest (10.0.2.15 / 2001:db8::15) to dst:port */
static enum np_verdict to(struct net_policy *p, const char *dst, unsigned proto, unsigned port,
                          uint64_t now)
{
    const char *src = strchr(dst, ':') ? "2001:db8::15" : "10.0.2.15";
    return tx(p, &(struct fspec){ .src = src, .dst = dst, .proto = proto, .sport = 40000,
                                  .dport = port }, now);
}

static int idx(const struct net_policy *p, enum np_kind kind, const char *text)
{
    struct np_rule_info ri;
    for (size_t i = 0; net_policy_rule(p, i, &ri) == 0; i++)
        if (ri.kind == kind && strcmp(ri.text, text) == 0)
            return (int)i;
    ck_abort_msg("no rule %s", text);
    return -1;
}

static struct np_counters ctr(const struct net_policy *p, size_t i)
{
    struct np_rule_info ri;
    ck_assert_int_eq(net_policy_rule(p, i, &ri), 0);
    return ri.c;
}

/* the verdict and deciding rule of the last frame */
#define EXPECT(v, r) do { \
    ck_assert_msg(res.verdict == (v) && res.rule == (unsigned)(r), \
                  "verdict %s rule %u, want %s rule %d", np_verdict_str(res.verdict), res.rule, \
                  np_verdict_str(v), (int)(r)); \
} while (0)

static enum np_verdict query(struct net_policy *p, const char *resolver, unsigned proto,
                             unsigned gport, unsigned id, const char *name, uint64_t now)
{
    uint8_t m[600], w[602];
    size_t n = dnsq(m, id, name);
    const uint8_t *pl = m;
    if (proto == 6) {
        n = tcp_wrap(w, m, n);
        pl = w;
    }
    const char *src = strchr(resolver, ':') ? "2001:db8::15" : "10.0.2.15";
    enum np_verdict v = tx(p, &(struct fspec){ .src = src, .dst = resolver, .proto = proto,
                                               .sport = gport, .dport = 53, .pl = pl, .pln = n },
                           now);
    return v;
}

static unsigned answer(struct net_policy *p, const char *resolver, unsigned proto, unsigned gport,
                       unsigned id, const char *name, const char *cname, const char *const *addrs,
                       size_t na, uint32_t ttl, uint64_t now)
{
    uint8_t m[2048], w[2050];
    size_t n = dnsr(m, id, 0, name, cname, addrs, na, ttl);
    const uint8_t *pl = m;
    if (proto == 6) {
        n = tcp_wrap(w, m, n);
        pl = w;
    }
    const char *dst = strchr(resolver, ':') ? "2001:db8::15" : "10.0.2.15";
    size_t fl = build(&(struct fspec){ .src = resolver, .dst = dst, .proto = proto, .sport = 53,
                                       .dport = gport, .pl = pl, .pln = n });
    return net_policy_rx(p, fb, fl, now);
}

/* ---- rule specs ------------------------------------------------------ */

START_TEST(rule_specs_ok)
{
    static const struct { const char *in, *canon; } ok[] = {
        { "10.0.0.0/8", "10.0.0.0/8" },
        { "1.2.3.4", "1.2.3.4/32" },
        { "0.0.0.0/0", "0.0.0.0/0" },
        { "::/0", "::/0" },
        { "2001:DB8::/32", "2001:db8::/32" },
        { "2001:db8:0:0::1", "2001:db8::1/128" },
        { "::ffff:1.2.3.4/128", "::ffff:1.2.3.4/128" },
        { "1.2.3.4/032", "1.2.3.4/32" },
        { "1.2.3.4,port=443,proto=tcp", "1.2.3.4/32,port=443,proto=tcp" },
        { "1.2.3.4,proto=udp,port=53", "1.2.3.4/32,port=53,proto=udp" },
        { "1.2.3.0/24,port=1000-2000", "1.2.3.0/24,port=1000-2000" },
        { "1.2.3.0/24,port=5-5", "1.2.3.0/24,port=5" },
        { "1.2.3.0/24,port=1-65535,proto=tcp", "1.2.3.0/24,port=1-65535,proto=tcp" },
        { "1.2.3.0/24,proto=icmp", "1.2.3.0/24,proto=icmp" },
        { "2001:db8::/32,proto=icmp", "2001:db8::/32,proto=icmp" },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct np_rule_spec s;
        int r = np_parse_rule(ok[i].in, &s, why, sizeof why);
        ck_assert_msg(r == 0, "%s: %s", ok[i].in, why);
        ck_assert_str_eq(s.text, ok[i].canon);
    }
    struct np_rule_spec s;
    ck_assert_int_eq(np_parse_rule("192.168.0.0/16,port=22-23,proto=tcp", &s, why, sizeof why), 0);
    ck_assert_int_eq(s.net.family, 4);
    ck_assert_int_eq(s.prefix, 16);
    ck_assert_int_eq(s.net.b[12], 192);
    ck_assert_int_eq(s.port_lo, 22);
    ck_assert_int_eq(s.port_hi, 23);
    ck_assert_int_eq(s.proto, NF_IPPROTO_TCP);
    ck_assert(!s.icmp);
    ck_assert_int_eq(np_parse_rule("fe80::/10,proto=icmp", &s, why, sizeof why), 0);
    ck_assert_int_eq(s.net.family, 6);
    ck_assert_int_eq(s.prefix, 10);
    ck_assert(s.icmp);
    ck_assert_int_eq(s.port_lo, 0);
}
END_TEST

START_TEST(rule_specs_bad)
{
    char longspec[NP_SPEC_MAX + 8];
    memset(longspec, '1', sizeof longspec - 1);
    longspec[sizeof longspec - 1] = 0;
    const char *bad[] = {
        "", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8x", "10.0.0.0/1000",
        "10.1.0.0/8", "2001:db8::1/32", "1.2.3.4/+8", "300.1.1.1", "1.2.3", "1.2.3.4.5", "example.org",
        "[::1]", "fe80::1%eth0", " 1.2.3.4", "1.2.3.4/8/8",
        "1.2.3.4,port=0", "1.2.3.4,port=65536", "1.2.3.4,port=99999999", "1.2.3.4,port=2000-1000",
        "1.2.3.4,port=80-", "1.2.3.4,port=-80", "1.2.3.4,port=8a", "1.2.3.4,port=", "1.2.3.4,port",
        "1.2.3.4,port=1-2-3", "1.2.3.4,port= 80",
        "1.2.3.4,proto=sctp", "1.2.3.4,proto=TCP", "1.2.3.4,proto=", "1.2.3.4,proto=icmp,port=1",
        "1.2.3.4,port=1,proto=icmp", "1.2.3.4,port=1,port=2", "1.2.3.4,proto=tcp,proto=udp",
        "1.2.3.4,bogus=1", "1.2.3.4,", "1.2.3.4,,port=1", "1.2.3.4,=1", longspec,
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct np_rule_spec s;
        why[0] = 0;
        ck_assert_msg(np_parse_rule(bad[i], &s, why, sizeof why) == -EINVAL, "accepted '%s'", bad[i]);
        ck_assert_msg(why[0], "no message for '%s'", bad[i]);
    }
    struct np_rule_spec s;
    ck_assert_int_eq(np_parse_rule(NULL, &s, why, sizeof why), -EINVAL);
    ck_assert_int_eq(np_parse_rule("10.1.0.0/8", &s, why, sizeof why), -EINVAL);
    ck_assert_msg(strstr(why, "10.0.0.0/8"), "%s", why);   /* says what was meant */
    ck_assert_int_eq(np_parse_rule("1.2.3.4,port=1,proto=icmp", &s, NULL, 0), -EINVAL);  /* no why */
}
END_TEST

START_TEST(domain_specs)
{
    static const struct { const char *in, *canon; bool wild; } ok[] = {
        { "example.org", "example.org", false },
        { "Example.ORG.", "example.org", false },
        { "*.pypi.org", "*.pypi.org", true },
        { "*.PyPI.org,port=443,proto=tcp", "*.pypi.org,port=443,proto=tcp", true },
        { "_dmarc.a-b.example", "_dmarc.a-b.example", false },
        { "localhost", "localhost", false },
        { "x.example,proto=icmp", "x.example,proto=icmp", false },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct np_rule_spec s;
        int r = np_parse_domain(ok[i].in, &s, why, sizeof why);
        ck_assert_msg(r == 0, "%s: %s", ok[i].in, why);
        ck_assert_str_eq(s.text, ok[i].canon);
        ck_assert_int_eq(s.wildcard, ok[i].wild);
    }
    char lab[70], name[300];
    memset(lab, 'a', 64);
    lab[64] = 0;
    snprintf(name, sizeof name, "%.63s.%.63s.%.63s.%.62s", lab, lab, lab, lab);   /* 254 */
    const char *bad[] = { "", "*", "*.", ".", "a..b", ".a", "a.*.b", "**.a", "*a.b", "a b", "a/b",
                          "a.b,port=0", "a.b,proto=icmp,port=1", "a.b,x=1", "é.org", lab, name };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct np_rule_spec s;
        why[0] = 0;
        ck_assert_msg(np_parse_domain(bad[i], &s, why, sizeof why) == -EINVAL, "accepted '%s'", bad[i]);
        ck_assert(why[0]);
    }
    name[252] = 0;       /* 252 + "x" fits */
    struct np_rule_spec s;
    ck_assert_int_eq(np_parse_domain(name + 1, &s, why, sizeof why), 0);
}
END_TEST

START_TEST(domain_matching)
{
    ck_assert(np_domain_match("example.org", false, "example.org"));
    ck_assert(!np_domain_match("example.org", false, "www.example.org"));
    ck_assert(!np_domain_match("example.org", false, "example.org.evil"));
    /* a wildcard: strictly below, any depth, never the apex */
    ck_assert(np_domain_match("pypi.org", true, "files.pypi.org"));
    ck_assert(np_domain_match("pypi.org", true, "a.b.pypi.org"));
    ck_assert(!np_domain_match("pypi.org", true, "pypi.org"));
    ck_assert(!np_domain_match("pypi.org", true, "evilpypi.org"));
    ck_assert(!np_domain_match("pypi.org", true, ".pypi.org"));
    ck_assert(!np_domain_match("pypi.org", true, "pypi.org.evil.com"));
    ck_assert(!np_domain_match("pypi.org", true, "org"));
}
END_TEST

START_TEST(conf_errors)
{
    struct net_policy *p = (struct net_policy *)1;
    struct np_conf c = { .ttl_min_s = 100, .ttl_max_s = 10 };
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -EINVAL);
    ck_assert_ptr_null(p);
    c = (struct np_conf){ .learn_max = NP_LEARN_MAX + 1 };
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -EINVAL);
    c = (struct np_conf){ .n_allow = NP_RULES_MAX + 1 };
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -E2BIG);
    c = (struct np_conf){ .n_host = NP_HOSTS_MAX + 1 };
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -E2BIG);
    struct nf_addr h = { 0 };
    c = (struct np_conf){ .host = &h, .n_host = 1 };
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -EINVAL);
    c = (struct np_conf){ .guest = &h, .n_guest = 1 };             /* a guest address with no family */
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -EINVAL);
    c = (struct np_conf){ .n_guest = NP_GUEST_ADDRS_MAX + 1 };
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -E2BIG);
    c = (struct np_conf){ .n_guest_mac = NP_GUEST_MACS_MAX + 1 };
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -E2BIG);
    const char *allow[] = { "10.0.0.0/8", "10.0.0.0/33" };
    c = (struct np_conf){ .allow = allow, .n_allow = 2 };
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -EINVAL);
    ck_assert_msg(strstr(why, "10.0.0.0/33"), "%s", why);
    const char *deny[] = { "1.2.3.4,proto=gre" };
    c = (struct np_conf){ .deny = deny, .n_deny = 1 };
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -EINVAL);
    const char *dom[] = { "ok.example", "bad..example" };
    c = (struct np_conf){ .allow_domain = dom, .n_allow_domain = 2 };
    ck_assert_int_eq(net_policy_new(&c, &p, why, sizeof why), -EINVAL);
    ck_assert_ptr_null(p);
    net_policy_free(NULL);
}
END_TEST

/* ---- the order ------------------------------------------------------- */

START_TEST(deny_beats_allow)
{
    const char *allow[] = { "10.1.0.0/16", "0.0.0.0/0,port=443,proto=tcp" };
    const char *deny[] = { "10.1.2.0/24", "10.1.2.3" };
    struct net_policy *p = mk(&(struct np_conf){ .allow = allow, .n_allow = 2, .deny = deny,
                                                 .n_deny = 2 });
    int d24 = idx(p, NP_K_DENY, "10.1.2.0/24"), a16 = idx(p, NP_K_ALLOW, "10.1.0.0/16");
    ck_assert_int_eq(to(p, "10.1.2.3", 6, 443, 0), NP_DROP);
    EXPECT(NP_DROP, d24);                       /* the first deny that matches */
    ck_assert_int_eq(to(p, "10.1.3.3", 17, 9, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, a16);
    ck_assert_int_eq(to(p, "8.8.8.8", 6, 443, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, idx(p, NP_K_ALLOW, "0.0.0.0/0,port=443,proto=tcp"));
    ck_assert_int_eq(to(p, "8.8.8.8", 6, 80, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_DEFAULT);              /* default deny */
    struct np_counters c = ctr(p, (size_t)d24);
    ck_assert_uint_eq(c.frames_dropped, 1);
    ck_assert_uint_eq(c.frames_allowed, 0);
    ck_assert_uint_eq(c.bytes_dropped, 14 + 20 + 20);
    c = ctr(p, (size_t)a16);
    ck_assert_uint_eq(c.frames_allowed, 1);
    ck_assert_uint_eq(c.bytes_allowed, 14 + 20 + 8);
    ck_assert_uint_eq(ctr(p, NP_B_DEFAULT).frames_dropped, 1);
    ck_assert_uint_eq(ctr(p, (size_t)idx(p, NP_K_DENY, "10.1.2.3/32")).frames_dropped, 0);
    net_policy_free(p);
}
END_TEST

START_TEST(preset_and_default)
{
    uint8_t hb[4] = { 203, 0, 113, 5 }, hb6[16];
    struct nf_addr host[3];
    nf_addr_v4(&host[0], hb);
    inet_pton(AF_INET6, "2001:db8:1::5", hb6);
    nf_addr_v6(&host[1], hb6);
    host[2] = (struct nf_addr){ .family = 4, .b = { [0] = 0x77, [12] = 198, 51, 100, 7 } };
    struct net_policy *p = mk(&(struct np_conf){ .default_allow = true, .host = host, .n_host = 3 });
    ck_assert_uint_eq(net_policy_rule_count(p), NP_B__COUNT + np_preset_count + 3);
    static const struct { const char *dst, *rule; } denied[] = {
        { "10.9.9.9", "10.0.0.0/8" }, { "172.31.0.1", "172.16.0.0/12" },
        { "192.168.1.1", "192.168.0.0/16" }, { "127.0.0.1", "127.0.0.0/8" },
        { "169.254.169.254", "169.254.0.0/16" }, { "100.100.100.200", "100.64.0.0/10" },
        { "0.1.2.3", "0.0.0.0/8" }, { "224.0.0.251", "224.0.0.0/4" },
        { "255.255.255.255", "240.0.0.0/4" }, { "203.0.113.5", "203.0.113.5/32 (host)" },
        { "::1", "::1/128" }, { "fd00:ec2::254", "fc00::/7" }, { "fe80::1", "fe80::/10" },
        { "ff02::1", "ff00::/8" }, { "::ffff:10.0.0.1", "::ffff:0.0.0.0/96" },
        { "2001:db8:1::5", "2001:db8:1::5/128 (host)" },
        { "198.51.100.7", "198.51.100.7/32 (host)" },     /* not given in mapped form */
    };
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
        ck_assert_msg(to(p, denied[i].dst, 6, 443, 0) == NP_DROP, "%s allowed", denied[i].dst);
        EXPECT(NP_DROP, idx(p, NP_K_PRESET, denied[i].rule));
    }
    ck_assert_int_eq(to(p, "93.184.216.34", 6, 443, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_DEFAULT);
    ck_assert_int_eq(to(p, "2606:4700::1", 17, 443, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_DEFAULT);
    ck_assert_int_eq(to(p, "203.0.113.6", 6, 443, 0), NP_ALLOW);   /* only the host's own */
    net_policy_free(p);

    /* an explicit allow beats the preset; a deny beats the default */
    const char *allow[] = { "10.1.2.3", "0.0.0.0/0,port=8443,proto=tcp" };
    const char *deny[] = { "93.184.216.0/24" };
    p = mk(&(struct np_conf){ .default_allow = true, .allow = allow, .n_allow = 2, .deny = deny,
                              .n_deny = 1 });
    ck_assert_int_eq(to(p, "10.1.2.3", 6, 22, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, idx(p, NP_K_ALLOW, "10.1.2.3/32"));
    ck_assert_int_eq(to(p, "10.1.2.4", 6, 8443, 0), NP_ALLOW);     /* a broad allow covers private ranges */
    ck_assert_int_eq(to(p, "10.1.2.4", 6, 22, 0), NP_DROP);
    EXPECT(NP_DROP, idx(p, NP_K_PRESET, "10.0.0.0/8"));
    ck_assert_int_eq(to(p, "93.184.216.34", 6, 443, 0), NP_DROP);
    EXPECT(NP_DROP, idx(p, NP_K_DENY, "93.184.216.0/24"));
    net_policy_free(p);

    /* the preset turned off: no preset rules, the default decides */
    p = mk(&(struct np_conf){ .default_allow = true, .no_preset = true, .host = host, .n_host = 2 });
    ck_assert_uint_eq(net_policy_rule_count(p), NP_B__COUNT);
    ck_assert_int_eq(to(p, "10.9.9.9", 6, 443, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_DEFAULT);
    ck_assert_int_eq(to(p, "169.254.169.254", 6, 443, 0), NP_ALLOW);
    char out[4096];
    net_policy_render(p, 0, out, sizeof out);
    ck_assert_msg(strstr(out, "preset off"), "%.600s", out);
    net_policy_free(p);

    /* default deny with the preset: private ranges still end at the preset */
    p = mk(&(struct np_conf){ 0 });
    ck_assert(!net_policy_default_allow(p));
    ck_assert_int_eq(to(p, "93.184.216.34", 6, 443, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_DEFAULT);
    ck_assert_int_eq(to(p, "10.0.0.1", 6, 443, 0), NP_DROP);
    EXPECT(NP_DROP, idx(p, NP_K_PRESET, "10.0.0.0/8"));
    net_policy_free(p);
}
END_TEST

START_TEST(ports_protocols_families)
{
    const char *allow[] = { "1.2.3.4,port=443,proto=tcp", "1.2.3.5,port=53", "1.2.3.6,proto=icmp",
                            "1.2.3.7,port=1000-2000,proto=udp", "2001:db8:9::/48,proto=icmp",
                            "5.0.0.0/8" };
    struct net_policy *p = mk(&(struct np_conf){ .allow = allow, .n_allow = 6 });
    ck_assert_int_eq(to(p, "1.2.3.4", 6, 443, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "1.2.3.4", 6, 80, 0), NP_DROP);
    ck_assert_int_eq(to(p, "1.2.3.4", 17, 443, 0), NP_DROP);
    ck_assert_int_eq(to(p, "1.2.3.4", 1, 8, 0), NP_DROP);
    ck_assert_int_eq(to(p, "1.2.3.5", 6, 53, 0), NP_ALLOW);         /* no proto: TCP and UDP */
    ck_assert_int_eq(to(p, "1.2.3.5", 17, 53, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "1.2.3.5", 1, 53, 0), NP_DROP);
    ck_assert_int_eq(to(p, "1.2.3.6", 1, 8, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "1.2.3.6", 6, 8, 0), NP_DROP);
    ck_assert_int_eq(to(p, "1.2.3.7", 17, 999, 0), NP_DROP);
    ck_assert_int_eq(to(p, "1.2.3.7", 17, 1000, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "1.2.3.7", 17, 2000, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "1.2.3.7", 17, 2001, 0), NP_DROP);
    ck_assert_int_eq(to(p, "2001:db8:9::1", 58, 0, 0), NP_ALLOW);    /* icmp is ICMPv6 here */
    ck_assert_int_eq(to(p, "2001:db8:9::1", 1, 0, 0), NP_DROP);
    ck_assert_int_eq(to(p, "5.6.7.8", 132, 0, 0), NP_ALLOW);         /* any protocol */
    /* families never mix: a v4 rule does not cover ::ffff:5.6.7.8 */
    ck_assert_int_eq(to(p, "::ffff:5.6.7.8", 6, 443, 0), NP_DROP);
    net_policy_free(p);

    const char *all6[] = { "::/0" };
    p = mk(&(struct np_conf){ .allow = all6, .n_allow = 1, .no_preset = true });
    ck_assert_int_eq(to(p, "2606:4700::1", 6, 1, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "1.1.1.1", 6, 1, 0), NP_DROP);
    net_policy_free(p);
}
END_TEST

START_TEST(steps_before_the_rules)
{
    const char *allow[] = { "0.0.0.0/0", "::/0" };
    const char *deny[] = { "169.254.0.0/16" };
    struct net_policy *p = mk(&(struct np_conf){ .allow = allow, .n_allow = 2, .deny = deny,
                                                 .n_deny = 1 });
    /* metadata: TCP port 80 only, whatever the rules say */
    ck_assert_int_eq(to(p, "169.254.169.254", 6, 80, 0), NP_METADATA);
    EXPECT(NP_METADATA, NP_B_METADATA);
    ck_assert_uint_eq(ctr(p, NP_B_METADATA).frames_allowed, 1);
    ck_assert_int_eq(to(p, "169.254.169.254", 17, 80, 0), NP_DROP);
    EXPECT(NP_DROP, idx(p, NP_K_DENY, "169.254.0.0/16"));
    ck_assert_int_eq(to(p, "169.254.169.254", 6, 8080, 0), NP_DROP);
    ck_assert_int_eq(to(p, "169.254.169.253", 6, 80, 0), NP_DROP);

    /* ARP allowed, other EtherTypes and VLAN tags dropped */
    ck_assert_int_eq(tx(p, &(struct fspec){ .ethertype = 0x0806 }, 0), NP_DROP);  /* htype 0: malformed */
    EXPECT(NP_DROP, NP_B_MALFORMED);
    ck_assert_int_eq(res.err, NF_E_ARP_FORMAT);
    static const uint8_t arp[42] = { 2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 6,
                                     0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 2, 10, 0, 2, 15 };
    ck_assert_int_eq(net_policy_tx(p, arp, sizeof arp, 0, &res), NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_ARP);
    ck_assert_int_eq(tx(p, &(struct fspec){ .ethertype = 0x88cc }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_NONIP);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.15", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443, .vlan = true }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_VLAN);

    /* malformed: counted per reason */
    size_t n = build(&(struct fspec){ .src = "10.0.2.15", .dst = "8.8.8.8", .proto = 6, .dport = 443 });
    fb[14] = 0x44;
    ck_assert_int_eq(net_policy_tx(p, fb, n, 0, &res), NP_DROP);
    EXPECT(NP_DROP, NP_B_MALFORMED);
    ck_assert_int_eq(res.err, NF_E_IP4_IHL);
    ck_assert_int_eq(net_policy_tx(p, fb, 5, 0, NULL), NP_DROP);
    struct np_stats st;
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.malformed[NF_E_IP4_IHL], 1);
    ck_assert_uint_eq(st.malformed[NF_E_ETH_SHORT], 1);
    ck_assert_uint_eq(st.malformed[NF_E_ARP_FORMAT], 1);
    ck_assert_uint_eq(ctr(p, NP_B_MALFORMED).frames_dropped, 3);
    ck_assert_uint_eq(ctr(p, NP_B_MALFORMED).bytes_dropped, 60 + n + 5);

    /* source routing: dropped before the rules */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.15", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443, .lsrr = true }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRCROUTE);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "2001:db8::15", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443, .segleft = true }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRCROUTE);
    net_policy_free(p);
}
END_TEST

START_TEST(link_services)
{
    struct net_policy *p = mk(&(struct np_conf){ 0 });     /* default deny, preset on */
    uint8_t boot[300];
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "0.0.0.0", .dst = "255.255.255.255", .proto = 17,
                                            .sport = 68, .dport = 67, .pl = boot,
                                            .pln = bootp(boot, 1, 0x1234, GUEST_MAC, 0, 1) }, 0),
                     NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_DHCP4);
    /* a unicast renewal is not a link service: the rules decide */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.15", .dst = "10.0.2.2", .proto = 17,
                                            .sport = 68, .dport = 67 }, 0), NP_DROP);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "0.0.0.0", .dst = "255.255.255.255", .proto = 17,
                                            .sport = 1068, .dport = 67 }, 0), NP_DROP);
    /* ND / MLD to link scope */
    static const unsigned nd[] = { 130, 131, 132, 133, 135, 136, 143 };
    uint8_t target[16] = { 0xfe, 0x80, [15] = 1 };     /* NS / NA: the target */
    for (size_t i = 0; i < sizeof nd / sizeof nd[0]; i++) {
        ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1:ff00:1",
                                                .proto = 58, .sport = nd[i], .pl = target,
                                                .pln = nd[i] >= 135 && nd[i] <= 136 ? sizeof target : 0 }, 0),
                         NP_ALLOW);
        EXPECT(NP_ALLOW, NP_B_ND6);
        ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "fe80::1",
                                                .proto = 58, .sport = nd[i], .pl = target,
                                                .pln = nd[i] >= 135 && nd[i] <= 136 ? sizeof target : 0 }, 0),
                         NP_ALLOW);
    }
    /* an NS / NA too short for its target */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1:ff00:1", .proto = 58,
                                            .sport = 135 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_ND6);
    /* a router advertisement, a redirect, an echo: not link services */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1", .proto = 58,
                                            .sport = 134 }, 0), NP_DROP);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1", .proto = 58,
                                            .sport = 137 }, 0), NP_DROP);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1", .proto = 58,
                                            .sport = 128 }, 0), NP_DROP);
    /* an NA to a global address is not link scope */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "2001:db8::15", .dst = "2606:4700::1",
                                            .proto = 58, .sport = 136 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_DEFAULT);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1:2", .proto = 17,
                                            .sport = 546, .dport = 547 }, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_DHCP6);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1:3", .proto = 17,
                                            .sport = 546, .dport = 547 }, 0), NP_DROP);
    net_policy_free(p);
}
END_TEST


/* ---- IPv6 addresses that embed IPv4 ones --------------------------------- */

static unsigned emb(const char *v6, uint32_t out[NP_EMBED_MAX])
{
    uint8_t b[16];
    ck_assert_int_eq(inet_pton(AF_INET6, v6, b), 1);
    return np_embedded_v4(b, out);
}

START_TEST(embedded_v4_forms)
{
    uint32_t o[NP_EMBED_MAX] = { 0 };
    ck_assert_uint_eq(emb("::ffff:169.254.169.254", o), 1);             /* IPv4-mapped */
    ck_assert_uint_eq(o[0], 0xa9fea9fe);
    ck_assert_uint_eq(emb("::a9fe:a9fe", o), 1);                        /* IPv4-compatible */
    ck_assert_uint_eq(o[0], 0xa9fea9fe);
    ck_assert_uint_eq(emb("::", o), 1);
    ck_assert_uint_eq(o[0], 0);
    ck_assert_uint_eq(emb("::1", o), 1);
    ck_assert_uint_eq(o[0], 1);
    ck_assert_uint_eq(emb("64:ff9b::a00:1", o), 1);                     /* NAT64 well-known */
    ck_assert_uint_eq(o[0], 0x0a000001);
    /* local-use NAT64: one candidate per network prefix length, /96, /48,
     * /56, /64 in that order */
    ck_assert_uint_eq(emb("64:ff9b:1:a9fe:a9:fe00::", o), 4);           /* as a /48 */
    ck_assert_uint_eq(o[1], 0xa9fea9fe);
    ck_assert_uint_eq(emb("64:ff9b:1::a00:1", o), 4);                   /* as a /96 */
    ck_assert_uint_eq(o[0], 0x0a000001);
    ck_assert_uint_eq(emb("64:ff9b:1:a9:fe:a9fe::", o), 4);             /* as a /56 */
    ck_assert_uint_eq(o[2], 0xa9fea9fe);
    ck_assert_uint_eq(emb("64:ff9b:1:0:a9:fea9:fe00:0", o), 4);         /* as a /64 */
    ck_assert_uint_eq(o[3], 0xa9fea9fe);
    ck_assert_uint_eq(emb("2001:db8::5efe:a9fe:a9fe", o), 1);           /* ISATAP, private */
    ck_assert_uint_eq(o[0], 0xa9fea9fe);
    ck_assert_uint_eq(emb("2001:db8::200:5efe:a00:1", o), 1);           /* ISATAP, global (u bit) */
    ck_assert_uint_eq(o[0], 0x0a000001);
    ck_assert_uint_eq(emb("2002:cb00:7105::5efe:a00:1", o), 2);         /* 6to4 and ISATAP */
    ck_assert_uint_eq(o[0], 0xcb007105);
    ck_assert_uint_eq(o[1], 0x0a000001);
    ck_assert_uint_eq(emb("2002:a9fe:a9fe::1", o), 1);                  /* 6to4 */
    ck_assert_uint_eq(o[0], 0xa9fea9fe);
    ck_assert_uint_eq(emb("2001:0:5db8:d822:8000:f227:5601:5601", o), 2);   /* Teredo */
    ck_assert_uint_eq(o[0], 0x5db8d822);                                /* the server */
    ck_assert_uint_eq(o[1], 0xa9fea9fe);                                /* the client, inverted */
    /* nothing embedded */
    static const char *const none[] = { "2606:4700::1", "64:ff9b:2::a00:1", "64:ff9b:0:1::a00:1",
                                        "::1:0:0:a00:1", "::fffe:a00:1", "2001:1::a00:1",
                                        "2003::a00:1", "fe80::a00:1", "0:0:0:1::a00:1",
                                        "2001:db8::400:5efe:a00:1", "2001:db8::5eff:a00:1" };
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        ck_assert_msg(emb(none[i], o) == 0, "%s embeds", none[i]);
}
END_TEST

START_TEST(embedded_v4_denied)
{
    uint8_t hb[4] = { 203, 0, 113, 5 };
    struct nf_addr host;
    nf_addr_v4(&host, hb);
    struct net_policy *p = mk(&(struct np_conf){ .default_allow = true, .host = &host, .n_host = 1 });
    static const struct { const char *dst, *rule; } denied[] = {
        { "64:ff9b::a9fe:a9fe", "169.254.0.0/16" }, { "64:ff9b::a00:1", "10.0.0.0/8" },
        { "64:ff9b::c0a8:101", "192.168.0.0/16" }, { "64:ff9b::7f00:1", "127.0.0.0/8" },
        { "2002:a9fe:a9fe::1", "169.254.0.0/16" }, { "2002:ac10:1::1", "172.16.0.0/12" },
        { "::a9fe:a9fe", "169.254.0.0/16" }, { "::a00:1", "10.0.0.0/8" },
        { "2001:0:a9fe:a9fe::1", "169.254.0.0/16" },                    /* Teredo server */
        { "2001:0:5db8:d822::5601:5601", "169.254.0.0/16" },            /* Teredo client */
        { "64:ff9b::cb00:7105", "203.0.113.5/32 (host)" },
        { "64:ff9b:1::a00:1", "64:ff9b:1::/48" },
        { "2001:db8::5efe:a9fe:a9fe", "169.254.0.0/16" },               /* ISATAP */
        { "2606:4700::200:5efe:a00:1", "10.0.0.0/8" },
    };
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
        ck_assert_msg(to(p, denied[i].dst, 6, 443, 0) == NP_DROP, "%s allowed", denied[i].dst);
        EXPECT(NP_DROP, idx(p, NP_K_PRESET, denied[i].rule));
    }
    static const char *const ok[] = { "64:ff9b::5db8:d822", "2002:5db8:d822::1", "::5db8:d822",
                                      "2001:0:5db8:d822::a247:27dd", "2606:4700::1" };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ck_assert_msg(to(p, ok[i], 6, 443, 0) == NP_ALLOW, "%s dropped", ok[i]);
        EXPECT(NP_ALLOW, NP_B_DEFAULT);
    }
    net_policy_free(p);

    /* an IPv4 deny rule covers the IPv6 forms of its addresses (ports and
     * protocol as for IPv4; proto=icmp takes ICMPv6); an explicit IPv6
     * allow still beats the preset, as an IPv4 one does */
    const char *deny[] = { "93.184.216.0/24,port=443,proto=tcp", "198.51.100.7,proto=icmp" };
    const char *allow[] = { "64:ff9b::a00:5" };
    p = mk(&(struct np_conf){ .default_allow = true, .deny = deny, .n_deny = 2, .allow = allow,
                              .n_allow = 1 });
    ck_assert_int_eq(to(p, "64:ff9b::5db8:d822", 6, 443, 0), NP_DROP);
    EXPECT(NP_DROP, idx(p, NP_K_DENY, "93.184.216.0/24,port=443,proto=tcp"));
    ck_assert_int_eq(to(p, "2002:5db8:d801::1", 6, 443, 0), NP_DROP);
    ck_assert_int_eq(to(p, "64:ff9b::5db8:d822", 6, 80, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "64:ff9b::c633:6407", 58, 0, 0), NP_DROP);
    EXPECT(NP_DROP, idx(p, NP_K_DENY, "198.51.100.7/32,proto=icmp"));
    ck_assert_int_eq(to(p, "64:ff9b::c633:6407", 17, 53, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "64:ff9b::a00:5", 6, 443, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, idx(p, NP_K_ALLOW, "64:ff9b::a00:5/128"));
    net_policy_free(p);

    /* the local-use prefix's /56 and /64 layouts and ISATAP, through an
     * IPv4 deny rule with the preset off */
    const char *deny169[] = { "169.254.0.0/16" };
    p = mk(&(struct np_conf){ .default_allow = true, .no_preset = true, .deny = deny169, .n_deny = 1 });
    static const char *const meta[] = { "64:ff9b:1:a9fe:a9:fe00::", "64:ff9b:1:a9:fe:a9fe::",
                                        "64:ff9b:1:0:a9:fea9:fe00:0", "64:ff9b:1::a9fe:a9fe",
                                        "2001:db8:1::5efe:a9fe:a9fe", "2001:db8:1::300:5efe:a9fe:a9fe" };
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) {
        ck_assert_msg(to(p, meta[i], 6, 80, 0) == NP_DROP, "%s allowed", meta[i]);
        EXPECT(NP_DROP, idx(p, NP_K_DENY, "169.254.0.0/16"));
    }
    ck_assert_int_eq(to(p, "64:ff9b:1:5d:b8:d822::", 6, 80, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "2001:db8:1::5efe:5db8:d822", 6, 80, 0), NP_ALLOW);
    net_policy_free(p);

    /* deny 0.0.0.0/0 takes every embedding form with it */
    const char *deny4[] = { "0.0.0.0/0" };
    p = mk(&(struct np_conf){ .default_allow = true, .no_preset = true, .deny = deny4, .n_deny = 1 });
    ck_assert_int_eq(to(p, "64:ff9b::5db8:d822", 6, 443, 0), NP_DROP);
    ck_assert_int_eq(to(p, "2001:0:5db8:d822::a247:27dd", 6, 443, 0), NP_DROP);
    ck_assert_int_eq(to(p, "2606:4700::1", 6, 443, 0), NP_ALLOW);
    net_policy_free(p);
}
END_TEST

/* A domain's AAAA answer in an embedding form: the preset still decides. */
START_TEST(embedded_v4_learned)
{
    const char *allow[] = { "10.0.2.3,port=53,proto=udp" };
    const char *dom[] = { "x.example" };
    struct net_policy *p = mk(&(struct np_conf){ .allow = allow, .n_allow = 1, .allow_domain = dom,
                                                 .n_allow_domain = 1 });
    ck_assert_int_eq(query(p, "10.0.2.3", 17, 5353, 7, "x.example", 0), NP_ALLOW);
    const char *addrs[] = { "64:ff9b::a9fe:a9fe", "2002:a00:1::1", "64:ff9b::5db8:d822" };
    ck_assert_uint_eq(answer(p, "10.0.2.3", 17, 5353, 7, "x.example", NULL, addrs, 3, 300, 0), 3);
    ck_assert_int_eq(to(p, "64:ff9b::a9fe:a9fe", 6, 443, S(1)), NP_DROP);
    EXPECT(NP_DROP, idx(p, NP_K_PRESET, "169.254.0.0/16"));
    ck_assert_int_eq(to(p, "2002:a00:1::1", 6, 443, S(1)), NP_DROP);
    EXPECT(NP_DROP, idx(p, NP_K_PRESET, "10.0.0.0/8"));
    ck_assert_int_eq(to(p, "64:ff9b::5db8:d822", 6, 443, S(1)), NP_ALLOW);
    EXPECT(NP_ALLOW, idx(p, NP_K_DOMAIN, "x.example"));
    net_policy_free(p);
}
END_TEST

/* ---- the guest's identity, source routing before the link services ------ */

START_TEST(srcroute_before_link_services)
{
    const char *deny[] = { "0.0.0.0/0", "::/0" };
    struct net_policy *p = mk(&(struct np_conf){ .deny = deny, .n_deny = 2 });
    uint8_t body[64], boot[300];
    size_t bn = ndbody(body, "fe80::1", 1, GUEST_MAC);
    /* an NS behind a routing header (segments left: fd00:ec2::254 next) */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1:ff00:1", .proto = 58,
                                            .sport = 135, .pl = body, .pln = bn, .segleft = true }, 0),
                     NP_DROP);
    EXPECT(NP_DROP, NP_B_SRCROUTE);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1:ff00:1", .proto = 58,
                                            .sport = 135, .pl = body, .pln = bn }, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_ND6);
    /* DHCP with a loose source route option, or any other option */
    size_t blen = bootp(boot, 1, 9, GUEST_MAC, 0, 1);
    struct fspec d = { .src = "0.0.0.0", .dst = "255.255.255.255", .proto = 17, .sport = 68,
                       .dport = 67, .pl = boot, .pln = blen, .lsrr = true };
    ck_assert_int_eq(tx(p, &d, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRCROUTE);
    size_t n = build(&d);
    fb[14 + 20] = 148;                                  /* router alert in its place */
    fb[14 + 21] = 4;
    ck_assert_int_eq(net_policy_tx(p, fb, n, 0, &res), NP_DROP);
    EXPECT(NP_DROP, NP_B_DHCP4);
    d.lsrr = false;
    ck_assert_int_eq(tx(p, &d, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_DHCP4);
    /* the counters say which */
    ck_assert_uint_eq(ctr(p, NP_B_SRCROUTE).frames_dropped, 2);
    ck_assert_uint_eq(ctr(p, NP_B_DHCP4).frames_dropped, 1);
    ck_assert_uint_eq(ctr(p, NP_B_DHCP4).frames_allowed, 1);
    net_policy_free(p);
}
END_TEST

START_TEST(spoofed_sources)
{
    const uint8_t macs[1][6] = { { 2, 0, 0, 0, 0, 2 } };
    uint8_t g4[4] = { 10, 0, 2, 15 }, g6[16];
    inet_pton(AF_INET6, "2001:db8::15", g6);
    struct nf_addr guest[2];
    nf_addr_v4(&guest[0], g4);
    nf_addr_v6(&guest[1], g6);
    const char *allow[] = { "0.0.0.0/0", "::/0" };
    struct net_policy *p = mk(&(struct np_conf){ .allow = allow, .n_allow = 2, .guest_mac = macs,
                                                 .n_guest_mac = 1, .guest = guest, .n_guest = 2 });
    /* the Ethernet source */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.15", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443, .smac = OTHER_MAC }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_MAC);
    ck_assert_int_eq(to(p, "8.8.8.8", 6, 443, 0), NP_ALLOW);
    /* ARP: the sender's MAC and address */
    size_t n = arpf(GUEST_MAC, 1, OTHER_MAC, "10.0.2.15");
    ck_assert_int_eq(net_policy_tx(p, fb, n, 0, &res), NP_DROP);
    EXPECT(NP_DROP, NP_B_ARP);
    n = arpf(GUEST_MAC, 2, GUEST_MAC, "10.0.2.2");           /* claims the gateway */
    ck_assert_int_eq(net_policy_tx(p, fb, n, 0, &res), NP_DROP);
    EXPECT(NP_DROP, NP_B_ARP);
    n = arpf(GUEST_MAC, 3, GUEST_MAC, "10.0.2.15");          /* RARP's op */
    ck_assert_int_eq(net_policy_tx(p, fb, n, 0, &res), NP_DROP);
    n = arpf(OTHER_MAC, 1, OTHER_MAC, "10.0.2.15");
    ck_assert_int_eq(net_policy_tx(p, fb, n, 0, &res), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_MAC);
    n = arpf(GUEST_MAC, 1, GUEST_MAC, "0.0.0.0");            /* a probe */
    ck_assert_int_eq(net_policy_tx(p, fb, n, 0, &res), NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_ARP);
    n = arpf(GUEST_MAC, 2, GUEST_MAC, "10.0.2.15");
    ck_assert_int_eq(net_policy_tx(p, fb, n, 0, &res), NP_ALLOW);
    ck_assert_uint_eq(ctr(p, NP_B_ARP).frames_dropped, 3);
    ck_assert_uint_eq(ctr(p, NP_B_ARP).frames_allowed, 2);
    /* IP sources */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.99", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "0.0.0.0", .dst = "8.8.8.8", .proto = 17,
                                            .sport = 68, .dport = 67 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "2001:db8::99", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "::", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    ck_assert_int_eq(to(p, "2606:4700::1", 6, 443, 0), NP_ALLOW);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443 }, 0), NP_ALLOW);
    /* ND: link-layer options and an NA's target */
    uint8_t body[64];
    size_t bn = ndbody(body, "2001:db8::99", 2, GUEST_MAC);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1", .proto = 58,
                                            .sport = 136, .pl = body, .pln = bn }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_ND6);
    bn = ndbody(body, "2001:db8::15", 2, OTHER_MAC);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1", .proto = 58,
                                            .sport = 136, .pl = body, .pln = bn }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_ND6);
    bn = ndbody(body, "fe80::1", 1, OTHER_MAC);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1:ff00:1", .proto = 58,
                                            .sport = 135, .pl = body, .pln = bn }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_ND6);
    uint8_t rs[8] = { 1, 1, 2, 0, 0, 0, 0, 0x99 };             /* RS, source option: another MAC */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::2", .proto = 58,
                                            .sport = 133, .pl = rs, .pln = 8 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_ND6);
    rs[7] = 2;
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::2", .proto = 58,
                                            .sport = 133, .pl = rs, .pln = 8 }, 0), NP_ALLOW);
    rs[1] = 0;                                                  /* an option of length 0 */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::2", .proto = 58,
                                            .sport = 133, .pl = rs, .pln = 8 }, 0), NP_DROP);
    /* what a Linux guest sends: DAD from ::, its NA, an NS with its MAC */
    bn = ndbody(body, "2001:db8::15", 0, GUEST_MAC);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "::", .dst = "ff02::1:ff00:15", .proto = 58,
                                            .sport = 135, .pl = body, .pln = bn }, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_ND6);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "::", .dst = "ff02::16", .proto = 58,
                                            .sport = 143 }, 0), NP_ALLOW);
    bn = ndbody(body, "2001:db8::15", 2, GUEST_MAC);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "2001:db8::15", .dst = "fe80::1", .proto = 58,
                                            .sport = 136, .pl = body, .pln = bn }, 0), NP_ALLOW);
    bn = ndbody(body, "fe80::1", 1, GUEST_MAC);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::15", .dst = "ff02::1:ff00:1", .proto = 58,
                                            .sport = 135, .pl = body, .pln = bn }, 0), NP_ALLOW);
    /* DHCP: from 0.0.0.0 with its own MAC as the client's */
    uint8_t boot[300];
    size_t blen = bootp(boot, 1, 5, OTHER_MAC, 0, 1);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "0.0.0.0", .dst = "255.255.255.255", .proto = 17,
                                            .sport = 68, .dport = 67, .pl = boot, .pln = blen }, 0),
                     NP_DROP);
    EXPECT(NP_DROP, NP_B_DHCP4);
    blen = bootp(boot, 1, 5, GUEST_MAC, 0, 3);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "0.0.0.0", .dst = "255.255.255.255", .proto = 17,
                                            .sport = 68, .dport = 67, .pl = boot, .pln = blen }, 0),
                     NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_DHCP4);
    ck_assert_uint_eq(ctr(p, NP_B_SRC_MAC).frames_dropped, 2);
    ck_assert_uint_eq(ctr(p, NP_B_SRC_ADDR).frames_dropped, 4);
    net_policy_free(p);
}
END_TEST

/* Without configured addresses: the lease DHCP hands the guest pins its
 * IPv4 source, when the ACK comes from the backend's server (conf
 * dhcp_server) and names that server. */
static unsigned dhcp_reply_from(struct net_policy *p, const char *server, uint32_t sid, uint32_t xid,
                                const uint8_t mac[6], uint32_t yi, unsigned type, uint64_t now)
{
    uint8_t boot[300];
    size_t blen = bootp(boot, 2, xid, mac, yi, type);
    if (sid) {
        blen--;                                     /* over the end option */
        boot[blen++] = 54; boot[blen++] = 4;
        boot[blen++] = (uint8_t)(sid >> 24); boot[blen++] = (uint8_t)(sid >> 16);
        boot[blen++] = (uint8_t)(sid >> 8); boot[blen++] = (uint8_t)sid;
        boot[blen++] = 255;
    }
    size_t n = build(&(struct fspec){ .src = server, .dst = "10.0.2.15", .proto = 17, .sport = 67,
                                      .dport = 68, .pl = boot, .pln = blen });
    net_policy_rx(p, fb, n, now);
    struct np_stats st;
    net_policy_stats(p, &st);
    return (unsigned)st.dhcp_learned;
}

static unsigned dhcp_reply(struct net_policy *p, uint32_t xid, const uint8_t mac[6], uint32_t yi,
                           unsigned type, uint64_t now)
{
    return dhcp_reply_from(p, "10.0.2.2", 0, xid, mac, yi, type, now);
}

static void dhcp_request(struct net_policy *p, uint32_t xid, uint64_t now)
{
    uint8_t boot[300];
    size_t blen = bootp(boot, 1, xid, GUEST_MAC, 0, 3);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "0.0.0.0", .dst = "255.255.255.255", .proto = 17,
                                            .sport = 68, .dport = 67, .pl = boot, .pln = blen }, now),
                     NP_ALLOW);
}

static const uint32_t SERVER = 0x0a000202;         /* 10.0.2.2 */

START_TEST(dhcp_pins_ipv4)
{
    const uint8_t macs[1][6] = { { 2, 0, 0, 0, 0, 2 } };
    struct net_policy *p = mk(&(struct np_conf){ .default_allow = true, .guest_mac = macs,
                                                 .n_guest_mac = 1, .dhcp_server = &SERVER,
                                                 .n_dhcp_server = 1 });
    /* an ACK for no transaction of the guest's is ignored */
    ck_assert_uint_eq(dhcp_reply(p, 0x77, GUEST_MAC, 0x0a00020f, 5, 0), 0);
    dhcp_request(p, 0x77, 0);
    ck_assert_uint_eq(dhcp_reply(p, 0x78, GUEST_MAC, 0x0a00020f, 5, 0), 0);     /* another xid */
    ck_assert_uint_eq(dhcp_reply(p, 0x77, OTHER_MAC, 0x0a00020f, 5, 0), 0);     /* another client */
    ck_assert_uint_eq(dhcp_reply(p, 0x77, GUEST_MAC, 0x0a00020f, 2, 0), 0);     /* an OFFER */
    ck_assert_uint_eq(dhcp_reply(p, 0x77, GUEST_MAC, 0x0a00020f, 5, S(31)), 0); /* too late */
    ck_assert_uint_eq(dhcp_reply(p, 0x77, GUEST_MAC, 0xe0000001, 5, S(1)), 0);  /* multicast */
    /* from a server elsewhere (a flow the guest opened to a port 67 out
     * there), or naming another server: not learned, counted */
    ck_assert_uint_eq(dhcp_reply_from(p, "198.51.100.7", 0, 0x77, GUEST_MAC, 0x08080808, 5, S(1)), 0);
    ck_assert_uint_eq(dhcp_reply_from(p, "10.0.2.2", 0xc6336407, 0x77, GUEST_MAC, 0x08080808, 5, S(1)),
                      0);
    struct np_stats st;
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.dhcp_refused, 2);
    ck_assert_uint_eq(dhcp_reply_from(p, "10.0.2.2", SERVER, 0x77, GUEST_MAC, 0x0a00020f, 5, S(1)), 1);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.99", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443 }, S(2)), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    ck_assert_int_eq(to(p, "8.8.8.8", 6, 443, S(2)), NP_ALLOW);
    size_t n = arpf(GUEST_MAC, 2, GUEST_MAC, "10.0.2.2");
    ck_assert_int_eq(net_policy_tx(p, fb, n, S(2), &res), NP_DROP);
    EXPECT(NP_DROP, NP_B_ARP);
    /* a rebuilt policy keeps what DHCP said */
    struct net_policy *q = mk(&(struct np_conf){ .default_allow = true, .guest_mac = macs,
                                                 .n_guest_mac = 1 });
    net_policy_carry(q, p, S(3));
    ck_assert_int_eq(tx(q, &(struct fspec){ .src = "10.0.2.99", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443 }, S(3)), NP_DROP);
    static char text[16384];
    net_policy_render(q, S(3), text, sizeof text);
    const char *g = strstr(text, "guest:");
    ck_assert_msg(g && strstr(g, "10.0.2.15 (DHCP)"), "%.200s", g ? g : "no guest line");
    net_policy_free(q);
    net_policy_free(p);

    /* no server named: DHCP pins nothing */
    p = mk(&(struct np_conf){ .default_allow = true });
    dhcp_request(p, 0x79, 0);
    ck_assert_uint_eq(dhcp_reply(p, 0x79, GUEST_MAC, 0x0a00020f, 5, S(1)), 0);
    net_policy_free(p);
}
END_TEST

/* Nothing given (no guest_mac, no guest items, no lease yet): the MAC and
 * addresses the guest first uses are pinned; a lease replaces the IPv4
 * one. */
START_TEST(first_use_pins)
{
    struct net_policy *p = mk(&(struct np_conf){ .default_allow = true, .dhcp_server = &SERVER,
                                                 .n_dhcp_server = 1 });
    ck_assert_int_eq(to(p, "8.8.8.8", 6, 443, 0), NP_ALLOW);                   /* 10.0.2.15, GUEST_MAC */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.15", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443, .smac = OTHER_MAC }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_MAC);
    static const uint8_t mcast[6] = { 0x33, 0x33, 0, 0, 0, 1 };
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.15", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443, .smac = mcast }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_MAC);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.99", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    size_t n = arpf(GUEST_MAC, 2, GUEST_MAC, "10.0.2.2");                      /* claims the gateway */
    ck_assert_int_eq(net_policy_tx(p, fb, n, 0, &res), NP_DROP);
    EXPECT(NP_DROP, NP_B_ARP);
    /* 0.0.0.0 only in DHCP */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "0.0.0.0", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    /* a lease from the backend's server replaces the first-use address */
    dhcp_request(p, 0x31, 0);
    ck_assert_uint_eq(dhcp_reply(p, 0x31, GUEST_MAC, 0x0a000210, 5, S(1)), 1);  /* 10.0.2.16 */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.16", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443 }, S(1)), NP_ALLOW);
    ck_assert_int_eq(to(p, "8.8.8.8", 6, 443, S(1)), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);

    /* IPv6: the EUI-64 link-local of the guest's MAC, and up to
     * NP_GUEST_LEARN_V6 others on first use; :: only in ND; an NA's target
     * the guest's */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::ff:fe00:2", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443 }, 0), NP_ALLOW);      /* 02:..:02's EUI-64 */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "::", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "ff02::1", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    char a[64];
    for (unsigned i = 0; i < NP_GUEST_LEARN_V6; i++) {
        snprintf(a, sizeof a, "2001:db8::%x", 0x100 + i);
        ck_assert_msg(tx(p, &(struct fspec){ .src = a, .dst = "2606:4700::1", .proto = 6, .dport = 443 },
                         0) == NP_ALLOW, "%s", a);
    }
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "2001:db8::100", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443 }, 0), NP_ALLOW);      /* pinned, again */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "2001:db8::1ff", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443 }, 0), NP_DROP);       /* over the cap */
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::99", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443 }, 0), NP_DROP);       /* a link-local too */
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    uint8_t body[64];
    size_t bn = ndbody(body, "fe80::1", 2, GUEST_MAC);                          /* NA: the gateway's */
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::ff:fe00:2", .dst = "ff02::1", .proto = 58,
                                            .sport = 136, .pl = body, .pln = bn }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_ND6);
    bn = ndbody(body, "2001:db8::101", 2, GUEST_MAC);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "fe80::ff:fe00:2", .dst = "ff02::1", .proto = 58,
                                            .sport = 136, .pl = body, .pln = bn }, 0), NP_ALLOW);
    /* the pins travel with a rebuilt policy and are shown */
    struct net_policy *q = mk(&(struct np_conf){ .default_allow = true });
    net_policy_carry(q, p, S(2));
    ck_assert_int_eq(tx(q, &(struct fspec){ .src = "10.0.2.16", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443, .smac = OTHER_MAC }, S(2)), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_MAC);
    ck_assert_int_eq(tx(q, &(struct fspec){ .src = "2001:db8::1ff", .dst = "2606:4700::1", .proto = 6,
                                            .dport = 443 }, S(2)), NP_DROP);
    static char text[16384];
    net_policy_render(q, S(2), text, sizeof text);
    const char *g = strstr(text, "guest:");
    ck_assert_msg(g && strstr(g, "02:00:00:00:00:02 (first use)") && strstr(g, "2001:db8::107 (first use)") &&
                  strstr(g, "10.0.2.16 (DHCP)"), "%.400s", g ? g : "no guest line");
    struct np_stats st;
    net_policy_stats(q, &st);
    ck_assert_uint_eq(st.ids_learned, 2 + NP_GUEST_LEARN_V6);                  /* MAC, 10.0.2.15, 8 IPv6 */
    net_policy_free(q);
    net_policy_free(p);
}
END_TEST

/* The policy's text: the guest's addresses (item guest ADDR). */
START_TEST(text_guest_addresses)
{
    struct np_text t;
    struct np_conf c;
    ck_assert_int_eq(np_text_parse("default allow; guest 10.0.2.15 ; guest 2001:db8::15; deny 1.2.3.4",
                                   &t, &c, why, sizeof why), 0);
    ck_assert_uint_eq(c.n_guest, 2);
    ck_assert_int_eq(c.guest[0].family, 4);
    ck_assert_int_eq(c.guest[0].b[15], 15);
    ck_assert_int_eq(c.guest[1].family, 6);
    ck_assert_uint_eq(c.n_deny, 1);
    ck_assert(c.default_allow);
    struct net_policy *p = mk(&c);
    np_text_free(&t);
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.99", .dst = "8.8.8.8", .proto = 6,
                                            .dport = 443 }, 0), NP_DROP);
    EXPECT(NP_DROP, NP_B_SRC_ADDR);
    ck_assert_int_eq(to(p, "8.8.8.8", 6, 443, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "2606:4700::1", 6, 443, 0), NP_ALLOW);
    net_policy_free(p);

    static const char *const bad[] = { "guest", "guest 10.0.2.0/24", "guest host.example",
                                       "guest 10.0.2.15,port=1", "guest fe80::1%eth0" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        ck_assert_msg(np_text_parse(bad[i], &t, &c, why, sizeof why) == -EINVAL, "accepted %s", bad[i]);
        ck_assert(why[0]);
        np_text_free(&t);
    }
    char many[1024] = "";
    for (unsigned i = 0; i <= NP_GUEST_ADDRS_MAX; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "guest 10.0.2.%u;", i + 1);
    ck_assert_int_eq(np_text_parse(many, &t, &c, why, sizeof why), -E2BIG);
    np_text_free(&t);
}
END_TEST

START_TEST(fragments)
{
    const char *allow[] = { "1.2.3.4,port=443,proto=tcp", "2001:db8:9::1,port=443,proto=tcp" };
    struct net_policy *p = mk(&(struct np_conf){ .allow = allow, .n_allow = 2 });
    int r4 = idx(p, NP_K_ALLOW, "1.2.3.4/32,port=443,proto=tcp");
    uint8_t data[64] = { 0 };
    for (int v6 = 0; v6 < 2; v6++) {
        const char *src = v6 ? "2001:db8::15" : "10.0.2.15";
        const char *dst = v6 ? "2001:db8:9::1" : "1.2.3.4";
        int rule = v6 ? r4 + 1 : r4;
        struct fspec first = { .src = src, .dst = dst, .proto = 6, .dport = 443, .frag = 1,
                               .id = 77, .pl = data, .pln = 4 };
        struct fspec later = { .src = src, .dst = dst, .proto = 6, .frag = 2, .frag_off = 24,
                               .id = 77, .pl = data, .pln = 16 };
        /* a later fragment before its first: dropped */
        ck_assert_int_eq(tx(p, &later, 0), NP_DROP);
        EXPECT(NP_DROP, NP_B_FRAG);
        ck_assert_int_eq(tx(p, &first, 0), NP_ALLOW);
        EXPECT(NP_ALLOW, rule);
        ck_assert_int_eq(tx(p, &later, S(1)), NP_ALLOW);
        EXPECT(NP_ALLOW, rule);
        later.last = true;
        later.pln = 5;
        ck_assert_int_eq(tx(p, &later, S(2)), NP_ALLOW);
        /* another id, another source, or the same after NP_FRAG_NS: dropped */
        later.id = 78;
        ck_assert_int_eq(tx(p, &later, S(2)), NP_DROP);
        EXPECT(NP_DROP, NP_B_FRAG);
        later.id = 77;
        later.src = v6 ? "2001:db8::16" : "10.0.2.16";
        ck_assert_int_eq(tx(p, &later, S(2)), NP_DROP);
        /* IPv4: 10.0.2.15, pinned on first use, is the guest's only address */
        EXPECT(NP_DROP, v6 ? NP_B_FRAG : NP_B_SRC_ADDR);
        later.src = src;
        ck_assert_int_eq(tx(p, &later, NP_FRAG_NS + 1), NP_DROP);
        /* a first fragment the rules deny: its later ones too */
        first.dport = 80;
        first.id = 90;
        later.id = 90;
        ck_assert_int_eq(tx(p, &first, S(3)), NP_DROP);
        EXPECT(NP_DROP, NP_B_DEFAULT);
        ck_assert_int_eq(tx(p, &later, S(3)), NP_DROP);
        EXPECT(NP_DROP, NP_B_FRAG);
    }
    ck_assert_uint_eq(ctr(p, (size_t)r4).frames_allowed, 3);
    ck_assert_uint_eq(ctr(p, NP_B_FRAG).frames_dropped, 9);

    /* the table is bounded: the oldest tracked datagram goes */
    struct fspec first = { .src = "10.0.2.15", .dst = "1.2.3.4", .proto = 6, .dport = 443,
                           .frag = 1, .pl = data, .pln = 4 };
    struct fspec later = { .src = "10.0.2.15", .dst = "1.2.3.4", .proto = 6, .frag = 2,
                           .frag_off = 24, .pl = data, .pln = 8 };
    for (unsigned i = 0; i < NP_FRAG_MAX + 10; i++) {
        first.id = 1000 + i;
        ck_assert_int_eq(tx(p, &first, S(100)), NP_ALLOW);
    }
    struct np_stats st;
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.frag_evicted, 10);
    later.id = 1000;
    ck_assert_int_eq(tx(p, &later, S(100)), NP_DROP);
    later.id = 1000 + NP_FRAG_MAX + 9;
    ck_assert_int_eq(tx(p, &later, S(100)), NP_ALLOW);
    later.id = 1010;
    ck_assert_int_eq(tx(p, &later, S(100)), NP_ALLOW);
    net_policy_free(p);
}
END_TEST

/* ---- DNS learning ------------------------------------------------------ */

#define RESOLVER "10.0.2.3"

static struct net_policy *dns_policy(uint32_t learn_max, const char *dom2)
{
    static const char *allow[] = { RESOLVER ",port=53", "2001:db8::3,port=53,proto=udp" };
    const char *dom[] = { "*.pypi.org", dom2 ? dom2 : "example.org" };
    return mk(&(struct np_conf){ .allow = allow, .n_allow = 2, .allow_domain = dom,
                                 .n_allow_domain = 2, .learn_max = learn_max });
}

START_TEST(learn_and_expire)
{
    struct net_policy *p = dns_policy(0, NULL);
    int pypi = idx(p, NP_K_DOMAIN, "*.pypi.org");
    const char *addrs[] = { "151.101.0.223", "2a04:4e42::223" };
    ck_assert_int_eq(to(p, "151.101.0.223", 6, 443, S(1)), NP_DROP);
    ck_assert_int_eq(query(p, RESOLVER, 17, 40001, 0x1111, "files.pypi.org", S(1)), NP_ALLOW);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40001, 0x1111, "files.pypi.org", NULL, addrs, 2, 300,
                             S(2)), 2);
    ck_assert_int_eq(to(p, "151.101.0.223", 6, 443, S(3)), NP_ALLOW);
    EXPECT(NP_ALLOW, pypi);
    ck_assert_int_eq(to(p, "2a04:4e42::223", 17, 443, S(3)), NP_ALLOW);
    EXPECT(NP_ALLOW, pypi);
    ck_assert_uint_eq(ctr(p, (size_t)pypi).frames_allowed, 2);
    struct nf_addr a;
    uint8_t b4[4] = { 151, 101, 0, 223 };
    nf_addr_v4(&a, b4);
    uint64_t exp = 0;
    ck_assert(net_policy_learned(p, &a, S(3), &exp));
    ck_assert_uint_eq(exp, S(302));
    /* the answer once consumed: a replay learns nothing */
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40001, 0x1111, "files.pypi.org", NULL, addrs, 2, 300,
                             S(4)), 0);
    struct np_stats st;
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.dns_seen, 2);
    ck_assert_uint_eq(st.dns_learned, 1);
    ck_assert_uint_eq(st.dns_unsolicited, 1);
    ck_assert_uint_eq(st.addrs_learned, 2);
    ck_assert_uint_eq(st.learned, 2);
    /* expiry: gone once its TTL has passed */
    ck_assert_int_eq(to(p, "151.101.0.223", 6, 443, S(301)), NP_ALLOW);
    ck_assert_int_eq(to(p, "2a04:4e42::223", 17, 443, S(302) + 1), NP_DROP);
    EXPECT(NP_DROP, NP_B_DEFAULT);
    ck_assert(!net_policy_learned(p, &a, S(400), NULL));
    net_policy_free(p);
}
END_TEST

START_TEST(ttl_clamp_and_use)
{
    const char *allow[] = { RESOLVER ",port=53,proto=udp" };
    const char *dom[] = { "example.org" };
    struct net_policy *p = mk(&(struct np_conf){ .allow = allow, .n_allow = 1, .allow_domain = dom,
                                                 .n_allow_domain = 1, .ttl_min_s = 10,
                                                 .ttl_max_s = 100 });
    const char *a1[] = { "93.184.216.34" }, *a2[] = { "93.184.216.35" };
    query(p, RESOLVER, 17, 5000, 1, "example.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 5000, 1, "example.org", NULL, a1, 1, 0, 0), 1);
    query(p, RESOLVER, 17, 5000, 2, "example.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 5000, 2, "example.org", NULL, a2, 1, 1000000, 0), 1);
    struct nf_addr a;
    uint8_t b[4] = { 93, 184, 216, 34 };
    uint64_t exp;
    nf_addr_v4(&a, b);
    ck_assert(net_policy_learned(p, &a, 0, &exp));
    ck_assert_uint_eq(exp, S(10));                  /* TTL 0 -> the minimum */
    b[3] = 35;
    nf_addr_v4(&a, b);
    ck_assert(net_policy_learned(p, &a, 0, &exp));
    ck_assert_uint_eq(exp, S(100));                 /* TTL 1000000 -> the maximum */
    /* a frame through a learned address keeps it at least ttl_min longer */
    ck_assert_int_eq(to(p, "93.184.216.34", 6, 443, S(8)), NP_ALLOW);
    b[3] = 34;
    nf_addr_v4(&a, b);
    ck_assert(net_policy_learned(p, &a, S(8), &exp));
    ck_assert_uint_eq(exp, S(18));
    ck_assert_int_eq(to(p, "93.184.216.34", 6, 443, S(17)), NP_ALLOW);
    ck_assert_int_eq(to(p, "93.184.216.34", 6, 443, S(27) + 1), NP_DROP);
    /* a second answer with a longer TTL extends; a shorter one does not shorten */
    query(p, RESOLVER, 17, 5000, 3, "example.org", S(30));
    answer(p, RESOLVER, 17, 5000, 3, "example.org", NULL, a2, 1, 20, S(30));
    b[3] = 35;
    nf_addr_v4(&a, b);
    ck_assert(net_policy_learned(p, &a, S(30), &exp));
    ck_assert_uint_eq(exp, S(100));
    net_policy_free(p);
}
END_TEST

START_TEST(trust_and_matching)
{
    struct net_policy *p = dns_policy(0, NULL);
    const char *addrs[] = { "151.101.0.223" };
    struct np_stats st;
    /* no query at all */
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40001, 7, "files.pypi.org", NULL, addrs, 1, 300, 0), 0);
    /* a query, then answers that do not fit it */
    query(p, RESOLVER, 17, 40001, 7, "files.pypi.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40001, 8, "files.pypi.org", NULL, addrs, 1, 300, 0), 0);
    ck_assert_uint_eq(answer(p, "10.0.2.4", 17, 40001, 7, "files.pypi.org", NULL, addrs, 1, 300, 0), 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40002, 7, "files.pypi.org", NULL, addrs, 1, 300, 0), 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 6, 40001, 7, "files.pypi.org", NULL, addrs, 1, 300, 0), 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40001, 7, "other.pypi.org", NULL, addrs, 1, 300, 0), 0);
    /* too late */
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40001, 7, "files.pypi.org", NULL, addrs, 1, 300,
                             NP_DNS_PENDING_NS), 0);
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.dns_unsolicited, 7);
    ck_assert_uint_eq(st.learned, 0);
    /* the right one; the case of the answer's name does not matter */
    query(p, RESOLVER, 17, 40001, 7, "Files.PyPI.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40001, 7, "files.pypi.ORG", NULL, addrs, 1, 300, 0), 1);

    /* names: the apex is not under "*.pypi.org"; queries for names no rule
     * matches are not tracked */
    query(p, RESOLVER, 17, 40003, 9, "pypi.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40003, 9, "pypi.org", NULL, addrs, 1, 300, 0), 0);
    query(p, RESOLVER, 17, 40003, 10, "example.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40003, 10, "example.org", NULL, addrs, 1, 300, 0), 1);
    query(p, RESOLVER, 17, 40003, 11, "www.example.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 40003, 11, "www.example.org", NULL, addrs, 1, 300, 0), 0);
    /* error answers */
    uint8_t m[512];
    query(p, RESOLVER, 17, 40004, 12, "x.pypi.org", 0);
    size_t n = dnsr(m, 12, 3, "x.pypi.org", NULL, addrs, 1, 300);
    size_t fl = build(&(struct fspec){ .src = RESOLVER, .dst = "10.0.2.15", .proto = 17, .sport = 53,
                                       .dport = 40004, .pl = m, .pln = n });
    ck_assert_uint_eq(net_policy_rx(p, fb, fl, 0), 0);
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.dns_rcode, 1);
    /* malformed DNS; a malformed frame; not from port 53 */
    m[5] = 2;
    ck_assert_uint_eq(net_policy_rx(p, fb, fl, 0), 0);
    fb[14 + 20 + 8 + 5] = 2;
    ck_assert_uint_eq(net_policy_rx(p, fb, fl, 0), 0);
    ck_assert_uint_eq(net_policy_rx(p, fb, 10, 0), 0);
    fl = build(&(struct fspec){ .src = RESOLVER, .dst = "10.0.2.15", .proto = 17, .sport = 54,
                                .dport = 40004, .pl = m, .pln = n });
    ck_assert_uint_eq(net_policy_rx(p, fb, fl, 0), 0);
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.dns_bad, 1);
    ck_assert_uint_eq(st.rx_malformed, 1);
    net_policy_free(p);

    /* a resolver only the default allows is not trusted; nor one a deny rule covers */
    const char *dom[] = { "*.pypi.org" };
    const char *allow[] = { "9.9.9.0/24,port=53" };
    const char *deny[] = { "9.9.9.10" };
    p = mk(&(struct np_conf){ .default_allow = true, .allow_domain = dom, .n_allow_domain = 1,
                              .allow = allow, .n_allow = 1, .deny = deny, .n_deny = 1 });
    ck_assert_int_eq(query(p, "8.8.8.8", 17, 1000, 1, "a.pypi.org", 0), NP_ALLOW);
    EXPECT(NP_ALLOW, NP_B_DEFAULT);
    ck_assert_uint_eq(answer(p, "8.8.8.8", 17, 1000, 1, "a.pypi.org", NULL, addrs, 1, 300, 0), 0);
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.dns_untrusted, 1);
    ck_assert_int_eq(query(p, "9.9.9.10", 17, 1000, 2, "a.pypi.org", 0), NP_DROP);
    ck_assert_uint_eq(answer(p, "9.9.9.10", 17, 1000, 2, "a.pypi.org", NULL, addrs, 1, 300, 0), 0);
    ck_assert_int_eq(query(p, "9.9.9.9", 17, 1000, 3, "a.pypi.org", 0), NP_ALLOW);
    ck_assert_uint_eq(answer(p, "9.9.9.9", 17, 1000, 3, "a.pypi.org", NULL, addrs, 1, 300, 0), 1);
    /* a dropped query is not tracked: a VLAN-tagged one to a trusted resolver */
    uint8_t q[512];
    n = dnsq(q, 4, "b.pypi.org");
    ck_assert_int_eq(tx(p, &(struct fspec){ .src = "10.0.2.15", .dst = "9.9.9.9", .proto = 17,
                                            .sport = 1000, .dport = 53, .pl = q, .pln = n,
                                            .vlan = true }, 0), NP_DROP);
    ck_assert_uint_eq(answer(p, "9.9.9.9", 17, 1000, 4, "b.pypi.org", NULL, addrs, 1, 300, 0), 0);
    /* trust is the policy's at the answer: a query tracked, then a new
     * policy that denies the resolver */
    ck_assert_int_eq(query(p, "9.9.9.9", 17, 1000, 5, "c.pypi.org", 0), NP_ALLOW);
    const char *deny2[] = { "9.9.9.9" };
    struct net_policy *p2 = mk(&(struct np_conf){ .default_allow = true, .allow_domain = dom,
                                                  .n_allow_domain = 1, .allow = allow,
                                                  .n_allow = 1, .deny = deny2, .n_deny = 1 });
    net_policy_carry(p2, p, 0);
    ck_assert_uint_eq(answer(p2, "9.9.9.9", 17, 1000, 5, "c.pypi.org", NULL, addrs, 1, 300, 0), 0);
    net_policy_stats(p2, &st);
    ck_assert_uint_eq(st.dns_untrusted, 2);
    net_policy_free(p2);
    net_policy_free(p);
}
END_TEST

START_TEST(learned_addresses_in_the_order)
{
    const char *allow[] = { RESOLVER ",port=53" };
    const char *deny[] = { "151.101.64.0/24" };
    const char *dom[] = { "*.pypi.org,port=443,proto=tcp" };
    struct net_policy *p = mk(&(struct np_conf){ .allow = allow, .n_allow = 1, .deny = deny,
                                                 .n_deny = 1, .allow_domain = dom,
                                                 .n_allow_domain = 1 });
    const char *addrs[] = { "151.101.0.223", "151.101.64.223", "10.0.0.5", "169.254.169.254" };
    query(p, RESOLVER, 17, 2000, 5, "files.pypi.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 2000, 5, "files.pypi.org", NULL, addrs, 4, 300, 0), 4);
    int d = idx(p, NP_K_DOMAIN, "*.pypi.org,port=443,proto=tcp");
    ck_assert_int_eq(to(p, "151.101.0.223", 6, 443, 0), NP_ALLOW);
    EXPECT(NP_ALLOW, d);
    ck_assert_int_eq(to(p, "151.101.0.223", 6, 22, 0), NP_DROP);      /* the rule's port only */
    EXPECT(NP_DROP, NP_B_DEFAULT);
    ck_assert_int_eq(to(p, "151.101.0.223", 17, 443, 0), NP_DROP);
    ck_assert_int_eq(to(p, "151.101.64.223", 6, 443, 0), NP_DROP);    /* deny beats learned */
    EXPECT(NP_DROP, idx(p, NP_K_DENY, "151.101.64.0/24"));
    ck_assert_int_eq(to(p, "10.0.0.5", 6, 443, 0), NP_DROP);          /* the preset beats learned */
    EXPECT(NP_DROP, idx(p, NP_K_PRESET, "10.0.0.0/8"));
    ck_assert_int_eq(to(p, "169.254.169.254", 6, 443, 0), NP_DROP);
    EXPECT(NP_DROP, idx(p, NP_K_PRESET, "169.254.0.0/16"));
    net_policy_free(p);
}
END_TEST

START_TEST(cname_tcp_and_ipv6_resolvers)
{
    struct net_policy *p = dns_policy(0, NULL);
    const char *addrs[] = { "151.101.0.223", "151.101.64.223" };
    /* CNAME: the question's name decides, the chain's end gives the addresses */
    query(p, RESOLVER, 17, 3000, 1, "files.pypi.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 3000, 1, "files.pypi.org", "dualstack.fastly.net",
                             addrs, 2, 300, 0), 2);
    ck_assert_int_eq(to(p, "151.101.64.223", 6, 443, 0), NP_ALLOW);
    /* DNS over TCP in one segment */
    const char *a3[] = { "151.101.128.223" };
    ck_assert_int_eq(query(p, RESOLVER, 6, 3001, 2, "x.pypi.org", 0), NP_ALLOW);
    ck_assert_uint_eq(answer(p, RESOLVER, 6, 3001, 2, "x.pypi.org", NULL, a3, 1, 300, 0), 1);
    ck_assert_int_eq(to(p, "151.101.128.223", 6, 443, 0), NP_ALLOW);
    /* a resolver over IPv6, an AAAA answer */
    const char *a6[] = { "2a04:4e42:200::223" };
    ck_assert_int_eq(query(p, "2001:db8::3", 17, 3002, 3, "y.pypi.org", 0), NP_ALLOW);
    ck_assert_uint_eq(answer(p, "2001:db8::3", 17, 3002, 3, "y.pypi.org", NULL, a6, 1, 300, 0), 1);
    ck_assert_int_eq(to(p, "2a04:4e42:200::223", 6, 443, 0), NP_ALLOW);
    /* a fragmented response is not read */
    uint8_t m[512];
    query(p, RESOLVER, 17, 3003, 4, "z.pypi.org", 0);
    size_t n = dnsr(m, 4, 0, "z.pypi.org", NULL, a3, 1, 300);
    size_t fl = build(&(struct fspec){ .src = RESOLVER, .dst = "10.0.2.15", .proto = 17,
                                       .sport = 53, .dport = 3003, .pl = m, .pln = n, .frag = 1 });
    ck_assert_uint_eq(net_policy_rx(p, fb, fl, 0), 0);
    net_policy_free(p);
}
END_TEST

START_TEST(table_bounds)
{
    /* learn_max entries at most; the least recently used goes */
    struct net_policy *p = dns_policy(8, NULL);
    char buf[20][32];
    const char *addrs[20];
    for (int i = 0; i < 20; i++) {
        snprintf(buf[i], sizeof buf[i], "151.101.1.%d", i);
        addrs[i] = buf[i];
    }
    query(p, RESOLVER, 17, 4000, 1, "a.pypi.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 4000, 1, "a.pypi.org", NULL, addrs, 20, 300, 0), 20);
    struct np_stats st;
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.learned, 8);
    ck_assert_uint_eq(st.learn_max, 8);
    ck_assert_uint_eq(st.learn_evicted, 12);
    ck_assert_int_eq(to(p, "151.101.1.11", 6, 443, 0), NP_DROP);
    ck_assert_int_eq(to(p, "151.101.1.12", 6, 443, 0), NP_ALLOW);    /* now the newest */
    /* one more evicts the least recently used: .13, not .12 */
    const char *one[] = { "151.101.2.1" };
    query(p, RESOLVER, 17, 4000, 2, "b.pypi.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 4000, 2, "b.pypi.org", NULL, one, 1, 300, 0), 1);
    ck_assert_int_eq(to(p, "151.101.1.12", 6, 443, 0), NP_ALLOW);
    ck_assert_int_eq(to(p, "151.101.1.13", 6, 443, 0), NP_DROP);
    ck_assert_int_eq(to(p, "151.101.2.1", 6, 443, 0), NP_ALLOW);
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.learned, 8);
    /* the same address for two matching rules: one entry each */
    net_policy_free(p);
    p = dns_policy(0, "*.org");
    query(p, RESOLVER, 17, 4000, 3, "c.pypi.org", 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 4000, 3, "c.pypi.org", NULL, one, 1, 300, 0), 2);
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.learned, 2);
    net_policy_free(p);

    /* tracked queries are bounded too */
    p = dns_policy(0, NULL);
    for (unsigned i = 0; i < NP_DNS_PENDING + 3; i++)
        query(p, RESOLVER, 17, 4000, i, "d.pypi.org", 0);
    net_policy_stats(p, &st);
    ck_assert_uint_eq(st.dns_pending_evicted, 3);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 4000, 0, "d.pypi.org", NULL, one, 1, 300, 0), 0);
    ck_assert_uint_eq(answer(p, RESOLVER, 17, 4000, 3, "d.pypi.org", NULL, one, 1, 300, 0), 1);
    net_policy_free(p);
}
END_TEST

/* ---- counters, text, run-time change -------------------------------- */

START_TEST(render)
{
    struct net_policy *p = dns_policy(0, NULL);
    const char *addrs[] = { "151.101.0.223" };
    query(p, RESOLVER, 17, 4000, 1, "a.pypi.org", S(10));
    answer(p, RESOLVER, 17, 4000, 1, "a.pypi.org", NULL, addrs, 1, 300, S(10));
    to(p, "151.101.0.223", 6, 443, S(10));
    to(p, "8.8.8.8", 6, 443, S(10));
    net_policy_tx(p, fb, 3, 0, NULL);
    char out[16384];
    size_t len = net_policy_render(p, S(110), out, sizeof out);
    ck_assert_uint_eq(len, strlen(out));
    ck_assert_msg(strstr(out, "default deny; preset on; 0 deny, 2 allow, 2 domain rules"), "%.600s", out);
    ck_assert_msg(strstr(out, "*.pypi.org"), "%.600s", out);
    ck_assert_msg(strstr(out, "10.0.2.3/32,port=53"), "%.600s", out);
    ck_assert_msg(strstr(out, "169.254.0.0/16"), "%.600s", out);
    ck_assert_msg(strstr(out, "default deny"), "%.600s", out);
    ck_assert_msg(strstr(out, "malformed: eth-short 1"), "%.600s", out);
    ck_assert_msg(strstr(out, "151.101.0.223"), "%.600s", out);
    ck_assert_msg(strstr(out, "200 s left"), "%.600s", out);
    ck_assert_msg(strstr(out, "learned: 1 of 4096"), "%.600s", out);
    /* snprintf-like: the same length whatever the buffer, always terminated */
    char small[40];
    memset(small, 'x', sizeof small);
    ck_assert_uint_eq(net_policy_render(p, S(110), small, sizeof small), len);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    ck_assert(memcmp(small, out, sizeof small - 1) == 0);
    ck_assert_uint_eq(net_policy_render(p, S(110), NULL, 0), len);
    len = net_policy_render(p, S(400), out, sizeof out);
    ck_assert_msg(strstr(out, "expired"), "%.600s", out);
    /* the rule list */
    struct np_rule_info ri;
    ck_assert_int_eq(net_policy_rule(p, NP_B_ARP, &ri), 0);
    ck_assert_str_eq(ri.text, "arp");
    ck_assert_int_eq(ri.kind, NP_K_BUILTIN);
    ck_assert_int_eq(net_policy_rule(p, net_policy_rule_count(p), &ri), -ENOENT);
    ck_assert_str_eq(np_verdict_str(NP_ALLOW), "allow");
    ck_assert_str_eq(np_verdict_str(NP_DROP), "drop");
    ck_assert_str_eq(np_verdict_str(NP_METADATA), "metadata");
    net_policy_free(p);
}
END_TEST

START_TEST(carry_over)
{
    const char *allow1[] = { RESOLVER ",port=53", "1.2.3.4" };
    const char *dom1[] = { "*.pypi.org", "example.org" };
    struct net_policy *p1 = mk(&(struct np_conf){ .allow = allow1, .n_allow = 2,
                                                  .allow_domain = dom1, .n_allow_domain = 2 });
    const char *a1[] = { "151.101.0.223" }, *a2[] = { "93.184.216.34" };
    query(p1, RESOLVER, 17, 5000, 1, "a.pypi.org", 0);
    answer(p1, RESOLVER, 17, 5000, 1, "a.pypi.org", NULL, a1, 1, 300, 0);
    query(p1, RESOLVER, 17, 5000, 2, "example.org", 0);
    answer(p1, RESOLVER, 17, 5000, 2, "example.org", NULL, a2, 1, 300, 0);
    query(p1, RESOLVER, 17, 5000, 3, "b.pypi.org", 0);             /* answered after the swap */
    to(p1, "1.2.3.4", 6, 22, 0);
    to(p1, "1.2.3.4", 6, 22, 0);
    to(p1, "8.8.8.8", 6, 22, 0);
    uint8_t data[8] = { 0 };
    struct fspec first = { .src = "10.0.2.15", .dst = "1.2.3.4", .proto = 17, .dport = 9,
                           .frag = 1, .id = 5, .pl = data, .pln = 8 };
    struct fspec later = { .src = "10.0.2.15", .dst = "1.2.3.4", .proto = 17, .frag = 2,
                           .frag_off = 16, .id = 5, .pl = data, .pln = 8 };
    ck_assert_int_eq(tx(p1, &first, 0), NP_ALLOW);

    /* the new policy: example.org gone, a new allow rule, another order */
    const char *allow2[] = { "5.5.5.5", "1.2.3.4", RESOLVER ",port=53" };
    const char *dom2[] = { "*.pypi.org" };
    struct net_policy *p2 = mk(&(struct np_conf){ .allow = allow2, .n_allow = 3,
                                                  .allow_domain = dom2, .n_allow_domain = 1 });
    net_policy_carry(p2, p1, S(1));
    net_policy_free(p1);
    ck_assert_uint_eq(ctr(p2, (size_t)idx(p2, NP_K_ALLOW, "1.2.3.4/32")).frames_allowed, 3);
    ck_assert_uint_eq(ctr(p2, NP_B_DEFAULT).frames_dropped, 1);
    ck_assert_uint_eq(ctr(p2, (size_t)idx(p2, NP_K_ALLOW, "5.5.5.5/32")).frames_allowed, 0);
    ck_assert_int_eq(to(p2, "151.101.0.223", 6, 443, S(2)), NP_ALLOW);
    EXPECT(NP_ALLOW, idx(p2, NP_K_DOMAIN, "*.pypi.org"));
    ck_assert_int_eq(to(p2, "93.184.216.34", 6, 443, S(2)), NP_DROP);
    const char *a3[] = { "151.101.64.223" };
    ck_assert_uint_eq(answer(p2, RESOLVER, 17, 5000, 3, "b.pypi.org", NULL, a3, 1, 300, S(2)), 1);
    ck_assert_int_eq(tx(p2, &later, S(2)), NP_ALLOW);
    EXPECT(NP_ALLOW, idx(p2, NP_K_ALLOW, "1.2.3.4/32"));
    struct np_stats st;
    net_policy_stats(p2, &st);
    ck_assert_uint_eq(st.dns_learned, 3);
    ck_assert_uint_eq(st.learned, 2);

    /* expired entries do not move; a smaller table keeps the newest */
    struct net_policy *p3 = mk(&(struct np_conf){ .allow = allow2, .n_allow = 3,
                                                  .allow_domain = dom2, .n_allow_domain = 1,
                                                  .learn_max = 1 });
    net_policy_carry(p3, p2, S(2));
    ck_assert_int_eq(to(p3, "151.101.64.223", 6, 443, S(3)), NP_ALLOW);
    ck_assert_int_eq(to(p3, "151.101.0.223", 6, 443, S(3)), NP_DROP);
    struct net_policy *p4 = mk(&(struct np_conf){ .allow = allow2, .n_allow = 3,
                                                  .allow_domain = dom2, .n_allow_domain = 1 });
    net_policy_carry(p4, p3, S(1000));
    net_policy_stats(p4, &st);
    ck_assert_uint_eq(st.learned, 0);
    net_policy_free(p2);
    net_policy_free(p3);
    net_policy_free(p4);
}
END_TEST

/* ---- cost ------------------------------------------------------------- */

START_TEST(bench_100_rules)
{
    char specs[100][64];
    const char *allow[50], *deny[50];
    for (int i = 0; i < 50; i++) {
        snprintf(specs[i], sizeof specs[i], "198.51.%d.0/24,port=%d,proto=tcp", i, 1000 + i);
        deny[i] = specs[i];
        snprintf(specs[50 + i], sizeof specs[50 + i], "2001:db8:%x::/48", i);
        allow[i] = specs[50 + i];
    }
    const char *dom[] = { "*.pypi.org" };
    struct net_policy *p = mk(&(struct np_conf){ .allow = allow, .n_allow = 50, .deny = deny,
                                                 .n_deny = 50, .allow_domain = dom,
                                                 .n_allow_domain = 1, .default_allow = true });
    /* the worst case: every rule and the preset scanned, the default decides */
    size_t n = build(&(struct fspec){ .src = "10.0.2.15", .dst = "93.184.216.34", .proto = 6,
                                      .sport = 40000, .dport = 443, .pl = (const uint8_t *)"GET /",
                                      .pln = 5 });
    const unsigned iters = 200000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned allowed = 0;
    for (unsigned i = 0; i < iters; i++)
        allowed += net_policy_tx(p, fb, n, i, NULL) == NP_ALLOW;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / iters;
    printf("net_policy: %.0f ns per frame (parse + 100 rules + %zu preset, the default decides)\n",
           ns, np_preset_count);
    ck_assert_uint_eq(allowed, iters);
    ck_assert_uint_eq(ctr(p, NP_B_DEFAULT).frames_allowed, iters);
    net_policy_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("net_policy");
    TCase *t = tcase_create("policy");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, rule_specs_ok);
    tcase_add_test(t, rule_specs_bad);
    tcase_add_test(t, domain_specs);
    tcase_add_test(t, domain_matching);
    tcase_add_test(t, conf_errors);
    tcase_add_test(t, deny_beats_allow);
    tcase_add_test(t, preset_and_default);
    tcase_add_test(t, ports_protocols_families);
    tcase_add_test(t, steps_before_the_rules);
    tcase_add_test(t, link_services);
    tcase_add_test(t, embedded_v4_forms);
    tcase_add_test(t, embedded_v4_denied);
    tcase_add_test(t, embedded_v4_learned);
    tcase_add_test(t, srcroute_before_link_services);
    tcase_add_test(t, spoofed_sources);
    tcase_add_test(t, dhcp_pins_ipv4);
    tcase_add_test(t, first_use_pins);
    tcase_add_test(t, text_guest_addresses);
    tcase_add_test(t, fragments);
    tcase_add_test(t, learn_and_expire);
    tcase_add_test(t, ttl_clamp_and_use);
    tcase_add_test(t, trust_and_matching);
    tcase_add_test(t, learned_addresses_in_the_order);
    tcase_add_test(t, cname_tcp_and_ipv6_resolvers);
    tcase_add_test(t, table_bounds);
    tcase_add_test(t, render);
    tcase_add_test(t, carry_over);
    tcase_add_test(t, bench_100_rules);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
