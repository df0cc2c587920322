/* Frame I/O through io_uring. Contracts in net_uring.h. */
#include "devices/net/net_uring.h"

#ifdef MOAT_HAVE_URING

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "devices/virtio/uring_restrict.h"
#include "vmm/base/log.h"

/* user_data: kind << 32 | slot */
#define K_RX     1u
#define K_TX     2u
#define K_CANCEL 3u
#define K_PROBE  4u
#define UD(k, i) ((uint64_t)(k) << 32 | (uint32_t)(i))

enum { S_FREE = 0, S_POSTED, S_READY, S_HELD };

struct net_uring {
    struct io_uring ring;
    bool ring_ok;
    int efd;
    char name[32];
    unsigned nrx, ntx;
    size_t slot;
    uint8_t *rxmem, *txmem;
    uint8_t rx_state[NET_URING_MAX_SLOTS];
    uint32_t rx_len[NET_URING_MAX_SLOTS];
    /* frames read, in completion order (a FIFO of rx slots) */
    uint16_t ready[NET_URING_MAX_SLOTS];
    unsigned ready_head, ready_n;
    int held;                   /* the slot net_uring_recv handed out, or -1 */
    uint32_t tx_len[NET_URING_MAX_SLOTS];
    uint16_t tx_free[NET_URING_MAX_SLOTS];
    unsigned ntx_free;
    unsigned rx_posted, tx_inflight, cancels;
    unsigned tx_queued;         /* writes queued, not submitted yet */
    struct io_uring_sqe *chain_tail;   /* the last write queued, linked to what comes next */
    unsigned refused;
    unsigned news;              /* frames read, or room after send said -EAGAIN: since the flush began */
    bool tx_blocked;            /* send said -EAGAIN */
    int failed;                 /* 0, or the file's error */
    bool probe_done;
    int probe_res;
};

static void fail(struct net_uring *u, int err)
{
    if (!u->failed)
        u->failed = err;
}

static int submit(struct net_uring *u);
static void end_chain(struct net_uring *u);

/* An SQE for anything but a write (the write chain ends first). */
static struct io_uring_sqe *get_sqe(struct net_uring *u)
{
    end_chain(u);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {                 /* the ring is sized for everything in flight: a full SQ not submitted yet */
        submit(u);
        sqe = io_uring_get_sqe(&u->ring);
    }
    return sqe;
}

/* The writes of a batch are linked (IOSQE_IO_LINK): each starts when the
 * one before is done, so frames leave in order even when the file makes
 * one wait; the chain ends before anything else is queued or submitted. */
static void end_chain(struct net_uring *u)
{
    if (u->chain_tail)
        u->chain_tail->flags &= (uint8_t)~IOSQE_IO_LINK;
    u->chain_tail = NULL;
}

static int submit(struct net_uring *u)
{
    end_chain(u);
    int r = io_uring_submit(&u->ring);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
        fail(u, r);
    else
        u->tx_queued = 0;
    return r;
}

static void queue_write(struct net_uring *u, unsigned i)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {
        submit(u);
        sqe = io_uring_get_sqe(&u->ring);
    }
    if (!sqe) {
        fail(u, -EIO);
        u->tx_free[u->ntx_free++] = (uint16_t)i;
        return;
    }
    io_uring_prep_write(sqe, 0, u->txmem + (size_t)i * u->slot, u->tx_len[i], 0);
    sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_LINK;
    io_uring_sqe_set_data64(sqe, UD(K_TX, i));
    u->chain_tail = sqe;
    u->tx_inflight++;
    u->tx_queued++;
}

static void post_read(struct net_uring *u, unsigned i)
{
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe) {
        fail(u, -EIO);
        return;
    }
    io_uring_prep_read(sqe, 0, u->rxmem + (size_t)i * u->slot, (unsigned)u->slot, 0);
    sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, UD(K_RX, i));
    u->rx_state[i] = S_POSTED;
    u->rx_posted++;
}

static void on_cqe(struct net_uring *u, uint64_t ud, int res)
{
    unsigned kind = (unsigned)(ud >> 32), i = (uint32_t)ud;
    switch (kind) {
    case K_RX:
        if (i >= u->nrx || u->rx_state[i] != S_POSTED)
            break;
        u->rx_posted--;
        u->rx_state[i] = S_FREE;
        if (res > 0) {
            u->rx_len[i] = (uint32_t)res;
            u->rx_state[i] = S_READY;
            u->news++;
            u->ready[(u->ready_head + u->ready_n++) % NET_URING_MAX_SLOTS] = (uint16_t)i;
        } else if (res == 0) {
            fail(u, -EPIPE);
        } else if (res != -EAGAIN && res != -EINTR && res != -ECANCELED) {
            fail(u, res);       /* EAGAIN, EINTR, a cancel: posted again at the next flush */
        }
        break;
    case K_TX:
        if (i >= u->ntx)
            break;
        u->tx_inflight--;
        if ((res == -EAGAIN || res == -EINTR || res == -ECANCELED) && !u->failed) {
            queue_write(u, i);  /* again, as it was (-ECANCELED: one before it in its chain failed) */
            break;
        }
        if (res < 0 && res != -EMSGSIZE && res != -EINVAL)
            fail(u, res);
        else if (res < 0 || (uint32_t)res != u->tx_len[i])
            u->refused++;       /* a TAP takes a frame whole or not at all */
        u->tx_free[u->ntx_free++] = (uint16_t)i;
        if (u->tx_blocked)
            u->news++;
        break;
    case K_CANCEL:
        if (u->cancels)
            u->cancels--;
        break;
    case K_PROBE:
        u->probe_done = true;
        u->probe_res = res;
        break;
    default:
        log_warn("%s: completion of unknown kind %u", u->name, kind);
    }
}

/* Take in every completion there is: how many. */
static unsigned reap(struct net_uring *u)
{
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&u->ring, head, cqe) {
        on_cqe(u, cqe->user_data, cqe->res);
        n++;
    }
    io_uring_cq_advance(&u->ring, n);
    return n;
}

int net_uring_eventfd(const struct net_uring *u) { return u->efd; }

int net_uring_send(struct net_uring *u, const struct iovec *iov, unsigned n)
{
    if (u->failed)
        return u->failed;
    size_t total = 0;
    for (unsigned k = 0; k < n; k++)
        total += iov[k].iov_len;
    if (total > u->slot)
        return -EMSGSIZE;
    if (u->ntx_free == 0) {     /* the batch so far goes now: a TAP write completes inside the submit */
        submit(u);
        reap(u);
    }
    if (u->tx_inflight > u->tx_queued)
        reap(u);
    /* no new write while one submitted waits (a TAP never makes one
     * wait): the next batch would not be ordered after it */
    if (u->ntx_free == 0 || u->tx_inflight > u->tx_queued) {
        u->tx_blocked = true;
        return u->failed ? u->failed : -EAGAIN;
    }
    u->tx_blocked = false;
    unsigned i = u->tx_free[--u->ntx_free];
    uint8_t *p = u->txmem + (size_t)i * u->slot;
    for (unsigned k = 0; k < n; k++) {
        memcpy(p, iov[k].iov_base, iov[k].iov_len);
        p += iov[k].iov_len;
    }
    u->tx_len[i] = (uint32_t)total;
    queue_write(u, i);
    return u->failed;
}

ssize_t net_uring_recv(struct net_uring *u, const uint8_t **data)
{
    if (u->held >= 0)           /* the last one is consumed by now */
        net_uring_recv_done(u);
    if (u->ready_n == 0)
        reap(u);
    if (u->ready_n == 0)
        return u->failed ? u->failed : -EAGAIN;
    unsigned i = u->ready[u->ready_head];
    u->ready_head = (u->ready_head + 1) % NET_URING_MAX_SLOTS;
    u->ready_n--;
    u->rx_state[i] = S_HELD;
    u->held = (int)i;
    *data = u->rxmem + (size_t)i * u->slot;
    return (ssize_t)u->rx_len[i];
}

void net_uring_recv_done(struct net_uring *u)
{
    if (u->held < 0)
        return;
    u->rx_state[u->held] = S_FREE;
    u->held = -1;
}

int net_uring_flush(struct net_uring *u, unsigned *refused)
{
    u->news = 0;
    reap(u);
    for (unsigned i = 0; i < u->nrx && !u->failed; i++)
        if (u->rx_state[i] == S_FREE)
            post_read(u, i);
    submit(u);
    /* drained after the submit (whose own completions, a TAP's writes,
     * signalled it: no wake-up for those), before the completions are
     * taken in: one that comes later signals it anew */
    uint64_t v;
    if (read(u->efd, &v, sizeof v) < 0 && errno != EAGAIN && errno != EINTR)
        log_debug("%s: eventfd: %s", u->name, strerror(errno));
    reap(u);
    if (refused) {
        *refused = u->refused;
        u->refused = 0;
    }
    if (u->failed)
        return u->failed;
    return u->news > 0;
}

/* Wait (at most 1 s) for one completion and take in what came; false:
 * nothing came, or the wait itself failed (logged). */
static bool wait_some(struct net_uring *u)
{
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = { .tv_sec = 1 };
    end_chain(u);
    int r = (u->ring.features & IORING_FEAT_EXT_ARG) ? io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, &ts, NULL)
                                                     : io_uring_submit_and_wait(&u->ring, 1);
    if (r >= 0)
        u->tx_queued = 0;
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && r != -ETIME) {
        log_err("%s: io_uring_enter: %s", u->name, strerror(-r));
        return false;
    }
    return reap(u) > 0 || r == -EINTR;
}

void net_uring_quiesce(struct net_uring *u)
{
    if (!u || !u->ring_ok)
        return;
    for (unsigned i = 0; i < u->nrx; i++) {
        if (u->rx_state[i] != S_POSTED)
            continue;
        struct io_uring_sqe *sqe = get_sqe(u);
        if (!sqe)
            break;
        io_uring_prep_cancel64(sqe, UD(K_RX, i), 0);
        sqe->flags |= IOSQE_FIXED_FILE;
        io_uring_sqe_set_data64(sqe, UD(K_CANCEL, i));
        u->cancels++;
    }
    /* a cancelled read completes at once; a write to a TAP never waits:
     * 10 s without a completion is a kernel that does not answer (logged,
     * rather than a stop that never ends) */
    for (unsigned idle = 0; (u->rx_posted || u->tx_inflight || u->cancels) && idle < 10;)
        idle = wait_some(u) ? 0 : idle + 1;
    if (u->rx_posted || u->tx_inflight || u->cancels)
        log_err("%s: io_uring: %u reads, %u writes, %u cancels still in flight after 10 s", u->name, u->rx_posted,
                u->tx_inflight, u->cancels);
}

int net_uring_try_op(struct net_uring *u, uint8_t opcode, uint8_t sqe_flags)
{
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe)
        return -EBUSY;
    memset(sqe, 0, sizeof(*sqe));
    sqe->opcode = opcode;
    sqe->flags = sqe_flags;
    sqe->fd = (sqe_flags & IOSQE_FIXED_FILE) ? 0 : -1;
    io_uring_sqe_set_data64(sqe, UD(K_PROBE, 0));
    u->probe_done = false;
    for (unsigned idle = 0; !u->probe_done && idle < 10;)
        idle = wait_some(u) ? 0 : idle + 1;
    return u->probe_done ? u->probe_res : -ETIME;
}

int net_uring_try_register(struct net_uring *u, int fd)
{
    return io_uring_register_files_update(&u->ring, 0, &fd, 1);
}

static int setup(struct net_uring *u, int fd, char *why, size_t wlen)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_R_DISABLED;
    unsigned entries = 1;
    /* every read, every write, a cancel per read, a probe */
    while (entries < 2 * u->nrx + u->ntx + 1)
        entries <<= 1;
    int r = io_uring_queue_init_params(entries, &u->ring, &p);
    if (r < 0) {
        int d = 0, dfd = open("/proc/sys/kernel/io_uring_disabled", O_RDONLY | O_CLOEXEC);
        if (dfd >= 0) {
            char b[8] = { 0 };
            if (read(dfd, b, sizeof b - 1) > 0)
                d = atoi(b);
            close(dfd);
        }
        snprintf(why, wlen, "io_uring_setup: %s%s", strerror(-r),
                 d ? " (/proc/sys/kernel/io_uring_disabled is set on this host)" : "");
        return r;
    }
    u->ring_ok = true;
    if ((r = io_uring_register_files(&u->ring, &fd, 1)) < 0) {
        snprintf(why, wlen, "io_uring register files: %s", strerror(-r));
        return r;
    }
    if ((r = io_uring_register_eventfd(&u->ring, u->efd)) < 0) {
        snprintf(why, wlen, "io_uring register eventfd: %s", strerror(-r));
        return r;
    }
    static const uint8_t ops[] = { IORING_OP_READ, IORING_OP_WRITE, IORING_OP_ASYNC_CANCEL };
    static const uint8_t reg[] = { IORING_UNREGISTER_FILES };
    struct uring_rules rules = { .ops = ops, .nops = sizeof ops, .flags_allowed = IOSQE_FIXED_FILE | IOSQE_IO_LINK,
                                 .flags_required = IOSQE_FIXED_FILE, .reg_ops = reg, .nreg_ops = sizeof reg };
    return uring_restrict_enable(&u->ring, &rules, why, wlen);
}

void net_uring_destroy(struct net_uring *u)
{
    if (!u)
        return;
    if (u->ring_ok) {
        net_uring_quiesce(u);
        /* the file goes now, not when the kernel tears the ring down
         * later: a TAP is free for the next process at once */
        int r = io_uring_unregister_files(&u->ring);
        if (r < 0 && r != -ENXIO)
            log_debug("%s: io_uring unregister files: %s", u->name, strerror(-r));
        io_uring_queue_exit(&u->ring);
    }
    if (u->efd >= 0)
        close(u->efd);
    free(u->rxmem);
    free(u->txmem);
    free(u);
}

int net_uring_create(const struct net_uring_cfg *c, struct net_uring **out, char *why, size_t wlen)
{
    *out = NULL;
    if (!c || c->fd < 0 || c->rx_slots == 0 || c->rx_slots > NET_URING_MAX_SLOTS || c->tx_slots == 0 ||
        c->tx_slots > NET_URING_MAX_SLOTS || c->slot_size == 0 || c->slot_size > (1u << 20)) {
        snprintf(why, wlen, "io_uring: bad configuration");
        return -EINVAL;
    }
    struct net_uring *u = calloc(1, sizeof(*u));
    if (!u) {
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    snprintf(u->name, sizeof u->name, "%s", c->name ? c->name : "net");
    u->nrx = c->rx_slots;
    u->ntx = c->tx_slots;
    u->slot = c->slot_size;
    u->held = -1;
    u->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    u->rxmem = malloc(u->nrx * u->slot);
    u->txmem = malloc(u->ntx * u->slot);
    if (u->efd < 0 || !u->rxmem || !u->txmem) {
        int e = u->efd < 0 ? -errno : -ENOMEM;
        snprintf(why, wlen, "%s", strerror(-e));
        net_uring_destroy(u);
        return e;
    }
    for (unsigned i = 0; i < u->ntx; i++)
        u->tx_free[u->ntx_free++] = (uint16_t)(u->ntx - 1 - i);
    int fl = fcntl(c->fd, F_GETFL);
    if (fl < 0 || ((fl & O_NONBLOCK) && fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK) < 0)) {
        int e = -errno;
        snprintf(why, wlen, "fcntl: %s", strerror(-e));
        net_uring_destroy(u);
        return e;
    }
    int r = setup(u, c->fd, why, wlen);
    if (r < 0) {
        net_uring_destroy(u);
        return r;
    }
    *out = u;
    return 0;
}

#endif
