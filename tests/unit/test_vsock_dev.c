/* virtio-vsock device driven through real virtqueues in fake guest memory
 * (a tiny polling driver in this file), with real AF_UNIX sockets on the
 * host side: Firecracker's hybrid-vsock handshake byte for byte, guest-
 * initiated connections to <uds>_<port>, timeouts, resets, credit. */
#include <check.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devices/virtio/virtq.h"
#include "devices/vsock/vsock.h"
#include "devices/vsock/vsock_pkt.h"
#include "vmm/base/gmem.h"

#define MEM_SIZE (8u << 20)
#define QSIZE    64u
#define QBASE(q) (0x1000u + (q) * 0x3000u)
#define RXBUF    0x100000u
#define RXLEN    4096u
#define TXBUF    0x200000u
#define GCID     3u

struct rig {
    uint8_t *ram;
    struct gmem mem;
    struct virtq q[3];
    struct virtio_dev_env env;
    struct vsock_dev *dev;
    uint16_t avail[3], used_seen[3];
    char path[80];
};

static struct rig R;

static void on_notify(void *o, unsigned q) { (void)o; (void)q; }

static void wr16(uint64_t gpa, uint16_t v) { memcpy(R.ram + gpa, &v, 2); }
static uint32_t rd32(uint64_t gpa) { uint32_t v; memcpy(&v, R.ram + gpa, 4); return v; }

static void put_desc(unsigned q, uint16_t i, uint64_t addr, uint32_t len, uint16_t flags)
{
    uint8_t *d = R.ram + QBASE(q) + 16u * i;
    memcpy(d, &addr, 8); memcpy(d + 8, &len, 4); memcpy(d + 12, &flags, 2);
    memset(d + 14, 0, 2);
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
    put_desc(0, i, RXBUF + i * 0x2000u, RXLEN, VIRTQ_DESC_F_WRITE);
    make_avail(0, i);
}

static void rig_setup(void)
{
    memset(&R, 0, sizeof R);
    R.ram = calloc(1, MEM_SIZE);
    R.mem.n = 1;
    R.mem.r[0] = (struct gmem_region){ 0, MEM_SIZE, R.ram };
    snprintf(R.path, sizeof R.path, "/tmp/moat-vsock-%d.sock", (int)getpid());
    char why[200];
    struct vsock_opts o = { .uds_path = R.path, .guest_cid = GCID, .name = "vstest" };
    ck_assert_msg(vsock_create(&o, &R.dev, why, sizeof why) == 0, "%s", why);
    for (unsigned q = 0; q < 3; q++) {
        ck_assert_int_eq(virtq_init(&R.q[q], QSIZE), 0);
        R.q[q].desc = QBASE(q);
        R.q[q].avail = QBASE(q) + 0x1000;
        R.q[q].used = QBASE(q) + 0x2000;
        ck_assert_int_eq(virtq_enable(&R.q[q], &R.mem), 0);
        R.env.kick_fd[q] = eventfd(0, EFD_CLOEXEC);   /* blocking, as the transport's */
    }
    R.env.mem = &R.mem;
    R.env.queues = R.q;
    R.env.nqueues = 3;
    R.env.notify_used = on_notify;
    R.env.opaque = &R;
    for (uint16_t i = 0; i < 32; i++)
        rx_post(i);
    ck_assert_int_eq(vsock_ops.start(R.dev, &R.env), 0);
    kick(0);
}

static void rig_teardown(void)
{
    vsock_ops.destroy(R.dev);
    for (unsigned q = 0; q < 3; q++)
        close(R.env.kick_fd[q]);
    free(R.ram);
}

static uint64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Wait for the next packet to the guest; returns 1 with h/payload, or 0. */
static int rx_wait(struct vsock_hdr *h, uint8_t *payload, unsigned timeout_ms)
{
    uint64_t used = QBASE(0) + 0x2000, end = ms_now() + timeout_ms;
    for (;;) {
        uint16_t idx = __atomic_load_n((uint16_t *)(R.ram + used + 2), __ATOMIC_ACQUIRE);
        if (idx != R.used_seen[0]) {
            uint64_t e = used + 4 + 8u * (R.used_seen[0] % QSIZE);
            uint16_t id = (uint16_t)rd32(e);
            uint32_t len = rd32(e + 4);
            R.used_seen[0]++;
            if (len == 0) {     /* a buffer given back unused (device stop) */
                rx_post(id);
                kick(0);
                continue;
            }
            ck_assert_uint_ge(len, VSOCK_HDR_SIZE);
            uint8_t *b = R.ram + RXBUF + id * 0x2000u;
            vsock_hdr_decode(b, h);
            ck_assert_uint_eq(h->len, len - VSOCK_HDR_SIZE);
            ck_assert_uint_le(h->len, RXLEN - VSOCK_HDR_SIZE);
            if (payload)
                memcpy(payload, b + VSOCK_HDR_SIZE, h->len);
            rx_post(id);
            kick(0);
            return 1;
        }
        if (ms_now() >= end)
            return 0;
        usleep(500);
    }
}

/* Send one packet from the guest and wait until the device consumed it. */
static void tx_send(const struct vsock_hdr *h, const void *payload, uint32_t plen)
{
    uint16_t i = R.avail[1] % QSIZE;
    uint64_t b = TXBUF + i * 0x11000u;
    vsock_hdr_encode(h, R.ram + b);
    if (plen)
        memcpy(R.ram + b + VSOCK_HDR_SIZE, payload, plen);
    put_desc(1, i, b, VSOCK_HDR_SIZE + plen, 0);
    make_avail(1, i);
    kick(1);
    uint64_t end = ms_now() + 2000;
    while (__atomic_load_n((uint16_t *)(R.ram + QBASE(1) + 0x2000 + 2), __ATOMIC_ACQUIRE) != R.avail[1]) {
        ck_assert_msg(ms_now() < end, "tx not consumed");
        usleep(200);
    }
}

static struct vsock_hdr gh(uint32_t sport, uint32_t dport, uint16_t op, uint32_t len)
{
    return (struct vsock_hdr){ .src_cid = GCID, .dst_cid = VSOCK_HOST_CID, .src_port = sport,
                               .dst_port = dport, .len = len, .type = VSOCK_TYPE_STREAM, .op = op,
                               .buf_alloc = 65536, .fwd_cnt = 0 };
}

static int dial(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = { 3, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* A host listener on <uds>_PORT, where guest connections to host port PORT
 * go; its path in lp. */
static int listen_host_port(unsigned port, char *lp, size_t len)
{
    snprintf(lp, len, "%s_%u", R.path, port);
    unlink(lp);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(l, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    ck_assert_uint_lt(strlen(lp), sizeof sa.sun_path);
    memcpy(sa.sun_path, lp, strlen(lp) + 1);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(l, 4), 0);
    return l;
}

static void write_all(int fd, const void *b, size_t n)
{
    ck_assert_int_eq(write(fd, b, n), (ssize_t)n);
}

static size_t read_n(int fd, void *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)b + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

/* Next packet that is not a credit update. */
static int rx_next(struct vsock_hdr *h, uint8_t *p, unsigned ms)
{
    while (rx_wait(h, p, ms))
        if (h->op != VSOCK_OP_CREDIT_UPDATE)
            return 1;
    return 0;
}

/* Host client handshake up to the guest's REQUEST; returns the client fd. */
static int host_connect(const char *line, struct vsock_hdr *req)
{
    int fd = dial(R.path);
    write_all(fd, line, strlen(line));
    ck_assert_int_eq(rx_next(req, NULL, 2000), 1);
    ck_assert_uint_eq(req->op, VSOCK_OP_REQUEST);
    ck_assert_uint_eq(req->src_cid, VSOCK_HOST_CID);
    ck_assert_uint_eq(req->dst_cid, GCID);
    ck_assert_uint_ge(req->src_port, VSOCK_HOST_PORT_BASE);
    ck_assert_uint_gt(req->buf_alloc, 0);
    return fd;
}

START_TEST(firecracker_handshake_and_echo)
{
    struct vsock_hdr req, h;
    uint8_t p[RXLEN];
    /* pipelined: payload in the same write as the CONNECT line */
    int fd = host_connect("connect 52\nhello", &req);
    ck_assert_uint_eq(req.dst_port, 52);
    ck_assert_uint_eq(req.src_port, VSOCK_HOST_PORT_BASE);
    struct vsock_hdr r = gh(52, req.src_port, VSOCK_OP_RESPONSE, 0);
    tx_send(&r, NULL, 0);
    char ok[64] = {0};
    char want[32];
    snprintf(want, sizeof want, "OK %u\n", req.src_port);
    ck_assert_uint_eq(read_n(fd, ok, strlen(want)), strlen(want));
    ck_assert_str_eq(ok, want);
    /* the pipelined payload reaches the guest, nothing of the line */
    ck_assert_int_eq(rx_next(&h, p, 2000), 1);
    ck_assert_uint_eq(h.op, VSOCK_OP_RW);
    ck_assert_uint_eq(h.len, 5);
    ck_assert_mem_eq(p, "hello", 5);
    ck_assert_uint_eq(h.dst_port, 52);
    /* guest -> host */
    struct vsock_hdr d = gh(52, req.src_port, VSOCK_OP_RW, 5);
    tx_send(&d, "world", 5);
    char got[8] = {0};
    ck_assert_uint_eq(read_n(fd, got, 5), 5);
    ck_assert_str_eq(got, "world");
    /* a second client gets the next host port */
    int fd2 = host_connect("CONNECT 52\n", &req);
    ck_assert_uint_eq(req.src_port, VSOCK_HOST_PORT_BASE + 1);
    /* host closes: the guest hears SHUTDOWN */
    close(fd);
    ck_assert_int_eq(rx_next(&h, NULL, 2000), 1);
    ck_assert_uint_eq(h.op, VSOCK_OP_SHUTDOWN);
    ck_assert_uint_eq(h.dst_port, 52);
    ck_assert_uint_eq(h.src_port, VSOCK_HOST_PORT_BASE);
    struct vsock_stats st;
    vsock_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.host_connected, 1);
    ck_assert_uint_eq(st.host_accepted, 2);
    ck_assert_uint_eq(st.rx_bytes, 5);
    ck_assert_uint_eq(st.tx_bytes, 5);
    close(fd2);
}
END_TEST

START_TEST(no_listener_or_no_answer_closes)
{
    struct vsock_hdr req, h;
    int fd = host_connect("CONNECT 9\n", &req);
    struct vsock_hdr r = gh(9, req.src_port, VSOCK_OP_RST, 0);
    tx_send(&r, NULL, 0);
    char c;
    ck_assert_int_eq(read(fd, &c, 1), 0);       /* closed, no OK */
    close(fd);
    uint64_t t0 = ms_now();
    fd = host_connect("CONNECT 10\n", &req);
    ck_assert_int_eq(read(fd, &c, 1), 0);       /* 2 s without an answer */
    uint64_t dt = ms_now() - t0;
    ck_assert_uint_ge(dt, 1900);
    ck_assert_uint_le(dt, 3000);
    ck_assert_int_eq(rx_next(&h, NULL, 1000), 1);   /* and the guest hears RST */
    ck_assert_uint_eq(h.op, VSOCK_OP_RST);
    ck_assert_uint_eq(h.src_port, req.src_port);
    close(fd);
}
END_TEST

START_TEST(malformed_connect_line_closes)
{
    const char *bad[] = { "CONNECTX 5\n", "GET / HTTP/1.0\r\n", "CONNECT 99999999999\n", "CONNECT\n" };
    for (unsigned i = 0; i < 4; i++) {
        int fd = dial(R.path);
        write_all(fd, bad[i], strlen(bad[i]));
        char c;
        ck_assert_int_le(read(fd, &c, 1), 0);   /* EOF, or ECONNRESET (unread bytes) */
        close(fd);
    }
    struct vsock_hdr h;
    ck_assert_int_eq(rx_next(&h, NULL, 200), 0);     /* the guest heard nothing */
}
END_TEST

START_TEST(guest_initiated)
{
    char lp[100];
    int l = listen_host_port(7000, lp, sizeof lp);
    struct vsock_hdr rq = gh(1025, 7000, VSOCK_OP_REQUEST, 0), h;
    tx_send(&rq, NULL, 0);
    ck_assert_int_eq(rx_next(&h, NULL, 2000), 1);
    ck_assert_uint_eq(h.op, VSOCK_OP_RESPONSE);
    ck_assert_uint_eq(h.src_port, 7000);
    ck_assert_uint_eq(h.dst_port, 1025);
    int fd = accept(l, NULL, NULL);
    ck_assert_int_ge(fd, 0);
    struct vsock_hdr d = gh(1025, 7000, VSOCK_OP_RW, 4);
    tx_send(&d, "ping", 4);
    char b[8] = {0};
    ck_assert_uint_eq(read_n(fd, b, 4), 4);
    ck_assert_str_eq(b, "ping");
    write_all(fd, "pong", 4);
    uint8_t p[RXLEN];
    ck_assert_int_eq(rx_next(&h, p, 2000), 1);
    ck_assert_uint_eq(h.op, VSOCK_OP_RW);
    ck_assert_mem_eq(p, "pong", 4);
    /* guest closes fully: RST back, host sees EOF */
    struct vsock_hdr s = gh(1025, 7000, VSOCK_OP_SHUTDOWN, 0);
    s.flags = VSOCK_SHUTDOWN_RCV | VSOCK_SHUTDOWN_SEND;
    tx_send(&s, NULL, 0);
    ck_assert_int_eq(rx_next(&h, NULL, 2000), 1);
    ck_assert_uint_eq(h.op, VSOCK_OP_RST);
    ck_assert_int_eq(read(fd, b, 1), 0);
    close(fd);
    /* no listener there: RST */
    rq = gh(1026, 7001, VSOCK_OP_REQUEST, 0);
    tx_send(&rq, NULL, 0);
    ck_assert_int_eq(rx_next(&h, NULL, 2000), 1);
    ck_assert_uint_eq(h.op, VSOCK_OP_RST);
    ck_assert_uint_eq(h.src_port, 7001);
    close(l);
    unlink(lp);
}
END_TEST

START_TEST(large_transfer_with_credit)
{
    /* host -> guest 1 MiB through a guest that grants 16 KiB credit and
     * updates it as it consumes: flow control must hold the data back. */
    struct vsock_hdr req, h;
    int fd = host_connect("CONNECT 80\n", &req);
    struct vsock_hdr r = gh(80, req.src_port, VSOCK_OP_RESPONSE, 0);
    r.buf_alloc = 16384;
    tx_send(&r, NULL, 0);
    char ok[32];
    size_t okn = (size_t)snprintf(ok, sizeof ok, "OK %u\n", req.src_port);
    ck_assert_uint_eq(read_n(fd, ok, okn), okn);
    size_t total = 1u << 20;
    uint8_t *src = malloc(total), *dst = malloc(total);
    for (size_t i = 0; i < total; i++)
        src[i] = (uint8_t)(i * 31 + (i >> 12));
    int fl = 0;
    (void)fl;
    size_t sent = 0, got = 0;
    uint32_t fwd = 0;
    uint8_t p[RXLEN];
    uint64_t end = ms_now() + 20000;
    while (got < total) {
        ck_assert_msg(ms_now() < end, "transfer stuck at %zu", got);
        if (sent < total) {
            struct pollfd pf = { fd, POLLOUT, 0 };
            if (poll(&pf, 1, 0) == 1) {
                ssize_t w = send(fd, src + sent, total - sent < 8192 ? total - sent : 8192, MSG_DONTWAIT);
                if (w > 0)
                    sent += (size_t)w;
            }
        }
        if (!rx_wait(&h, p, 10))
            continue;
        if (h.op == VSOCK_OP_CREDIT_REQUEST) {
            struct vsock_hdr cu = gh(80, req.src_port, VSOCK_OP_CREDIT_UPDATE, 0);
            cu.buf_alloc = 16384; cu.fwd_cnt = fwd;
            tx_send(&cu, NULL, 0);
            continue;
        }
        ck_assert_uint_eq(h.op, VSOCK_OP_RW);
        ck_assert_uint_le(got + h.len - fwd, 16384);   /* never beyond the credit */
        memcpy(dst + got, p, h.len);
        got += h.len;
        fwd += h.len;       /* consumed at once */
        struct vsock_hdr cu = gh(80, req.src_port, VSOCK_OP_CREDIT_UPDATE, 0);
        cu.buf_alloc = 16384; cu.fwd_cnt = fwd;
        tx_send(&cu, NULL, 0);
    }
    ck_assert_mem_eq(dst, src, total);
    free(src); free(dst);
    close(fd);
}
END_TEST

START_TEST(credit_overrun_and_garbage)
{
    /* a guest connection to a host socket that never reads */
    char lp[100];
    int l = listen_host_port(7100, lp, sizeof lp);
    struct vsock_hdr rq = gh(2000, 7100, VSOCK_OP_REQUEST, 0), h;
    tx_send(&rq, NULL, 0);
    ck_assert_int_eq(rx_next(&h, NULL, 2000), 1);
    ck_assert_uint_eq(h.op, VSOCK_OP_RESPONSE);
    uint32_t credit = h.buf_alloc;
    ck_assert_uint_eq(credit, VSOCK_BUF_ALLOC);
    static uint8_t big[VSOCK_MAX_PKT_LEN];
    memset(big, 'x', sizeof big);
    int rst = 0;
    for (int i = 0; i < 64 && !rst; i++) {   /* 4 MiB: far beyond credit + socket buffer */
        struct vsock_hdr d = gh(2000, 7100, VSOCK_OP_RW, sizeof big);
        tx_send(&d, big, sizeof big);
        while (rx_wait(&h, NULL, 5))
            if (h.op == VSOCK_OP_RST)
                rst = 1;
    }
    ck_assert_int_eq(rst, 1);
    /* garbage: bad type answered with RST, other junk counted */
    struct vsock_hdr g = gh(3000, 7100, VSOCK_OP_REQUEST, 0);
    g.type = 2;
    tx_send(&g, NULL, 0);
    ck_assert_int_eq(rx_next(&h, NULL, 2000), 1);
    ck_assert_uint_eq(h.op, VSOCK_OP_RST);
    g = gh(3000, 7100, VSOCK_OP_RW, 10);
    g.src_cid = 99;
    tx_send(&g, "0123456789", 10);
    uint8_t shortb[10] = {0};
    tx_send((struct vsock_hdr[]){ gh(1, 2, 0, 0) }, NULL, 0);
    (void)shortb;
    struct vsock_stats st;
    vsock_get_stats(R.dev, &st);
    ck_assert_uint_ge(st.bad_pkts, 3);
    close(l);
    unlink(lp);
}
END_TEST

START_TEST(stop_and_restart_keep_connections)
{
    struct vsock_hdr req, h;
    int fd = host_connect("CONNECT 52\n", &req);
    struct vsock_hdr r = gh(52, req.src_port, VSOCK_OP_RESPONSE, 0);
    tx_send(&r, NULL, 0);
    char ok[32];
    size_t okn = (size_t)snprintf(ok, sizeof ok, "OK %u\n", req.src_port);
    ck_assert_uint_eq(read_n(fd, ok, okn), okn);
    vsock_ops.stop(R.dev);
    vsock_ops.stop(R.dev);              /* idempotent */
    write_all(fd, "later", 5);
    ck_assert_int_eq(rx_wait(&h, NULL, 100), 0);    /* stopped: nothing moves */
    ck_assert_int_eq(vsock_ops.start(R.dev, &R.env), 0);
    uint8_t p[RXLEN];
    ck_assert_int_eq(rx_next(&h, p, 2000), 1);
    ck_assert_uint_eq(h.op, VSOCK_OP_RW);
    ck_assert_mem_eq(p, "later", 5);
    close(fd);
}
END_TEST

/* CPU time of the whole process (every thread), in ms. */
static uint64_t cpu_ms(void)
{
    struct rusage ru;
    ck_assert_int_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

/* A guest that stops refilling RX: take the used RX entries without
 * giving the buffers back. Adds their payload bytes to *bytes, their
 * buffer ids to ids[*n]; true if there was any. */
static bool rx_hold(uint16_t *ids, unsigned *n, size_t *bytes)
{
    uint64_t used = QBASE(0) + 0x2000;
    bool any = false;
    for (;;) {
        uint16_t idx = __atomic_load_n((uint16_t *)(R.ram + used + 2), __ATOMIC_ACQUIRE);
        if (idx == R.used_seen[0])
            return any;
        uint64_t e = used + 4 + 8u * (R.used_seen[0] % QSIZE);
        uint16_t id = (uint16_t)rd32(e);
        uint32_t len = rd32(e + 4);
        R.used_seen[0]++;
        ids[(*n)++] = id;
        any = true;
        if (len >= VSOCK_HDR_SIZE) {
            struct vsock_hdr h;
            vsock_hdr_decode(R.ram + RXBUF + id * 0x2000u, &h);
            if (h.op == VSOCK_OP_RW)
                *bytes += h.len;
        }
    }
}

/* An established host client on guest port gport, with a large credit
 * from the guest; returns its fd (non-blocking). */
static int host_established(uint32_t gport)
{
    struct vsock_hdr req;
    char line[32];
    snprintf(line, sizeof line, "CONNECT %u\n", gport);
    int fd = host_connect(line, &req);
    struct vsock_hdr r = gh(gport, req.src_port, VSOCK_OP_RESPONSE, 0);
    r.buf_alloc = 1u << 30;     /* RX buffers run out before the credit */
    tx_send(&r, NULL, 0);
    char ok[32];
    size_t okn = (size_t)snprintf(ok, sizeof ok, "OK %u\n", req.src_port);
    ck_assert_uint_eq(read_n(fd, ok, okn), okn);
    ck_assert_int_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
    return fd;
}

/* Backpressure: a guest that gives no RX buffers stops our reading of the
 * host socket (its bytes wait there), and the I/O thread sleeps, also when
 * the host client then hangs up; once the buffers come back every byte
 * arrives, then the SHUTDOWN. (Before, a hung-up socket with unread bytes
 * woke poll() again at once: the thread spun until the guest refilled.) */
START_TEST(no_rx_buffers_no_reading_no_spinning)
{
    int fd = host_established(61);
    /* more than the 32 posted RX buffers hold */
    static uint8_t chunk[4096];
    memset(chunk, 'x', sizeof chunk);
    size_t written = 0;
    while (written < (1u << 20)) {
        ssize_t w = send(fd, chunk, sizeof chunk, MSG_DONTWAIT);
        if (w <= 0)
            break;
        written += (size_t)w;
    }
    ck_assert_uint_gt(written, 32u * RXLEN);
    uint16_t ids[QSIZE * 4];
    unsigned n = 0;
    size_t held = 0;
    uint64_t quiet = ms_now() + 200, end = ms_now() + 5000;
    while (ms_now() < quiet) {
        if (rx_hold(ids, &n, &held))
            quiet = ms_now() + 200;
        ck_assert_msg(ms_now() < end, "RX never ran dry");
        ck_assert_uint_le(n, 32);
        usleep(1000);
    }
    ck_assert_uint_eq(n, 32);           /* every buffer used ... */
    ck_assert_uint_lt(held, written);   /* ... and the rest left in the socket */
    /* starved: nothing more read, and no CPU burnt */
    uint64_t c0 = cpu_ms();
    usleep(300 * 1000);
    ck_assert_uint_lt(cpu_ms() - c0, 100);
    ck_assert(!rx_hold(ids, &n, &held));
    /* the host client hangs up with bytes still unread */
    close(fd);
    c0 = cpu_ms();
    usleep(300 * 1000);
    uint64_t burnt = cpu_ms() - c0;
    ck_assert_msg(burnt < 100, "the I/O thread spun: %llu ms of CPU in 300 ms",
                  (unsigned long long)burnt);
    ck_assert(!rx_hold(ids, &n, &held));
    /* RX buffers back: the rest, then the host's SHUTDOWN */
    for (unsigned i = 0; i < n; i++)
        rx_post(ids[i]);
    kick(0);
    struct vsock_hdr h;
    uint8_t p[RXLEN];
    bool shut = false;
    while (!shut && rx_wait(&h, p, 2000)) {
        if (h.op == VSOCK_OP_RW)
            held += h.len;
        else if (h.op == VSOCK_OP_SHUTDOWN)
            shut = true;
    }
    ck_assert(shut);
    ck_assert_uint_eq(held, written);
}
END_TEST

/* Kick eventfds that are O_NONBLOCK (a vhost-user frontend's, QEMU's):
 * served as the blocking ones, and an idle device does not spin on them. */
START_TEST(nonblocking_kick_fds)
{
    vsock_ops.stop(R.dev);
    for (unsigned q = 0; q < 3; q++) {
        close(R.env.kick_fd[q]);
        R.env.kick_fd[q] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        ck_assert_int_ge(R.env.kick_fd[q], 0);
    }
    ck_assert_int_eq(vsock_ops.start(R.dev, &R.env), 0);
    int fd = host_established(62);
    struct vsock_hdr h;
    uint8_t p[RXLEN];
    write_all(fd, "to guest", 8);
    ck_assert_int_eq(rx_next(&h, p, 2000), 1);
    ck_assert_uint_eq(h.op, VSOCK_OP_RW);
    ck_assert_mem_eq(p, "to guest", 8);
    struct vsock_hdr d = gh(62, h.src_port, VSOCK_OP_RW, 7);
    tx_send(&d, "to host", 7);
    char got[8] = {0};
    ck_assert_int_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK), 0);
    ck_assert_uint_eq(read_n(fd, got, 7), 7);
    ck_assert_str_eq(got, "to host");
    uint64_t c0 = cpu_ms();
    usleep(200 * 1000);
    ck_assert_uint_lt(cpu_ms() - c0, 60);
    close(fd);
}
END_TEST

/* reset: the guest is gone (driver reset, vhost-user frontend gone). Every
 * host connection is closed, host clients still in the backlog too; the
 * socket stays bound and the next guest serves new clients. */
START_TEST(reset_closes_every_connection)
{
    struct vsock_hdr req, h;
    int fd = host_connect("CONNECT 52\n", &req);
    struct vsock_hdr r = gh(52, req.src_port, VSOCK_OP_RESPONSE, 0);
    tx_send(&r, NULL, 0);
    char ok[32];
    size_t okn = (size_t)snprintf(ok, sizeof ok, "OK %u\n", req.src_port);
    ck_assert_uint_eq(read_n(fd, ok, okn), okn);
    vsock_ops.stop(R.dev);
    int waiting = dial(R.path);                 /* in the backlog: no I/O thread */
    write_all(waiting, "CONNECT 53\n", 11);
    vsock_ops.reset(R.dev);
    char b;
    struct timeval tv = { .tv_sec = 2 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(waiting, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ck_assert_int_eq(read(fd, &b, 1), 0);       /* closed */
    ssize_t wn = read(waiting, &b, 1);
    ck_assert_msg(wn == 0 || (wn < 0 && errno == ECONNRESET), "backlog client: %zd (%s)", wn, strerror(errno));
    struct vsock_stats st;
    vsock_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.conns, 0);
    close(fd);
    close(waiting);
    /* started again (the next guest), a new client is served */
    ck_assert_int_eq(vsock_ops.start(R.dev, &R.env), 0);
    int fd2 = host_connect("CONNECT 54\n", &req);
    ck_assert_uint_eq(req.dst_port, 54);
    vsock_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.conns, 1);
    (void)h;
    close(fd2);
}
END_TEST

/* After a restore: one TRANSPORT_RESET on the event queue once a buffer is
 * there; host clients held in the backlog until vsock_ungate(); the
 * internal client passes the gate. */
START_TEST(restored_reset_gate_internal)
{
    struct vsock_hdr req, h;
    vsock_ops.stop(R.dev);
    vsock_restored(R.dev);
    ck_assert(vsock_is_gated(R.dev));
    ck_assert_uint_eq(vsock_guest_cid(R.dev), GCID);
    ck_assert_int_eq(vsock_ops.start(R.dev, &R.env), 0);
    uint64_t evused = QBASE(2) + 0x2000;
    usleep(50000);      /* no event buffer yet: nothing used */
    ck_assert_uint_eq(__atomic_load_n((uint16_t *)(R.ram + evused + 2), __ATOMIC_ACQUIRE), 0);
    memset(R.ram + 0x300000, 0xaa, 8);
    put_desc(2, 0, 0x300000, 8, VIRTQ_DESC_F_WRITE);
    make_avail(2, 0);
    put_desc(2, 1, 0x300010, 8, VIRTQ_DESC_F_WRITE);
    make_avail(2, 1);
    kick(2);
    uint64_t end = ms_now() + 2000;
    while (__atomic_load_n((uint16_t *)(R.ram + evused + 2), __ATOMIC_ACQUIRE) == 0) {
        ck_assert_msg(ms_now() < end, "no transport reset event");
        usleep(500);
    }
    ck_assert_uint_eq(rd32(evused + 4), 0);         /* head 0 */
    ck_assert_uint_eq(rd32(evused + 8), 4);         /* 4 bytes written */
    ck_assert_uint_eq(rd32(0x300000), 0);           /* VIRTIO_VSOCK_EVENT_TRANSPORT_RESET */
    ck_assert_uint_eq(R.ram[0x300004], 0xaa);
    /* a host client: connect() succeeds (backlog), its CONNECT is held */
    int fd = dial(R.path);
    write_all(fd, "CONNECT 77\n", 11);
    ck_assert_int_eq(rx_next(&h, NULL, 300), 0);
    /* the internal client is served once the driver gave the event
     * buffer back (it has handled the reset) */
    int ifd = -1;
    ck_assert_int_eq(vsock_open_internal(R.dev, &ifd), 0);
    ck_assert_int_ge(ifd, 0);
    write_all(ifd, "CONNECT 88\n", 11);
    ck_assert_int_eq(rx_next(&req, NULL, 300), 0);
    make_avail(2, 0);
    kick(2);
    ck_assert_int_eq(rx_next(&req, NULL, 2000), 1);
    ck_assert_uint_eq(req.op, VSOCK_OP_REQUEST);
    ck_assert_uint_eq(req.dst_port, 88);
    struct vsock_hdr r = gh(88, req.src_port, VSOCK_OP_RESPONSE, 0);
    tx_send(&r, NULL, 0);
    char ok[32] = {0};
    size_t okn = (size_t)snprintf(ok, sizeof ok, "OK %u\n", req.src_port);
    char got[32] = {0};
    ck_assert_uint_eq(read_n(ifd, got, okn), okn);
    ck_assert_str_eq(got, ok);
    /* only one reset, even after another kick */
    ck_assert_uint_eq(rd32(0x300000), 0);
    kick(2);
    usleep(50000);
    ck_assert_uint_eq(__atomic_load_n((uint16_t *)(R.ram + evused + 2), __ATOMIC_ACQUIRE), 1);
    /* ungate: the held client's CONNECT goes through */
    vsock_ungate(R.dev);
    ck_assert(!vsock_is_gated(R.dev));
    ck_assert_int_eq(rx_next(&req, NULL, 2000), 1);
    ck_assert_uint_eq(req.op, VSOCK_OP_REQUEST);
    ck_assert_uint_eq(req.dst_port, 77);
    close(fd);
    close(ifd);
}
END_TEST

START_TEST(restored_reset_unacknowledged)
{
    struct vsock_hdr req;
    vsock_ops.stop(R.dev);
    vsock_restored(R.dev);
    put_desc(2, 0, 0x300000, 8, VIRTQ_DESC_F_WRITE);
    make_avail(2, 0);
    ck_assert_int_eq(vsock_ops.start(R.dev, &R.env), 0);
    int ifd = -1;
    ck_assert_int_eq(vsock_open_internal(R.dev, &ifd), 0);
    write_all(ifd, "CONNECT 89\n", 11);
    uint64_t t0 = ms_now();
    ck_assert_int_eq(rx_next(&req, NULL, 3000), 1);
    uint64_t dt = ms_now() - t0;
    ck_assert_uint_eq(req.dst_port, 89);
    ck_assert_uint_ge(dt, VSOCK_RESET_ACK_MS - 100);
    ck_assert_uint_le(dt, VSOCK_RESET_ACK_MS + 1000);
    ck_assert(vsock_is_gated(R.dev));   /* host clients still wait */
    close(ifd);
}
END_TEST

/* The socket gives root in the guest (through the agent): it is created
 * 0600 whatever the umask, and a client of another uid is closed at once
 * even where the mode would let it connect. (Before, the mode came from
 * the umask and any local user could connect.) */
START_TEST(socket_owner_only)
{
    struct stat st;
    ck_assert_int_eq(stat(R.path, &st), 0);
    ck_assert_msg((st.st_mode & 0777) == 0600, "socket mode %o", st.st_mode & 0777);
    if (geteuid() != 0) {
        printf("SKIPPED: vsock socket_owner_only: the other-uid client needs root to setuid\n");
        return;
    }
    ck_assert_int_eq(chmod(R.path, 0666), 0);   /* only the uid check is left */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setgid(65534) < 0 || setuid(65534) < 0)
            _exit(10);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", R.path);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            _exit(11);
        struct timeval tv = { 3, 0 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (send(fd, "CONNECT 52\n", 11, MSG_NOSIGNAL) < 0) { /* a closed peer: fine */ }
        char c;
        ssize_t n = read(fd, &c, 1);
        _exit(n == 0 || (n < 0 && errno == ECONNRESET) ? 0 : 12);   /* closed, no OK */
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "other-uid client: status %d", status);
    struct vsock_hdr h;
    ck_assert_int_eq(rx_next(&h, NULL, 300), 0);   /* the guest heard nothing */
    struct vsock_stats vs;
    vsock_get_stats(R.dev, &vs);
    ck_assert_uint_eq(vs.host_refused, 1);
    ck_assert_uint_eq(vs.host_accepted, 0);
    /* Our own uid still gets through. */
    struct vsock_hdr req;
    int fd = host_connect("CONNECT 52\n", &req);
    ck_assert_uint_eq(req.dst_port, 52);
    close(fd);
}
END_TEST

START_TEST(create_rejects_bad_options)
{
    struct vsock_dev *d = (void *)1;
    char why[200];
    struct vsock_opts o = { .uds_path = "/tmp/x", .guest_cid = 2 };
    ck_assert_int_eq(vsock_create(&o, &d, why, sizeof why), -EINVAL);
    ck_assert_ptr_null(d);
    o.guest_cid = 0xffffffffull;
    ck_assert_int_eq(vsock_create(&o, &d, why, sizeof why), -EINVAL);
    o.guest_cid = 3; o.uds_path = "";
    ck_assert_int_eq(vsock_create(&o, &d, why, sizeof why), -EINVAL);
    char longp[200];
    memset(longp, 'a', sizeof longp - 1); longp[0] = '/'; longp[sizeof longp - 1] = 0;
    o.uds_path = longp;
    ck_assert_int_eq(vsock_create(&o, &d, why, sizeof why), -ENAMETOOLONG);
    o.uds_path = "/etc/passwd";     /* not a socket: never removed */
    ck_assert_int_eq(vsock_create(&o, &d, why, sizeof why), -EEXIST);
    ck_assert_int_eq(access("/etc/passwd", F_OK), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vsock");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, rig_setup, rig_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, firecracker_handshake_and_echo);
    tcase_add_test(tc, no_listener_or_no_answer_closes);
    tcase_add_test(tc, malformed_connect_line_closes);
    tcase_add_test(tc, guest_initiated);
    tcase_add_test(tc, large_transfer_with_credit);
    tcase_add_test(tc, credit_overrun_and_garbage);
    tcase_add_test(tc, stop_and_restart_keep_connections);
    tcase_add_test(tc, reset_closes_every_connection);
    tcase_add_test(tc, restored_reset_gate_internal);
    tcase_add_test(tc, restored_reset_unacknowledged);
    tcase_add_test(tc, socket_owner_only);
    tcase_add_test(tc, no_rx_buffers_no_reading_no_spinning);
    tcase_add_test(tc, nonblocking_kick_fds);
    suite_add_tcase(s, tc);
    TCase *t2 = tcase_create("create");
    tcase_add_test(t2, create_rejects_bad_options);
    suite_add_tcase(s, t2);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
