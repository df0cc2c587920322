/* virtio-net as a kind of device (devices/net/net_kind.h). */
#include "devices/net/net_kind.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/stat.h>

#include "devices/net/http_req.h"
#include "devices/net/mmds.h"
#include "devices/net/net_local.h"
#include "devices/net/net_passt.h"
#include "devices/net/net_policy.h"
#include "devices/net/net_policy_text.h"
#include "devices/net/net_tap.h"
#include "devices/net/virtio_net.h"
#include "devices/virtio/ratelimit.h"
#include "vmm/base/clock.h"
#include "vmm/base/fullio.h"

static const char *const net_keys[] = { "tap", "user", "forward", "host_loopback", "mac", "guest_mac", "mtu", "id", "mmds",
                                         "metadata", "mmds_v1",
                                         "tx_bw", "tx_ops", "rx_bw", "rx_ops", "policy", NULL };
static const char *const limit_keys[] = { "tx_bw", "tx_ops", "rx_bw", "rx_ops" };

/* The limiters of o's tx_bw/tx_ops/rx_bw/rx_ops (checked): tx, rx; have
 * says which are limited at all. */
static int limits(const struct devopts *o, struct ratelimit_cfg *tx, struct ratelimit_cfg *rx, int have[2],
                  char *why, size_t wlen)
{
    struct ratelimit_cfg *c[2] = { tx, rx };
    for (int i = 0; i < 2; i++) {
        const char *bw = limit_keys[2 * i], *ops = limit_keys[2 * i + 1];
        if (ratelimit_from_named_opts(bw, devopt_get(o, bw), ops, devopt_get(o, ops), c[i], &have[i], why, wlen) < 0)
            return -EINVAL;
    }
    return 0;
}

/* a restore may put the device on another backend, or give it another
 * MAC (a fork of a running VM must not share its parent's) */
static const char *const net_override_keys[] = { "tap", "user", "forward", "host_loopback", "mac", "guest_mac", NULL };
static const char *const net_tap_group[] = { "tap", NULL };
static const char *const net_user_group[] = { "user", "forward", "host_loopback", NULL };
static const char *const *const net_backend_groups[] = { net_tap_group, net_user_group, NULL };

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int net_parse_mac(const char *s, uint8_t mac[6])
{
    if (!s || strlen(s) != 17)
        return -EINVAL;
    for (int i = 0; i < 6; i++) {
        int hi = hexval(s[3 * i]), lo = hexval(s[3 * i + 1]);
        if (hi < 0 || lo < 0 || (i < 5 && s[3 * i + 2] != ':'))
            return -EINVAL;
        mac[i] = (uint8_t)(hi << 4 | lo);
    }
    static const uint8_t zero[6];
    if ((mac[0] & 1) || !memcmp(mac, zero, 6))
        return -EINVAL;
    return 0;
}

void net_random_mac(uint8_t mac[6])
{
    if (getrandom(mac, 6, 0) != 6) {    /* no entropy source: time and pid, still unique enough locally */
        uint64_t x = (uint64_t)time(NULL) * 6364136223846793005ull ^ (uint64_t)getpid() << 16 ^ (uint64_t)clock();
        memcpy(mac, &x, 6);
    }
    mac[0] = (uint8_t)((mac[0] & 0xfe) | 0x02);     /* unicast, locally administered */
}

void net_format_mac(const uint8_t mac[6], char out[18])
{
    snprintf(out, 18, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]);
}

/* mtu=N: 68 .. 65535, decimal. */
static int parse_mtu(const char *s, unsigned *mtu)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || errno || *s == '-' || v < VIRTIO_NET_MTU_MIN || v > VIRTIO_NET_MTU_MAX)
        return -EINVAL;
    *mtu = (unsigned)v;
    return 0;
}

#define HOST_ADDRS_MAX 64

/* The host's own addresses (those of the network namespace moat runs in),
 * denied by the preset. */
static size_t host_addrs(struct nf_addr *a, size_t max)
{
    struct ifaddrs *ifa = NULL;
    size_t n = 0;
    if (getifaddrs(&ifa) < 0)
        return 0;
    for (struct ifaddrs *i = ifa; i && n < max; i = i->ifa_next) {
        if (!i->ifa_addr)
            continue;
        if (i->ifa_addr->sa_family == AF_INET)
            nf_addr_v4(&a[n++], (const uint8_t *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr);
        else if (i->ifa_addr->sa_family == AF_INET6)
            nf_addr_v6(&a[n++], ((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr.s6_addr);
    }
    freeifaddrs(ifa);
    return n;
}

size_t net_route_gateways(const char *text, uint32_t *out, size_t max)
{
    size_t n = 0;
    const char *line = text;
    while (line && *line && n < max) {
        const char *nl = strchr(line, '\n');
        char row[256];
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len < sizeof row) {
            memcpy(row, line, len);
            row[len] = 0;
            char ifn[64];
            unsigned dst, gw, flags, refc, use, metric, mask;
            if (sscanf(row, "%63s %x %x %x %u %u %u %x", ifn, &dst, &gw, &flags, &refc, &use, &metric,
                       &mask) == 8 &&
                dst == 0 && mask == 0 && (flags & 0x2) && gw != 0) {
                /* the kernel prints the address as the u32 it holds, in
                 * network byte order */
                uint32_t g = ntohl(gw);
                bool dup = false;
                for (size_t i = 0; i < n; i++)
                    dup |= out[i] == g;
                if (!dup)
                    out[n++] = g;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

/* The DHCP servers of the device's backend (net_rec's dhcp_server). */
static size_t dhcp_servers(bool user, uint32_t *out, size_t max)
{
    if (user) {
        char text[8192];
        int fd = open("/proc/net/route", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return 0;
        ssize_t got = read_full(fd, text, sizeof text - 1);
        close(fd);
        text[got > 0 ? got : 0] = 0;
        return net_route_gateways(text, out, max);
    }
    struct nf_addr a[HOST_ADDRS_MAX];
    size_t na = host_addrs(a, HOST_ADDRS_MAX), n = 0;
    for (size_t i = 0; i < na && n < max; i++)
        if (a[i].family == 4 && a[i].b[12] != 127)
            out[n++] = (uint32_t)a[i].b[12] << 24 | (uint32_t)a[i].b[13] << 16 |
                       (uint32_t)a[i].b[14] << 8 | a[i].b[15];
    return n;
}

/* A policy from its text (policy= option, or a run-time change); the
 * guest's source MAC pinned to macs (n of them; none: pinned on first
 * use), its DHCP lease learned from rec's servers (rec NULL: none). */
static int policy_build(const char *text, const uint8_t (*macs)[6], size_t n, const struct net_rec *rec,
                        struct net_policy **out, char *why, size_t wlen)
{
    struct np_text t;
    struct np_conf c;
    int r = np_text_parse(text, &t, &c, why, wlen);
    if (r == 0) {
        struct nf_addr host[HOST_ADDRS_MAX];
        c.host = host;
        c.n_host = host_addrs(host, HOST_ADDRS_MAX);
        c.guest_mac = macs;
        c.n_guest_mac = n;
        if (rec) {
            c.dhcp_server = rec->dhcp_server;
            c.n_dhcp_server = rec->n_dhcp_server;
        }
        r = net_policy_new(&c, out, why, wlen);
    }
    np_text_free(&t);
    return r;
}

/* forward=SPEC[+SPEC...] (net_passt_parse_forward's SPEC): into fwd
 * (NET_PASST_MAX_FWD), checked as a list. */
static int forwards(const char *v, struct net_passt_fwd *fwd, size_t *n, char *why, size_t wlen)
{
    *n = 0;
    if (!v)
        return 0;
    char buf[1024];
    if (strlen(v) >= sizeof(buf)) {
        snprintf(why, wlen, "forward=: too long");
        return -EINVAL;
    }
    strcpy(buf, v);
    char *save = NULL;
    for (char *f = strtok_r(buf, "+", &save); f; f = strtok_r(NULL, "+", &save)) {
        if (*n == NET_PASST_MAX_FWD) {
            snprintf(why, wlen, "forward=: more than %u forwards", NET_PASST_MAX_FWD);
            return -EINVAL;
        }
        char w[160] = "";
        if (net_passt_parse_forward(f, &fwd[(*n)++], w, sizeof(w)) < 0) {
            snprintf(why, wlen, "forward=%.40s: %s", f, w);
            return -EINVAL;
        }
    }
    if (*n == 0) {
        snprintf(why, wlen, "forward=: no forward (tcp:HOSTPORT:GUESTPORT[+...])");
        return -EINVAL;
    }
    return net_passt_check_forwards(fwd, *n, why, wlen);
}

static int net_check(const struct devopts *o, char *why, size_t wlen)
{
    const char *tap = devopt_get(o, "tap"), *mac = devopt_get(o, "mac"), *mtu = devopt_get(o, "mtu");
    const char *id = devopt_get(o, "id");
    uint8_t m[6];
    unsigned u;
    const char *user = devopt_get(o, "user"), *fw = devopt_get(o, "forward"), *hl = devopt_get(o, "host_loopback");
    if ((!tap || !*tap) && !user) {
        snprintf(why, wlen, "a backend is required: tap=NAME or user");
        return -EINVAL;
    }
    if (tap && user) {
        snprintf(why, wlen, "one backend: tap=NAME or user, not both");
        return -EINVAL;
    }
    if ((user && *user) || (hl && *hl)) {
        snprintf(why, wlen, "user and host_loopback take no value");
        return -EINVAL;
    }
    if (!user && (fw || hl)) {
        snprintf(why, wlen, "forward= and host_loopback are the user backend's (passt)");
        return -EINVAL;
    }
    struct net_passt_fwd fwds[NET_PASST_MAX_FWD];
    size_t nf;
    if (fw && forwards(fw, fwds, &nf, why, wlen) < 0)
        return -EINVAL;
    if (tap && (strlen(tap) > NET_TAP_NAME_MAX || strchr(tap, '/'))) {
        snprintf(why, wlen, "tap=NAME: 1 to %u bytes, no '/'", NET_TAP_NAME_MAX);
        return -EINVAL;
    }
    if (mac && net_parse_mac(mac, m) < 0) {
        snprintf(why, wlen, "mac=%.40s: not a unicast MAC address (52:54:00:12:34:56)", mac);
        return -EINVAL;
    }
    const char *gmac = devopt_get(o, "guest_mac");
    if (gmac && net_parse_mac(gmac, m) < 0) {
        snprintf(why, wlen, "guest_mac=%.40s: not a unicast MAC address (52:54:00:12:34:56)", gmac);
        return -EINVAL;
    }
    if (mtu && parse_mtu(mtu, &u) < 0) {
        snprintf(why, wlen, "mtu must be %u .. %u", VIRTIO_NET_MTU_MIN, VIRTIO_NET_MTU_MAX);
        return -EINVAL;
    }
    const char *md = devopt_get(o, "metadata"), *mm = devopt_get(o, "mmds"), *v1 = devopt_get(o, "mmds_v1");
    if ((mm && *mm) || (v1 && *v1)) {
        snprintf(why, wlen, "mmds and mmds_v1 take no value");
        return -EINVAL;
    }
    if (md && access(md, R_OK) < 0) {
        int e = errno;
        snprintf(why, wlen, "metadata=%s: %s", md, strerror(e));
        return -e;
    }
    struct ratelimit_cfg tl, rl;
    int have[2];
    int lr = limits(o, &tl, &rl, have, why, wlen);
    if (lr < 0)
        return lr;
    const char *pol = devopt_get(o, "policy");
    if (pol) {
        struct net_policy *p = NULL;
        char w[200] = "";
        lr = policy_build(pol, NULL, 0, NULL, &p, w, sizeof(w));
        net_policy_free(p);
        if (lr < 0) {
            snprintf(why, wlen, "policy: %s", w);
            return lr;
        }
    }
    if (id && (!*id || strlen(id) > NET_ID_MAX)) {
        snprintf(why, wlen, "id must be 1 to %u bytes", NET_ID_MAX);
        return -EINVAL;
    }
    return 0;
}

static void net_id(const struct devopts *o, unsigned k, char *id)
{
    const char *given = devopt_get(o, "id");
    if (given && *given)
        snprintf(id, VIRTIO_KIND_ID_MAX + 1, "%s", given);
    else
        snprintf(id, VIRTIO_KIND_ID_MAX + 1, "net%u", k);
}

/* ---- the metadata service on the device's own IPv4 host ---- */

static const uint8_t mmds_mac[6] = { 0x06, 0x00, 0xa9, 0xfe, 0xa9, 0xfe };

/* net_local's service: one HTTP request at a time through the parser. */
static long mmds_serve(void *opaque, const uint8_t *in, size_t in_len, uint8_t *out, size_t out_cap, size_t *out_len,
                       bool *close, uint64_t now_ns)
{
    struct net_rec *r = opaque;
    http_parser_init(r->http);
    size_t used = http_parser_feed(r->http, in, in_len);
    if (http_parser_state(r->http) == HTTP_NEED_MORE)
        return 0;
    size_t len = 0;
    int e = mmds_respond(r->mmds, r->http, now_ns, (char *)out, out_cap, &len, close);
    if (e < 0)
        return e;
    *out_len = len;
    return (long)used;
}

static void mmds_emit(void *opaque, const uint8_t *frame, size_t len)
{
    struct net_rec *r = opaque;
    if (virtio_net_inject(r->dev, frame, len) < 0)
        r->inject_dropped++;
}

/* Every frame the guest sends: the metadata service's, then the policy. */
static enum net_verdict rec_tx(void *opaque, const uint8_t *frame, size_t len, const struct net_frame *parsed)
{
    struct net_rec *r = opaque;
    if (r->mmds && net_local_wants(r->local, frame, len))
        return NET_LOCAL;
    if (!r->policy)
        return NET_PASS;
    pthread_mutex_lock(&r->plock);
    enum np_verdict v = parsed ? net_policy_tx_parsed(r->policy, frame, len, parsed, clock_mono_ns(), NULL)
                               : net_policy_tx(r->policy, frame, len, clock_mono_ns(), NULL);
    pthread_mutex_unlock(&r->plock);
    /* the metadata address without the service: nobody there */
    return v == NP_ALLOW ? NET_PASS : NET_DROP;
}

/* Every frame the guest receives: DNS answers for domain rules. */
static void rec_rx(void *opaque, const uint8_t *frame, size_t len)
{
    struct net_rec *r = opaque;
    if (!r->policy)
        return;
    pthread_mutex_lock(&r->plock);
    net_policy_rx(r->policy, frame, len, clock_mono_ns());
    pthread_mutex_unlock(&r->plock);
}

static void rec_local(void *opaque, struct virtio_net *n, const uint8_t *frame, size_t len)
{
    struct net_rec *r = opaque;
    (void)n;
    net_local_input(r->local, frame, len, clock_mono_ns());
}

/* The metadata document from a file (at most 1 MiB). */
static int read_doc(struct mmds *m, const char *path, char *why, size_t wlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(why, wlen, "metadata=%s: %s", path, strerror(e));
        return -e;
    }
    size_t cap = 1u << 20, n = 0;
    char *buf = malloc(cap);
    ssize_t k = 0;
    while (buf && n < cap && (k = read(fd, buf + n, cap - n)) > 0)
        n += (size_t)k;
    close(fd);
    if (!buf || k < 0) {
        free(buf);
        snprintf(why, wlen, "metadata=%s: %s", path, buf ? "read error" : "out of memory");
        return buf ? -EIO : -ENOMEM;
    }
    char e[200] = "";
    int r = mmds_put(m, buf, n, e, sizeof(e));
    free(buf);
    if (r < 0)
        snprintf(why, wlen, "metadata=%s: %s", path, e);
    return r;
}

static void net_free(void *priv)
{
    struct net_rec *r = priv;
    if (!r)
        return;
    if (r->local) {
        net_local_free(r->local);
        free(r->local);
    }
    mmds_destroy(r->mmds);
    net_policy_free(r->policy);
    free(r->policy_text);
    pthread_mutex_destroy(&r->plock);
    free(r->http);
    free(r);
}

static int net_kind_create(struct devopts *o, const char *id, bool restoring, int seccomp,
                           struct virtio_made *out, char *why, size_t wlen)
{
    (void)restoring;
    struct net_rec *rec = calloc(1, sizeof(*rec));
    if (!rec) {
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    pthread_mutex_init(&rec->plock, NULL);
    const char *mac = devopt_get(o, "mac"), *mtu = devopt_get(o, "mtu");
    char ms[18];
    if (!mac || net_parse_mac(mac, rec->mac) < 0) {
        /* its own address, recorded so that a restore keeps it */
        net_random_mac(rec->mac);
        net_format_mac(rec->mac, ms);
        if (devopt_set(o, "mac", ms) < 0) {
            net_free(rec);
            snprintf(why, wlen, "out of memory");
            return -ENOMEM;
        }
    }
    const char *gmac = devopt_get(o, "guest_mac");
    rec->n_mac = 1;
    memcpy(rec->macs[0], rec->mac, 6);
    rec->guest_mac_given = gmac && net_parse_mac(gmac, rec->guest_mac) == 0;
    if (rec->guest_mac_given && memcmp(rec->guest_mac, rec->mac, 6))
        memcpy(rec->macs[rec->n_mac++], rec->guest_mac, 6);
    rec->n_dhcp_server = dhcp_servers(devopt_get(o, "user") != NULL, rec->dhcp_server, NP_DHCP_SERVERS_MAX);
    const char *pol = devopt_get(o, "policy");
    if (pol) {
        char w[200] = "";
        rec->policy_text = strdup(pol);
        int pr = rec->policy_text ? policy_build(pol, rec->macs, rec->n_mac, rec, &rec->policy, w, sizeof(w))
                                  : -ENOMEM;
        if (pr < 0) {
            snprintf(why, wlen, "policy: %s", w);
            net_free(rec);
            return pr;
        }
    }
    unsigned u = 0;
    if (mtu)
        parse_mtu(mtu, &u);
    struct net_backend *be = NULL;
    int r;
    if (devopt_get(o, "user")) {
        /* passt, moat's child: its DHCP gives the guest the device's MTU */
        struct net_passt_fwd fwds[NET_PASST_MAX_FWD];
        size_t nf = 0;
        r = forwards(devopt_get(o, "forward"), fwds, &nf, why, wlen);
        struct net_passt_opts po = { .fwd = fwds, .nfwd = nf, .mtu = u ? u : 0,
                                     .host_loopback = devopt_get(o, "host_loopback") != NULL };
        if (r == 0)
            r = net_passt_create(&po, &be, why, wlen);
    } else {
        r = net_tap_open(devopt_get(o, "tap"), &be, why, wlen);
    }
    if (r < 0) {
        net_free(rec);
        return r;
    }
    const char *md = devopt_get(o, "metadata");
    if (md || devopt_get(o, "mmds") || devopt_get(o, "mmds_v1")) {
        struct mmds_config mc = { .version = devopt_get(o, "mmds_v1") ? MMDS_V1 : MMDS_V2 };
        uint32_t seed = 0;
        if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
            seed = (uint32_t)clock_mono_ns();
        rec->http = malloc(sizeof(*rec->http));
        rec->local = malloc(sizeof(*rec->local));
        r = rec->http && rec->local ? mmds_create(&mc, &rec->mmds) : -ENOMEM;
        if (r == 0)
            r = net_local_init(rec->local, htonl(MMDS_IPV4), 80, mmds_mac, mmds_serve, mmds_emit, rec, seed);
        if (r == 0 && md)
            r = read_doc(rec->mmds, md, why, wlen);
        else if (r < 0)
            snprintf(why, wlen, "out of memory");
        if (r < 0) {
            be->ops->destroy(be);
            net_free(rec);
            return r;
        }
    }
    struct ratelimit_cfg tl, rl;
    int have[2];
    limits(o, &tl, &rl, have, why, wlen);       /* checked */
    struct virtio_net_opts no = { .mtu = (uint16_t)u, .backend = be, .name = id,
                                  .filter = { .tx = rec_tx, .rx = rec_rx, .local = rec_local, .opaque = rec },
                                  .tx_limit = have[0] ? &tl : NULL, .rx_limit = have[1] ? &rl : NULL };
    memcpy(no.mac, rec->mac, 6);
    r = virtio_net_create(&no, &rec->dev, why, wlen);
    if (r < 0) {
        net_free(rec);
        return r;
    }
    *out = (struct virtio_made){ .ops = &virtio_net_ops, .dev = rec->dev, .priv = rec };
    return 0;
}

static const char *const net_set_keys[] = { "metadata", "metadata_patch", "tx_bw", "tx_ops", "rx_bw", "rx_ops",
                                             "link", "policy", NULL };

static int net_set(void *priv, const char *key, const char *value, char *why, size_t wlen)
{
    struct net_rec *r = priv;
    if (!strcmp(key, "metadata") || !strcmp(key, "metadata_patch")) {
        if (!r->mmds) {
            snprintf(why, wlen, "the device has no metadata service (give it mmds)");
            return -EINVAL;
        }
        return key[8] ? mmds_patch(r->mmds, value, strlen(value), why, wlen)
                      : mmds_put(r->mmds, value, strlen(value), why, wlen);
    }
    if (!strcmp(key, "policy")) {
        /* built off the lock; learned addresses and counters carried over */
        struct net_policy *np = NULL, *old;
        int e = policy_build(value, r->macs, r->n_mac, r, &np, why, wlen);
        if (e < 0)
            return e;
        char *text = strdup(value), *old_text;
        if (!text) {
            net_policy_free(np);
            snprintf(why, wlen, "out of memory");
            return -ENOMEM;
        }
        pthread_mutex_lock(&r->plock);
        old = r->policy;
        old_text = r->policy_text;
        if (old)
            net_policy_carry(np, old, clock_mono_ns());
        r->policy = np;
        r->policy_text = text;
        pthread_mutex_unlock(&r->plock);
        net_policy_free(old);
        free(old_text);
        return 0;
    }
    if (!strcmp(key, "link")) {
        if (strcmp(value, "up") && strcmp(value, "down")) {
            snprintf(why, wlen, "up or down");
            return -EINVAL;
        }
        virtio_net_set_link(r->dev, !strcmp(value, "up"));
        return 0;
    }
    /* a limiter: one bucket anew, the other as it is */
    bool tx = key[0] == 't', ops = !strcmp(key + 3, "ops");
    struct ratelimit_cfg c;
    virtio_net_get_limit(r->dev, tx, &c);
    if (ratelimit_set_bucket(&c, ops, value) < 0) {
        snprintf(why, wlen, "SIZE/REFILL_MS[/BURST] or off");
        return -EINVAL;
    }
    return virtio_net_set_limit(r->dev, tx, &c);
}

int net_kind_frontend_mac(void *priv, char *why, size_t wlen)
{
    struct net_rec *r = priv;
    pthread_mutex_lock(&r->plock);
    /* only guest_mac= names the frontend's MAC (else: the first it uses) */
    memcpy(r->macs[0], r->guest_mac, 6);
    r->n_mac = r->guest_mac_given ? 1 : 0;
    pthread_mutex_unlock(&r->plock);
    if (!r->policy)
        return 0;
    struct net_policy *np = NULL, *old;
    int e = policy_build(r->policy_text, r->macs, r->n_mac, r, &np, why, wlen);
    if (e < 0)
        return e;
    pthread_mutex_lock(&r->plock);
    old = r->policy;
    net_policy_carry(np, old, clock_mono_ns());
    r->policy = np;
    pthread_mutex_unlock(&r->plock);
    net_policy_free(old);
    return 0;
}

static const char *const net_get_keys[] = { "policy", "stats", NULL };

static long net_get(void *priv, const char *key, char *buf, size_t len)
{
    struct net_rec *r = priv;
    size_t n = 0;
    if (!strcmp(key, "policy")) {
        pthread_mutex_lock(&r->plock);
        n = (size_t)snprintf(buf, len, "%s", r->policy_text ? r->policy_text : "");
        pthread_mutex_unlock(&r->plock);
        return (long)n;
    }
    struct virtio_net_stats st;
    virtio_net_get_stats(r->dev, &st);
    char mac[18];
    net_format_mac(r->mac, mac);
#define PUT(...) do { int k_ = snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, __VA_ARGS__); \
                      if (k_ > 0) n += (size_t)k_; } while (0)
    PUT("mac %s\n", mac);
    if (r->guest_mac_given) {
        net_format_mac(r->guest_mac, mac);
        PUT("guest_mac %s\n", mac);
    }
    PUT("tx frames %llu bytes %llu dropped %llu local %llu bad %llu backend-errors %llu throttled %llu "
        "bad-offload %llu\n",
        (unsigned long long)st.tx_frames, (unsigned long long)st.tx_bytes, (unsigned long long)st.tx_dropped,
        (unsigned long long)st.tx_local, (unsigned long long)st.tx_bad, (unsigned long long)st.tx_backend_errors,
        (unsigned long long)st.tx_throttled, (unsigned long long)st.tx_bad_offload);
    PUT("rx frames %llu bytes %llu dropped %llu bad %llu throttled %llu\n", (unsigned long long)st.rx_frames,
        (unsigned long long)st.rx_bytes, (unsigned long long)st.rx_dropped, (unsigned long long)st.rx_bad,
        (unsigned long long)st.rx_throttled);
    if (r->mmds) {
        struct mmds_stats ms;
        mmds_get_stats(r->mmds, &ms);
        PUT("metadata requests %llu bad %llu tokens %llu no-token %llu invalid-token %llu\n",
            (unsigned long long)ms.requests, (unsigned long long)ms.bad_requests,
            (unsigned long long)ms.tokens_issued, (unsigned long long)ms.rx_no_token,
            (unsigned long long)ms.rx_invalid_token);
    }
#undef PUT
    pthread_mutex_lock(&r->plock);
    if (r->policy)
        n += net_policy_render(r->policy, clock_mono_ns(), buf + (n < len ? n : len), n < len ? len - n : 0);
    pthread_mutex_unlock(&r->plock);
    return (long)n;
}

/* A fork's child: a MAC of its own, and a TAP of its own (one process
 * at a time holds a TAP: the parent's is not the child's to take). */
static int net_fork_identity(struct devopts *o, const struct devopts *ovr, char *why, size_t wlen)
{
    const char *tap = devopt_get(o, "tap"), *otap = ovr ? devopt_get(ovr, "tap") : NULL;
    if (tap && !(ovr && devopt_get(ovr, "user")) && (!otap || !strcmp(otap, tap))) {
        snprintf(why, wlen, "a fork's child cannot share its parent's TAP %s: give it one of its own "
                 "(moat restore --fork-child --net tap=NAME; moat fork --tap NAME%%u; moat_fork: net_tap_fmt or "
                 "net_taps)", tap);
        return -EINVAL;
    }
    /* the restored guest goes on sending from the MAC it read at boot: the
     * policy pins that one too (the first generation's, kept by later ones) */
    const char *old = devopt_get(o, "mac");
    uint8_t m[6];
    char ms[18];
    if (old && !devopt_get(o, "guest_mac") && net_parse_mac(old, m) == 0) {
        net_format_mac(m, ms);
        int r = devopt_set(o, "guest_mac", ms);
        if (r < 0)
            return r;
    }
    net_random_mac(m);
    net_format_mac(m, ms);
    return devopt_set(o, "mac", ms);
}

const struct virtio_kind net_kind = {
    .fork_identity = net_fork_identity,
    .override_groups = net_backend_groups,
    .get = net_get,
    .get_keys = net_get_keys,
    .set = net_set,
    .set_keys = net_set_keys,
    .type = "net",
    .name = "net",
    .device_id = VIRTIO_ID_NET,
    /* over vhost-user: started once rx and tx are both ready (the device
     * refuses to start with one); QEMU's virtio-mmio reports QueueNumMax
     * 1024 and Linux's virtio-net uses it (docs/vhost-user.md) */
    .vhost_user_nqueues = 2,
    .vhost_user_queue_max = 1024,
    .keys = net_keys,
    .override_keys = net_override_keys,
    .check = net_check,
    .id = net_id,
    .create = net_kind_create,
    .free = net_free,
};
