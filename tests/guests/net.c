/* net: a tiny polling virtio-mmio (version 2) virtio-net driver that talks
 * UDP and ARP through moat's device to a peer on the host. Protocol and
 * command line in net_proto.h. Exit codes:
 *   3  no virtio-net device (NET_NODEV)          4  command line incomplete or bad
 *   10 bad magic/version   11 a needed feature missing or FEATURES_OK refused
 *   12 queue setup refused 13 config MAC is not net.mac
 *   14 link down           15 config MTU is not net.mtu
 *   20 ping: no reply      30 ARP: no answer      31 ARP answer has the wrong MAC
 *   40 bulk: a reply missing (lost or out of order: the next expected is printed)
 *   50 big: no reply       51 big: net.mrg=1 but the reply came in one buffer
 *   60 short chain not handed back with length 0  61 no reply after it
 *   70 a reply out of order or different from what was sent
 *   71 a reply with a bad IPv4 or UDP checksum, or a header flag not negotiated
 *   72 the device returned a descriptor it was not given
 *   73 a merged frame larger than any Ethernet frame, or num_buffers 0
 *   74 no free transmit slot (the device stopped taking frames)
 *   80 net.csum=1: a crafted checksum did not come out as meant (a bug here) */
#include "rt.h"
#include "virtio_mmio.h"
#include <stdbool.h>

#include "net_proto.h"

#define CMDLINE     0x20000ull
#define NSLOTS      8               /* virtio-mmio slots looked at */
#define RXQ         64
#define TXQ         64
#define TXS         (TXQ / 2)       /* transmit slots: descriptors 2s and 2s+1 */
#define VHDR        12              /* struct virtio_net_hdr_v1 */
#define ETH_MAX     1514
#define RXBUF_BIG   2048            /* without mergeable buffers: header + any frame */
#define RXBUF_MRG   256             /* with them: a large frame spans several */
#define F_NEXT      1
#define F_WRITE     2
#define WAIT_GCYCLES 60             /* default bound for each wait, 10^9 TSC cycles (~20 s at 3 GHz) */

#define VIRTIO_NET_F_CSUM      0
#define VIRTIO_NET_F_MTU       3
#define VIRTIO_NET_F_MAC       5
#define VIRTIO_NET_F_MRG_RXBUF 15
#define VIRTIO_NET_F_STATUS    16

struct vq {
    VRING_FIELDS(RXQ);
};

static struct vq rxq, txq;
static uint8_t rxbuf[RXQ][RXBUF_BIG] __attribute__((aligned(4096)));
static uint8_t txbuf[TXS][VHDR + ETH_MAX + 2] __attribute__((aligned(64)));
static bool tx_busy[TXS];
static uint32_t tx_done_len[TXS], tx_next;
static uint8_t frame_asm[RXBUF_BIG];       /* one frame, from one buffer or merged */
static uint32_t asm_len, asm_left;
static uint8_t asm_flags;

static uint64_t base;
static bool mrg;
static uint32_t rxbufsz, rx_stride;    /* receive chains: every rx_stride-th descriptor heads one */
static uint8_t my_mac[6], peer_mac[6], want_mac[6];
static uint32_t my_ip, peer_ip, count = 300, window = 16, want_mtu;
static uint64_t wait_cycles = WAIT_GCYCLES * 1000000000ull; /* net.wait= */
static uint16_t peer_port;
static bool have_want_mac;
static bool csum_mode;              /* net.csum=1 */
static uint8_t tx_hdr[VHDR];        /* the next frame's virtio-net header (then zero again) */

static int fail;                    /* set by the receive path: an exit code */
static uint32_t rx_next;            /* the sequence number the next reply must carry */
static uint32_t max_buffers, arp_answered, rx_frames;
static bool arp_seen;
static uint8_t arp_mac[6];
static bool arp_pending;            /* an ARP reply to send (from the receive path) */
static uint8_t arp_to_mac[6];
static uint32_t arp_to_ip;

static uint32_t rd(uint64_t off) { return mmio_read32(base + off); }
static void wr(uint64_t off, uint32_t v) { mmio_write32(base + off, v); }

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)(v >> 16)); put16(p + 2, (uint16_t)v); }

/* ---- the command line ---- */

/* The value of key (up to a space) in out; false if absent. */
static bool arg(const char *key, char *out, unsigned cap)
{
    const volatile char *c = (const volatile char *)CMDLINE;
    size_t n = strlen(key);
    for (unsigned i = 0; i < 4096 && c[i]; i++) {
        if (i > 0 && c[i - 1] != ' ')
            continue;
        size_t k = 0;
        while (k < n && c[i + k] == key[k])
            k++;
        if (k != n || c[i + n] != '=')
            continue;
        unsigned j = 0;
        for (const volatile char *v = c + i + n + 1; *v && *v != ' ' && j + 1 < cap; v++)
            out[j++] = *v;
        out[j] = 0;
        return true;
    }
    return false;
}

static bool parse_u32(const char *s, uint32_t max, uint32_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > max)
            return false;
    }
    *out = (uint32_t)v;
    return true;
}

static bool parse_ip(const char *s, uint32_t *ip)
{
    uint32_t v = 0;
    for (int part = 0; part < 4; part++) {
        char b[4];
        unsigned n = 0;
        while (*s && *s != '.' && n < 3)
            b[n++] = *s++;
        b[n] = 0;
        uint32_t x;
        if (!parse_u32(b, 255, &x) || (part < 3 ? *s != '.' : *s != 0))
            return false;
        if (part < 3)
            s++;
        v = v << 8 | x;
    }
    *ip = v;
    return true;
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool parse_mac(const char *s, uint8_t m[6])
{
    if (strlen(s) != 17)
        return false;
    for (int i = 0; i < 6; i++) {
        int h = hexv(s[3 * i]), l = hexv(s[3 * i + 1]);
        if (h < 0 || l < 0 || (i < 5 && s[3 * i + 2] != ':'))
            return false;
        m[i] = (uint8_t)(h << 4 | l);
    }
    return true;
}

static bool parse_cmdline(void)
{
    char v[40];
    uint32_t x;
    if (!arg("net.ip", v, sizeof v) || !parse_ip(v, &my_ip))
        return false;
    if (!arg("net.peer", v, sizeof v) || !parse_ip(v, &peer_ip))
        return false;
    if (!arg("net.peermac", v, sizeof v) || !parse_mac(v, peer_mac))
        return false;
    if (!arg("net.port", v, sizeof v) || !parse_u32(v, 65535, &x) || x == 0)
        return false;
    peer_port = (uint16_t)x;
    if (arg("net.mac", v, sizeof v)) {
        if (!parse_mac(v, want_mac))
            return false;
        have_want_mac = true;
    }
    if (arg("net.mrg", v, sizeof v)) {
        if (!parse_u32(v, 1, &x))
            return false;
        mrg = x;
    }
    if (arg("net.mtu", v, sizeof v) && (!parse_u32(v, 65535, &want_mtu) || want_mtu == 0))
        return false;
    if (arg("net.count", v, sizeof v) && !parse_u32(v, NET_COUNT_MAX, &count))
        return false;
    if (arg("net.window", v, sizeof v) && (!parse_u32(v, NET_COUNT_MAX, &window) || window == 0))
        return false;
    if (arg("net.csum", v, sizeof v)) {
        if (!parse_u32(v, 1, &x))
            return false;
        csum_mode = x;
    }
    if (arg("net.wait", v, sizeof v)) {
        if (!parse_u32(v, NET_WAIT_MAX, &x) || x == 0)
            return false;
        wait_cycles = x * 1000000000ull;
    }
    return true;
}

/* ---- the device ---- */

static void queue_setup(unsigned q, struct vq *v, unsigned n)
{
    wr(R_QUEUE_SEL, q);
    wr(R_QUEUE_NUM, n);
    uint64_t a = (uint64_t)(uintptr_t)v->desc, b = (uint64_t)(uintptr_t)&v->avail, c = (uint64_t)(uintptr_t)&v->used;
    wr(R_DESC_LO, (uint32_t)a); wr(R_DESC_HI, (uint32_t)(a >> 32));
    wr(R_AVAIL_LO, (uint32_t)b); wr(R_AVAIL_HI, (uint32_t)(b >> 32));
    wr(R_USED_LO, (uint32_t)c); wr(R_USED_HI, (uint32_t)(c >> 32));
    wr(R_QUEUE_READY, 1);
}

static void make_avail(struct vq *v, unsigned n, uint16_t head)
{
    v->avail.ring[v->avail.idx % n] = head;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&v->avail.idx, (uint16_t)(v->avail.idx + 1), __ATOMIC_RELEASE);
}

static void notify(unsigned q)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    wr(R_QUEUE_NOTIFY, q);
}

static int dev_init(void)
{
    base = 0;
    for (unsigned s = 0; s < NSLOTS && !base; s++) {
        uint64_t b = VIRTIO_MMIO_SLOT(s);
        uint32_t magic = mmio_read32(b + R_MAGIC);
        if (magic == 0xffffffffu)
            break;                      /* nothing mapped: no more slots */
        if (magic != 0x74726976u || mmio_read32(b + R_VERSION) != 2)
            return 10;
        if (mmio_read32(b + R_DEVICE_ID) == 1)
            base = b;
    }
    if (!base)
        return NET_NODEV;
    wr(R_STATUS, 0);
    wr(R_STATUS, 1);
    wr(R_STATUS, 1 | 2);
    wr(R_DEV_FEAT_SEL, 0);
    uint32_t lo = rd(R_DEV_FEAT);
    wr(R_DEV_FEAT_SEL, 1);
    uint32_t hi = rd(R_DEV_FEAT);
    uint32_t want = 1u << VIRTIO_NET_F_MAC | 1u << VIRTIO_NET_F_STATUS;
    if (mrg)
        want |= 1u << VIRTIO_NET_F_MRG_RXBUF;
    if (want_mtu)
        want |= 1u << VIRTIO_NET_F_MTU;
    if (csum_mode)
        want |= 1u << VIRTIO_NET_F_CSUM;
    if (!(hi & 1) || (lo & want) != want)
        return 11;
    wr(R_DRV_FEAT_SEL, 0);
    wr(R_DRV_FEAT, want);               /* no TSO, no event idx, no indirect; CSUM with net.csum=1 */
    wr(R_DRV_FEAT_SEL, 1);
    wr(R_DRV_FEAT, 1);                  /* VERSION_1 */
    wr(R_STATUS, 1 | 2 | 8);
    if (!(rd(R_STATUS) & 8))
        return 11;
    for (unsigned q = 0; q < 2; q++) {
        wr(R_QUEUE_SEL, q);
        if (rd(R_QUEUE_MAX) < (q ? TXQ : RXQ))
            return 12;
        queue_setup(q, q ? &txq : &rxq, q ? TXQ : RXQ);
        if (rd(R_QUEUE_READY) != 1)
            return 12;
    }
    wr(R_STATUS, 1 | 2 | 8 | 4);
    for (unsigned i = 0; i < 6; i++)
        my_mac[i] = mmio_read8(base + R_CONFIG + i);
    if (have_want_mac && memcmp(my_mac, want_mac, 6) != 0)
        return 13;
    if (!(mmio_read16(base + R_CONFIG + 6) & 1))
        return 14;
    if (want_mtu && mmio_read16(base + R_CONFIG + 10) != want_mtu)
        return 15;
    /* With mergeable buffers one small descriptor per chain (as Linux);
     * without, RXQ / 2 chains of two: the header, then the rest (as
     * Linux's "big packets"), so the device writes across descriptors. */
    rxbufsz = mrg ? RXBUF_MRG : RXBUF_BIG;
    rx_stride = mrg ? 1 : 2;
    for (uint16_t i = 0; i < RXQ; i += rx_stride) {
        uint64_t a = (uint64_t)(uintptr_t)rxbuf[i / rx_stride];
        if (mrg) {
            rxq.desc[i] = (struct desc){ a, rxbufsz, F_WRITE, 0 };
        } else {
            rxq.desc[i] = (struct desc){ a, VHDR, F_WRITE | F_NEXT, (uint16_t)(i + 1) };
            rxq.desc[i + 1] = (struct desc){ a + VHDR, rxbufsz - VHDR, F_WRITE, 0 };
        }
        make_avail(&rxq, RXQ, i);
    }
    notify(0);
    return 0;
}

/* ---- checksums ---- */

static uint32_t sum16(uint32_t s, const uint8_t *p, uint32_t n)
{
    for (; n > 1; p += 2, n -= 2)
        s += be16(p);
    if (n)
        s += (uint32_t)p[0] << 8;
    return s;
}

static uint16_t fold(uint32_t s)
{
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

/* The UDP checksum over the pseudo header and udp (ulen bytes, its
 * checksum field as it is). */
static uint16_t udp_sum(uint32_t src, uint32_t dst, const uint8_t *udp, uint32_t ulen)
{
    uint32_t s = (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + 17 + ulen;
    return fold(sum16(s, udp, ulen));
}

/* ---- receive ---- */

/* The sequence number's payload: NET_PING n, or NET_BIG n and pattern
 * bytes up to NET_BIG_LEN. Returns its length. */
static uint32_t payload(uint32_t n, bool big, uint8_t *p)
{
    char *e = fmt_dec(fmt_str((char *)p, big ? NET_BIG : NET_PING), n);
    uint32_t len = (uint32_t)((uint8_t *)e - p);
    if (!big)
        return len;
    p[len++] = ' ';
    for (; len < NET_BIG_LEN; len++)
        p[len] = (uint8_t)(n * 7u + len * 13u);
    return len;
}

static void on_reply(const uint8_t *d, uint32_t len)
{
    static uint8_t want[NET_BIG_LEN];
    bool big = len >= sizeof NET_BIG - 1 && memcmp(d, NET_BIG, sizeof NET_BIG - 1) == 0;
    uint32_t wl = payload(rx_next, big, want);
    if (len != wl || memcmp(d, want, wl) != 0) {
        serial_puts("net: unexpected reply, wanted number ");
        serial_putdec(rx_next);
        serial_puts("\n");
        fail = 70;
        return;
    }
    rx_next++;
}

static void on_arp(const uint8_t *f, uint32_t len)
{
    if (len < 42 || be16(f + 14) != 1 || be16(f + 16) != 0x0800 || f[18] != 6 || f[19] != 4)
        return;
    uint16_t op = be16(f + 20);
    uint32_t spa = be32(f + 28), tpa = be32(f + 38);
    if (op == 1 && tpa == my_ip) {
        memcpy(arp_to_mac, f + 22, 6);
        arp_to_ip = spa;
        arp_pending = true;             /* answered from the main loop */
    } else if (op == 2 && spa == peer_ip && tpa == my_ip) {
        memcpy(arp_mac, f + 22, 6);
        arp_seen = true;
    }
}

static void on_frame(uint8_t flags, const uint8_t *f, uint32_t len)
{
    static const uint8_t bcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
    rx_frames++;
    if (len < 14 || (memcmp(f, my_mac, 6) != 0 && memcmp(f, bcast, 6) != 0))
        return;                         /* not for us (IPv6 multicast and such) */
    if (flags & 1) {                    /* NEEDS_CSUM: only with GUEST_CSUM, not negotiated */
        fail = 71;
        return;
    }
    uint16_t type = be16(f + 12);
    if (type == 0x0806) {
        on_arp(f, len);
        return;
    }
    if (type != 0x0800 || len < 14 + 20 + 8)
        return;
    const uint8_t *ip = f + 14;
    uint32_t ihl = (ip[0] & 15u) * 4, tot = be16(ip + 2);
    if ((ip[0] >> 4) != 4 || ihl < 20 || tot < ihl + 8 || 14 + tot > len || ip[9] != 17 ||
        be32(ip + 12) != peer_ip || be32(ip + 16) != my_ip || (be16(ip + 6) & 0x3fff))
        return;
    const uint8_t *udp = ip + ihl;
    uint32_t ulen = be16(udp + 4);
    if (be16(udp) != peer_port || be16(udp + 2) != NET_GUEST_PORT || ulen < 8 || ulen > tot - ihl)
        return;
    if (fold(sum16(0, ip, ihl)) != 0 || (be16(udp + 6) && udp_sum(peer_ip, my_ip, udp, ulen) != 0)) {
        fail = 71;
        return;
    }
    on_reply(udp + 8, ulen - 8);
}

/* Take the frames the device wrote, give their buffers back. */
static void poll_rx(void)
{
    unsigned reposted = 0;
    while (__atomic_load_n(&rxq.used.idx, __ATOMIC_ACQUIRE) != rxq.last_used && !fail) {
        uint32_t id = rxq.used.ring[rxq.last_used % RXQ].id, len = rxq.used.ring[rxq.last_used % RXQ].len;
        rxq.last_used++;
        if (id >= RXQ || id % rx_stride || len > rxbufsz) {
            fail = 72;
            break;
        }
        const uint8_t *b = rxbuf[id / rx_stride];
        bool was_mid = asm_left != 0;
        if (asm_left == 0 && len < VHDR) {
            /* length 0: a buffer handed back unused (a frame dropped) */
        } else if (asm_left == 0) {
            uint16_t nb = (uint16_t)(b[10] | b[11] << 8);
            if (nb == 0 || (!mrg && nb != 1)) {
                fail = 73;
                break;
            }
            if (nb > max_buffers)
                max_buffers = nb;
            asm_flags = b[0];
            asm_len = len - VHDR;
            memcpy(frame_asm, b + VHDR, asm_len);
            asm_left = nb - 1u;
        } else if (asm_len + len > sizeof frame_asm) {
            fail = 73;
            break;
        } else {
            memcpy(frame_asm + asm_len, b, len);
            asm_len += len;
            asm_left--;
        }
        if (asm_left == 0 && (was_mid || len >= VHDR))
            on_frame(asm_flags, frame_asm, asm_len);
        make_avail(&rxq, RXQ, (uint16_t)id);
        reposted++;
    }
    if (reposted)
        notify(0);
}

/* ---- transmit ---- */

static void poll_tx(void)
{
    while (__atomic_load_n(&txq.used.idx, __ATOMIC_ACQUIRE) != txq.last_used) {
        uint32_t id = txq.used.ring[txq.last_used % TXQ].id, len = txq.used.ring[txq.last_used % TXQ].len;
        txq.last_used++;
        if (id >= TXQ || (id & 1) || !tx_busy[id / 2]) {
            fail = 72;
            return;
        }
        tx_done_len[id / 2] = len;
        __atomic_store_n(&tx_busy[id / 2], false, __ATOMIC_RELEASE);
    }
}

/* Wait (bounded) for the next transmit slot; -1 if none came free. */
static int tx_slot(void)
{
    unsigned s = tx_next % TXS;
    uint64_t t0 = rdtsc();
    for (uint64_t i = 0; tx_busy[s]; i++) {
        poll_tx();
        poll_rx();
        if (fail || i > 4000000000ull || rdtsc() - t0 > wait_cycles) {
            if (!fail)
                fail = 74;
            return -1;
        }
        cpu_relax();
    }
    tx_next++;
    return (int)s;
}

/* Queue a frame in slot s: header and frame in one descriptor, or (split)
 * in two. The slot's frame starts at txbuf[s] + VHDR. */
static void tx_post(unsigned s, uint32_t flen, bool split, uint32_t chain_len)
{
    memcpy(txbuf[s], tx_hdr, VHDR);
    memset(tx_hdr, 0, VHDR);
    uint16_t d = (uint16_t)(2 * s);
    uint64_t a = (uint64_t)(uintptr_t)txbuf[s];
    if (chain_len)                      /* a deliberately short chain */
        txq.desc[d] = (struct desc){ a, chain_len, 0, 0 };
    else if (split) {
        txq.desc[d] = (struct desc){ a, VHDR, F_NEXT, (uint16_t)(d + 1) };
        txq.desc[d + 1] = (struct desc){ a + VHDR, flen, 0, 0 };
    } else {
        txq.desc[d] = (struct desc){ a, VHDR + flen, 0, 0 };
    }
    tx_busy[s] = true;
    tx_done_len[s] = 0xffffffffu;
    make_avail(&txq, TXQ, d);
    notify(1);
}

static void eth_hdr(uint8_t *f, const uint8_t *dst, uint16_t type)
{
    memcpy(f, dst, 6);
    memcpy(f + 6, my_mac, 6);
    put16(f + 12, type);
}

static int send_arp(uint16_t op, const uint8_t *tha, uint32_t tpa)
{
    static const uint8_t bcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
    int s = tx_slot();
    if (s < 0)
        return -1;
    uint8_t *f = txbuf[s] + VHDR;
    eth_hdr(f, op == 1 ? bcast : tha, 0x0806);
    put16(f + 14, 1);
    put16(f + 16, 0x0800);
    f[18] = 6;
    f[19] = 4;
    put16(f + 20, op);
    memcpy(f + 22, my_mac, 6);
    put32(f + 28, my_ip);
    memcpy(f + 32, tha, 6);
    put32(f + 38, tpa);
    tx_post((unsigned)s, 42, false, 0);
    return 0;
}

/* Datagram n (NET_PING or NET_BIG) to the peer. */
static int send_udp(uint32_t n, bool big)
{
    int s = tx_slot();
    if (s < 0)
        return -1;
    uint8_t *f = txbuf[s] + VHDR, *ip = f + 14, *udp = ip + 20;
    uint32_t plen = payload(n, big, udp + 8), ulen = 8 + plen;
    eth_hdr(f, peer_mac, 0x0800);
    ip[0] = 0x45;
    ip[1] = 0;
    put16(ip + 2, (uint16_t)(20 + ulen));
    put16(ip + 4, (uint16_t)n);
    put16(ip + 6, 0x4000);              /* don't fragment */
    ip[8] = 64;
    ip[9] = 17;
    put16(ip + 10, 0);
    put32(ip + 12, my_ip);
    put32(ip + 16, peer_ip);
    put16(ip + 10, fold(sum16(0, ip, 20)));
    put16(udp, NET_GUEST_PORT);
    put16(udp + 2, peer_port);
    put16(udp + 4, (uint16_t)ulen);
    put16(udp + 6, 0);
    uint16_t cs = udp_sum(my_ip, peer_ip, udp, ulen);
    put16(udp + 6, cs ? cs : 0xffff);
    tx_post((unsigned)s, 14 + 20 + ulen, n & 1, 0);
    return 0;
}

/* ---- the script ---- */

/* One round of both queues, and an ARP answer that came due. */
static void poll(void)
{
    poll_tx();
    poll_rx();
    if (arp_pending && !fail) {
        arp_pending = false;
        if (send_arp(2, arp_to_mac, arp_to_ip) == 0)
            arp_answered++;
    }
}

/* Poll until cond() or the bound; false on timeout or failure. */
static bool wait_for(bool (*cond)(void))
{
    uint64_t t0 = rdtsc();
    for (uint64_t i = 0; i < 4000000000ull && !fail; i++) {
        poll();
        if (cond())
            return !fail;
        if (rdtsc() - t0 > wait_cycles)
            break;
        cpu_relax();
    }
    return false;
}

static uint32_t sent;                   /* datagrams sent (= the next sequence number) */
static bool all_back(void) { return rx_next == sent; }
static bool window_open(void) { return sent - rx_next < window; }
static bool got_arp(void) { return arp_seen; }
static unsigned bad_slot;
static bool bad_back(void) { return !tx_busy[bad_slot]; }

static int udp_round(bool big, int code)
{
    if (send_udp(sent++, big) < 0 || !wait_for(all_back))
        return fail ? fail : code;
    return 0;
}

static int script(void)
{
    int e;
    if ((e = udp_round(false, 20)))
        return e;
    serial_puts(NET_OK_PING);

    if (send_arp(1, (const uint8_t[6]){ 0 }, peer_ip) < 0 || !wait_for(got_arp))
        return fail ? fail : 30;
    if (memcmp(arp_mac, peer_mac, 6) != 0)
        return 31;
    serial_puts(NET_OK_ARP);

    for (uint32_t k = 0; k < count; k++) {
        if (!wait_for(window_open) || send_udp(sent++, false) < 0)
            break;
    }
    if (fail || !wait_for(all_back)) {
        serial_puts("net: bulk: waiting for number ");
        serial_putdec(rx_next);
        serial_puts("\n");
        return fail ? fail : 40;
    }
    serial_puts(NET_OK_BULK);

    if ((e = udp_round(true, 50)))
        return e;
    if (mrg && max_buffers < 2)
        return 51;
    serial_puts(NET_OK_BIG);

    /* 20 bytes: less than the virtio-net header and an Ethernet header */
    int s = tx_slot();
    if (s < 0)
        return fail;
    bad_slot = (unsigned)s;
    memset(txbuf[s] + VHDR, 0xff, 8);
    tx_post(bad_slot, 0, false, VHDR + 8);
    if (!wait_for(bad_back) || tx_done_len[bad_slot] != 0)
        return fail ? fail : 60;
    if ((e = udp_round(false, 61)))
        return e;
    serial_puts(NET_OK_BAD);
    return 0;
}

/* ---- net.csum=1 (net_proto.h) ---- */

/* The folded ones' complement sum, not complemented. */
static uint16_t ocsum(uint32_t s) { return (uint16_t)~fold(s); }

/* A UDP datagram to the peer: text (14 bytes) and a 2-byte fixer as its
 * payload, NEEDS_CSUM with csum_start / csum_offset. good: the checksum
 * field holds the pseudo-header sum; else it is 0 (none) and the fixer
 * makes the checksum of [start, end), which the host writes at start + off,
 * come out as want. */
static int send_csum(const char *text, uint16_t start, uint16_t off, bool good, uint16_t want)
{
    int s = tx_slot();
    if (s < 0)
        return -1;
    uint8_t *f = txbuf[s] + VHDR, *ip = f + 14, *udp = ip + 20, *pl = udp + 8;
    uint32_t tl = (uint32_t)strlen(text), ulen = 8 + tl + 2, flen = 14 + 20 + ulen;
    memcpy(pl, text, tl);
    put16(pl + tl, 0);
    eth_hdr(f, peer_mac, 0x0800);
    ip[0] = 0x45;
    ip[1] = 0;
    put16(ip + 2, (uint16_t)(20 + ulen));
    put16(ip + 4, (uint16_t)(0x4000 + tx_next));
    put16(ip + 6, 0x4000);
    ip[8] = 64;
    ip[9] = 17;
    put16(ip + 10, 0);
    put32(ip + 12, my_ip);
    put32(ip + 16, peer_ip);
    put16(ip + 10, fold(sum16(0, ip, 20)));
    put16(udp, NET_GUEST_PORT);
    put16(udp + 2, peer_port);
    put16(udp + 4, (uint16_t)ulen);
    put16(udp + 6, 0);
    if (good) {
        put16(udp + 6, ocsum((my_ip >> 16) + (my_ip & 0xffff) + (peer_ip >> 16) + (peer_ip & 0xffff) + 17 + ulen));
    } else {
        /* (start, the fixer and the end are an even distance apart) */
        uint16_t r = ocsum(sum16(0, f + start, flen - start));
        put16(pl + tl, ocsum((uint32_t)(uint16_t)~want + (uint16_t)~r));
        if (fold(sum16(0, f + start, flen - start)) != want) {
            fail = 80;
            return -1;
        }
    }
    tx_hdr[0] = 1;                      /* VIRTIO_NET_HDR_F_NEEDS_CSUM */
    tx_hdr[6] = (uint8_t)start;
    tx_hdr[7] = (uint8_t)(start >> 8);
    tx_hdr[8] = (uint8_t)off;
    tx_hdr[9] = (uint8_t)(off >> 8);
    tx_post((unsigned)s, flen, false, 0);
    return 0;
}

static bool tx_idle(void)
{
    for (unsigned i = 0; i < TXS; i++)
        if (tx_busy[i])
            return false;
    return true;
}

static int csum_script(void)
{
    if (send_csum(NET_CSUM_GOOD, 14 + 20, 6, true, 0) < 0 ||
        send_csum(NET_CSUM_ADDR, 14 + 18, 0, false, (uint16_t)(peer_ip ^ 0xff)) < 0 ||
        send_csum(NET_CSUM_PORT, 14 + 20 + 2, 0, false, NET_CSUM_NEWPORT) < 0 || !wait_for(tx_idle))
        return fail ? fail : 74;
    serial_puts(NET_OK_CSUM);
    for (uint64_t t0 = rdtsc(); rdtsc() - t0 < 1000000000ull && !fail;)
        poll();
    return fail;
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    int rc = parse_cmdline() ? dev_init() : 4;
    if (!rc)
        rc = csum_mode ? csum_script() : script();
    char line[160], *p = line;
    p = fmt_str(p, "net: " NET_ARP_ANSWERED);
    p = fmt_dec(p, arp_answered);
    p = fmt_str(p, " rx-frames ");
    p = fmt_dec(p, rx_frames);
    p = fmt_str(p, " " NET_MAX_BUFFERS);
    p = fmt_dec(p, max_buffers);
    p = fmt_str(p, " replies ");
    p = fmt_dec(p, rx_next);
    fmt_str(p, "\n");
    serial_puts(line);
    if (rc) {
        serial_puts("net: failed, code ");
        serial_putdec((uint64_t)rc);
        serial_puts("\n");
    } else {
        serial_puts(NET_OK_ALL);
    }
    return rc;
}
