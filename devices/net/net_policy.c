/* The egress policy: rule parsing, evaluation, DNS learning, counters. */
#include "devices/net/net_policy.h"
#include "vmm/base/bytes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX
#define NS_PER_S 1000000000ull

const char *const np_preset[] = {
    "0.0.0.0/8",            /* "this" network */
    "10.0.0.0/8",           /* RFC 1918 */
    "100.64.0.0/10",        /* shared address space (CGNAT; some clouds' metadata) */
    "127.0.0.0/8",          /* loopback */
    "169.254.0.0/16",       /* link-local (cloud metadata) */
    "172.16.0.0/12",        /* RFC 1918 */
    "192.0.0.0/24",         /* IETF protocol assignments */
    "192.168.0.0/16",       /* RFC 1918 */
    "198.18.0.0/15",        /* benchmarking */
    "224.0.0.0/4",          /* multicast */
    "240.0.0.0/4",          /* reserved, limited broadcast */
    "::/128",               /* unspecified */
    "::1/128",              /* loopback */
    "::ffff:0:0/96",        /* IPv4-mapped */
    "64:ff9b:1::/48",       /* local-use NAT64 */
    "fc00::/7",             /* unique local (ULA; cloud metadata fd00:ec2::254) */
    "fe80::/10",            /* link-local */
    "fec0::/10",            /* site-local (deprecated) */
    "ff00::/8",             /* multicast */
};
const size_t np_preset_count = sizeof np_preset / sizeof np_preset[0];

static const char *const builtin_text[NP_B__COUNT] = {
    [NP_B_MALFORMED] = "malformed",
    [NP_B_VLAN] = "vlan-tagged",
    [NP_B_SRC_MAC] = "source mac not the guest's",
    [NP_B_SRCROUTE] = "source-routed",
    [NP_B_ARP] = "arp",
    [NP_B_NONIP] = "non-ip",
    [NP_B_SRC_ADDR] = "source address not the guest's",
    [NP_B_METADATA] = "metadata 169.254.169.254:80",
    [NP_B_DHCP4] = "link dhcpv4",
    [NP_B_ND6] = "link ipv6-nd/mld",
    [NP_B_DHCP6] = "link dhcpv6",
    [NP_B_FRAG] = "fragment without an allowed first fragment",
    [NP_B_DEFAULT] = "default",
};

/* A rule's matching part, kept small for the per-frame scan. */
struct np_match {
    uint64_t hi, lo, mhi, mlo;  /* network and mask, as two big-endian halves */
    uint16_t plo, phi;
    uint8_t family, proto;
    bool icmp, has_port;
    uint32_t rule;
};

struct np_rule {
    enum np_kind kind;
    uint64_t hash;              /* of kind and text: finds the same rule in a new policy */
    struct np_counters c;
    char text[NP_SPEC_MAX];
};

struct np_dom {
    struct np_match m;          /* proto / ports only */
    bool wildcard;
    char name[DNS_NAME_TEXT_MAX + 1];
};

/* learned (address, domain rule) entries: a hash table with chains and an
 * LRU list (prev: newer, next: older), slots in one array */
struct np_learn {
    uint64_t hi, lo, expires;
    uint32_t dom, hnext, prev, next;
    uint8_t family;
};

struct np_pending {
    uint64_t hi, lo, name_hash, expires;
    uint16_t port, id;
    uint8_t family, proto;
    bool used;
};

struct np_frag {
    uint64_t shi, slo, dhi, dlo, expires;
    uint32_t id, rule;
    uint8_t family, proto;
    bool used;
};

struct net_policy {
    bool default_allow, preset;
    uint32_t ttl_min_s, ttl_max_s;
    struct np_rule *rules;
    size_t n_rules;
    struct np_match *deny, *allow, *pre;
    size_t n_deny, n_allow, n_pre;
    struct np_dom *dom;
    size_t n_dom;

    struct np_learn *ln;
    uint32_t ln_max, ln_count, ln_free, lru_new, lru_old;
    uint32_t *bucket, bucket_mask;

    struct np_pending pend[NP_DNS_PENDING];
    unsigned pend_next;
    struct np_frag frag[NP_FRAG_MAX];
    unsigned frag_next;

    /* the guest's identity: MACs, configured addresses, the IPv4 address
     * DHCP handed it (dhcp4, when have_dhcp4) and the DHCP transaction it
     * last broadcast (xid, for dhcp_expires) */
    uint8_t gmac[NP_GUEST_MACS_MAX][6];
    size_t n_gmac;
    uint32_t g4[NP_GUEST_ADDRS_MAX];
    size_t n_g4;
    uint64_t g6hi[NP_GUEST_ADDRS_MAX], g6lo[NP_GUEST_ADDRS_MAX];
    size_t n_g6;
    uint32_t dhcp4, dhcp_xid;
    bool have_dhcp4, dhcp_pending;
    uint8_t dhcp_mac[6];
    uint64_t dhcp_expires;
    /* the DHCP servers an ACK may come from (host order) */
    uint32_t dsrv[NP_DHCP_SERVERS_MAX];
    size_t n_dsrv;
    /* pinned on first use where nothing was given: the MAC (no guest_mac),
     * the IPv4 address (no guest item, no lease yet), IPv6 addresses
     * (link-local ones always; others without guest items) */
    uint8_t lmac[6];
    bool have_lmac, have_l4;
    uint32_t l4;
    uint64_t l6hi[NP_GUEST_LEARN_V6], l6lo[NP_GUEST_LEARN_V6];
    size_t n_l6;

    struct np_stats st;
};

struct key {
    uint64_t hi, lo;
    uint8_t family, proto;
    bool ports;
    uint16_t dport;
};

/* ---- small helpers --------------------------------------------------- */

static int errf(char *why, size_t wlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int errf(char *why, size_t wlen, const char *fmt, ...)
{
    if (why && wlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, wlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static void split(const struct nf_addr *a, uint64_t *hi, uint64_t *lo)
{
    *hi = be64_load(a->b);
    *lo = be64_load(a->b + 8);
}

static void join(struct nf_addr *a, uint8_t family, uint64_t hi, uint64_t lo)
{
    a->family = family;
    be64_store(a->b, hi);
    be64_store(a->b + 8, lo);
}

static void mask_of(unsigned bits, uint64_t *mhi, uint64_t *mlo)
{
    *mhi = bits >= 64 ? ~0ull : bits == 0 ? 0 : ~0ull << (64 - bits);
    *mlo = bits <= 64 ? 0 : bits >= 128 ? ~0ull : ~0ull << (128 - bits);
}

static uint64_t hash_str(const char *s, uint64_t h)
{
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}


static uint32_t v4_at(const uint8_t *b, unsigned i0, unsigned i1, unsigned i2, unsigned i3)
{
    return (uint32_t)b[i0] << 24 | (uint32_t)b[i1] << 16 | (uint32_t)b[i2] << 8 | b[i3];
}

unsigned np_embedded_v4(const uint8_t v6[16], uint32_t out[NP_EMBED_MAX])
{
    static const uint8_t zero[10];
    uint32_t last = be32_load(v6 + 12);
    unsigned n = 0;
    if (memcmp(v6, zero, 10) == 0) {
        if ((v6[10] == 0 && v6[11] == 0) || (v6[10] == 0xff && v6[11] == 0xff))
            out[n++] = last;            /* ::a.b.c.d, ::ffff:a.b.c.d */
        return n;
    }
    if (be32_load(v6) == 0x0064ff9bu && memcmp(v6 + 4, zero, 8) == 0) {
        out[n++] = last;                /* 64:ff9b::/96 */
    } else if (be32_load(v6) == 0x0064ff9bu && be16_load(v6 + 4) == 0x0001) {
        /* 64:ff9b:1::/48 with a network prefix of /96, /48, /56 or /64
         * (RFC 6052 section 2.2: byte 8 is skipped) */
        out[n++] = last;
        out[n++] = v4_at(v6, 6, 7, 9, 10);
        out[n++] = v4_at(v6, 7, 9, 10, 11);
        out[n++] = v4_at(v6, 9, 10, 11, 12);
        return n;
    } else if (be16_load(v6) == 0x2002) {
        out[n++] = be32_load(v6 + 2);        /* 6to4 */
    } else if (be32_load(v6) == 0x20010000u) {
        out[n++] = be32_load(v6 + 4);        /* Teredo: the server, the client (obfuscated) */
        out[n++] = ~last;
        return n;
    }
    /* ISATAP (RFC 5214): an interface identifier of [00|02]00:5efe:a.b.c.d
     * (the u and g bits free) under any prefix */
    if ((v6[8] & 0xfc) == 0 && v6[9] == 0 && v6[10] == 0x5e && v6[11] == 0xfe)
        out[n++] = last;
    return n;
}

/* ---- rule specs ------------------------------------------------------ */

/* 1..65535, decimal digits only */
static bool parse_port(const char *s, size_t n, uint16_t *out)
{
    if (n == 0 || n > 5)
        return false;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return false;
    *out = (uint16_t)v;
    return true;
}

/* ",key=value" options after the address or name: port, proto. */
static int parse_opts(char *s, const char *spec, struct np_rule_spec *o, char *why, size_t wlen)
{
    bool have_port = false, have_proto = false;
    while (s) {
        char *next = strchr(s, ',');
        if (next)
            *next++ = 0;
        char *eq = strchr(s, '=');
        if (!*s)
            return errf(why, wlen, "%s: empty option", spec);
        if (!eq || !eq[1])
            return errf(why, wlen, "%s: option '%s' needs a value (port=P[-Q] or proto=tcp|udp|icmp)",
                        spec, s);
        *eq = 0;
        const char *v = eq + 1;
        if (strcmp(s, "port") == 0) {
            if (have_port)
                return errf(why, wlen, "%s: port given twice", spec);
            have_port = true;
            const char *dash = strchr(v, '-');
            size_t n1 = dash ? (size_t)(dash - v) : strlen(v);
            if (!parse_port(v, n1, &o->port_lo) ||
                (dash && !parse_port(dash + 1, strlen(dash + 1), &o->port_hi)))
                return errf(why, wlen, "%s: port '%s' is not P or P-Q with ports 1..65535", spec, v);
            if (!dash)
                o->port_hi = o->port_lo;
            if (o->port_lo > o->port_hi)
                return errf(why, wlen, "%s: port range %u-%u is reversed", spec, o->port_lo, o->port_hi);
        } else if (strcmp(s, "proto") == 0) {
            if (have_proto)
                return errf(why, wlen, "%s: proto given twice", spec);
            have_proto = true;
            if (strcmp(v, "tcp") == 0)
                o->proto = NF_IPPROTO_TCP;
            else if (strcmp(v, "udp") == 0)
                o->proto = NF_IPPROTO_UDP;
            else if (strcmp(v, "icmp") == 0)
                o->icmp = true;
            else
                return errf(why, wlen, "%s: unknown proto '%s' (tcp, udp or icmp)", spec, v);
        } else {
            return errf(why, wlen, "%s: unknown option '%s' (port, proto)", spec, s);
        }
        s = next;
    }
    if (have_port && o->icmp)
        return errf(why, wlen, "%s: a port needs proto=tcp or proto=udp (or no proto: both), not icmp",
                    spec);
    return 0;
}

static void append_opts(struct np_rule_spec *o)
{
    size_t n = strlen(o->text);
    if (o->port_lo && o->port_lo == o->port_hi)
        n += (size_t)snprintf(o->text + n, sizeof o->text - n, ",port=%u", o->port_lo);
    else if (o->port_lo)
        n += (size_t)snprintf(o->text + n, sizeof o->text - n, ",port=%u-%u", o->port_lo, o->port_hi);
    if (o->proto || o->icmp)
        snprintf(o->text + n, sizeof o->text - n, ",proto=%s",
                 o->icmp ? "icmp" : o->proto == NF_IPPROTO_TCP ? "tcp" : "udp");
}

/* The start of a rule's parse: o cleared, spec copied into buf
 * (NP_SPEC_MAX) and cut at its first ',' (*opts: what follows, or NULL). */
static int copy_spec(const char *spec, struct np_rule_spec *o, char *buf, char **opts, char *why,
                     size_t wlen)
{
    memset(o, 0, sizeof *o);
    if (!spec || !*spec)
        return errf(why, wlen, "empty rule");
    size_t n = strlen(spec);
    if (n >= NP_SPEC_MAX)
        return errf(why, wlen, "rule longer than %u bytes", NP_SPEC_MAX - 1);
    memcpy(buf, spec, n + 1);
    *opts = strchr(buf, ',');
    if (*opts)
        *(*opts)++ = 0;
    return 0;
}

int np_parse_rule(const char *spec, struct np_rule_spec *o, char *why, size_t wlen)
{
    char buf[NP_SPEC_MAX], *opts;
    int r = copy_spec(spec, o, buf, &opts, why, wlen);
    if (r)
        return r;
    char *slash = strchr(buf, '/');
    int prefix = -1;
    if (slash) {
        *slash = 0;
        const char *d = slash + 1;
        size_t n = strlen(d);
        if (n == 0 || n > 3 || strspn(d, "0123456789") != n)
            return errf(why, wlen, "%s: prefix '/%s' is not a number", spec, d);
        prefix = atoi(d);
    }
    uint8_t b[16];
    if (inet_pton(AF_INET, buf, b) == 1)
        nf_addr_v4(&o->net, b);
    else if (inet_pton(AF_INET6, buf, b) == 1)
        nf_addr_v6(&o->net, b);
    else
        return errf(why, wlen, "%s: '%s' is not an IPv4 or IPv6 address", spec, buf);
    int max = o->net.family == 4 ? 32 : 128;
    if (prefix < 0)
        prefix = max;
    if (prefix > max)
        return errf(why, wlen, "%s: prefix /%d is longer than /%d", spec, prefix, max);
    o->prefix = (uint8_t)prefix;
    uint64_t hi, lo, mhi, mlo;
    split(&o->net, &hi, &lo);
    mask_of((unsigned)prefix + (o->net.family == 4 ? 96 : 0), &mhi, &mlo);
    if ((hi & ~mhi) || (lo & ~mlo)) {
        struct nf_addr net;
        char t[NF_ADDR_STRLEN];
        join(&net, o->net.family, hi & mhi, lo & mlo);
        return errf(why, wlen, "%s: address has bits set past /%d (the network is %s/%d)", spec,
                    prefix, nf_addr_str(&net, t, sizeof t), prefix);
    }
    if ((r = parse_opts(opts, spec, o, why, wlen)))
        return r;
    char t[NF_ADDR_STRLEN];
    snprintf(o->text, sizeof o->text, "%s/%d", nf_addr_str(&o->net, t, sizeof t), prefix);
    append_opts(o);
    return 0;
}

int np_parse_domain(const char *spec, struct np_rule_spec *o, char *why, size_t wlen)
{
    char buf[NP_SPEC_MAX], *opts;
    int r = copy_spec(spec, o, buf, &opts, why, wlen);
    if (r)
        return r;
    char *name = buf;
    if (strncmp(name, "*.", 2) == 0) {
        o->wildcard = true;
        name += 2;
    }
    size_t n = strlen(name);
    if (n && name[n - 1] == '.')
        name[--n] = 0;
    if (n == 0)
        return errf(why, wlen, "%s: no domain name", spec);
    if (n > DNS_NAME_TEXT_MAX)
        return errf(why, wlen, "%s: name longer than %u characters", spec, DNS_NAME_TEXT_MAX);
    size_t label = 0;
    for (size_t i = 0; i <= n; i++) {
        char c = name[i];
        if (c == '.' || c == 0) {
            if (label == 0)
                return errf(why, wlen, "%s: empty label in the name", spec);
            label = 0;
            continue;
        }
        if (c >= 'A' && c <= 'Z')
            name[i] = (char)(c + 32);
        else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return errf(why, wlen, "%s: '%c' in the name (letters, digits, '-', '_'; '*.' only first)",
                        spec, c);
        if (++label > DNS_LABEL_MAX)
            return errf(why, wlen, "%s: a label longer than %u characters", spec, DNS_LABEL_MAX);
    }
    memcpy(o->domain, name, n + 1);
    if ((r = parse_opts(opts, spec, o, why, wlen)))
        return r;
    snprintf(o->text, sizeof o->text, "%s%s", o->wildcard ? "*." : "", o->domain);
    append_opts(o);
    return 0;
}

bool np_domain_match(const char *domain, bool wildcard, const char *name)
{
    if (!wildcard)
        return strcmp(domain, name) == 0;
    size_t dl = strlen(domain), nl = strlen(name);
    return nl > dl + 1 && name[nl - dl - 1] == '.' && memcmp(name + nl - dl, domain, dl) == 0;
}

/* ---- building ------------------------------------------------------- */

static uint32_t add_rule(struct net_policy *p, enum np_kind kind, const char *text)
{
    struct np_rule *r = &p->rules[p->n_rules];
    r->kind = kind;
    snprintf(r->text, sizeof r->text, "%s", text);
    r->hash = hash_str(r->text, 0xcbf29ce484222325ull ^ (uint64_t)kind);
    return (uint32_t)p->n_rules++;
}

static void match_from(struct np_match *m, const struct np_rule_spec *s, uint32_t rule)
{
    memset(m, 0, sizeof *m);
    m->family = s->net.family;
    if (m->family) {
        split(&s->net, &m->hi, &m->lo);
        mask_of(s->prefix + (m->family == 4 ? 96u : 0u), &m->mhi, &m->mlo);
    }
    m->proto = s->proto;
    m->icmp = s->icmp;
    m->has_port = s->port_lo != 0;
    m->plo = s->port_lo;
    m->phi = s->port_hi;
    m->rule = rule;
}

static int add_cidr(struct net_policy *p, enum np_kind kind, const char *spec, struct np_match *m,
                    char *why, size_t wlen)
{
    struct np_rule_spec s;
    int r = np_parse_rule(spec, &s, why, wlen);
    if (r)
        return r;
    match_from(m, &s, add_rule(p, kind, s.text));
    return 0;
}

static void ln_init(struct net_policy *p)
{
    for (uint32_t i = 0; i < p->ln_max; i++)
        p->ln[i].next = i + 1 < p->ln_max ? i + 1 : NIL;
    p->ln_free = 0;
    p->lru_new = p->lru_old = NIL;
    for (uint32_t i = 0; i <= p->bucket_mask; i++)
        p->bucket[i] = NIL;
}

int net_policy_new(const struct np_conf *c, struct net_policy **out, char *why, size_t wlen)
{
    *out = NULL;
    size_t nuser = c->n_deny + c->n_allow + c->n_allow_domain;
    if (nuser > NP_RULES_MAX) {
        errf(why, wlen, "%zu rules: at most %u", nuser, NP_RULES_MAX);
        return -E2BIG;
    }
    if (c->n_host > NP_HOSTS_MAX) {
        errf(why, wlen, "%zu host addresses: at most %u", c->n_host, NP_HOSTS_MAX);
        return -E2BIG;
    }
    uint32_t tmin = c->ttl_min_s ? c->ttl_min_s : NP_TTL_MIN_DEFAULT;
    uint32_t tmax = c->ttl_max_s ? c->ttl_max_s : NP_TTL_MAX_DEFAULT;
    if (tmin > tmax)
        return errf(why, wlen, "learned-address TTL range %u..%u s is reversed", tmin, tmax);
    uint32_t lmax = c->learn_max ? c->learn_max : NP_LEARN_DEFAULT;
    if (lmax > NP_LEARN_MAX)
        return errf(why, wlen, "learned-address table of %u entries: at most %u", lmax, NP_LEARN_MAX);
    for (size_t i = 0; i < c->n_host; i++)
        if (c->host[i].family != 4 && c->host[i].family != 6)
            return errf(why, wlen, "host address %zu has no family (4 or 6)", i);
    if (c->n_dhcp_server > NP_DHCP_SERVERS_MAX)
        return errf(why, wlen, "%zu DHCP servers: at most %u", c->n_dhcp_server, NP_DHCP_SERVERS_MAX);
    if (c->n_guest_mac > NP_GUEST_MACS_MAX || c->n_guest > NP_GUEST_ADDRS_MAX) {
        errf(why, wlen, "%zu guest MACs, %zu guest addresses: at most %u, %u", c->n_guest_mac,
             c->n_guest, NP_GUEST_MACS_MAX, NP_GUEST_ADDRS_MAX);
        return -E2BIG;
    }
    for (size_t i = 0; i < c->n_guest; i++)
        if (c->guest[i].family != 4 && c->guest[i].family != 6)
            return errf(why, wlen, "guest address %zu has no family (4 or 6)", i);

    struct net_policy *p = calloc(1, sizeof *p);
    size_t npre = c->no_preset ? 0 : np_preset_count + c->n_host;
    uint32_t nb = 1;
    while (nb < 2 * lmax)
        nb <<= 1;
    if (p) {
        p->rules = calloc(NP_B__COUNT + nuser + npre, sizeof *p->rules);
        p->deny = calloc(c->n_deny + 1, sizeof *p->deny);
        p->allow = calloc(c->n_allow + 1, sizeof *p->allow);
        p->pre = calloc(npre + 1, sizeof *p->pre);
        p->dom = calloc(c->n_allow_domain + 1, sizeof *p->dom);
        p->ln = calloc(lmax, sizeof *p->ln);
        p->bucket = calloc(nb, sizeof *p->bucket);
    }
    if (!p || !p->rules || !p->deny || !p->allow || !p->pre || !p->dom || !p->ln || !p->bucket) {
        net_policy_free(p);
        errf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    p->default_allow = c->default_allow;
    p->preset = !c->no_preset;
    p->ttl_min_s = tmin;
    p->ttl_max_s = tmax;
    p->ln_max = lmax;
    p->bucket_mask = nb - 1;
    p->st.learn_max = lmax;
    ln_init(p);
    for (size_t i = 0; i < c->n_guest_mac; i++)
        memcpy(p->gmac[p->n_gmac++], c->guest_mac[i], 6);
    for (size_t i = 0; i < c->n_dhcp_server; i++)
        p->dsrv[p->n_dsrv++] = c->dhcp_server[i];
    for (size_t i = 0; i < c->n_guest; i++) {
        if (c->guest[i].family == 4) {
            p->g4[p->n_g4++] = be32_load(c->guest[i].b + 12);
        } else {
            p->g6hi[p->n_g6] = be64_load(c->guest[i].b);
            p->g6lo[p->n_g6++] = be64_load(c->guest[i].b + 8);
        }
    }

    for (unsigned i = 0; i < NP_B__COUNT; i++)
        add_rule(p, NP_K_BUILTIN, builtin_text[i]);
    int r = 0;
    for (size_t i = 0; i < c->n_deny && !r; i++)
        if (!(r = add_cidr(p, NP_K_DENY, c->deny[i], &p->deny[i], why, wlen)))
            p->n_deny++;
    for (size_t i = 0; i < c->n_allow && !r; i++)
        if (!(r = add_cidr(p, NP_K_ALLOW, c->allow[i], &p->allow[i], why, wlen)))
            p->n_allow++;
    for (size_t i = 0; i < c->n_allow_domain && !r; i++) {
        struct np_rule_spec s;
        if ((r = np_parse_domain(c->allow_domain[i], &s, why, wlen)))
            break;
        struct np_dom *d = &p->dom[p->n_dom++];
        match_from(&d->m, &s, add_rule(p, NP_K_DOMAIN, s.text));
        d->wildcard = s.wildcard;
        memcpy(d->name, s.domain, sizeof d->name);
    }
    for (size_t i = 0; i < (p->preset ? np_preset_count : 0) && !r; i++)
        if (!(r = add_cidr(p, NP_K_PRESET, np_preset[i], &p->pre[p->n_pre], why, wlen)))
            p->n_pre++;
    for (size_t i = 0; i < (p->preset ? c->n_host : 0) && !r; i++) {
        struct np_rule_spec s;
        memset(&s, 0, sizeof s);
        s.net = c->host[i];
        if (s.net.family == 4)          /* only b[12..15] count */
            nf_addr_v4(&s.net, c->host[i].b + 12);
        s.prefix = s.net.family == 4 ? 32 : 128;
        char t[NF_ADDR_STRLEN], text[NP_SPEC_MAX];
        snprintf(text, sizeof text, "%s/%u (host)", nf_addr_str(&s.net, t, sizeof t), s.prefix);
        match_from(&p->pre[p->n_pre++], &s, add_rule(p, NP_K_PRESET, text));
    }
    if (r) {
        net_policy_free(p);
        return r;
    }
    *out = p;
    return 0;
}

void net_policy_free(struct net_policy *p)
{
    if (!p)
        return;
    free(p->rules);
    free(p->deny);
    free(p->allow);
    free(p->pre);
    free(p->dom);
    free(p->ln);
    free(p->bucket);
    free(p);
}

/* ---- the learned table ------------------------------------------------ */

static uint32_t ln_hash(const struct net_policy *p, uint8_t family, uint64_t hi, uint64_t lo)
{
    uint64_t x = hi * 0x9e3779b97f4a7c15ull ^ lo ^ family;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x & p->bucket_mask;
}

static void lru_unlink(struct net_policy *p, uint32_t i)
{
    struct np_learn *e = &p->ln[i];
    if (e->prev != NIL)
        p->ln[e->prev].next = e->next;
    else
        p->lru_new = e->next;
    if (e->next != NIL)
        p->ln[e->next].prev = e->prev;
    else
        p->lru_old = e->prev;
}

static void lru_push(struct net_policy *p, uint32_t i)
{
    struct np_learn *e = &p->ln[i];
    e->prev = NIL;
    e->next = p->lru_new;
    if (p->lru_new != NIL)
        p->ln[p->lru_new].prev = i;
    p->lru_new = i;
    if (p->lru_old == NIL)
        p->lru_old = i;
}

static void ln_remove(struct net_policy *p, uint32_t i)
{
    struct np_learn *e = &p->ln[i];
    uint32_t *link = &p->bucket[ln_hash(p, e->family, e->hi, e->lo)];
    while (*link != i)
        link = &p->ln[*link].hnext;
    *link = e->hnext;
    lru_unlink(p, i);
    e->next = p->ln_free;
    p->ln_free = i;
    p->ln_count--;
}

static void ln_put(struct net_policy *p, uint8_t family, uint64_t hi, uint64_t lo, uint32_t dom,
                   uint64_t expires)
{
    uint32_t b = ln_hash(p, family, hi, lo);
    for (uint32_t i = p->bucket[b]; i != NIL; i = p->ln[i].hnext) {
        struct np_learn *e = &p->ln[i];
        if (e->family == family && e->hi == hi && e->lo == lo && e->dom == dom) {
            if (expires > e->expires)
                e->expires = expires;
            lru_unlink(p, i);
            lru_push(p, i);
            return;
        }
    }
    if (p->ln_count == p->ln_max) {
        ln_remove(p, p->lru_old);
        p->st.learn_evicted++;
    }
    uint32_t i = p->ln_free;
    struct np_learn *e = &p->ln[i];
    p->ln_free = e->next;
    *e = (struct np_learn){ .hi = hi, .lo = lo, .expires = expires, .dom = dom,
                            .hnext = p->bucket[b], .family = family };
    p->bucket[b] = i;
    lru_push(p, i);
    p->ln_count++;
}

static bool l4_ok(const struct np_match *m, const struct key *k)
{
    if (m->icmp) {
        if (k->proto != (k->family == 4 ? NF_IPPROTO_ICMP : NF_IPPROTO_ICMPV6))
            return false;
    } else if (m->proto && m->proto != k->proto) {
        return false;
    }
    return !m->has_port || (k->ports && k->dport >= m->plo && k->dport <= m->phi);
}

/* A learned entry admitting k: its domain rule's index, or -1. Drops the
 * expired entries it meets; extends the one it uses. */
static int ln_hit(struct net_policy *p, const struct key *k, uint64_t now)
{
    uint32_t i = p->bucket[ln_hash(p, k->family, k->hi, k->lo)];
    while (i != NIL) {
        struct np_learn *e = &p->ln[i];
        uint32_t next = e->hnext;
        if (e->family == k->family && e->hi == k->hi && e->lo == k->lo) {
            if (e->expires <= now) {
                ln_remove(p, i);
            } else if (l4_ok(&p->dom[e->dom].m, k)) {
                uint64_t keep = add_sat(now, (uint64_t)p->ttl_min_s * NS_PER_S);
                if (keep > e->expires)
                    e->expires = keep;
                lru_unlink(p, i);
                lru_push(p, i);
                return (int)e->dom;
            }
        }
        i = next;
    }
    return -1;
}

bool net_policy_learned(const struct net_policy *p, const struct nf_addr *a, uint64_t now_ns,
                        uint64_t *expires_ns)
{
    uint64_t hi, lo, best = 0;
    bool found = false;
    split(a, &hi, &lo);
    for (uint32_t i = p->bucket[ln_hash(p, a->family, hi, lo)]; i != NIL; i = p->ln[i].hnext) {
        const struct np_learn *e = &p->ln[i];
        if (e->family == a->family && e->hi == hi && e->lo == lo && e->expires > now_ns) {
            found = true;
            if (e->expires > best)
                best = e->expires;
        }
    }
    if (found && expires_ns)
        *expires_ns = best;
    return found;
}

/* ---- evaluation ------------------------------------------------------ */

static const struct np_match *scan(const struct np_match *m, size_t n, const struct key *k)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].family == k->family && (k->hi & m[i].mhi) == m[i].hi &&
            (k->lo & m[i].mlo) == m[i].lo && l4_ok(&m[i], k))
            return &m[i];
    return NULL;
}

/* k, or else one of the n4 IPv4 keys of the addresses k's IPv6 destination embeds */
static const struct np_match *scan_k(const struct np_match *m, size_t n, const struct key *k,
                                     const struct key *k4, unsigned n4)
{
    const struct np_match *r = scan(m, n, k);
    for (unsigned i = 0; !r && i < n4; i++)
        r = scan(m, n, &k4[i]);
    return r;
}

static bool nd_type(uint8_t t)
{
    return (t >= 130 && t <= 133) || t == 135 || t == 136 || t == 143;
}

static struct np_frag *frag_find(struct net_policy *p, const struct net_frame *f, uint64_t now)
{
    uint64_t shi, slo, dhi, dlo;
    split(&f->src, &shi, &slo);
    split(&f->dst, &dhi, &dlo);
    for (unsigned i = 0; i < NP_FRAG_MAX; i++) {
        struct np_frag *g = &p->frag[i];
        if (g->used && g->expires > now && g->family == f->dst.family && g->id == f->frag_id &&
            g->proto == f->proto && g->shi == shi && g->slo == slo && g->dhi == dhi && g->dlo == dlo)
            return g;
    }
    return NULL;
}

static void frag_put(struct net_policy *p, const struct net_frame *f, uint32_t rule, uint64_t now)
{
    struct np_frag *g = frag_find(p, f, now);
    if (!g) {
        g = &p->frag[p->frag_next];
        p->frag_next = (p->frag_next + 1) % NP_FRAG_MAX;
        if (g->used && g->expires > now)
            p->st.frag_evicted++;
    }
    split(&f->src, &g->shi, &g->slo);
    split(&f->dst, &g->dhi, &g->dlo);
    g->family = f->dst.family;
    g->id = f->frag_id;
    g->proto = f->proto;
    g->rule = rule;
    g->expires = add_sat(now, NP_FRAG_NS);
    g->used = true;
}

/* ---- the guest's identity --------------------------------------------- */

static bool mac_is_guest(const struct net_policy *p, const uint8_t mac[6])
{
    for (size_t i = 0; i < p->n_gmac; i++)
        if (memcmp(p->gmac[i], mac, 6) == 0)
            return true;
    return p->have_lmac && memcmp(p->lmac, mac, 6) == 0;
}

/* The frame's Ethernet source: one of the given MACs; with none given,
 * the first unicast source the guest used (pinned then). A multicast or
 * all-zero source is never the guest's. */
static bool mac_src_ok(struct net_policy *p, const uint8_t mac[6])
{
    static const uint8_t zero[6];
    if ((mac[0] & 1) || memcmp(mac, zero, 6) == 0)
        return false;
    if (p->n_gmac || p->have_lmac)
        return mac_is_guest(p, mac);
    memcpy(p->lmac, mac, 6);
    p->have_lmac = true;
    p->st.ids_learned++;
    return true;
}

/* a (host order) is one of the guest's IPv4 addresses */
static bool v4_is_guest(const struct net_policy *p, uint32_t a)
{
    for (size_t i = 0; i < p->n_g4; i++)
        if (p->g4[i] == a)
            return true;
    return (p->have_dhcp4 && p->dhcp4 == a) || (p->have_l4 && p->l4 == a);
}

/* An IPv4 source other than 0.0.0.0: the guest's (given, from its lease,
 * or pinned on first use: with none known, a unicast a becomes it). */
static bool v4_src_ok(struct net_policy *p, uint32_t a)
{
    if (a == 0 || a >= 0xe0000000u || a >> 24 == 127)
        return false;
    if (p->n_g4 || p->have_dhcp4 || p->have_l4)
        return v4_is_guest(p, a);
    p->l4 = a;
    p->have_l4 = true;
    p->st.ids_learned++;
    return true;
}

/* fe80::/64 with the modified EUI-64 interface identifier of mac */
static bool is_eui64_ll(uint64_t hi, uint64_t lo, const uint8_t mac[6])
{
    uint64_t id = (uint64_t)(mac[0] ^ 2) << 56 | (uint64_t)mac[1] << 48 | (uint64_t)mac[2] << 40 |
                  0xfffe000000ull | (uint64_t)mac[3] << 16 | (uint64_t)mac[4] << 8 | mac[5];
    return hi == 0xfe80000000000000ull && lo == id;
}

/* An IPv6 address as the guest's (a source other than ::, or an NA's
 * target): given (guest items), the link-local EUI-64 address of one of
 * its MACs, or pinned on first use: link-local ones always, others when
 * no guest item of the family was given, at most NP_GUEST_LEARN_V6 in
 * all. Multicast is never the guest's. */
static bool v6_addr_ok(struct net_policy *p, uint64_t hi, uint64_t lo)
{
    if (hi >> 56 == 0xff || (hi == 0 && (lo == 0 || lo == 1)))
        return false;
    bool ll = (hi & 0xffc0000000000000ull) == 0xfe80000000000000ull;
    if (ll) {
        for (size_t i = 0; i < p->n_gmac; i++)
            if (is_eui64_ll(hi, lo, p->gmac[i]))
                return true;
        if (p->have_lmac && is_eui64_ll(hi, lo, p->lmac))
            return true;
    } else {
        for (size_t i = 0; i < p->n_g6; i++)
            if (p->g6hi[i] == hi && p->g6lo[i] == lo)
                return true;
        if (p->n_g6)
            return false;
    }
    for (size_t i = 0; i < p->n_l6; i++)
        if (p->l6hi[i] == hi && p->l6lo[i] == lo)
            return true;
    if (p->n_l6 == NP_GUEST_LEARN_V6)
        return false;
    p->l6hi[p->n_l6] = hi;
    p->l6lo[p->n_l6++] = lo;
    p->st.ids_learned++;
    return true;
}

/* An ARP frame the guest may send: a request or reply about itself. */
static bool arp_ok(struct net_policy *p, const struct net_frame *f)
{
    if (f->arp_op != 1 && f->arp_op != 2)
        return false;
    if (memcmp(f->arp_sha, f->src_mac, 6) != 0)
        return false;
    uint32_t spa = be32_load(f->src.b + 12);
    return spa == 0 || v4_src_ok(p, spa);
}

/* The DHCPv4 link service: a BOOTREQUEST from the frame's own MAC, no
 * IPv4 options, not fragmented. Notes its transaction for net_policy_rx. */
static bool dhcp4_ok(struct net_policy *p, const uint8_t *frame, size_t len,
                     const struct net_frame *f, uint64_t now)
{
    if ((f->flags & NF_F_FRAG) || f->l4_off - f->l3_off != 20)
        return false;
    if (f->payload_off > len || f->payload_len > len - f->payload_off || f->payload_len < 44)
        return false;
    const uint8_t *b = frame + f->payload_off;
    if (b[0] != 1 || b[1] != 1 || b[2] != 6 || memcmp(b + 28, f->src_mac, 6) != 0)
        return false;
    p->dhcp_xid = be32_load(b + 4);
    memcpy(p->dhcp_mac, f->src_mac, 6);
    p->dhcp_pending = true;
    p->dhcp_expires = add_sat(now, NP_DNS_PENDING_NS);
    return true;
}

/* The ND / MLD link service: not fragmented; a source (1) or target (2)
 * link-layer address option is the frame's own MAC; an NA's target is the
 * guest's (when its IPv6 addresses are known). */
static bool nd_ok(struct net_policy *p, const uint8_t *frame, size_t len,
                  const struct net_frame *f)
{
    if (f->flags & NF_F_FRAG)
        return false;
    size_t end = f->l3_off + f->ip_len;
    if (end > len || f->l4_off > end)
        return false;
    const uint8_t *m = frame + f->l4_off;
    size_t n = end - f->l4_off, at;
    uint8_t t = f->icmp_type;
    if (t == 133)
        at = 8;                         /* RS */
    else if (t == 135 || t == 136)
        at = 24;                        /* NS, NA: the target, then options */
    else
        return true;                    /* MLD: no link-layer options */
    if (n < at)
        return false;
    if (t == 136 && !v6_addr_ok(p, be64_load(m + 8), be64_load(m + 16)))
        return false;
    while (at < n) {
        if (n - at < 2 || m[at + 1] == 0 || (size_t)m[at + 1] * 8 > n - at)
            return false;
        if ((m[at] == 1 || m[at] == 2) && memcmp(m + at + 2, f->src_mac, 6) != 0)
            return false;
        at += (size_t)m[at + 1] * 8;
    }
    return true;
}

/* ---- the decision ------------------------------------------------------ */

static enum np_verdict decide(struct net_policy *p, const uint8_t *frame, size_t len,
                              const struct net_frame *f, uint64_t now, uint32_t *rule)
{
    if (f->err != NF_E_OK) {
        p->st.malformed[(unsigned)f->err < NF_E__COUNT ? f->err : NF_E_OK]++;
        *rule = NP_B_MALFORMED;
        return NP_DROP;
    }
    if (f->n_vlan) {
        *rule = NP_B_VLAN;
        return NP_DROP;
    }
    if (!mac_src_ok(p, f->src_mac)) {
        *rule = NP_B_SRC_MAC;
        return NP_DROP;
    }
    if (f->flags & NF_F_SRCROUTE) {
        *rule = NP_B_SRCROUTE;
        return NP_DROP;
    }
    if (f->l3 == NF_L3_ARP) {
        *rule = NP_B_ARP;
        return arp_ok(p, f) ? NP_ALLOW : NP_DROP;
    }
    if (f->l3 != NF_L3_IPV4 && f->l3 != NF_L3_IPV6) {
        *rule = NP_B_NONIP;
        return NP_DROP;
    }
    struct key k = { .family = f->dst.family, .proto = f->proto,
                     .ports = (f->flags & NF_F_PORTS) != 0, .dport = f->dport };
    split(&f->dst, &k.hi, &k.lo);
    bool dhcp4 = k.family == 4 && k.proto == NF_IPPROTO_UDP && k.ports && f->sport == 68 &&
                 k.dport == 67 && k.hi == 0 && k.lo == 0x0000ffffffffffffull;
    bool nd6 = k.family == 6 && k.proto == NF_IPPROTO_ICMPV6 && (f->flags & NF_F_L4) &&
               nd_type(f->icmp_type) &&
               ((k.hi & 0xffc0000000000000ull) == 0xfe80000000000000ull || k.hi >> 48 == 0xff02);
    uint64_t shi, slo;
    split(&f->src, &shi, &slo);
    if (k.family == 4 ? (slo == 0x0000ffff00000000ull ? !dhcp4 : !v4_src_ok(p, (uint32_t)slo))
                      : (shi == 0 && slo == 0 ? !nd6 : !v6_addr_ok(p, shi, slo))) {
        *rule = NP_B_SRC_ADDR;
        return NP_DROP;
    }
    if (k.family == 4 && k.proto == NF_IPPROTO_TCP && k.ports && k.dport == NP_METADATA_PORT &&
        k.hi == 0 && k.lo == 0x0000ffffa9fea9feull) {
        *rule = NP_B_METADATA;
        return NP_METADATA;
    }
    if (dhcp4) {
        *rule = NP_B_DHCP4;
        return dhcp4_ok(p, frame, len, f, now) ? NP_ALLOW : NP_DROP;
    }
    if (nd6) {
        *rule = NP_B_ND6;
        return nd_ok(p, frame, len, f) ? NP_ALLOW : NP_DROP;
    }
    if (k.family == 6 && k.proto == NF_IPPROTO_UDP && k.ports && f->sport == 546 && k.dport == 547 &&
        k.hi == 0xff02000000000000ull && k.lo == 0x0000000000010002ull) {
        *rule = NP_B_DHCP6;
        return NP_ALLOW;
    }
    if ((f->flags & NF_F_FRAG) && !(f->flags & NF_F_FRAG_FIRST)) {
        const struct np_frag *g = frag_find(p, f, now);
        *rule = g ? g->rule : NP_B_FRAG;
        return g ? NP_ALLOW : NP_DROP;
    }
    /* the IPv4 addresses an IPv6 destination embeds, as IPv4 keys for the
     * deny rules and the preset */
    struct key k4[NP_EMBED_MAX];
    unsigned n4 = 0;
    if (k.family == 6) {
        uint32_t v4[NP_EMBED_MAX];
        n4 = np_embedded_v4(f->dst.b, v4);
        for (unsigned i = 0; i < n4; i++)
            k4[i] = (struct key){ .hi = 0, .lo = 0x0000ffff00000000ull | v4[i], .family = 4,
                                  .proto = k.proto == NF_IPPROTO_ICMPV6 ? NF_IPPROTO_ICMP : k.proto,
                                  .ports = k.ports, .dport = k.dport };
    }
    const struct np_match *m;
    if ((m = scan_k(p->deny, p->n_deny, &k, k4, n4))) {
        *rule = m->rule;
        return NP_DROP;
    }
    if ((m = scan(p->allow, p->n_allow, &k))) {
        *rule = m->rule;
        return NP_ALLOW;
    }
    if ((m = scan_k(p->pre, p->n_pre, &k, k4, n4))) {
        *rule = m->rule;
        return NP_DROP;
    }
    int d = p->ln_count ? ln_hit(p, &k, now) : -1;
    if (d >= 0) {
        *rule = p->dom[d].m.rule;
        return NP_ALLOW;
    }
    *rule = NP_B_DEFAULT;
    return p->default_allow ? NP_ALLOW : NP_DROP;
}

/* The DNS message in an (unfragmented) UDP or one-segment TCP payload. */
static bool dns_payload(const uint8_t *frame, size_t len, const struct net_frame *f,
                        const uint8_t **m, size_t *n)
{
    if (f->payload_off > len || f->payload_len > len - f->payload_off)
        return false;
    const uint8_t *b = frame + f->payload_off;
    size_t l = f->payload_len;
    if (f->proto == NF_IPPROTO_TCP) {
        if (l < 2 || be16_load(b) != l - 2)
            return false;
        b += 2;
        l -= 2;
    }
    *m = b;
    *n = l;
    return true;
}

static int dom_first(const struct net_policy *p, const char *name)
{
    for (size_t i = 0; i < p->n_dom; i++)
        if (np_domain_match(p->dom[i].name, p->dom[i].wildcard, name))
            return (int)i;
    return -1;
}

static void track_query(struct net_policy *p, const uint8_t *frame, size_t len,
                        const struct net_frame *f, uint64_t now)
{
    const uint8_t *m;
    size_t n;
    struct dns_query q;
    if (!p->n_dom || !(f->flags & NF_F_PORTS) || f->dport != 53 || (f->flags & NF_F_FRAG) ||
        !dns_payload(frame, len, f, &m, &n) || dns_parse_query(m, n, &q, NULL) ||
        dom_first(p, q.qname) < 0)
        return;
    struct np_pending *e = &p->pend[p->pend_next];
    p->pend_next = (p->pend_next + 1) % NP_DNS_PENDING;
    if (e->used && e->expires > now)
        p->st.dns_pending_evicted++;
    split(&f->dst, &e->hi, &e->lo);
    e->family = f->dst.family;
    e->proto = f->proto;
    e->port = f->sport;
    e->id = q.id;
    e->name_hash = dns_name_hash(q.qname);
    e->expires = add_sat(now, NP_DNS_PENDING_NS);
    e->used = true;
}

enum np_verdict net_policy_tx_parsed(struct net_policy *p, const uint8_t *frame, size_t len,
                                     const struct net_frame *f, uint64_t now_ns,
                                     struct np_result *r)
{
    uint32_t rule;
    enum np_verdict v = decide(p, frame, len, f, now_ns, &rule);
    struct np_counters *c = &p->rules[rule].c;
    if (v == NP_DROP) {
        c->frames_dropped++;
        c->bytes_dropped += len;
    } else {
        c->frames_allowed++;
        c->bytes_allowed += len;
    }
    if (v == NP_ALLOW && (f->flags & NF_F_FRAG_FIRST))
        frag_put(p, f, rule, now_ns);
    if (v == NP_ALLOW)
        track_query(p, frame, len, f, now_ns);
    if (r)
        *r = (struct np_result){ .verdict = v, .rule = rule, .err = f->err };
    return v;
}

enum np_verdict net_policy_tx(struct net_policy *p, const uint8_t *frame, size_t len,
                              uint64_t now_ns, struct np_result *r)
{
    struct net_frame f;
    net_frame_parse(frame, len, &f, NULL);
    return net_policy_tx_parsed(p, frame, len, &f, now_ns, r);
}

/* ---- learning -------------------------------------------------------- */

/* A DHCPACK answering the transaction the guest last broadcast (same xid,
 * the client hardware address it sent from): its yiaddr becomes the
 * guest's IPv4 address (in place of an earlier one). */
static void dhcp_learn(struct net_policy *p, const uint8_t *frame, size_t len,
                       const struct net_frame *f, uint64_t now)
{
    if (!p->dhcp_pending || p->dhcp_expires <= now || f->payload_off > len ||
        f->payload_len > len - f->payload_off || f->payload_len < 240)
        return;
    const uint8_t *b = frame + f->payload_off;
    size_t n = f->payload_len;
    if (b[0] != 2 || b[1] != 1 || b[2] != 6 || be32_load(b + 4) != p->dhcp_xid ||
        memcmp(b + 28, p->dhcp_mac, 6) != 0 || be32_load(b + 236) != 0x63825363u)
        return;
    /* from the backend's DHCP server: a reply the guest elicited from a
     * server elsewhere (a UDP flow from its port 68 to a port 67 outside)
     * must not choose its address */
    uint32_t from = be32_load(f->src.b + 12), sid = from;
    bool listed = false;
    for (size_t i = 0; i < p->n_dsrv; i++)
        listed |= p->dsrv[i] == from;
    if (!listed) {
        p->st.dhcp_refused++;
        return;
    }
    uint32_t yi = be32_load(b + 16);
    int type = 0;
    for (size_t i = 240; i < n && b[i] != 255;) {
        if (b[i] == 0) {
            i++;
            continue;
        }
        if (n - i < 2 || b[i + 1] > n - i - 2)
            return;
        if (b[i] == 53 && b[i + 1] == 1)
            type = b[i + 2];
        if (b[i] == 54 && b[i + 1] == 4)
            sid = be32_load(b + i + 2);
        i += 2u + b[i + 1];
    }
    if (type != 5 || yi == 0 || yi >= 0xe0000000u || yi >> 24 == 127)
        return;
    if (sid != from) {          /* the server identifier names another server */
        p->st.dhcp_refused++;
        return;
    }
    p->dhcp4 = yi;
    p->have_dhcp4 = true;
    p->have_l4 = false;         /* the lease replaces a first-use pin */
    p->dhcp_pending = false;
    p->st.dhcp_learned++;
}

unsigned net_policy_rx(struct net_policy *p, const uint8_t *frame, size_t len, uint64_t now_ns)
{
    struct net_frame f;
    if (net_frame_parse(frame, len, &f, NULL)) {
        p->st.rx_malformed++;
        return 0;
    }
    if (f.l3 == NF_L3_IPV4 && f.proto == NF_IPPROTO_UDP && (f.flags & NF_F_PORTS) && f.sport == 67 &&
        f.dport == 68 && !(f.flags & NF_F_FRAG))
        dhcp_learn(p, frame, len, &f, now_ns);
    const uint8_t *m;
    size_t n;
    if (!(f.flags & NF_F_PORTS) || f.sport != 53 || (f.flags & NF_F_FRAG) ||
        !dns_payload(frame, len, &f, &m, &n))
        return 0;
    p->st.dns_seen++;
    struct dns_answer a;
    if (dns_parse_response(m, n, &a, NULL)) {
        p->st.dns_bad++;
        return 0;
    }
    uint64_t shi, slo, h = dns_name_hash(a.chain[0]);
    split(&f.src, &shi, &slo);
    struct np_pending *q = NULL;
    for (unsigned i = 0; i < NP_DNS_PENDING && !q; i++) {
        struct np_pending *e = &p->pend[i];
        if (e->used && e->expires > now_ns && e->family == f.src.family && e->hi == shi &&
            e->lo == slo && e->proto == f.proto && e->port == f.dport && e->id == a.id &&
            e->name_hash == h)
            q = e;
    }
    if (!q) {
        p->st.dns_unsolicited++;
        return 0;
    }
    q->used = false;
    struct key k = { .hi = shi, .lo = slo, .family = f.src.family, .proto = f.proto,
                     .ports = true, .dport = 53 };
    if (scan(p->deny, p->n_deny, &k) || !scan(p->allow, p->n_allow, &k)) {
        p->st.dns_untrusted++;
        return 0;
    }
    if (a.rcode != DNS_RCODE_NOERROR) {
        p->st.dns_rcode++;
        return 0;
    }
    unsigned learned = 0;
    for (size_t d = 0; d < p->n_dom; d++) {
        if (!np_domain_match(p->dom[d].name, p->dom[d].wildcard, a.chain[0]))
            continue;
        for (unsigned i = 0; i < a.n_addr; i++) {
            uint32_t ttl = a.addr[i].ttl;
            ttl = ttl < p->ttl_min_s ? p->ttl_min_s : ttl > p->ttl_max_s ? p->ttl_max_s : ttl;
            struct nf_addr ad = { .family = a.addr[i].family };
            memcpy(ad.b, a.addr[i].b, 16);
            uint64_t hi, lo;
            split(&ad, &hi, &lo);
            ln_put(p, ad.family, hi, lo, (uint32_t)d, add_sat(now_ns, (uint64_t)ttl * NS_PER_S));
            learned++;
        }
    }
    if (learned) {
        p->st.dns_learned++;
        p->st.addrs_learned += learned;
    }
    return learned;
}

/* ---- run-time change ------------------------------------------------- */

static int find_same(const struct net_policy *to, const struct np_rule *r, const bool *taken)
{
    for (size_t j = 0; j < to->n_rules; j++)
        if (!taken[j] && to->rules[j].hash == r->hash && to->rules[j].kind == r->kind &&
            strcmp(to->rules[j].text, r->text) == 0)
            return (int)j;
    return -1;
}

void net_policy_carry(struct net_policy *to, const struct net_policy *from, uint64_t now_ns)
{
    int *map = calloc(from->n_rules, sizeof *map);
    bool *taken = calloc(to->n_rules, sizeof *taken);
    if (map && taken) {
        for (size_t i = 0; i < from->n_rules; i++) {
            int j = find_same(to, &from->rules[i], taken);
            map[i] = j;
            if (j >= 0) {
                taken[j] = true;
                struct np_counters *c = &to->rules[j].c;
                const struct np_counters *o = &from->rules[i].c;
                c->frames_allowed += o->frames_allowed;
                c->bytes_allowed += o->bytes_allowed;
                c->frames_dropped += o->frames_dropped;
                c->bytes_dropped += o->bytes_dropped;
            }
        }
        /* learned entries, oldest first so the LRU order survives */
        for (uint32_t i = from->lru_old; i != NIL; i = from->ln[i].prev) {
            const struct np_learn *e = &from->ln[i];
            int j = map[from->dom[e->dom].m.rule];
            if (e->expires <= now_ns || j < 0)
                continue;
            for (size_t d = 0; d < to->n_dom; d++)
                if (to->dom[d].m.rule == (uint32_t)j)
                    ln_put(to, e->family, e->hi, e->lo, (uint32_t)d, e->expires);
        }
        for (unsigned i = 0; i < NP_FRAG_MAX; i++) {
            const struct np_frag *g = &from->frag[i];
            if (g->used && g->expires > now_ns && map[g->rule] >= 0) {
                to->frag[i] = *g;
                to->frag[i].rule = (uint32_t)map[g->rule];
            }
        }
        to->frag_next = from->frag_next;
    }
    free(map);
    free(taken);
    memcpy(to->pend, from->pend, sizeof to->pend);
    to->pend_next = from->pend_next;
    to->dhcp4 = from->dhcp4;
    to->have_dhcp4 = from->have_dhcp4;
    to->dhcp_xid = from->dhcp_xid;
    to->dhcp_pending = from->dhcp_pending;
    memcpy(to->dhcp_mac, from->dhcp_mac, 6);
    to->dhcp_expires = from->dhcp_expires;
    memcpy(to->lmac, from->lmac, 6);
    to->have_lmac = from->have_lmac;
    to->l4 = from->l4;
    to->have_l4 = from->have_l4;
    memcpy(to->l6hi, from->l6hi, sizeof to->l6hi);
    memcpy(to->l6lo, from->l6lo, sizeof to->l6lo);
    to->n_l6 = from->n_l6;
    struct np_stats keep = to->st;
    to->st = from->st;
    to->st.learned = keep.learned;
    to->st.learn_max = keep.learn_max;
    to->st.learn_evicted += keep.learn_evicted;
}

/* ---- reading --------------------------------------------------------- */

size_t net_policy_rule_count(const struct net_policy *p) { return p->n_rules; }

bool net_policy_default_allow(const struct net_policy *p) { return p->default_allow; }

int net_policy_rule(const struct net_policy *p, size_t i, struct np_rule_info *out)
{
    if (i >= p->n_rules)
        return -ENOENT;
    out->kind = p->rules[i].kind;
    out->text = p->rules[i].text;
    out->c = p->rules[i].c;
    return 0;
}

void net_policy_stats(const struct net_policy *p, struct np_stats *s)
{
    *s = p->st;
    s->learned = p->ln_count;
    s->learn_max = p->ln_max;
}

const char *np_verdict_str(enum np_verdict v)
{
    return v == NP_ALLOW ? "allow" : v == NP_METADATA ? "metadata" : v == NP_DROP ? "drop" : "?";
}

struct out {
    char *buf;
    size_t n, len;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(o->len < o->n ? o->buf + o->len : NULL, o->len < o->n ? o->n - o->len : 0,
                      fmt, ap);
    va_end(ap);
    if (r > 0)
        o->len += (size_t)r;
}

static const char *kind_str(enum np_kind k)
{
    static const char *const s[] = { "step", "deny", "allow", "domain", "preset" };
    return (unsigned)k < sizeof s / sizeof s[0] ? s[k] : "?";
}

size_t net_policy_render(const struct net_policy *p, uint64_t now_ns, char *buf, size_t n)
{
    struct out o = { .buf = buf, .n = n };
    if (n)
        buf[0] = 0;
    put(&o, "default %s; preset %s; %zu deny, %zu allow, %zu domain rules\n",
        p->default_allow ? "allow" : "deny", p->preset ? "on" : "off", p->n_deny, p->n_allow,
        p->n_dom);
    put(&o, "order: malformed, vlan, source mac, source-route, arp, non-ip, source address, "
            "metadata, link, fragments, deny, allow, preset, learned, default\n");
    put(&o, "%4s  %-6s  %-44s %12s %14s %12s %14s\n", "#", "kind", "rule", "frames-ok", "bytes-ok",
        "frames-drop", "bytes-drop");
    for (size_t i = 0; i < p->n_rules; i++) {
        const struct np_rule *r = &p->rules[i];
        const char *text = r->text;
        char def[32];
        if (i == NP_B_DEFAULT) {
            snprintf(def, sizeof def, "default %s", p->default_allow ? "allow" : "deny");
            text = def;
        }
        put(&o, "%4zu  %-6s  %-44s %12llu %14llu %12llu %14llu\n", i, kind_str(r->kind), text,
            (unsigned long long)r->c.frames_allowed, (unsigned long long)r->c.bytes_allowed,
            (unsigned long long)r->c.frames_dropped, (unsigned long long)r->c.bytes_dropped);
    }
    bool any = false;
    for (unsigned e = 1; e < NF_E__COUNT; e++)
        if (p->st.malformed[e]) {
            put(&o, "%s %s %llu", any ? "," : "malformed:", net_frame_errname((enum nf_err)e),
                (unsigned long long)p->st.malformed[e]);
            any = true;
        }
    if (any)
        put(&o, "\n");
    put(&o, "dns: %llu responses seen, %llu learned from, %llu malformed, %llu unsolicited, "
            "%llu from untrusted resolvers, %llu with an error code; %llu queries and %llu "
            "fragments evicted\n",
        (unsigned long long)p->st.dns_seen, (unsigned long long)p->st.dns_learned,
        (unsigned long long)p->st.dns_bad, (unsigned long long)p->st.dns_unsolicited,
        (unsigned long long)p->st.dns_untrusted, (unsigned long long)p->st.dns_rcode,
        (unsigned long long)p->st.dns_pending_evicted, (unsigned long long)p->st.frag_evicted);
    put(&o, "guest: %zu MACs, %zu IPv4, %zu IPv6 addresses given", p->n_gmac, p->n_g4, p->n_g6);
    if (p->have_dhcp4)
        put(&o, "; %u.%u.%u.%u (DHCP)", p->dhcp4 >> 24, p->dhcp4 >> 16 & 255, p->dhcp4 >> 8 & 255,
            p->dhcp4 & 255);
    if (p->have_lmac)
        put(&o, "; %02x:%02x:%02x:%02x:%02x:%02x (first use)", p->lmac[0], p->lmac[1], p->lmac[2],
            p->lmac[3], p->lmac[4], p->lmac[5]);
    if (p->have_l4)
        put(&o, "; %u.%u.%u.%u (first use)", p->l4 >> 24, p->l4 >> 16 & 255, p->l4 >> 8 & 255,
            p->l4 & 255);
    for (size_t i = 0; i < p->n_l6; i++) {
        struct nf_addr a;
        char t[NF_ADDR_STRLEN];
        join(&a, 6, p->l6hi[i], p->l6lo[i]);
        put(&o, "; %s (first use)", nf_addr_str(&a, t, sizeof t));
    }
    put(&o, "; %llu DHCP replies refused (not from the backend's server)\n",
        (unsigned long long)p->st.dhcp_refused);
    put(&o, "learned: %u of %u entries (ttl %u..%u s), %llu evicted\n", p->ln_count, p->ln_max,
        p->ttl_min_s, p->ttl_max_s, (unsigned long long)p->st.learn_evicted);
    for (uint32_t i = p->lru_new; i != NIL; i = p->ln[i].next) {
        const struct np_learn *e = &p->ln[i];
        struct nf_addr a;
        char t[NF_ADDR_STRLEN];
        join(&a, e->family, e->hi, e->lo);
        if (e->expires <= now_ns)
            put(&o, "  %-40s %s  expired\n", nf_addr_str(&a, t, sizeof t),
                p->rules[p->dom[e->dom].m.rule].text);
        else
            put(&o, "  %-40s %s  %llu s left\n", nf_addr_str(&a, t, sizeof t),
                p->rules[p->dom[e->dom].m.rule].text,
                (unsigned long long)((e->expires - now_ns + NS_PER_S - 1) / NS_PER_S));
    }
    return o.len;
}
