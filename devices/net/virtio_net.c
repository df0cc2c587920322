/* virtio-net device. Contracts in virtio_net.h. */
#include "devices/net/virtio_net.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/net/net_frame.h"
#include "devices/virtio/evloop.h"
#include "devices/virtio/ratelimit.h"
#include "vmm/base/clock.h"
#include "devices/virtio/virtq.h"
#include "devices/virtio/vqueues.h"
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"

#define Q_RX 0
#define Q_TX 1
#define NQUEUES 2
#define CHAIN_MAX 64            /* segments of one chain we take */
#define TX_BATCH 256            /* chains per pass before looking at the rest */
#define RX_BATCH 256
#define ETH_MIN 14              /* an Ethernet header */

struct inj {
    uint8_t *frame;
    size_t len;
};

struct virtio_net {
    char name[48];
    uint8_t mac[6];
    uint16_t mtu;
    _Atomic uint16_t status;
    struct net_backend *be;
    bool be_failed;
    struct net_filter filter;
    struct log_limit rl;        /* guest-triggered messages */

    struct virtio_dev_env env;
    struct vqueues vq;
    uint64_t features;
    struct evloop *loop;
    pthread_t thread;
    bool running;

    /* transmit: a frame the backend could not take yet (its chain pushed) */
    uint8_t *tx_buf;
    size_t tx_len;
    struct net_vhdr tx_hdr;
    bool tx_held;
    /* receive: a frame waiting for the guest's buffers */
    uint8_t *rx_buf;
    size_t rx_len;
    struct net_vhdr rx_hdr;
    bool rx_held;
    bool rx_starved;            /* no receive buffers: wait for a kick */
    /* rate limiters (docs/ratelimit.md): a frame is charged before it is
     * sent or delivered; while one waits for tokens the queue waits too */
    pthread_mutex_t rl_lock;    /* run-time changes come from other threads */
    struct ratelimit tx_rl, rx_rl;
    bool tx_charged, rx_charged;
    struct evloop_timer rl_timer;
    /* a transmit pass stopped at TX_BATCH with chains left: the next pass */
    struct evloop_timer tx_more;
    /* frames of local endpoints for the guest (FIFO) */
    struct inj inj[VIRTIO_NET_INJECT_MAX];
    unsigned inj_head, inj_n;

    struct virtq_seg seg[CHAIN_MAX], seg0[CHAIN_MAX];
    _Atomic uint64_t st_tx_frames, st_tx_bytes, st_tx_dropped, st_tx_local, st_tx_bad, st_tx_be_err, st_tx_bad_offload;
    _Atomic uint64_t st_rx_frames, st_rx_bytes, st_rx_dropped, st_rx_bad, st_be_failed;
};

#define STAT_ADD(n, f, v) atomic_fetch_add_explicit(&(n)->f, (v), memory_order_relaxed)

/* ---- config space and features ---- */

static uint64_t net_features(void *dev)
{
    struct virtio_net *n = dev;
    uint64_t f = 1ull << VIRTIO_NET_F_MAC | 1ull << VIRTIO_NET_F_STATUS | 1ull << VIRTIO_NET_F_MRG_RXBUF |
                 1ull << VIRTIO_F_EVENT_IDX | 1ull << VIRTIO_F_INDIRECT_DESC;
    if (n->mtu)
        f |= 1ull << VIRTIO_NET_F_MTU;
    if (n->be->vnet_hdr)        /* the backend takes and gives partial checksums and GSO frames */
        f |= 1ull << VIRTIO_NET_F_CSUM | 1ull << VIRTIO_NET_F_GUEST_CSUM | 1ull << VIRTIO_NET_F_HOST_TSO4 |
             1ull << VIRTIO_NET_F_HOST_TSO6 | 1ull << VIRTIO_NET_F_GUEST_TSO4 | 1ull << VIRTIO_NET_F_GUEST_TSO6;
    return f;
}

static void net_config_read(void *dev, uint32_t off, uint8_t *data, uint32_t len)
{
    struct virtio_net *n = dev;
    uint8_t cfg[VIRTIO_NET_CONFIG_SIZE];
    uint16_t st = atomic_load(&n->status);
    memcpy(cfg, n->mac, 6);
    cfg[6] = (uint8_t)st;
    cfg[7] = (uint8_t)(st >> 8);
    cfg[8] = 1;                 /* max_virtqueue_pairs */
    cfg[9] = 0;
    cfg[10] = (uint8_t)n->mtu;
    cfg[11] = (uint8_t)(n->mtu >> 8);
    for (uint32_t i = 0; i < len; i++)
        data[i] = off + i < sizeof(cfg) ? cfg[off + i] : 0;
}

static void net_config_write(void *dev, uint32_t off, const uint8_t *data, uint32_t len)
{
    (void)dev; (void)off; (void)data; (void)len;   /* read-only (no VIRTIO_NET_F_CTRL_MAC_ADDR) */
}

static uint32_t net_config_size(void *dev) { (void)dev; return VIRTIO_NET_CONFIG_SIZE; }

void virtio_net_set_link(struct virtio_net *n, bool up)
{
    atomic_store(&n->status, up ? VIRTIO_NET_S_LINK_UP : 0);
}

/* ---- the virtio-net header (little endian in guest memory) ---- */

static void hdr_get(const uint8_t *p, struct net_vhdr *h)
{
    h->flags = p[0];
    h->gso_type = p[1];
    h->hdr_len = (uint16_t)(p[2] | p[3] << 8);
    h->gso_size = (uint16_t)(p[4] | p[5] << 8);
    h->csum_start = (uint16_t)(p[6] | p[7] << 8);
    h->csum_offset = (uint16_t)(p[8] | p[9] << 8);
    h->num_buffers = (uint16_t)(p[10] | p[11] << 8);
}

static void hdr_put(uint8_t *p, const struct net_vhdr *h)
{
    p[0] = h->flags;
    p[1] = h->gso_type;
    p[2] = (uint8_t)h->hdr_len; p[3] = (uint8_t)(h->hdr_len >> 8);
    p[4] = (uint8_t)h->gso_size; p[5] = (uint8_t)(h->gso_size >> 8);
    p[6] = (uint8_t)h->csum_start; p[7] = (uint8_t)(h->csum_start >> 8);
    p[8] = (uint8_t)h->csum_offset; p[9] = (uint8_t)(h->csum_offset >> 8);
    p[10] = (uint8_t)h->num_buffers; p[11] = (uint8_t)(h->num_buffers >> 8);
}

/* ---- transmit ---- */

static void backend_failed(struct virtio_net *n, int err)
{
    if (n->be_failed)
        return;
    n->be_failed = true;
    STAT_ADD(n, st_be_failed, 1);
    log_warn("%s: backend %s failed (%s): frames are dropped from now on", n->name, n->be->ops->name,
             strerror(-err));
}

/* Send the held frame: true if it is gone (sent or dropped), false if
 * the backend still cannot take it. */
/* Charge a frame to a limiter: true if it may go now; else the timer is
 * armed for when it may. */
static bool rl_charge(struct virtio_net *n, struct ratelimit *rl, size_t len)
{
    uint64_t now = clock_mono_ns(), wait = 0;
    pthread_mutex_lock(&n->rl_lock);
    int r = ratelimit_unlimited(rl) ? 0 : ratelimit_consume(rl, len, 1, now, &wait);
    pthread_mutex_unlock(&n->rl_lock);
    if (r == 0)
        return true;
    if (!evloop_timer_armed(&n->rl_timer) || evloop_timer_deadline(&n->rl_timer) > now + wait)
        evloop_timer_arm(n->loop, &n->rl_timer, wait > UINT64_MAX - now ? UINT64_MAX : now + wait);
    return false;
}

static bool tx_flush(struct virtio_net *n)
{
    if (!n->tx_held)
        return true;
    if (!n->tx_charged && !n->be_failed) {
        if (!rl_charge(n, &n->tx_rl, n->tx_len))
            return false;
        n->tx_charged = true;
    }
    int r = n->be_failed ? -EPIPE : n->be->ops->send(n->be, &n->tx_hdr, n->tx_buf, n->tx_len);
    if (r == -EAGAIN)
        return false;
    n->tx_held = false;
    n->tx_charged = false;
    if (r == 0) {
        STAT_ADD(n, st_tx_frames, 1);
        STAT_ADD(n, st_tx_bytes, n->tx_len);
    } else {
        STAT_ADD(n, st_tx_be_err, 1);
        if (r != -EMSGSIZE && r != -EINVAL)
            backend_failed(n, r);
    }
    return true;
}

/* The offloads the driver negotiated, as net_vhdr_check takes them. */
static unsigned offloads(uint64_t f)
{
    return (f & (1ull << VIRTIO_NET_F_CSUM) ? NF_OFF_CSUM : 0) |
           (f & (1ull << VIRTIO_NET_F_HOST_TSO4) ? NF_OFF_TSO4 : 0) |
           (f & (1ull << VIRTIO_NET_F_HOST_TSO6) ? NF_OFF_TSO6 : 0);
}

/* The header of the frame in tx_buf must agree with the frame (checksum
 * offload writes where csum_start / csum_offset say, after the filter
 * looked: devices/net/net_frame.h); tx_hdr becomes the header to hand on.
 * false: dropped (counted). Every frame, whatever the filter and backend:
 * a driver's headers always agree with its frames. *parsed: whether f
 * holds the frame's parse (done when the header asks for an offload), for
 * the filter not to parse it again. */
static bool tx_hdr_ok(struct virtio_net *n, size_t len, struct net_frame *f, bool *parsed)
{
    const char *why = NULL;
    bool parse = net_vhdr_active(&n->tx_hdr);
    if (parse)
        net_frame_parse(n->tx_buf, len, f, NULL);
    *parsed = parse;
    if (net_vhdr_check(&n->tx_hdr, parse ? f : NULL, len, offloads(n->features), n->mtu, &n->tx_hdr, NULL,
                       &why) == 0)
        return true;
    STAT_ADD(n, st_tx_bad_offload, 1);
    log_guest(&n->rl, "%s: transmit frame dropped: %s (flags %#x gso_type %#x csum_start %u csum_offset %u)", n->name,
              why, n->tx_hdr.flags, n->tx_hdr.gso_type, n->tx_hdr.csum_start, n->tx_hdr.csum_offset);
    return false;
}

/* One chain: its header and frame, through the filter to the backend. */
static void tx_chain(struct virtio_net *n, const struct virtq_chain *c)
{
    const struct gmem *m = n->env.mem;
    uint8_t h[NET_VHDR_LEN];
    if (c->read_len < NET_VHDR_LEN + ETH_MIN || c->read_len > NET_VHDR_LEN + NET_FRAME_MAX ||
        virtq_chain_read(m, c, 0, h, NET_VHDR_LEN) != NET_VHDR_LEN) {
        STAT_ADD(n, st_tx_bad, 1);
        log_guest(&n->rl, "%s: transmit chain of %u bytes refused (header + frame of %u .. %u)", n->name,
                  (unsigned)c->read_len, NET_VHDR_LEN + ETH_MIN, NET_VHDR_LEN + NET_FRAME_MAX);
        return;
    }
    size_t len = c->read_len - NET_VHDR_LEN;
    if (virtq_chain_read(m, c, NET_VHDR_LEN, n->tx_buf, len) != (long)len) {
        STAT_ADD(n, st_tx_bad, 1);
        return;
    }
    hdr_get(h, &n->tx_hdr);
    struct net_frame f;
    bool parsed;
    if (!tx_hdr_ok(n, len, &f, &parsed))
        return;
    enum net_verdict v = n->filter.tx ? n->filter.tx(n->filter.opaque, n->tx_buf, len, parsed ? &f : NULL)
                                      : NET_PASS;
    if (v == NET_DROP) {
        STAT_ADD(n, st_tx_dropped, 1);
        return;
    }
    if (v == NET_LOCAL) {
        STAT_ADD(n, st_tx_local, 1);
        if (n->filter.local)
            n->filter.local(n->filter.opaque, n, n->tx_buf, len);
        return;
    }
    n->tx_len = len;
    n->tx_held = true;
    tx_flush(n);
}

/* Take what the driver made available, while the backend keeps up. */
static void tx_process(struct virtio_net *n)
{
    struct virtq *q = &n->env.queues[Q_TX];
    const struct gmem *m = n->env.mem;
    if (n->vq.broken[Q_TX])
        return;
    unsigned k;
    for (k = 0; k < TX_BATCH && tx_flush(n); k++) {
        struct virtq_chain c = { .seg = n->seg, .max_seg = CHAIN_MAX };
        int r = virtq_pop(q, m, &c);
        if (r == 0) {
            /* ask for kicks again, then look once more (a chain made
             * available in between is not missed) */
            int more = virtq_enable_notify(q, m);
            if (more == 0)
                break;
            if (more < 0) {
                vqueues_broken(&n->vq, Q_TX, virtq_strerror(q->err));
                break;
            }
            continue;
        }
        if (r == -EIO) {
            vqueues_broken(&n->vq, Q_TX, virtq_strerror(c.err));
            break;
        }
        if (r == -EINVAL) {
            STAT_ADD(n, st_tx_bad, 1);
            log_guest(&n->rl, "%s: bad transmit chain: %s", n->name, virtq_strerror(c.err));
        } else if (c.nread != c.nseg) {
            STAT_ADD(n, st_tx_bad, 1);
            log_guest(&n->rl, "%s: transmit chain with device-writable buffers", n->name);
        } else {
            tx_chain(n, &c);
        }
        vqueues_push(&n->vq, Q_TX, c.head, 0);
    }
    /* A full batch, so maybe chains left: the driver will not kick for
     * them (with VIRTIO_F_EVENT_IDX it kicks only when its index passes
     * the avail_event written when the ring was last found empty), so
     * come back at the loop's next pass, after the events waiting now. */
    if (k == TX_BATCH && !evloop_timer_armed(&n->tx_more))
        evloop_timer_arm(n->loop, &n->tx_more, 0);
}

/* ---- receive ---- */

/* The next frame for the guest: a local endpoint's first, else the
 * backend's. true if one is held in rx_buf. */
static bool rx_next(struct virtio_net *n)
{
    if (n->rx_held)
        return true;
    if (n->inj_n) {
        struct inj *i = &n->inj[n->inj_head];
        memcpy(n->rx_buf, i->frame, i->len);
        n->rx_len = i->len;
        memset(&n->rx_hdr, 0, sizeof(n->rx_hdr));
        free(i->frame);
        i->frame = NULL;
        n->inj_head = (n->inj_head + 1) % VIRTIO_NET_INJECT_MAX;
        n->inj_n--;
        n->rx_held = true;
        return true;
    }
    if (n->be_failed)
        return false;
    ssize_t r = n->be->ops->recv(n->be, &n->rx_hdr, n->rx_buf, NET_FRAME_MAX);
    if (r == -EAGAIN)
        return false;
    if (r < 0) {
        backend_failed(n, (int)r);
        return false;
    }
    if (!n->be->vnet_hdr)
        memset(&n->rx_hdr, 0, sizeof(n->rx_hdr));
    n->rx_len = (size_t)r;
    n->rx_held = true;
    return true;
}

/* Write the held frame into the guest's receive buffers: 1 delivered (or
 * dropped: too large for them), 0 not enough buffers now (nothing
 * consumed), -1 the queue is unusable. With mergeable buffers a frame may
 * span chains (num_buffers in the first one's header; Linux takes the next
 * num_buffers used entries as the frame, so malformed chains met on the
 * way are handed back after it); otherwise it must fit one. */
static int rx_deliver(struct virtio_net *n)
{
    struct virtq *q = &n->env.queues[Q_RX];
    const struct gmem *m = n->env.mem;
    bool mrg = n->features & (1ull << VIRTIO_NET_F_MRG_RXBUF);
    size_t total = NET_VHDR_LEN + n->rx_len, done = 0;
    uint16_t heads[RX_BATCH], bad[RX_BATCH];
    uint32_t lens[RX_BATCH];
    unsigned nb = 0, nbad = 0;
    uint8_t hb[NET_VHDR_LEN];
    struct virtq_chain c0 = { .seg = n->seg0, .max_seg = CHAIN_MAX };
    int ret = 1;
    while (done < total) {
        struct virtq_chain cn = { .seg = n->seg, .max_seg = CHAIN_MAX };
        struct virtq_chain *c = nb == 0 ? &c0 : &cn;
        if (nb + nbad >= RX_BATCH || nb + nbad >= q->size) {
            /* the whole ring does not hold it: dropped */
            STAT_ADD(n, st_rx_dropped, 1);
            log_guest(&n->rl, "%s: a %zu-byte frame does not fit the guest's receive buffers", n->name, n->rx_len);
            for (unsigned i = 0; i < nb; i++)
                bad[nbad++] = heads[i];
            nb = 0;
            break;
        }
        int r = virtq_pop(q, m, c);
        if (r == 0) {
            int more = virtq_enable_notify(q, m);
            if (more > 0)
                continue;
            if (more < 0)
                r = -EIO;
        }
        if (r == -EIO) {
            vqueues_broken(&n->vq, Q_RX, virtq_strerror(q->err ? q->err : c->err));
            ret = -1;
            break;
        }
        if (r == 0) {
            /* not enough buffers now: give back what this frame took and
             * wait for the driver's kick */
            if (virtq_unpop(q, (uint16_t)(nb + nbad)) < 0)
                log_warn("%s: receive queue: cannot give chains back", n->name);
            return 0;
        }
        if (r == -EINVAL || c->nread != 0 || c->write_len < (nb == 0 ? NET_VHDR_LEN : 1u)) {
            STAT_ADD(n, st_rx_bad, 1);
            log_guest(&n->rl, "%s: bad receive chain: %s", n->name,
                      r == -EINVAL ? virtq_strerror(c->err) : "no (or too small a) device-writable buffer");
            bad[nbad++] = c->head;
            continue;
        }
        /* this chain takes [done, done + put) of header + frame */
        size_t put = total - done < c->write_len ? total - done : c->write_len;
        int w = 0;
        if (done == 0) {        /* the header first; num_buffers set below */
            n->rx_hdr.num_buffers = 1;
            hdr_put(hb, &n->rx_hdr);
            w = virtq_chain_write(m, c, 0, hb, NET_VHDR_LEN);
            if (w == 0)
                w = virtq_chain_write(m, c, NET_VHDR_LEN, n->rx_buf, put - NET_VHDR_LEN);
        } else {
            w = virtq_chain_write(m, c, 0, n->rx_buf + (done - NET_VHDR_LEN), put);
        }
        if (w < 0) {
            STAT_ADD(n, st_rx_bad, 1);
            bad[nbad++] = c->head;
            continue;
        }
        heads[nb] = c->head;
        lens[nb] = (uint32_t)put;
        nb++;
        done += put;
        if (!mrg && done < total) {
            /* without mergeable buffers one chain holds the whole frame */
            STAT_ADD(n, st_rx_dropped, 1);
            log_guest(&n->rl, "%s: a %zu-byte frame does not fit the guest's receive buffer (%u bytes)", n->name,
                      n->rx_len, (unsigned)c->write_len);
            bad[nbad++] = heads[--nb];
            break;
        }
    }
    if (nb > 1) {               /* num_buffers, in the first chain's header */
        n->rx_hdr.num_buffers = (uint16_t)nb;
        hdr_put(hb, &n->rx_hdr);
        if (virtq_chain_write(m, &c0, 0, hb, NET_VHDR_LEN) < 0)
            log_guest(&n->rl, "%s: receive buffer left guest memory", n->name);
    }
    for (unsigned i = 0; i < nb; i++)
        vqueues_push(&n->vq, Q_RX, heads[i], lens[i]);
    for (unsigned i = 0; i < nbad; i++)
        vqueues_push(&n->vq, Q_RX, bad[i], 0);
    if (ret < 0)
        return ret;
    if (nb) {
        STAT_ADD(n, st_rx_frames, 1);
        STAT_ADD(n, st_rx_bytes, n->rx_len);
        if (n->filter.rx)
            n->filter.rx(n->filter.opaque, n->rx_buf, n->rx_len);
    }
    n->rx_held = false;
    n->rx_charged = false;
    return 1;
}

static void rx_process(struct virtio_net *n)
{
    if (n->vq.broken[Q_RX] || !n->env.queues[Q_RX].ready) {
        n->rx_starved = true;
        return;
    }
    for (unsigned k = 0; ; k++) {
        if (k == RX_BATCH) {
            /* maybe more: an asynchronous backend's frames read ahead
             * wake nothing, so come back at the loop's next pass */
            if (!evloop_timer_armed(&n->tx_more))
                evloop_timer_arm(n->loop, &n->tx_more, 0);
            return;
        }
        if (!rx_next(n))
            return;
        if (!n->rx_charged) {
            if (!rl_charge(n, &n->rx_rl, n->rx_len))
                return;             /* the timer brings it back */
            n->rx_charged = true;
        }
        int r = rx_deliver(n);
        if (r <= 0) {
            n->rx_starved = true;   /* wait for the driver's kick */
            return;
        }
    }
}

int virtio_net_inject(struct virtio_net *n, const uint8_t *frame, size_t len)
{
    if (len < ETH_MIN || len > NET_FRAME_MAX)
        return -EMSGSIZE;
    if (n->inj_n == VIRTIO_NET_INJECT_MAX) {
        STAT_ADD(n, st_rx_dropped, 1);
        return -ENOBUFS;
    }
    uint8_t *f = malloc(len);
    if (!f)
        return -ENOMEM;
    memcpy(f, frame, len);
    unsigned i = (n->inj_head + n->inj_n) % VIRTIO_NET_INJECT_MAX;
    n->inj[i] = (struct inj){ f, len };
    n->inj_n++;
    return 0;
}

/* ---- the I/O thread (devices/virtio/evloop.h) ---- */

/* Both ways as far as they go, publish, and watch the backend for what
 * the device waits for: frames while the guest has receive buffers and
 * none is held, room while a frame waits to be sent. */
static void work(struct virtio_net *n)
{
    for (unsigned pass = 0;; pass++) {
        tx_process(n);
        if (n->inj_n)           /* answers of a local endpoint */
            n->rx_starved = false;
        if (!n->rx_starved)
            rx_process(n);
        if (!n->be->async || n->be_failed)
            break;
        /* an asynchronous backend: the batch goes to the kernel; what
         * completed meanwhile (frames, room) is looked at again, since the
         * flush took its wake-up */
        unsigned refused = 0;
        int r = n->be->ops->flush(n->be, &refused);
        if (refused)
            STAT_ADD(n, st_tx_be_err, refused);
        if (r < 0)
            backend_failed(n, r);
        if (r <= 0)
            break;
        if (pass == 3) {        /* enough for one wake-up: the rest at the next pass */
            if (!evloop_timer_armed(&n->tx_more))
                evloop_timer_arm(n->loop, &n->tx_more, 0);
            break;
        }
    }
    vqueues_publish(&n->vq, NULL);
    uint32_t ev = 0;
    if (!n->be_failed) {
        if (!n->rx_starved && !n->rx_held)
            ev |= EVLOOP_IN;
        if (n->tx_held)         /* an asynchronous backend's room comes as input */
            ev |= n->be->async ? EVLOOP_IN : EVLOOP_OUT;
    }
    evloop_mod(n->loop, n->be->fd, ev);
}

static void on_kick(void *opaque, int fd, uint32_t events)
{
    struct virtio_net *n = opaque;
    uint64_t v;
    (void)events;
    if (evloop_eventfd_take(fd, &v) < 0)
        log_debug("%s: kick eventfd: %s", n->name, strerror(errno));
    if (fd == n->env.kick_fd[Q_RX])
        n->rx_starved = false;
    work(n);
}

static void on_backend(void *opaque, int fd, uint32_t events)
{
    struct virtio_net *n = opaque;
    (void)fd;
    if ((events & EVLOOP_ERR) && !(events & EVLOOP_IN))
        backend_failed(n, -EIO);
    work(n);
}

/* The limiter's timer (tokens are there again) and the next transmit
 * pass after a full batch: both ways once more. */
static void on_timer(void *opaque)
{
    work(opaque);
}

static void *io_thread(void *arg)
{
    struct virtio_net *n = arg;
    if (sc_install(SC_NET, (enum sc_mode)n->env.seccomp) < 0) {
        log_err("%s: seccomp filter failed: device stopped", n->name);
        return NULL;
    }
    work(n);                    /* what the driver queued while stopped */
    int r = evloop_run(n->loop);
    if (r < 0)
        log_err("%s: event loop: %s: device stopped", n->name, strerror(-r));
    if (n->be->async)           /* nothing left posted on this thread's behalf */
        n->be->ops->quiesce(n->be);
    return NULL;
}

/* ---- lifecycle ---- */

/* Forget the fds of the last start (kick fds may differ the next time). */
static void unwatch(struct virtio_net *n)
{
    for (unsigned q = 0; q < NQUEUES; q++)
        if (n->env.kick_fd[q] >= 0)
            evloop_del(n->loop, n->env.kick_fd[q]);
    evloop_del(n->loop, n->be->fd);
    evloop_clear_stop(n->loop);
}

static int net_start(void *dev, const struct virtio_dev_env *env)
{
    struct virtio_net *n = dev;
    if (n->running)
        return -EALREADY;
    if (!env || !env->mem || !env->queues || env->nqueues != NQUEUES || !env->notify_used)
        return -EINVAL;
    n->env = *env;
    n->features = env->features;
    vqueues_init(&n->vq, &n->env, n->name);
    n->rx_starved = false;
    if (n->be->vnet_hdr && n->be->ops->set_offloads) {
        int r = n->be->ops->set_offloads(n->be, n->features);
        if (r < 0)
            log_warn("%s: setting the backend's offloads: %s", n->name, strerror(-r));
    }
    int r = 0;
    for (unsigned q = 0; q < NQUEUES && r == 0; q++)
        r = evloop_add(n->loop, env->kick_fd[q], EVLOOP_IN, on_kick, n);
    if (r == 0)
        r = evloop_add(n->loop, n->be->fd, 0, on_backend, n);
    if (r == 0 && (r = -pthread_create(&n->thread, NULL, io_thread, n)) == 0) {
        n->running = true;
        return 0;
    }
    log_err("%s: starting the I/O thread: %s", n->name, strerror(-r));
    unwatch(n);
    return r;
}

static void net_stop(void *dev)
{
    struct virtio_net *n = dev;
    if (!n->running)
        return;
    evloop_stop(n->loop);
    pthread_join(n->thread, NULL);
    n->running = false;
    unwatch(n);
    evloop_timer_cancel(n->loop, &n->rl_timer);
    evloop_timer_cancel(n->loop, &n->tx_more);
    if (n->tx_held) {           /* its chain was pushed: a frame lost, as a busy link loses them */
        n->tx_held = false;
        n->tx_charged = false;
        STAT_ADD(n, st_tx_be_err, 1);
    }
    vqueues_publish(&n->vq, NULL);
}

static void inj_clear(struct virtio_net *n)
{
    for (unsigned k = 0; k < n->inj_n; k++)
        free(n->inj[(n->inj_head + k) % VIRTIO_NET_INJECT_MAX].frame);
    memset(n->inj, 0, sizeof(n->inj));
    n->inj_head = n->inj_n = 0;
}

/* The driver went away: what it sent and what waited for it are dropped. */
static void net_reset(void *dev)
{
    struct virtio_net *n = dev;
    net_stop(n);
    n->rx_held = false;
    n->rx_charged = false;
    inj_clear(n);
}

static void net_destroy(void *dev)
{
    struct virtio_net *n = dev;
    if (!n)
        return;
    net_stop(n);
    inj_clear(n);
    if (n->be)
        n->be->ops->destroy(n->be);
    evloop_destroy(n->loop);
    pthread_mutex_destroy(&n->rl_lock);
    free(n->tx_buf);
    free(n->rx_buf);
    free(n);
}

int virtio_net_create(const struct virtio_net_opts *o, struct virtio_net **out, char *why, size_t wlen)
{
    if (!o->backend) {
        snprintf(why, wlen, "net: no backend");
        return -EINVAL;
    }
    if (o->mtu && o->mtu < VIRTIO_NET_MTU_MIN) {
        snprintf(why, wlen, "net: MTU %u below %u", o->mtu, VIRTIO_NET_MTU_MIN);
        o->backend->ops->destroy(o->backend);
        return -EINVAL;
    }
    struct virtio_net *n = calloc(1, sizeof(*n));
    if (n) {
        n->tx_buf = malloc(NET_FRAME_MAX);
        n->rx_buf = malloc(NET_FRAME_MAX);
    }
    if (!n || !n->tx_buf || !n->rx_buf) {
        if (n) {
            free(n->tx_buf);
            free(n->rx_buf);
        }
        free(n);
        o->backend->ops->destroy(o->backend);
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    snprintf(n->name, sizeof(n->name), "%s", o->name ? o->name : "net");
    memcpy(n->mac, o->mac, 6);
    n->mtu = o->mtu;
    n->be = o->backend;
    n->filter = o->filter;
    n->rl = LOG_LIMIT(10);
    atomic_store(&n->status, VIRTIO_NET_S_LINK_UP);
    pthread_mutex_init(&n->rl_lock, NULL);
    evloop_timer_init(&n->rl_timer, on_timer, n);
    evloop_timer_init(&n->tx_more, on_timer, n);
    uint64_t now = clock_mono_ns();
    int r = ratelimit_init(&n->tx_rl, o->tx_limit, now);
    if (r == 0)
        r = ratelimit_init(&n->rx_rl, o->rx_limit, now);
    if (r < 0) {
        snprintf(why, wlen, "net: rate limiter: refill time too long");
        n->loop = NULL;
        net_destroy(n);
        return r;
    }
    r = evloop_create(&n->loop);
    if (r < 0) {
        snprintf(why, wlen, "net: event loop: %s", strerror(-r));
        net_destroy(n);
        return r;
    }
    *out = n;
    return 0;
}

int virtio_net_set_limit(struct virtio_net *n, bool tx, const struct ratelimit_cfg *cfg)
{
    return ratelimit_update_locked(tx ? &n->tx_rl : &n->rx_rl, &n->rl_lock, cfg, clock_mono_ns());
}

void virtio_net_get_limit(struct virtio_net *n, bool tx, struct ratelimit_cfg *cfg)
{
    ratelimit_get_cfg_locked(tx ? &n->tx_rl : &n->rx_rl, &n->rl_lock, cfg);
}

void virtio_net_get_stats(const struct virtio_net *n, struct virtio_net_stats *s)
{
    struct virtio_net *m = (struct virtio_net *)n;
    s->tx_frames = atomic_load(&m->st_tx_frames);
    s->tx_bytes = atomic_load(&m->st_tx_bytes);
    s->tx_dropped = atomic_load(&m->st_tx_dropped);
    s->tx_local = atomic_load(&m->st_tx_local);
    s->tx_bad = atomic_load(&m->st_tx_bad);
    s->tx_backend_errors = atomic_load(&m->st_tx_be_err);
    s->tx_bad_offload = atomic_load(&m->st_tx_bad_offload);
    s->rx_frames = atomic_load(&m->st_rx_frames);
    s->rx_bytes = atomic_load(&m->st_rx_bytes);
    s->rx_dropped = atomic_load(&m->st_rx_dropped);
    s->rx_bad = atomic_load(&m->st_rx_bad);
    s->backend_failed = atomic_load(&m->st_be_failed);
    pthread_mutex_lock(&m->rl_lock);
    s->tx_throttled = m->tx_rl.stats.throttled;
    s->rx_throttled = m->rx_rl.stats.throttled;
    pthread_mutex_unlock(&m->rl_lock);
}

const struct virtio_dev_ops virtio_net_ops = {
    .name = "net",
    .device_id = VIRTIO_ID_NET,
    .nqueues = NQUEUES,
    .queue_max = VIRTIO_NET_QUEUE_MAX,
    .features = net_features,
    .config_read = net_config_read,
    .config_write = net_config_write,
    .config_size = net_config_size,
    .start = net_start,
    .stop = net_stop,
    .reset = net_reset,
    .destroy = net_destroy,
};
