/* virtio-net device driven through real virtqueues in fake guest memory (a
 * tiny polling driver in this file), with a backend over a SOCK_SEQPACKET
 * socket pair: frames both ways, the filter (drop, local endpoint
 * answering through virtio_net_inject), mergeable receive buffers,
 * backpressure, and every malformed chain the guest can make. The TAP
 * backend's own code (io_uring when built with liburing) runs over such a
 * pair too: frames with their virtio-net header both ways, in order, across
 * a stop and start. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "devices/net/net_kind.h"
#include "devices/net/net_tap.h"
#include "devices/net/virtio_net.h"
#include "devices/virtio/ratelimit.h"
#include "devices/virtio/virtq.h"
#include "vmm/base/gmem.h"

#define MEM_SIZE (8u << 20)
#define QSIZE    64u
#define QBASE(q) (0x1000u + (q) * 0x3000u)
#define RXBUF    0x100000u
#define TXBUF    0x300000u
#define Q_RX 0
#define Q_TX 1

struct pair_be {
    struct net_backend b;
    _Atomic bool full;          /* send says -EAGAIN */
    _Atomic unsigned sent;
    /* sink: send takes every frame without the socket (which says -EAGAIN
     * after a few queued datagrams, and the room coming back wakes the
     * device), counting those that are frame_make(100 bytes, 0x45, n)
     * for n = the frame's number */
    _Atomic bool sink;
    _Atomic unsigned sink_match;
};

struct rig {
    uint8_t *ram;
    struct gmem mem;
    struct virtq q[2];
    struct virtio_dev_env env;
    struct virtio_net *dev;
    struct pair_be *be;
    int peer;                   /* the test's end of the backend */
    uint16_t avail[2], used_seen[2];
    uint32_t rxlen;             /* size of each posted receive buffer */
};

static struct rig R;

static void on_notify(void *o, unsigned q) { (void)o; (void)q; }
static void frame_make(uint8_t *f, size_t len, uint8_t tag, unsigned seed);

static int pair_send(struct net_backend *b, const struct net_vhdr *h, const uint8_t *f, size_t len)
{
    struct pair_be *p = (struct pair_be *)b;
    (void)h;
    if (atomic_load(&p->full))
        return -EAGAIN;
    if (atomic_load(&p->sink)) {
        uint8_t want[100];
        frame_make(want, sizeof want, 0x45, atomic_load(&p->sent));
        if (len == sizeof want && memcmp(f, want, len) == 0)
            atomic_fetch_add(&p->sink_match, 1);
        atomic_fetch_add(&p->sent, 1);
        return 0;
    }
    ssize_t n = send(b->fd, f, len, MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN ? -EAGAIN : -errno;
    atomic_fetch_add(&p->sent, 1);
    return 0;
}

static ssize_t pair_recv(struct net_backend *b, struct net_vhdr *h, uint8_t *buf, size_t cap)
{
    memset(h, 0, sizeof(*h));
    ssize_t n = recv(b->fd, buf, cap, MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN ? -EAGAIN : -errno;
    return n == 0 ? -EPIPE : n;
}

static void pair_destroy(struct net_backend *b)
{
    close(b->fd);
    free(b);
}

static const struct net_backend_ops pair_ops = {
    .name = "pair", .send = pair_send, .recv = pair_recv, .destroy = pair_destroy,
};

/* ---- the filter: frames whose byte 14 is 0xdd are dropped, 0x10 are for
 * the device (answered with the same frame, byte 14 = 0x11) ---- */
static _Atomic unsigned seen_rx;

/* frames handed over already parsed (an offload header was checked):
 * how many, and how many of those parses differ from a fresh one */
static _Atomic unsigned tx_parsed, tx_parsed_wrong;

static enum net_verdict f_tx(void *o, const uint8_t *f, size_t len, const struct net_frame *parsed)
{
    (void)o;
    if (parsed) {
        struct net_frame g;
        net_frame_parse(f, len, &g, NULL);
        atomic_fetch_add(&tx_parsed, 1);
        if (memcmp(&g, parsed, sizeof g) != 0)
            atomic_fetch_add(&tx_parsed_wrong, 1);
    }
    return len > 14 && f[14] == 0xdd ? NET_DROP : len > 14 && f[14] == 0x10 ? NET_LOCAL : NET_PASS;
}

static void f_rx(void *o, const uint8_t *f, size_t len) { (void)o; (void)f; (void)len; atomic_fetch_add(&seen_rx, 1); }

static void f_local(void *o, struct virtio_net *n, const uint8_t *f, size_t len)
{
    (void)o;
    uint8_t a[256];
    ck_assert_uint_le(len, sizeof a);
    memcpy(a, f, len);
    a[14] = 0x11;
    ck_assert_int_eq(virtio_net_inject(n, a, len), 0);
}

static void wr16(uint64_t gpa, uint16_t v) { memcpy(R.ram + gpa, &v, 2); }
static uint32_t rd32(uint64_t gpa) { uint32_t v; memcpy(&v, R.ram + gpa, 4); return v; }
static uint16_t rd16(uint64_t gpa) { uint16_t v; memcpy(&v, R.ram + gpa, 2); return v; }

static void put_desc(unsigned q, uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
    uint8_t *d = R.ram + QBASE(q) + 16u * i;
    memcpy(d, &addr, 8); memcpy(d + 8, &len, 4); memcpy(d + 12, &flags, 2); memcpy(d + 14, &next, 2);
}

static void kick(unsigned q)
{
    uint64_t one = 1;
    ck_assert_int_eq(write(R.env.kick_fd[q], &one, 8), 8);
}

static void make_avail(unsigned q, uint16_t head)
{
    uint64_t av = QBASE(q) + 0x1000;
    wr16(av + 4 + 2u * (R.avail[q] % QSIZE), head);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    R.avail[q]++;
    wr16(av + 2, R.avail[q]);
}

static void rx_post(uint16_t i)
{
    put_desc(Q_RX, i, RXBUF + i * 0x10000u, R.rxlen, VIRTQ_DESC_F_WRITE, 0);
    make_avail(Q_RX, i);
}

static uint64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The next used entry of q within timeout_ms: 1 with head and len, or 0. */
static int used_wait(unsigned q, uint16_t *head, uint32_t *len, unsigned timeout_ms)
{
    uint64_t used = QBASE(q) + 0x2000, end = ms_now() + timeout_ms;
    for (;;) {
        uint16_t idx = __atomic_load_n((uint16_t *)(R.ram + used + 2), __ATOMIC_ACQUIRE);
        if (idx != R.used_seen[q]) {
            uint64_t e = used + 4 + 8u * (R.used_seen[q] % QSIZE);
            *head = (uint16_t)rd32(e);
            *len = rd32(e + 4);
            R.used_seen[q]++;
            return 1;
        }
        if (ms_now() >= end)
            return 0;
        usleep(200);
    }
}

static void rig_start(uint64_t features, uint32_t rxlen, uint16_t nrx)
{
    R.rxlen = rxlen;
    for (unsigned q = 0; q < 2; q++) {
        ck_assert_int_eq(virtq_init(&R.q[q], QSIZE), 0);
        R.q[q].desc = QBASE(q);
        R.q[q].avail = QBASE(q) + 0x1000;
        R.q[q].used = QBASE(q) + 0x2000;
        virtq_set_features(&R.q[q], features);
        ck_assert_int_eq(virtq_enable(&R.q[q], &R.mem), 0);
    }
    R.env.features = features;
    for (uint16_t i = 0; i < nrx; i++)
        rx_post(i);
    ck_assert_int_eq(virtio_net_ops.start(R.dev, &R.env), 0);
}

static const struct ratelimit_cfg *setup_tx_limit, *setup_rx_limit;
static bool use_tap;

static void rig_setup(void)
{
    memset(&R, 0, sizeof R);
    atomic_store(&seen_rx, 0);
    R.ram = calloc(1, MEM_SIZE);
    R.mem.n = 1;
    R.mem.r[0] = (struct gmem_region){ 0, MEM_SIZE, R.ram };
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    int sz = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    struct net_backend *be;
    char w[200] = "";
    if (use_tap) {              /* the TAP backend's code on the pair */
        ck_assert_msg(net_tap_from_fd(sv[0], "taptest", &be, w, sizeof w) == 0, "%s", w);
    } else {
        R.be = calloc(1, sizeof(*R.be));
        R.be->b = (struct net_backend){ .ops = &pair_ops, .fd = sv[0] };
        be = &R.be->b;
    }
    R.peer = sv[1];
    struct virtio_net_opts o = { .mac = { 0x52, 0x54, 0, 0x12, 0x34, 0x56 }, .mtu = 1500, .backend = be,
                                 .filter = { .tx = f_tx, .rx = f_rx, .local = f_local }, .name = "nettest",
                                 .tx_limit = setup_tx_limit, .rx_limit = setup_rx_limit };
    char why[200];
    ck_assert_msg(virtio_net_create(&o, &R.dev, why, sizeof why) == 0, "%s", why);
    for (unsigned q = 0; q < 2; q++)
        R.env.kick_fd[q] = eventfd(0, EFD_CLOEXEC);    /* blocking, as KVM's */
    R.env.mem = &R.mem;
    R.env.queues = R.q;
    R.env.nqueues = 2;
    R.env.notify_used = on_notify;
    R.env.opaque = &R;
}

static void rig_teardown(void)
{
    virtio_net_ops.destroy(R.dev);
    for (unsigned q = 0; q < 2; q++)
        close(R.env.kick_fd[q]);
    if (R.peer >= 0)
        close(R.peer);
    free(R.ram);
}

#define F_MRG (1ull << VIRTIO_NET_F_MRG_RXBUF)
#define F_BASE (1ull << VIRTIO_F_VERSION_1)
#define F_CSUM (1ull << VIRTIO_NET_F_CSUM)
#define F_TSO4 (1ull << VIRTIO_NET_F_HOST_TSO4)

/* A frame of len bytes: byte 14 = tag, the rest a pattern from seed. */
static void frame_make(uint8_t *f, size_t len, uint8_t tag, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        f[i] = (uint8_t)(i * 7 + seed);
    f[14] = tag;
}

/* A TCP segment over IPv4 of len bytes (TCP header at 34, 20 bytes), its
 * payload a pattern from seed. */
static void frame_tcp4(uint8_t *f, size_t len, unsigned seed)
{
    frame_make(f, len, 0x45, seed);
    f[12] = 0x08;
    f[13] = 0x00;
    f[15] = 0;
    f[16] = (uint8_t)((len - 14) >> 8);
    f[17] = (uint8_t)(len - 14);
    f[20] = 0x40;                   /* DF, no fragment */
    f[21] = 0;
    f[23] = 6;                      /* TCP */
    f[34 + 12] = 5 << 4;            /* data offset */
}

/* The guest sends: header + frame in nseg descriptors (split evenly). */
static uint16_t tx_head;
static void guest_send(const uint8_t *f, size_t len, unsigned nseg)
{
    uint8_t *buf = R.ram + TXBUF + (tx_head % 8) * 0x20000u;
    memset(buf, 0, 12);
    memcpy(buf + 12, f, len);
    size_t total = 12 + len, off = 0;
    uint16_t base = (uint16_t)((tx_head % 8) * 8);
    for (unsigned s = 0; s < nseg; s++) {
        size_t part = s + 1 == nseg ? total - off : total / nseg;
        put_desc(Q_TX, (uint16_t)(base + s), TXBUF + (tx_head % 8) * 0x20000u + off, (uint32_t)part,
                 s + 1 < nseg ? VIRTQ_DESC_F_NEXT : 0, (uint16_t)(base + s + 1));
        off += part;
    }
    make_avail(Q_TX, base);
    tx_head++;
    kick(Q_TX);
}

static ssize_t peer_recv(uint8_t *buf, size_t cap, int timeout_ms)
{
    struct pollfd p = { .fd = R.peer, .events = POLLIN };
    if (poll(&p, 1, timeout_ms) <= 0)
        return -1;
    return recv(R.peer, buf, cap, 0);
}

START_TEST(tx_frames_reach_the_backend)
{
    rig_setup();
    rig_start(F_BASE | F_MRG, 2048, 16);
    static uint8_t f[9000], g[70000];
    uint16_t head;
    uint32_t len;
    for (unsigned nseg = 1; nseg <= 3; nseg++) {
        frame_make(f, 1514, 0x45, nseg);
        guest_send(f, 1514, nseg);
        ck_assert_int_eq(peer_recv(g, sizeof g, 2000), 1514);
        ck_assert(memcmp(f, g, 1514) == 0);
        ck_assert_int_eq(used_wait(Q_TX, &head, &len, 2000), 1);
        ck_assert_uint_eq(len, 0);
    }
    /* a jumbo frame too */
    frame_make(f, 9000, 0x45, 9);
    guest_send(f, 9000, 2);
    ck_assert_int_eq(peer_recv(g, sizeof g, 2000), 9000);
    ck_assert(memcmp(f, g, 9000) == 0);
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.tx_frames, 4);
    ck_assert_uint_eq(st.tx_bytes, 3 * 1514 + 9000);
    rig_teardown();
}
END_TEST

START_TEST(filter_drops_and_local_answers)
{
    rig_setup();
    rig_start(F_BASE | F_MRG, 2048, 16);
    static uint8_t f[2000], g[70000];
    uint16_t head;
    uint32_t len;
    frame_make(f, 100, 0xdd, 1);        /* dropped */
    guest_send(f, 100, 1);
    ck_assert_int_eq(used_wait(Q_TX, &head, &len, 2000), 1);
    ck_assert_int_eq(peer_recv(g, sizeof g, 100), -1);
    frame_make(f, 100, 0x10, 2);        /* for the device: it answers */
    guest_send(f, 100, 1);
    ck_assert_int_eq(used_wait(Q_RX, &head, &len, 2000), 1);
    ck_assert_uint_eq(len, 12 + 100);
    const uint8_t *b = R.ram + RXBUF + head * 0x10000u;
    ck_assert_uint_eq(rd16(RXBUF + head * 0x10000u + 10), 1);   /* num_buffers */
    ck_assert_uint_eq(b[12 + 14], 0x11);
    ck_assert(memcmp(b + 12, f, 14) == 0);
    ck_assert_int_eq(peer_recv(g, sizeof g, 100), -1);         /* the backend saw neither */
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.tx_dropped, 1);
    ck_assert_uint_eq(st.tx_local, 1);
    ck_assert_uint_eq(st.tx_frames, 0);
    ck_assert_uint_eq(st.rx_frames, 1);
    ck_assert_uint_eq(atomic_load(&seen_rx), 1);
    rig_teardown();
}
END_TEST

START_TEST(rx_frames_reach_the_guest)
{
    rig_setup();
    rig_start(F_BASE | F_MRG, 2048, 32);
    static uint8_t f[70000];
    uint16_t head;
    uint32_t len;
    /* one buffer */
    frame_make(f, 600, 0x45, 3);
    ck_assert_int_eq(send(R.peer, f, 600, 0), 600);
    ck_assert_int_eq(used_wait(Q_RX, &head, &len, 2000), 1);
    ck_assert_uint_eq(len, 612);
    ck_assert_uint_eq(rd16(RXBUF + head * 0x10000u + 10), 1);
    ck_assert(memcmp(R.ram + RXBUF + head * 0x10000u + 12, f, 600) == 0);
    /* mergeable: 5000 bytes over 3 buffers of 2048, num_buffers = 3 */
    frame_make(f, 5000, 0x45, 4);
    ck_assert_int_eq(send(R.peer, f, 5000, 0), 5000);
    static uint8_t got[70000];
    size_t off = 0;
    uint16_t first = 0;
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(used_wait(Q_RX, &head, &len, 2000), 1);
        const uint8_t *b = R.ram + RXBUF + head * 0x10000u;
        if (k == 0) {
            first = head;
            ck_assert_uint_eq(len, 2048);
            memcpy(got, b + 12, len - 12);
            off = len - 12;
        } else {
            memcpy(got + off, b, len);
            off += len;
        }
    }
    ck_assert_uint_eq(rd16(RXBUF + first * 0x10000u + 10), 3);
    ck_assert_uint_eq(off, 5000);
    ck_assert(memcmp(got, f, 5000) == 0);
    /* a 64 KiB frame over 33 buffers: more than are posted (32, less the 4
     * used): it waits, then goes once the guest posts more */
    frame_make(f, 65000, 0x45, 5);
    ck_assert_int_eq(send(R.peer, f, 65000, 0), 65000);
    usleep(100000);
    ck_assert_int_eq(used_wait(Q_RX, &head, &len, 100), 0);
    for (uint16_t i = 32; i < 64; i++)
        rx_post(i);
    kick(Q_RX);
    unsigned n = 0;
    off = 0;
    while (off < 65012 && used_wait(Q_RX, &head, &len, 2000) == 1) {
        off += len;
        n++;
    }
    ck_assert_uint_eq(off, 65012);
    ck_assert_uint_eq(n, 32);
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.rx_frames, 3);
    ck_assert_uint_eq(st.rx_dropped, 0);
    rig_teardown();
}
END_TEST

/* Without mergeable buffers a frame must fit one buffer: a larger one is
 * dropped and counted, and the next frame still arrives. */
START_TEST(rx_too_large_without_mergeable)
{
    rig_setup();
    rig_start(F_BASE, 1526, 8);
    static uint8_t f[4000];
    uint16_t head;
    uint32_t len;
    frame_make(f, 3000, 0x45, 6);
    ck_assert_int_eq(send(R.peer, f, 3000, 0), 3000);
    ck_assert_int_eq(used_wait(Q_RX, &head, &len, 2000), 1);
    ck_assert_uint_eq(len, 0);                      /* the buffer back, empty */
    frame_make(f, 1000, 0x45, 7);
    ck_assert_int_eq(send(R.peer, f, 1000, 0), 1000);
    ck_assert_int_eq(used_wait(Q_RX, &head, &len, 2000), 1);
    ck_assert_uint_eq(len, 1012);
    ck_assert(memcmp(R.ram + RXBUF + head * 0x10000u + 12, f, 1000) == 0);
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.rx_dropped, 1);
    ck_assert_uint_eq(st.rx_frames, 1);
    rig_teardown();
}
END_TEST

/* Hostile chains: too short for a header and an Ethernet header, longer
 * than any frame, with a device-writable buffer, a descriptor loop, a
 * buffer outside RAM; each is counted and handed back, and a good frame
 * after them still goes out. */
START_TEST(malformed_tx_chains)
{
    rig_setup();
    rig_start(F_BASE | F_MRG, 2048, 8);
    uint16_t head;
    uint32_t len;
    put_desc(Q_TX, 0, TXBUF, 20, 0, 0);                                 /* 12 + 8 bytes */
    put_desc(Q_TX, 1, TXBUF, 70000, VIRTQ_DESC_F_NEXT, 2);                 /* 70000 + 70000 */
    put_desc(Q_TX, 2, TXBUF, 70000, 0, 0);
    put_desc(Q_TX, 3, TXBUF, 100, VIRTQ_DESC_F_NEXT, 4);
    put_desc(Q_TX, 4, TXBUF + 200, 100, VIRTQ_DESC_F_WRITE, 0);            /* writable */
    put_desc(Q_TX, 5, TXBUF, 100, VIRTQ_DESC_F_NEXT, 6);
    put_desc(Q_TX, 6, TXBUF, 100, VIRTQ_DESC_F_NEXT, 5);                   /* a loop */
    put_desc(Q_TX, 7, MEM_SIZE - 10, 100, 0, 0);                           /* out of RAM */
    for (uint16_t h = 0; h < 8; h++)
        if (h != 2 && h != 4 && h != 6)
            make_avail(Q_TX, h);
    kick(Q_TX);
    for (int k = 0; k < 5; k++) {
        ck_assert_int_eq(used_wait(Q_TX, &head, &len, 2000), 1);
        ck_assert_uint_eq(len, 0);
    }
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.tx_bad, 5);
    ck_assert_uint_eq(st.tx_frames, 0);
    static uint8_t f[200], g[70000];
    frame_make(f, 64, 0x45, 8);
    tx_head = 1;
    guest_send(f, 64, 1);
    ck_assert_int_eq(peer_recv(g, sizeof g, 2000), 64);
    ck_assert(memcmp(f, g, 64) == 0);
    rig_teardown();
}
END_TEST

/* Receive chains that are not writable, or too small for the header, are
 * handed back empty and counted; the frame goes to the next good one. */
START_TEST(malformed_rx_chains)
{
    rig_setup();
    R.rxlen = 2048;
    put_desc(Q_RX, 0, RXBUF, 100, 0, 0);                        /* device-readable */
    make_avail(Q_RX, 0);
    put_desc(Q_RX, 1, RXBUF + 0x10000u, 8, VIRTQ_DESC_F_WRITE, 0);   /* smaller than a header */
    make_avail(Q_RX, 1);
    rx_post(2);
    rig_start(F_BASE | F_MRG, 2048, 0);
    static uint8_t f[300];
    frame_make(f, 300, 0x45, 9);
    ck_assert_int_eq(send(R.peer, f, 300, 0), 300);
    uint16_t head;
    uint32_t len;
    /* the frame first (Linux takes num_buffers entries after it), then the bad ones */
    ck_assert_int_eq(used_wait(Q_RX, &head, &len, 2000), 1);
    ck_assert_uint_eq(head, 2);
    ck_assert_uint_eq(len, 312);
    ck_assert_int_eq(used_wait(Q_RX, &head, &len, 2000), 1);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(used_wait(Q_RX, &head, &len, 2000), 1);
    ck_assert_uint_eq(len, 0);
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.rx_bad, 2);
    ck_assert_uint_eq(st.rx_frames, 1);
    rig_teardown();
}
END_TEST

/* A backend that cannot take a frame holds the queue (no frame lost while
 * it runs); stop() drops the held frame so nothing is in flight. */
START_TEST(backpressure_and_stop)
{
    rig_setup();
    rig_start(F_BASE | F_MRG, 2048, 8);
    atomic_store(&R.be->full, true);
    static uint8_t f[200], g[70000];
    frame_make(f, 100, 0x45, 10);
    guest_send(f, 100, 1);
    frame_make(f, 100, 0x46, 11);
    guest_send(f, 100, 1);
    usleep(100000);
    ck_assert_uint_eq(atomic_load(&R.be->sent), 0);
    virtio_net_ops.stop(R.dev);
    ck_assert_uint_eq(R.q[Q_TX].inflight, 0);
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.tx_backend_errors, 1);     /* the held one */
    atomic_store(&R.be->full, false);
    ck_assert_int_eq(virtio_net_ops.start(R.dev, &R.env), 0);
    ck_assert_int_eq(peer_recv(g, sizeof g, 2000), 100);   /* the second one */
    ck_assert_uint_eq(g[14], 0x46);
    rig_teardown();
}
END_TEST

START_TEST(config_space)
{
    rig_setup();
    uint8_t c[12];
    virtio_net_ops.config_read(R.dev, 0, c, 12);
    static const uint8_t mac[6] = { 0x52, 0x54, 0, 0x12, 0x34, 0x56 };
    ck_assert(memcmp(c, mac, 6) == 0);
    ck_assert_uint_eq(c[6] | c[7] << 8, VIRTIO_NET_S_LINK_UP);
    ck_assert_uint_eq(c[8] | c[9] << 8, 1);
    ck_assert_uint_eq(c[10] | c[11] << 8, 1500);
    virtio_net_set_link(R.dev, false);
    virtio_net_ops.config_read(R.dev, 6, c, 2);
    ck_assert_uint_eq(c[0] | c[1] << 8, 0);
    virtio_net_ops.config_read(R.dev, 10, c, 4);       /* past the end reads 0 */
    ck_assert_uint_eq(c[2], 0);
    uint64_t f = virtio_net_ops.features(R.dev);
    ck_assert(f & (1ull << VIRTIO_NET_F_MAC));
    ck_assert(f & (1ull << VIRTIO_NET_F_MTU));
    ck_assert(f & (1ull << VIRTIO_NET_F_MRG_RXBUF));
    ck_assert(!(f & (1ull << VIRTIO_NET_F_CSUM)));   /* no vnet header: no offloads */
    rig_teardown();
}
END_TEST

/* The default gateways in /proc/net/route's text (the passt backend's
 * DHCP server for the egress policy): destination and mask 0 with
 * RTF_GATEWAY; other rows, duplicates and malformed rows skipped. */
START_TEST(route_gateways)
{
    static const char text[] =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t00000000\t025B0A0A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"       /* via 10.10.91.2 */
        "eth0\t005B0A0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"       /* on-link /24 */
        "eth1\t00000000\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0\n"       /* default, no gateway */
        "eth2\t00000000\t0102A8C0\t0001\t0\t0\t0\t00000000\t0\t0\t0\n"       /* no RTF_GATEWAY */
        "eth0\t00000000\t025B0A0A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"     /* the same again */
        "eth3\tzz\t0102A8C0\t0003\n"                                                /* malformed */
        "eth4\t00000000\t0164A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0";         /* 192.168.100.1, no newline */
    uint32_t g[4];
    ck_assert_uint_eq(net_route_gateways(text, g, 4), 2);
    ck_assert_uint_eq(g[0], 0x0a0a5b02);
    ck_assert_uint_eq(g[1], 0xc0a86401);
    ck_assert_uint_eq(net_route_gateways(text, g, 1), 1);
    ck_assert_uint_eq(net_route_gateways("", g, 4), 0);
    ck_assert_uint_eq(net_route_gateways("Iface\tDestination\n", g, 4), 0);
}
END_TEST

START_TEST(mac_parse)
{
    uint8_t m[6];
    ck_assert_int_eq(net_parse_mac("52:54:00:AB:cd:ef", m), 0);
    ck_assert_uint_eq(m[3], 0xab);
    ck_assert_uint_eq(m[5], 0xef);
    static const char *bad[] = { "", "52:54:00:ab:cd", "52:54:00:ab:cd:ef:00", "52-54-00-ab-cd-ef", "5g:54:00:ab:cd:ef",
                                 "01:00:5e:00:00:01", "00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff", NULL };
    for (int i = 0; bad[i]; i++)
        ck_assert_msg(net_parse_mac(bad[i], m) == -EINVAL, "%s", bad[i]);
    ck_assert_int_eq(net_parse_mac(NULL, m), -EINVAL);
    uint8_t a[6], b[6];
    net_random_mac(a);
    net_random_mac(b);
    ck_assert_uint_eq(a[0] & 3, 2);                     /* local, unicast */
    ck_assert(memcmp(a, b, 6) != 0);
    char s[18];
    net_format_mac(a, s);
    ck_assert_int_eq(net_parse_mac(s, b), 0);
    ck_assert(memcmp(a, b, 6) == 0);
}
END_TEST

/* Bytes the peer receives in [from_ms, to_ms) after t0 while the guest
 * keeps 8 frames of len bytes in flight. */
static double tx_rate(unsigned len, unsigned from_ms, unsigned to_ms)
{
    static uint8_t f[9000], g[70000];
    frame_make(f, len, 0x45, 1);
    uint64_t t0 = ms_now(), bytes = 0;
    static unsigned outstanding;    /* across calls: chains the device still has */
    for (;;) {
        uint64_t t = ms_now() - t0;
        if (t >= to_ms)
            break;
        while (outstanding < 8) {
            guest_send(f, len, 1);
            outstanding++;
        }
        uint16_t head;
        uint32_t ulen;
        while (used_wait(Q_TX, &head, &ulen, 0) == 1)
            outstanding--;
        ssize_t n;
        while ((n = recv(R.peer, g, sizeof g, MSG_DONTWAIT)) > 0)
            if (ms_now() - t0 >= from_ms)
                bytes += (uint64_t)n;
        usleep(200);
    }
    return (double)bytes * 1000.0 / (double)(to_ms - from_ms);
}

/* TX limited to 1 MB/s (100000 bytes a 100 ms): over 5 s the rate is
 * within 10 % of it, and the limiter said wait. */
START_TEST(tx_rate_limit)
{
    static const struct ratelimit_cfg lim = { .bandwidth = { .size = 100000, .refill_time_ms = 100 } };
    setup_tx_limit = &lim;
    tx_head = 0;
    rig_setup();
    setup_tx_limit = NULL;
    rig_start(F_BASE | F_MRG, 2048, 8);
    /* 8000-byte frames, 8 in flight: 64 ms of traffic queued, so a test
     * thread that a loaded machine holds up for a while still keeps the
     * limiter, not itself, the bottleneck */
    double rate = tx_rate(8000, 0, 5000) - 100000.0 / 5.0;   /* less the bucket's first fill */
    fprintf(stderr, "tx_rate_limit: %.0f bytes/s (limit 1000000)\n", rate);
    ck_assert_msg(rate > 900000 && rate < 1100000, "rate %.0f", rate);
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_gt(st.tx_throttled, 0);
    /* changed at run time: 4 MB/s */
    static const struct ratelimit_cfg fast = { .bandwidth = { .size = 400000, .refill_time_ms = 100 } };
    ck_assert_int_eq(virtio_net_set_limit(R.dev, true, &fast), 0);
    rate = tx_rate(8000, 500, 2500);
    fprintf(stderr, "tx_rate_limit after the change: %.0f bytes/s (limit 4000000)\n", rate);
    ck_assert_msg(rate > 3600000 && rate < 4400000, "rate %.0f", rate);
    rig_teardown();
}
END_TEST

/* RX limited to 500 kB/s: what the guest receives over 2 s (after the
 * first fill) is within 10 % of it; nothing is dropped meanwhile. */
START_TEST(rx_rate_limit)
{
    static const struct ratelimit_cfg lim = { .bandwidth = { .size = 50000, .refill_time_ms = 100 } };
    setup_rx_limit = &lim;
    rig_setup();
    setup_rx_limit = NULL;
    rig_start(F_BASE | F_MRG, 2048, 64);
    static uint8_t f[2048];
    frame_make(f, 1000, 0x45, 2);
    uint64_t t0 = ms_now(), bytes = 0, sent = 0, got = 0;
    while (ms_now() - t0 < 2500) {
        while (send(R.peer, f, 1000, MSG_DONTWAIT) == 1000)
            sent++;
        uint16_t head;
        uint32_t len;
        while (used_wait(Q_RX, &head, &len, 0) == 1) {
            got++;
            if (ms_now() - t0 >= 500)
                bytes += len - 12;
            rx_post(head);
        }
        kick(Q_RX);
        usleep(1000);
    }
    double rate = (double)bytes / 2.0;
    fprintf(stderr, "rx_rate_limit: %.0f bytes/s (limit 500000), %llu frames sent, %llu received\n", rate,
            (unsigned long long)sent, (unsigned long long)got);
    ck_assert_msg(rate > 450000 && rate < 550000, "rate %.0f", rate);
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.rx_dropped, 0);
    ck_assert_uint_gt(st.rx_throttled, 0);
    rig_teardown();
}
END_TEST

START_TEST(bucket_option_parse)
{
    struct ratelimit_bucket_cfg b;
    ck_assert_int_eq(ratelimit_bucket_parse("1048576/100", &b), 0);
    ck_assert_uint_eq(b.size, 1048576);
    ck_assert_uint_eq(b.refill_time_ms, 100);
    ck_assert_uint_eq(b.one_time_burst, 0);
    ck_assert_int_eq(ratelimit_bucket_parse("10/1/5000", &b), 0);
    ck_assert_uint_eq(b.one_time_burst, 5000);
    static const char *bad[] = { "", "10", "10/", "/10", "0/10", "10/0", "10/10/", "10/10/5/1", "a/10", "10/-1",
                                 "18446744073709551616/1", "1/1099511627777", " 10/10", NULL };
    for (int i = 0; bad[i]; i++)
        ck_assert_msg(ratelimit_bucket_parse(bad[i], &b) == -EINVAL, "%s", bad[i]);
    ck_assert_int_eq(ratelimit_bucket_parse(NULL, &b), -EINVAL);
    /* two options into a limiter, and one bucket changed at run time */
    struct ratelimit_cfg c;
    int lim = -1, which = -1;
    ck_assert_int_eq(ratelimit_from_opts(NULL, NULL, &c, &lim, &which), 0);
    ck_assert_int_eq(lim, 0);
    ck_assert_uint_eq(c.bandwidth.size, 0);
    ck_assert_int_eq(ratelimit_from_opts(NULL, "5/10", &c, &lim, &which), 0);
    ck_assert_int_eq(lim, 1);
    ck_assert_uint_eq(c.ops.size, 5);
    ck_assert_uint_eq(c.bandwidth.size, 0);
    ck_assert_int_eq(ratelimit_from_opts("1000/10", "x", &c, &lim, &which), -EINVAL);
    ck_assert_int_eq(which, 1);
    ck_assert_int_eq(ratelimit_from_opts("10", NULL, &c, &lim, &which), -EINVAL);
    ck_assert_int_eq(which, 0);
    ck_assert_int_eq(ratelimit_from_opts("1000/10", "5/10/20", &c, &lim, &which), 0);
    ck_assert_uint_eq(c.ops.one_time_burst, 20);
    ck_assert_int_eq(ratelimit_set_bucket(&c, 0, "off"), 0);
    ck_assert_uint_eq(c.bandwidth.size, 0);
    ck_assert_uint_eq(c.ops.size, 5);                   /* the other kept */
    ck_assert_int_eq(ratelimit_set_bucket(&c, 1, "7/1"), 0);
    ck_assert_uint_eq(c.ops.size, 7);
    ck_assert_int_eq(ratelimit_set_bucket(&c, 1, "fast"), -EINVAL);
    ck_assert_uint_eq(c.ops.size, 7);                   /* unchanged */
    ck_assert_int_eq(ratelimit_set_bucket(&c, 1, NULL), -EINVAL);
    /* the same with the options' names: the bad one named in the message */
    char why[120] = "";
    ck_assert_int_eq(ratelimit_from_named_opts("tx_bw", "1000/10", "tx_ops", "5/0", &c, &lim, why, sizeof why),
                     -EINVAL);
    ck_assert_str_eq(why, "tx_ops=5/0: SIZE/REFILL_MS[/BURST], each a positive number");
    ck_assert_int_eq(ratelimit_from_named_opts("bw", "x", "ops", NULL, &c, &lim, why, sizeof why), -EINVAL);
    ck_assert_str_eq(why, "bw=x: SIZE/REFILL_MS[/BURST], each a positive number");
    ck_assert_int_eq(ratelimit_from_named_opts("bw", "100/10", "ops", NULL, &c, &lim, why, sizeof why), 0);
    ck_assert_int_eq(lim, 1);
    ck_assert_uint_eq(c.bandwidth.size, 100);
}
END_TEST

/* Served over vhost-user (moat device net), the rings are as large as
 * QEMU's virtio-mmio says (QueueNumMax 1024, which Linux uses): a kind
 * limited to the device's own 256 had its rings refused ("vring 0 size
 * 1024 above the device maximum 256") and passed no frame. */
START_TEST(kind_takes_qemu_rings)
{
    ck_assert_uint_ge(net_kind.vhost_user_queue_max, 1024);
    ck_assert_uint_eq(net_kind.vhost_user_nqueues, 2);     /* rx and tx both the backend's, both needed */
    struct virtq q;
    ck_assert_int_eq(virtq_init(&q, net_kind.vhost_user_queue_max), 0);
}
END_TEST

/* More chains made available at once than the device takes in one pass
 * (TX_BATCH, 256), with VIRTIO_F_EVENT_IDX and a single kick, as Linux's
 * virtio_net does on a ring of 1024: the driver kicks only when its index
 * passes the avail_event the device wrote when it last found the ring
 * empty, so no kick comes for the rest. The device must come back for
 * them by itself; it used to take 256 and stop until some other event
 * (a frame from the backend) woke it: under QEMU TCG an iperf3 stream
 * stalled for 6 s at a time (bench/net.sh). */
#define BIGQ      512u
#define BIGQ_BASE 0x500000u         /* desc, avail at +0x2000, used at +0x3000 */
#define BIGQ_BUF  0x600000u         /* 256 bytes per chain */
START_TEST(tx_more_than_a_batch_one_kick)
{
    rig_setup();
    const uint64_t feat = F_BASE | F_MRG | 1ull << VIRTIO_F_EVENT_IDX;
    const unsigned nframes = 300;
    struct virtq *tq = &R.q[Q_TX];
    ck_assert_int_eq(virtq_init(&R.q[Q_RX], QSIZE), 0);
    R.q[Q_RX].desc = QBASE(Q_RX);
    R.q[Q_RX].avail = QBASE(Q_RX) + 0x1000;
    R.q[Q_RX].used = QBASE(Q_RX) + 0x2000;
    ck_assert_int_eq(virtq_init(tq, BIGQ), 0);
    tq->desc = BIGQ_BASE;
    tq->avail = BIGQ_BASE + 0x2000;
    tq->used = BIGQ_BASE + 0x3000;
    for (unsigned q = 0; q < 2; q++) {
        virtq_set_features(&R.q[q], feat);
        ck_assert_int_eq(virtq_enable(&R.q[q], &R.mem), 0);
    }
    R.env.features = feat;
    R.rxlen = 2048;
    for (uint16_t i = 0; i < 8; i++)
        rx_post(i);
    ck_assert_int_eq(virtio_net_ops.start(R.dev, &R.env), 0);

    atomic_store(&R.be->sink, true);
    usleep(100000);     /* the I/O thread's first pass has found the ring empty */
    /* all the chains first, then one kick */
    static uint8_t f[100];
    for (unsigned i = 0; i < nframes; i++) {
        uint64_t buf = BIGQ_BUF + 256ull * i;
        memset(R.ram + buf, 0, 12);
        frame_make(f, 100, 0x45, i);
        memcpy(R.ram + buf + 12, f, 100);
        uint8_t *d = R.ram + BIGQ_BASE + 16u * i;
        uint32_t len = 112;
        uint16_t zero = 0;
        memcpy(d, &buf, 8); memcpy(d + 8, &len, 4); memcpy(d + 12, &zero, 2); memcpy(d + 14, &zero, 2);
        wr16(tq->avail + 4 + 2u * i, (uint16_t)i);
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
    wr16(tq->avail + 2, (uint16_t)nframes);
    kick(Q_TX);

    uint64_t end = ms_now() + 3000;
    while ((atomic_load(&R.be->sent) < nframes || rd16(tq->used + 2) != nframes) && ms_now() < end)
        usleep(200);
    ck_assert_msg(atomic_load(&R.be->sent) == nframes, "%u of %u frames reached the backend after one kick",
                  atomic_load(&R.be->sent), nframes);
    ck_assert_uint_eq(atomic_load(&R.be->sink_match), nframes);    /* each one whole, in order */
    ck_assert_uint_eq(rd16(tq->used + 2), nframes);
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.tx_frames, nframes);
    rig_teardown();
}
END_TEST

/* The TAP backend (net_tap_from_fd) on the pair: its frames carry the
 * virtio-net header. The guest's header reaches the peer as given, the
 * peer's reaches the guest; 200 frames each way keep their order; frames
 * the peer sends while the device is stopped arrive after start. */
START_TEST(tap_backend_both_ways)
{
    use_tap = true;
    rig_setup();
    use_tap = false;
    rig_start(F_BASE | F_MRG | F_CSUM, 2048, 32);
    static uint8_t f[2000], g[4000];
    uint16_t head;
    uint32_t len;
    /* out: a header with NEEDS_CSUM, as the driver writes it */
    for (unsigned i = 0; i < 200; i++) {
        uint8_t *buf = R.ram + TXBUF + (tx_head % 8) * 0x20000u;
        frame_tcp4(f, 300, i);
        memset(buf, 0, 12);
        buf[0] = 1;                                     /* VIRTIO_NET_HDR_F_NEEDS_CSUM */
        buf[6] = 34;                                    /* csum_start */
        buf[8] = 16;                                    /* csum_offset */
        memcpy(buf + 12, f, 300);
        put_desc(Q_TX, (uint16_t)((tx_head % 8) * 8), TXBUF + (tx_head % 8) * 0x20000u, 312, 0, 0);
        make_avail(Q_TX, (uint16_t)((tx_head % 8) * 8));
        tx_head++;
        kick(Q_TX);
        ck_assert_int_eq(peer_recv(g, sizeof g, 2000), 312);
        ck_assert_uint_eq(g[0], 1);
        ck_assert_uint_eq(g[6], 34);
        ck_assert_uint_eq(g[8], 16);
        ck_assert(memcmp(g + 12, f, 300) == 0);
        ck_assert_int_eq(used_wait(Q_TX, &head, &len, 2000), 1);
    }
    /* in: 200 frames (a header with DATA_VALID), the guest reposting buffers */
    for (unsigned i = 0; i < 200; i++) {
        memset(g, 0, 12);
        g[0] = 2;                                       /* VIRTIO_NET_HDR_F_DATA_VALID */
        frame_make(g + 12, 700, 0x45, i);
        ck_assert_int_eq(send(R.peer, g, 712, 0), 712);
        ck_assert_int_eq(used_wait(Q_RX, &head, &len, 2000), 1);
        ck_assert_uint_eq(len, 712);
        const uint8_t *b = R.ram + RXBUF + head * 0x10000u;
        ck_assert_uint_eq(b[0], 2);
        ck_assert_uint_eq(rd16(RXBUF + head * 0x10000u + 10), 1);
        ck_assert(memcmp(b + 12, g + 12, 700) == 0);
        rx_post(head);
        kick(Q_RX);
    }
    /* stopped: the peer's frames wait, and arrive in order after start */
    virtio_net_ops.stop(R.dev);
    for (unsigned i = 0; i < 3; i++) {
        memset(g, 0, 12);
        frame_make(g + 12, 100, 0x47, i);
        ck_assert_int_eq(send(R.peer, g, 112, 0), 112);
    }
    usleep(50000);
    ck_assert_int_eq(used_wait(Q_RX, &head, &len, 50), 0);
    ck_assert_int_eq(virtio_net_ops.start(R.dev, &R.env), 0);
    for (unsigned i = 0; i < 3; i++) {
        ck_assert_int_eq(used_wait(Q_RX, &head, &len, 2000), 1);
        ck_assert_uint_eq(len, 112);
        frame_make(f, 100, 0x47, i);
        ck_assert(memcmp(R.ram + RXBUF + head * 0x10000u + 12, f, 100) == 0);
    }
    struct virtio_net_stats st;
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.tx_frames, 200);
    ck_assert_uint_eq(st.rx_frames, 203);
    ck_assert_uint_eq(st.tx_backend_errors, 0);
    ck_assert_uint_eq(st.backend_failed, 0);
    /* the peer goes away: the backend failed, said once */
    close(R.peer);
    R.peer = -1;
    for (int k = 0; k < 100 && !st.backend_failed; k++) {
        usleep(20000);
        kick(Q_RX);
        virtio_net_get_stats(R.dev, &st);
    }
    ck_assert_uint_eq(st.backend_failed, 1);
    rig_teardown();
}
END_TEST

/* The virtio-net header must agree with the frame before the frame goes
 * anywhere (net_vhdr_check): through the TAP backend's code, a right
 * NEEDS_CSUM / TSO header goes on (the fields it does not use zero, hdr_len
 * the parsed header length for TSO); csum_start at the destination address,
 * DATA_VALID, a wrong csum_offset, TSO not negotiated, hdr_len past the frame:
 * dropped, counted in tx_bad_offload, the chain handed back. */
static void send_with_hdr(const uint8_t *hdr, const uint8_t *f, size_t len)
{
    uint8_t *buf = R.ram + TXBUF + (tx_head % 8) * 0x20000u;
    memcpy(buf, hdr, 12);
    memcpy(buf + 12, f, len);
    put_desc(Q_TX, (uint16_t)((tx_head % 8) * 8), TXBUF + (tx_head % 8) * 0x20000u, (uint32_t)(12 + len), 0, 0);
    make_avail(Q_TX, (uint16_t)((tx_head % 8) * 8));
    tx_head++;
    kick(Q_TX);
}

START_TEST(tx_offload_header_checked)
{
    use_tap = true;
    rig_setup();
    use_tap = false;
    rig_start(F_BASE | F_MRG | F_CSUM | F_TSO4, 2048, 8);
    static uint8_t f[4000], g[5000];
    uint16_t head;
    uint32_t len;
    frame_tcp4(f, 3000, 1);
    /* flags, gso_type, hdr_len, gso_size, csum_start, csum_offset, num_buffers (little endian) */
    static const uint8_t good[][12] = {
        { 1, 0, 0, 0, 0, 0, 34, 0, 16, 0, 0x5a, 0x5a },         /* NEEDS_CSUM */
        { 1, 1, 0x36, 0, 0xb4, 5, 34, 0, 16, 0, 0, 0 },         /* TSO4, MSS 1460, hdr_len 54 */
        { 1, 1, 0, 0, 0xb4, 5, 34, 0, 16, 0, 0, 0 },            /* hdr_len 0: the device's 54 */
        { 0, 0, 0xff, 0, 7, 0, 30, 0, 2, 0, 1, 0 },             /* nothing asked: fields unused */
    };
    static const uint8_t want[][12] = {
        { 1, 0, 0, 0, 0, 0, 34, 0, 16, 0, 0, 0 },
        { 1, 1, 0x36, 0, 0xb4, 5, 34, 0, 16, 0, 0, 0 },
        { 1, 1, 0x36, 0, 0xb4, 5, 34, 0, 16, 0, 0, 0 },
        { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    };
    atomic_store(&tx_parsed, 0);
    atomic_store(&tx_parsed_wrong, 0);
    for (unsigned i = 0; i < 4; i++) {
        send_with_hdr(good[i], f, 3000);
        ck_assert_int_eq(peer_recv(g, sizeof g, 2000), 3012);
        ck_assert_msg(memcmp(g, want[i], 12) == 0, "header %u handed on as %02x %02x %02x%02x %02x%02x %02x%02x %02x%02x",
                      i, g[0], g[1], g[3], g[2], g[5], g[4], g[7], g[6], g[9], g[8]);
        ck_assert(memcmp(g + 12, f, 3000) == 0);
        ck_assert_int_eq(used_wait(Q_TX, &head, &len, 2000), 1);
    }
    /* the three with an offload were parsed once, by the device, and the
     * filter was given that parse; the fourth parses in the filter */
    ck_assert_uint_eq(atomic_load(&tx_parsed), 3);
    ck_assert_uint_eq(atomic_load(&tx_parsed_wrong), 0);
    static const uint8_t bad[][12] = {
        { 1, 0, 0, 0, 0, 0, 30, 0, 0, 0, 0, 0 },                /* csum_start: the destination address */
        { 1, 0, 0, 0, 0, 0, 36, 0, 0, 0, 0, 0 },                /* ... the destination port */
        { 1, 0, 0, 0, 0, 0, 34, 0, 6, 0, 0, 0 },                /* csum_offset: UDP's on TCP */
        { 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },                 /* DATA_VALID */
        { 1, 4, 0, 0, 0xb4, 5, 34, 0, 16, 0, 0, 0 },            /* TSO6: not negotiated (nor IPv6) */
        { 1, 0x81, 0, 0, 0xb4, 5, 34, 0, 16, 0, 0, 0 },         /* TSO4 with ECN */
        { 1, 1, 0, 0, 0, 0, 34, 0, 16, 0, 0, 0 },               /* gso_size 0 */
        { 1, 1, 0, 0, 1, 0, 34, 0, 16, 0, 0, 0 },               /* gso_size 1: 2960 segments */
        { 0, 0, 0xc5, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0 },           /* hdr_len 3013 */
    };
    struct virtio_net_stats st;
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        send_with_hdr(bad[i], f, 3000);
        ck_assert_int_eq(used_wait(Q_TX, &head, &len, 2000), 1);
        ck_assert_uint_eq(len, 0);
        ck_assert_msg(peer_recv(g, sizeof g, 50) == -1, "bad header %u went on", i);
        virtio_net_get_stats(R.dev, &st);
        ck_assert_uint_eq(st.tx_bad_offload, i + 1);
    }
    /* without VIRTIO_NET_F_CSUM negotiated, NEEDS_CSUM is refused too */
    virtio_net_ops.stop(R.dev);
    R.env.features = F_BASE | F_MRG;
    ck_assert_int_eq(virtio_net_ops.start(R.dev, &R.env), 0);
    send_with_hdr(good[0], f, 3000);
    ck_assert_int_eq(used_wait(Q_TX, &head, &len, 2000), 1);
    ck_assert_int_eq(peer_recv(g, sizeof g, 50), -1);
    virtio_net_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.tx_bad_offload, sizeof bad / sizeof bad[0] + 1);
    ck_assert_uint_eq(st.tx_frames, 4);
    ck_assert_uint_eq(st.tx_bad, 0);
    ck_assert_uint_eq(st.tx_dropped, 0);
    rig_teardown();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("virtio_net");
    TCase *tc = tcase_create("net");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, tx_frames_reach_the_backend);
    tcase_add_test(tc, filter_drops_and_local_answers);
    tcase_add_test(tc, rx_frames_reach_the_guest);
    tcase_add_test(tc, rx_too_large_without_mergeable);
    tcase_add_test(tc, malformed_tx_chains);
    tcase_add_test(tc, malformed_rx_chains);
    tcase_add_test(tc, backpressure_and_stop);
    tcase_add_test(tc, config_space);
    tcase_add_test(tc, mac_parse);
    tcase_add_test(tc, tx_rate_limit);
    tcase_add_test(tc, rx_rate_limit);
    tcase_add_test(tc, bucket_option_parse);
    tcase_add_test(tc, kind_takes_qemu_rings);
    tcase_add_test(tc, tx_more_than_a_batch_one_kick);
    tcase_add_test(tc, tap_backend_both_ways);
    tcase_add_test(tc, tx_offload_header_checked);
    tcase_add_test(tc, route_gateways);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
