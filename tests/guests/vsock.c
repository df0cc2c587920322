/* vsock: a tiny polling virtio-mmio (version 2) virtio-vsock driver that
 * accepts a host connection and echoes, then connects out to the host.
 * Protocol in vsock_proto.h. Exit codes:
 *   3  no virtio-vsock device in slot 0 (VS_NODEV)
 *   10 bad magic/version  11 FEATURES_OK refused  12 queue setup refused
 *   13 guest CID not 3
 *   20 no REQUEST (timeout)  21 unexpected packet on the echo connection
 *   30 connect out: no RESPONSE  31 no reply data  32 reply wrong
 *   33 no RST after shutdown */
#include "rt.h"
#include "virtio_mmio.h"
#include <stdbool.h>

#include "vsock_proto.h"

#define VBASE         VIRTIO_MMIO_SLOT(0)

#define QN 8
#define F_WRITE 2
#define BUFSZ 4096

enum { OP_REQUEST = 1, OP_RESPONSE, OP_RST, OP_SHUTDOWN, OP_RW, OP_CREDIT_UPDATE, OP_CREDIT_REQUEST };

struct hdr {
    uint64_t src_cid, dst_cid;
    uint32_t src_port, dst_port, len;
    uint16_t type, op;
    uint32_t flags, buf_alloc, fwd_cnt;
} __attribute__((packed));

struct vq {
    VRING_FIELDS(QN);
};

static struct vq qs[3];
static uint8_t rxbuf[QN][BUFSZ] __attribute__((aligned(4096)));
static uint8_t txbuf[BUFSZ] __attribute__((aligned(4096)));
static uint32_t fwd_cnt;        /* bytes we consumed (all connections: one at a time) */

static uint32_t rd(uint64_t off) { return mmio_read32(VBASE + off); }
static void wr(uint64_t off, uint32_t v) { mmio_write32(VBASE + off, v); }

static void make_avail(unsigned q, uint16_t head)
{
    struct vq *v = &qs[q];
    v->avail.ring[v->avail.idx % QN] = head;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&v->avail.idx, (uint16_t)(v->avail.idx + 1), __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    wr(R_QUEUE_NOTIFY, q);
}

static int dev_init(void)
{
    int e = virtio_mmio_handshake(VBASE, 19, VS_NODEV);
    if (e)
        return e;
    for (unsigned q = 0; q < 3; q++) {
        wr(R_QUEUE_SEL, q);
        if (rd(R_QUEUE_MAX) < QN)
            return 12;
        wr(R_QUEUE_NUM, QN);
        uint64_t a = (uint64_t)(uintptr_t)qs[q].desc, b = (uint64_t)(uintptr_t)&qs[q].avail,
                 c = (uint64_t)(uintptr_t)&qs[q].used;
        wr(R_DESC_LO, (uint32_t)a); wr(R_DESC_HI, (uint32_t)(a >> 32));
        wr(R_AVAIL_LO, (uint32_t)b); wr(R_AVAIL_HI, (uint32_t)(b >> 32));
        wr(R_USED_LO, (uint32_t)c); wr(R_USED_HI, (uint32_t)(c >> 32));
        wr(R_QUEUE_READY, 1);
        if (rd(R_QUEUE_READY) != 1)
            return 12;
    }
    wr(R_STATUS, 1 | 2 | 8 | 4);
    if (rd(R_CONFIG) != 3 || rd(R_CONFIG + 4) != 0)
        return 13;
    /* RX buffers (descriptor i = rxbuf[i]) */
    for (uint16_t i = 0; i < QN; i++) {
        qs[0].desc[i] = (struct desc){ (uint64_t)(uintptr_t)rxbuf[i], BUFSZ, F_WRITE, 0 };
        make_avail(0, i);
    }
    return 0;
}

/* Wait for the next packet; copy its header and payload out and repost
 * the buffer. false on timeout. */
static bool recv_pkt(struct hdr *h, uint8_t *payload, uint32_t cap)
{
    struct vq *v = &qs[0];
    for (uint64_t i = 0; i < 4000000000ull; i++) {
        if (__atomic_load_n(&v->used.idx, __ATOMIC_ACQUIRE) != v->last_used) {
            uint16_t id = (uint16_t)v->used.ring[v->last_used % QN].id;
            uint32_t len = v->used.ring[v->last_used % QN].len;
            v->last_used++;
            if (id >= QN || len < sizeof *h) {
                if (id < QN)
                    make_avail(0, id);
                continue;
            }
            memcpy(h, rxbuf[id], sizeof *h);
            uint32_t n = h->len < cap ? h->len : cap;
            if (payload && n)
                memcpy(payload, rxbuf[id] + sizeof *h, n);
            make_avail(0, id);
            return true;
        }
        cpu_relax();
    }
    return false;
}

static void send_pkt(uint32_t sport, uint32_t dport, uint16_t op, uint32_t flags,
                     const void *data, uint32_t len)
{
    struct hdr h = { 3, 2, sport, dport, len, 1, op, flags, 65536, fwd_cnt };
    memcpy(txbuf, &h, sizeof h);
    if (len)
        memcpy(txbuf + sizeof h, data, len);
    struct vq *v = &qs[1];
    v->desc[0] = (struct desc){ (uint64_t)(uintptr_t)txbuf, (uint32_t)sizeof h + len, 0, 0 };
    make_avail(1, 0);
    while (__atomic_load_n(&v->used.idx, __ATOMIC_ACQUIRE) == v->last_used)
        cpu_relax();
    v->last_used++;
}

static uint8_t data[BUFSZ];

static int echo(void)
{
    struct hdr h;
    uint32_t hport = 0;
    for (;;) {
        if (!recv_pkt(&h, data, sizeof data))
            return 20;
        if (h.op == OP_REQUEST && h.dst_port == VS_LISTEN_PORT) {
            hport = h.src_port;
            break;
        }
    }
    send_pkt(VS_LISTEN_PORT, hport, OP_RESPONSE, 0, 0, 0);
    uint32_t echoed = 0;
    for (;;) {
        if (!recv_pkt(&h, data, sizeof data))
            return 21;
        if (h.src_port != hport || h.dst_port != VS_LISTEN_PORT)
            continue;
        if (h.op == OP_RW) {
            fwd_cnt += h.len;
            send_pkt(VS_LISTEN_PORT, hport, OP_RW, 0, data, h.len);
            echoed += h.len;
        } else if (h.op == OP_SHUTDOWN || h.op == OP_RST) {
            if (h.op == OP_SHUTDOWN)
                send_pkt(VS_LISTEN_PORT, hport, OP_RST, 0, 0, 0);
            break;
        } else if (h.op == OP_CREDIT_REQUEST) {
            send_pkt(VS_LISTEN_PORT, hport, OP_CREDIT_UPDATE, 0, 0, 0);
        } else if (h.op != OP_CREDIT_UPDATE) {
            return 21;
        }
    }
    if (echoed != VS_ECHO_LEN)
        return 21;
    serial_puts(VS_ECHO_OK);
    return 0;
}

static int connect_out(void)
{
    struct hdr h;
    fwd_cnt = 0;
    send_pkt(VS_GUEST_PORT, VS_HOST_PORT, OP_REQUEST, 0, 0, 0);
    do {
        if (!recv_pkt(&h, data, sizeof data))
            return 30;
    } while (h.dst_port != VS_GUEST_PORT || h.op == OP_CREDIT_UPDATE);
    if (h.op != OP_RESPONSE || h.src_port != VS_HOST_PORT)
        return 30;
    send_pkt(VS_GUEST_PORT, VS_HOST_PORT, OP_RW, 0, VS_HELLO, sizeof VS_HELLO - 1);
    uint32_t got = 0;
    static uint8_t reply[64];
    while (got < sizeof VS_REPLY - 1) {
        if (!recv_pkt(&h, data, sizeof data))
            return 31;
        if (h.dst_port != VS_GUEST_PORT || h.op == OP_CREDIT_UPDATE)
            continue;
        if (h.op != OP_RW || got + h.len > sizeof reply)
            return 31;
        memcpy(reply + got, data, h.len);
        got += h.len;
        fwd_cnt += h.len;
    }
    if (memcmp(reply, VS_REPLY, sizeof VS_REPLY - 1) != 0)
        return 32;
    send_pkt(VS_GUEST_PORT, VS_HOST_PORT, OP_SHUTDOWN, 3, 0, 0);
    return 0;
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    int rc = dev_init();
    if (!rc) {
        serial_puts(VS_READY);
        rc = echo();
    }
    if (!rc)
        rc = connect_out();
    if (!rc) {
        struct hdr h;
        do {
            if (!recv_pkt(&h, data, sizeof data)) {
                rc = 33;
                break;
            }
        } while (h.dst_port != VS_GUEST_PORT || h.op != OP_RST);
    }
    if (rc) {
        serial_puts("vsock: failed, code ");
        serial_putdec((uint64_t)rc);
        serial_puts("\n");
    } else {
        serial_puts(VS_OUT_OK);
    }
    return rc;
}
