/* Block I/O engine: io_uring with a thread-pool fallback. Contracts in
 * blk_uring.h. */
#include "devices/blk/blk_uring.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef MOAT_HAVE_URING
#include <liburing.h>
#endif

#include "devices/virtio/evloop.h"
#include "devices/virtio/uring_restrict.h"
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"

#define TAG_IO   0u
#define TAG_KICK 1u
#define TAG_STOP 2u
#define TAG_CANCEL 3u
#define POOL_WORKERS 4

struct blk_engine {
    enum blk_engine_kind kind;
    int file_fd;
    int stop_fd;
    int kick_fd[BLK_ENGINE_MAX_KICK];
    unsigned nkick;
    unsigned max_inflight, inflight;
    const struct blk_engine_cb *cb;
    void *opaque;
    int (*exec)(void *, struct blk_io *);
    void *exec_opaque;
    char name[32];
    int seccomp;                        /* enum sc_mode: each thread's filter */
    pthread_t thread;
    bool thread_started;
    uint64_t stop_buf;
#ifdef MOAT_HAVE_URING
    struct io_uring *ring;              /* the device's (cfg.ring) or own */
    struct blk_ring *own;
    bool files_set;                     /* slots filled: cleared at stop */
    bool kick_armed[BLK_ENGINE_MAX_KICK];
    unsigned cancels;                   /* POLL_REMOVEs in flight */
#endif
    /* thread pool */
    pthread_t worker[POOL_WORKERS];
    unsigned nworkers;
    pthread_mutex_t plock;
    pthread_cond_t pcond;
    bool plock_ok;
    struct blk_io *jobs_head, *jobs_tail, *done_head;
    bool quit;
    int done_fd;
};

const char *blk_engine_kind_name(enum blk_engine_kind k)
{
    switch (k) {
    case BLK_ENGINE_URING: return "io_uring";
    case BLK_ENGINE_POOL: return "thread pool";
    default: return "auto";
    }
}

enum blk_engine_kind blk_engine_kind_of(const struct blk_engine *e) { return e->kind; }

unsigned blk_engine_space(const struct blk_engine *e)
{
    return e->inflight < e->max_inflight ? e->max_inflight - e->inflight : 0;
}

/* Skip n bytes of a transfer (a short read/write was done). */
static void io_advance(struct blk_io *io, uint64_t n)
{
    io->off += n;
    io->len -= n;
    while (n && io->niov) {
        if (n >= io->iov[0].iov_len) {
            n -= io->iov[0].iov_len;
            io->iov++;
            io->niov--;
        } else {
            io->iov[0].iov_base = (uint8_t *)io->iov[0].iov_base + n;
            io->iov[0].iov_len -= n;
            n = 0;
        }
    }
}

static uint64_t io_total(const struct blk_io *io)
{
    uint64_t t = 0;
    for (unsigned i = 0; i < io->niov; i++)
        t += io->iov[i].iov_len;
    return t;
}

/* What to do with a result: 1 = resubmit (io updated), 0 = finished with
 * io->res set. */
static int io_result(struct blk_io *io, int64_t res)
{
    if (res == -EAGAIN || res == -EINTR)
        return 1;
    switch (io->op) {
    case BLK_IO_READ:
    case BLK_IO_WRITE:
        if (res < 0) {
            io->res = (int)res;
            return 0;
        }
        if (res == 0 && io->len) {      /* the file shrank under us */
            io->res = -EIO;
            return 0;
        }
        if ((uint64_t)res < io->len) {
            io_advance(io, (uint64_t)res);
            return 1;
        }
        io->res = 0;
        return 0;
    case BLK_IO_ZERO:
        if (res == -EOPNOTSUPP || res == -EINVAL) {
            io->op = BLK_IO_PUNCH;      /* a hole reads back as zeroes */
            return 1;
        }
        io->res = res < 0 ? (int)res : 0;
        return 0;
    default:
        io->res = res < 0 ? (int)res : 0;
        return 0;
    }
}

static void finish(struct blk_engine *e, struct blk_io *io)
{
    e->inflight--;
    e->cb->done(e->opaque, io);
}

/* At thread start, look at every queue once: requests made available while
 * the device was stopped (pause, snapshot) are not lost for want of a kick. */
static void initial_kicks(struct blk_engine *e)
{
    for (unsigned q = 0; q < e->nkick; q++)
        e->cb->kick(e->opaque, q);
    e->cb->batch(e->opaque, false);
}

/* ---------------- thread pool ---------------- */

static int64_t exec_once(int fd, struct blk_io *io)
{
    ssize_t r = 0;
    switch (io->op) {
    case BLK_IO_READ: r = preadv(fd, io->iov, (int)io->niov, (off_t)io->off); break;
    case BLK_IO_WRITE: r = pwritev(fd, io->iov, (int)io->niov, (off_t)io->off); break;
    case BLK_IO_FLUSH: r = fdatasync(fd); break;
    case BLK_IO_PUNCH:
        r = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)io->off, (off_t)io->len);
        break;
    case BLK_IO_ZERO:
        r = fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)io->off, (off_t)io->len);
        break;
    }
    return r < 0 ? -errno : r;
}

static void *pool_worker(void *arg)
{
    struct blk_engine *e = arg;
    sc_install(SC_BLK, (enum sc_mode)e->seccomp);    /* logs a failure; kill mode never fails in practice */
    pthread_mutex_lock(&e->plock);
    for (;;) {
        while (!e->quit && !e->jobs_head)
            pthread_cond_wait(&e->pcond, &e->plock);
        if (!e->jobs_head)
            break;                      /* quit, nothing left */
        struct blk_io *io = e->jobs_head;
        e->jobs_head = io->next;
        if (!e->jobs_head)
            e->jobs_tail = NULL;
        pthread_mutex_unlock(&e->plock);
        if (e->exec)
            io->res = e->exec(e->exec_opaque, io);
        else
            while (io_result(io, exec_once(e->file_fd, io)))
                ;
        pthread_mutex_lock(&e->plock);
        io->next = e->done_head;
        e->done_head = io;
        uint64_t one = 1;
        if (write(e->done_fd, &one, sizeof one) < 0)
            log_err("%s: completion eventfd: %s", e->name, strerror(errno));
    }
    pthread_mutex_unlock(&e->plock);
    return NULL;
}

static void drain_fd(int fd)
{
    uint64_t v;
    if (read(fd, &v, sizeof v) < 0 && errno != EAGAIN && errno != EINTR)
        log_debug("eventfd read: %s", strerror(errno));
}

/* Reset a kick eventfd found readable, without blocking: the transport's
 * are blocking (KVM ioeventfds), a vhost-user frontend's usually are
 * O_NONBLOCK, and the device gets them as they are. */
static void take_kick(struct blk_engine *e, unsigned q)
{
    uint64_t v;
    int r = evloop_eventfd_take(e->kick_fd[q], &v);
    if (r < 0)
        log_debug("%s: kick eventfd (queue %u): %s", e->name, q, strerror(-r));
}

static void *pool_thread(void *arg)
{
    struct blk_engine *e = arg;
    sc_install(SC_BLK, (enum sc_mode)e->seccomp);    /* logs a failure; kill mode never fails in practice */
    bool stopping = false;
    struct pollfd p[2 + BLK_ENGINE_MAX_KICK];
    initial_kicks(e);
    for (;;) {
        p[0] = (struct pollfd){ .fd = e->stop_fd, .events = POLLIN };
        p[1] = (struct pollfd){ .fd = e->done_fd, .events = POLLIN };
        for (unsigned q = 0; q < e->nkick; q++)
            p[2 + q] = (struct pollfd){ .fd = stopping ? -1 : e->kick_fd[q], .events = POLLIN };
        int r = poll(p, 2 + e->nkick, -1);
        if (r < 0) {
            if (errno != EINTR)
                log_err("%s: poll: %s", e->name, strerror(errno));
            continue;
        }
        if (p[0].revents & POLLIN) {
            drain_fd(e->stop_fd);
            stopping = true;
        }
        if (p[1].revents & POLLIN) {
            drain_fd(e->done_fd);
            pthread_mutex_lock(&e->plock);
            struct blk_io *list = e->done_head, *fifo = NULL;
            e->done_head = NULL;
            pthread_mutex_unlock(&e->plock);
            while (list) {                  /* reverse: completion order */
                struct blk_io *n = list->next;
                list->next = fifo;
                fifo = list;
                list = n;
            }
            while (fifo) {
                struct blk_io *n = fifo->next;
                finish(e, fifo);
                fifo = n;
            }
        }
        for (unsigned q = 0; q < e->nkick && !stopping; q++) {
            if (p[2 + q].revents & POLLIN) {
                take_kick(e, q);
                e->cb->kick(e->opaque, q);
            }
        }
        e->cb->batch(e->opaque, stopping);
        if (stopping && e->inflight == 0)
            break;
    }
    return NULL;
}

static int pool_submit(struct blk_engine *e, struct blk_io *io)
{
    io->next = NULL;
    pthread_mutex_lock(&e->plock);
    if (e->jobs_tail)
        e->jobs_tail->next = io;
    else
        e->jobs_head = io;
    e->jobs_tail = io;
    pthread_cond_signal(&e->pcond);
    pthread_mutex_unlock(&e->plock);
    return 0;
}

static int pool_setup(struct blk_engine *e)
{
    e->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (e->done_fd < 0)
        return -errno;
    if (pthread_mutex_init(&e->plock, NULL))
        return -ENOMEM;
    if (pthread_cond_init(&e->pcond, NULL)) {
        pthread_mutex_destroy(&e->plock);
        return -ENOMEM;
    }
    e->plock_ok = true;
    unsigned n = e->max_inflight < POOL_WORKERS ? e->max_inflight : POOL_WORKERS;
    for (unsigned i = 0; i < n; i++) {
        int r = pthread_create(&e->worker[i], NULL, pool_worker, e);
        if (r)
            return -r;
        e->nworkers++;
    }
    return 0;
}

static void pool_teardown(struct blk_engine *e)
{
    if (e->plock_ok) {
        pthread_mutex_lock(&e->plock);
        e->quit = true;
        pthread_cond_broadcast(&e->pcond);
        pthread_mutex_unlock(&e->plock);
        for (unsigned i = 0; i < e->nworkers; i++)
            pthread_join(e->worker[i], NULL);
        pthread_cond_destroy(&e->pcond);
        pthread_mutex_destroy(&e->plock);
    }
    if (e->done_fd >= 0)
        close(e->done_fd);
}

/* ---------------- io_uring ---------------- */

#ifdef MOAT_HAVE_URING
#define FIXED_FILE 0u
#define FIXED_STOP 1u
#define FIXED_KICK0 2u
#define BLK_RING_FILES (FIXED_KICK0 + BLK_ENGINE_MAX_KICK)

struct blk_ring {
    struct io_uring ring;
    unsigned max_inflight;
};

int blk_ring_create(unsigned max_inflight, struct blk_ring **out, char *why, size_t wlen)
{
    *out = NULL;
    if (max_inflight == 0 || max_inflight > 1024)
        return -EINVAL;
    struct blk_ring *R = calloc(1, sizeof *R);
    if (!R)
        return -ENOMEM;
    R->max_inflight = max_inflight;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_R_DISABLED;
    /* requests, one poll and one POLL_REMOVE per kick, the stop READ */
    unsigned entries = 1;
    while (entries < max_inflight + 2 * BLK_ENGINE_MAX_KICK + 1)
        entries <<= 1;
    int r = io_uring_queue_init_params(entries, &R->ring, &p);
    if (r < 0) {
        snprintf(why, wlen, "io_uring_setup: %s", strerror(-r));
        if (r == -EPERM) {
            size_t l = strlen(why);
            snprintf(why + l, wlen - l, " (is io_uring disabled? /proc/sys/kernel/io_uring_disabled)");
        }
        free(R);
        return r;
    }
    int fds[BLK_RING_FILES];
    for (unsigned i = 0; i < BLK_RING_FILES; i++)
        fds[i] = -1;                    /* empty slots, filled at each start */
    if ((r = io_uring_register_files(&R->ring, fds, BLK_RING_FILES)) < 0) {
        snprintf(why, wlen, "io_uring register files: %s", strerror(-r));
        goto fail;
    }
    static const uint8_t ops[] = { IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_FSYNC, IORING_OP_FALLOCATE,
                                   IORING_OP_READ, IORING_OP_POLL_ADD, IORING_OP_POLL_REMOVE };
    static const uint8_t reg_ops[] = { IORING_REGISTER_FILES_UPDATE };
    struct uring_rules rules = { .ops = ops, .nops = sizeof ops, .flags_allowed = IOSQE_FIXED_FILE,
                                 .flags_required = IOSQE_FIXED_FILE, .reg_ops = reg_ops,
                                 .nreg_ops = sizeof reg_ops };
    if ((r = uring_restrict_enable(&R->ring, &rules, why, wlen)) < 0)
        goto fail;
    *out = R;
    return 0;
fail:
    io_uring_queue_exit(&R->ring);
    free(R);
    return r;
}

void blk_ring_destroy(struct blk_ring *R)
{
    if (!R)
        return;
    io_uring_queue_exit(&R->ring);
    free(R);
}

int blk_ring_try_op(struct blk_ring *R, uint8_t opcode, uint8_t sqe_flags)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&R->ring);
    if (!sqe)
        return -EBUSY;
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = opcode;
    sqe->flags = sqe_flags;
    sqe->fd = (sqe_flags & IOSQE_FIXED_FILE) ? 0 : -1;
    int r = io_uring_submit(&R->ring);
    if (r < 0)
        return r;
    struct io_uring_cqe *cqe;
    if ((r = io_uring_wait_cqe(&R->ring, &cqe)) < 0)
        return r;
    r = cqe->res;
    io_uring_cqe_seen(&R->ring, cqe);
    return r;
}

int blk_ring_try_register(struct blk_ring *R, unsigned op, void *arg, unsigned n)
{
    long r = syscall(__NR_io_uring_register, R->ring.ring_fd, op, arg, n);
    return r < 0 ? -errno : (int)r;
}

static struct io_uring_sqe *get_sqe(struct blk_engine *e)
{
    struct io_uring_sqe *sqe;
    while (!(sqe = io_uring_get_sqe(e->ring))) {
        int r = io_uring_submit(e->ring);
        if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
            log_err("%s: io_uring_submit: %s", e->name, strerror(-r));
            return NULL;
        }
    }
    return sqe;
}

static int uring_queue(struct blk_engine *e, struct blk_io *io)
{
    struct io_uring_sqe *sqe = get_sqe(e);
    if (!sqe)
        return -EIO;
    switch (io->op) {
    case BLK_IO_READ: io_uring_prep_readv(sqe, FIXED_FILE, io->iov, io->niov, io->off); break;
    case BLK_IO_WRITE: io_uring_prep_writev(sqe, FIXED_FILE, io->iov, io->niov, io->off); break;
    case BLK_IO_FLUSH: io_uring_prep_fsync(sqe, FIXED_FILE, IORING_FSYNC_DATASYNC); break;
    case BLK_IO_PUNCH:
        io_uring_prep_fallocate(sqe, FIXED_FILE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                (off_t)io->off, (off_t)io->len);
        break;
    case BLK_IO_ZERO:
        io_uring_prep_fallocate(sqe, FIXED_FILE, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                                (off_t)io->off, (off_t)io->len);
        break;
    }
    sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, (uint64_t)io->gen << 32 | (uint64_t)io->slot << 8 | TAG_IO);
    return 0;
}

/* The stop eventfd (ours, blocking): an 8-byte READ. */
static int uring_arm(struct blk_engine *e, unsigned fixed, uint64_t *buf, uint64_t tag)
{
    struct io_uring_sqe *sqe = get_sqe(e);
    if (!sqe)
        return -EIO;
    io_uring_prep_read(sqe, (int)fixed, buf, sizeof *buf, 0);
    sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, tag);
    return 0;
}

/* Queue q's kick eventfd: a one-shot POLL_ADD, then the thread reads the
 * counter itself without blocking (take_kick). A READ would not do for
 * an O_NONBLOCK eventfd: kernels that honour the flag in io_uring (5.x)
 * complete it at once with -EAGAIN. */
static int uring_arm_kick(struct blk_engine *e, unsigned q)
{
    struct io_uring_sqe *sqe = get_sqe(e);
    if (!sqe)
        return -EIO;
    io_uring_prep_poll_add(sqe, (int)(FIXED_KICK0 + q), POLLIN);
    sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, (uint64_t)q << 8 | TAG_KICK);
    e->kick_armed[q] = true;
    return 0;
}

/* Stopping: take back every armed kick poll (POLL_REMOVE; the poll ends
 * with -ECANCELED, or has fired already), so that the ring, which the
 * device keeps for its next start, holds nothing of this engine. */
static void uring_cancel_kicks(struct blk_engine *e)
{
    for (unsigned q = 0; q < e->nkick; q++) {
        if (!e->kick_armed[q])
            continue;
        struct io_uring_sqe *sqe = get_sqe(e);
        if (!sqe)
            return;
        io_uring_prep_poll_remove(sqe, (uint64_t)q << 8 | TAG_KICK);
        sqe->flags |= IOSQE_FIXED_FILE;     /* required by the ring's restrictions; unused */
        io_uring_sqe_set_data64(sqe, TAG_CANCEL);
        e->cancels++;
    }
}

static bool uring_idle(const struct blk_engine *e)
{
    if (e->inflight || e->cancels)
        return false;
    for (unsigned q = 0; q < e->nkick; q++)
        if (e->kick_armed[q])
            return false;
    return true;
}

static void uring_cqe(struct blk_engine *e, uint64_t ud, int res, bool *stopping)
{
    unsigned tag = ud & 0xff;
    if (tag == TAG_STOP) {
        if (!*stopping)
            uring_cancel_kicks(e);
        *stopping = true;
        return;
    }
    if (tag == TAG_CANCEL) {
        if (e->cancels)
            e->cancels--;
        return;
    }
    if (tag == TAG_KICK) {
        unsigned q = (unsigned)(ud >> 8) & 0xff;
        if (q >= e->nkick)
            return;
        e->kick_armed[q] = false;
        if (*stopping)
            return;
        if (res < 0 && res != -EINTR)
            log_err("%s: kick poll (queue %u): %s", e->name, q, strerror(-res));
        /* Reset the counter, then re-arm: a kick after the reset fires
         * again (the poll finds the counter non-zero). */
        take_kick(e, q);
        uring_arm_kick(e, q);
        e->cb->kick(e->opaque, q);
        return;
    }
    uint32_t slot = (uint32_t)(ud >> 8) & 0xffffff, gen = (uint32_t)(ud >> 32);
    struct blk_io *io = e->cb->lookup(e->opaque, slot, gen);
    if (!io) {
        log_err("%s: completion for stale slot %u gen %u", e->name, slot, gen);
        e->inflight--;
        return;
    }
    if (io_result(io, res)) {
        if (uring_queue(e, io) == 0)
            return;
        io->res = -EIO;
    }
    finish(e, io);
}

static void *uring_thread(void *arg)
{
    struct blk_engine *e = arg;
    sc_install(SC_BLK, (enum sc_mode)e->seccomp);    /* logs a failure; kill mode never fails in practice */
    bool stopping = false;
    uring_arm(e, FIXED_STOP, &e->stop_buf, TAG_STOP);
    for (unsigned q = 0; q < e->nkick; q++)
        uring_arm_kick(e, q);
    initial_kicks(e);
    for (;;) {
        int r = io_uring_submit_and_wait(e->ring, 1);
        if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && r != -ETIME) {
            log_err("%s: io_uring_enter: %s", e->name, strerror(-r));
            usleep(1000);
        }
        unsigned head, n = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(e->ring, head, cqe) {
            uring_cqe(e, cqe->user_data, cqe->res, &stopping);
            n++;
        }
        io_uring_cq_advance(e->ring, n);
        if (n)
            e->cb->batch(e->opaque, stopping);
        if (stopping && uring_idle(e))
            break;
    }
    return NULL;
}

/* The engine's files into the ring's slots (an allowed register op). */
static int uring_setup(struct blk_engine *e, struct blk_ring *ring, char *why, size_t wlen)
{
    int r;
    if (!ring) {
        if ((r = blk_ring_create(e->max_inflight, &e->own, why, wlen)) < 0)
            return r;
        ring = e->own;
    }
    if (e->max_inflight > ring->max_inflight) {
        snprintf(why, wlen, "io_uring: ring made for %u requests, not %u", ring->max_inflight, e->max_inflight);
        return -EINVAL;
    }
    e->ring = &ring->ring;
    int fds[BLK_RING_FILES];
    for (unsigned i = 0; i < BLK_RING_FILES; i++)
        fds[i] = -1;
    fds[FIXED_FILE] = e->file_fd;
    fds[FIXED_STOP] = e->stop_fd;
    for (unsigned q = 0; q < e->nkick; q++)
        fds[FIXED_KICK0 + q] = e->kick_fd[q];
    if ((r = io_uring_register_files_update(e->ring, 0, fds, BLK_RING_FILES)) < 0) {
        snprintf(why, wlen, "io_uring files update: %s", strerror(-r));
        return r;
    }
    e->files_set = true;
    return 0;
}

/* Empty the slots: the ring keeps no reference to the image or the
 * eventfds (a swapped-out file is released; closed fds really close). */
static void uring_clear(struct blk_engine *e)
{
    if (!e->ring || !e->files_set)
        return;
    int fds[BLK_RING_FILES];
    for (unsigned i = 0; i < BLK_RING_FILES; i++)
        fds[i] = -1;
    int r = io_uring_register_files_update(e->ring, 0, fds, BLK_RING_FILES);
    if (r < 0)
        log_err("%s: io_uring files update: %s", e->name, strerror(-r));
    e->files_set = false;
}
#endif

#ifndef MOAT_HAVE_URING
int blk_ring_create(unsigned max_inflight, struct blk_ring **out, char *why, size_t wlen)
{
    (void)max_inflight;
    *out = NULL;
    snprintf(why, wlen, "moat was built without liburing");
    return -ENOSYS;
}

void blk_ring_destroy(struct blk_ring *r)
{
    (void)r;
}

int blk_ring_try_op(struct blk_ring *r, uint8_t opcode, uint8_t sqe_flags)
{
    (void)r, (void)opcode, (void)sqe_flags;
    return -ENOSYS;
}

int blk_ring_try_register(struct blk_ring *r, unsigned op, void *arg, unsigned n)
{
    (void)r, (void)op, (void)arg, (void)n;
    return -ENOSYS;
}
#endif

__attribute__((unused))
static int read_disabled_sysctl(void)
{
    int fd = open("/proc/sys/kernel/io_uring_disabled", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;                       /* older kernels: no such switch */
    char b[8] = { 0 };
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    return n > 0 ? atoi(b) : 0;
}

bool blk_uring_available(char *why, size_t len)
{
#ifndef MOAT_HAVE_URING
    snprintf(why, len, "moat was built without liburing");
    return false;
#else
    int d = read_disabled_sysctl();
    if (d == 2) {
        snprintf(why, len, "io_uring is disabled on this host (/proc/sys/kernel/io_uring_disabled = 2)");
        return false;
    }
    struct io_uring ring;
    int r = io_uring_queue_init(4, &ring, 0);
    if (r < 0) {
        snprintf(why, len, "io_uring is not available on this host (%s%s)", strerror(-r),
                 d == 1 ? "; /proc/sys/kernel/io_uring_disabled = 1" : "");
        return false;
    }
    io_uring_queue_exit(&ring);
    if (len)
        why[0] = 0;
    return true;
#endif
}

static void engine_free(struct blk_engine *e)
{
#ifdef MOAT_HAVE_URING
    uring_clear(e);
    blk_ring_destroy(e->own);
#endif
    if (e->kind == BLK_ENGINE_POOL)
        pool_teardown(e);
    if (e->stop_fd >= 0)
        close(e->stop_fd);
    free(e);
}

int blk_engine_start(const struct blk_engine_cfg *c, struct blk_engine **out)
{
    *out = NULL;
    if (!c || !c->cb || (c->file_fd < 0 && !c->exec) || c->nkick == 0 || c->nkick > BLK_ENGINE_MAX_KICK ||
        c->max_inflight == 0 || c->max_inflight > 1024)
        return -EINVAL;
    struct blk_engine *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    e->file_fd = c->file_fd;
    e->done_fd = -1;
    e->nkick = c->nkick;
    memcpy(e->kick_fd, c->kick_fd, c->nkick * sizeof(int));
    e->max_inflight = c->max_inflight;
    e->cb = c->cb;
    e->opaque = c->opaque;
    e->exec = c->exec;
    e->exec_opaque = c->exec_opaque;
    e->seccomp = c->seccomp;
    snprintf(e->name, sizeof e->name, "%s", c->name ? c->name : "blk");
    e->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (e->stop_fd < 0) {
        int r = -errno;
        free(e);
        return r;
    }
    int r = 0;
    enum blk_engine_kind kind = c->exec ? BLK_ENGINE_POOL : c->kind;
    char why[160] = "";
#ifdef MOAT_HAVE_URING
    if (kind != BLK_ENGINE_POOL) {
        /* The device's ring, made and restricted before any seccomp
         * filter (the runner's list has no io_uring_setup); the engine
         * only fills its file slots. */
        r = uring_setup(e, c->ring, why, sizeof why);
        if (r < 0) {
            uring_clear(e);
            blk_ring_destroy(e->own);
            e->own = NULL;
            e->ring = NULL;
            if (kind == BLK_ENGINE_URING) {
                log_err("%s: %s", e->name, why);
                engine_free(e);
                return r;
            }
            log_warn("%s: %s; using a thread pool for disk I/O", e->name, why);
            kind = BLK_ENGINE_POOL;
        } else {
            kind = BLK_ENGINE_URING;
        }
    }
#else
    if (kind == BLK_ENGINE_URING) {
        engine_free(e);
        return -ENOSYS;
    }
    if (kind == BLK_ENGINE_AUTO)
        log_info("%s: built without liburing; using a thread pool for disk I/O", e->name);
    kind = BLK_ENGINE_POOL;
#endif
    (void)why;
    e->kind = kind;
    if (kind == BLK_ENGINE_POOL && (r = pool_setup(e)) < 0) {
        engine_free(e);
        return r;
    }
    void *(*fn)(void *) = pool_thread;
#ifdef MOAT_HAVE_URING
    if (kind == BLK_ENGINE_URING)
        fn = uring_thread;
#endif
    *out = e;       /* before the thread exists: its first callbacks may use it */
    r = pthread_create(&e->thread, NULL, fn, e);
    if (r) {
        *out = NULL;
        engine_free(e);
        return -r;
    }
    e->thread_started = true;
    return 0;
}

int blk_engine_submit(struct blk_engine *e, struct blk_io *io)
{
    if (e->inflight >= e->max_inflight)
        return -EBUSY;
    io->res = 0;
    if (io->op == BLK_IO_READ || io->op == BLK_IO_WRITE)
        io->len = io_total(io);
    int r;
#ifdef MOAT_HAVE_URING
    if (e->kind == BLK_ENGINE_URING)
        r = uring_queue(e, io);
    else
#endif
        r = pool_submit(e, io);
    if (r == 0)
        e->inflight++;
    return r;
}

void blk_engine_stop(struct blk_engine *e)
{
    if (!e)
        return;
    if (e->thread_started) {
        uint64_t one = 1;
        if (write(e->stop_fd, &one, sizeof one) < 0)
            log_err("%s: stop eventfd: %s", e->name, strerror(errno));
        pthread_join(e->thread, NULL);
    }
    engine_free(e);
}
