/* virtio-blk device. Contracts in virtio_blk.h. */
#include "devices/blk/virtio_blk.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "devices/blk/overlay_disk.h"
#include "devices/blk/virtio_blk_req.h"
#include "devices/virtio/ratelimit.h"
#include "devices/virtio/virtq.h"
#include "devices/virtio/vqueues.h"
#include "vmm/base/clock.h"
#include "vmm/base/log.h"

#define NQUEUES    1
#define CHAIN_MAX  (VIRTIO_BLK_SEG_MAX + 2)   /* header + data + status */
#define NSLOTS     (NQUEUES * VIRTIO_BLK_QUEUE_MAX)

struct slot {
    struct blk_io io;           /* first: the engine hands it back */
    uint32_t gen;
    bool busy;
    uint8_t q;
    uint16_t head;
    uint32_t written;           /* used length on success */
    uint32_t bytes;             /* data bytes of a read or write (the I/O counters) */
    uint64_t status_gpa;
    struct blk_range range;
    struct iovec iov[CHAIN_MAX];
    struct virtq_seg data[CHAIN_MAX];
};

struct virtio_blk {
    int fd;                     /* the image; -1 for a moat-format overlay */
    struct ovl_disk *ovl;       /* copy-on-write drive (owns fd), or NULL */
    int dfd;                    /* O_DIRECT descriptor, or -1 */
    unsigned dalign;            /* direct-I/O alignment when dfd >= 0 */
    char name[32];
    uint8_t id[VIRTIO_BLK_ID_BYTES];
    struct blk_params params;
    enum blk_engine_kind engine_kind;

    /* Run state (start .. stop), used by the I/O thread only. */
    struct virtio_dev_env env;
    struct blk_engine *eng;
    struct blk_ring *ring;      /* made at create, kept across starts; NULL: thread pool */
    int ring_err;               /* why there is none (-errno) */
    bool running;
    bool backlog[NQUEUES];
    struct vqueues vq;          /* broken / pushed-not-published, per queue */
    struct virtq_seg chain_seg[CHAIN_MAX];
    struct slot slots[NSLOTS];
    struct log_limit rl;
    /* The rate limiter (docs/ratelimit.md): a request is charged when it
     * is popped; one that must wait is held (the queue waits with it) and
     * a timerfd, the engine's last kick fd, brings it back. */
    pthread_mutex_t lim_lock;   /* run-time changes come from other threads */
    struct ratelimit lim;
    int timer_fd;
    int kicks[NQUEUES + 1];
    bool held;
    unsigned held_q;
    struct virtq_chain held_c;
    struct virtq_seg held_seg[CHAIN_MAX];

    _Atomic uint64_t st_completed, st_failed, st_bad, st_notifies, st_batches, st_maxinf;
    _Atomic uint64_t st_rd_bytes, st_wr_bytes, st_rd, st_wr, st_flush;
    _Atomic int st_engine;

    /* Start, stop and a backing-file swap exclude each other (the
     * transport starts and stops under its register lock; a swap comes
     * from the API thread). had_env: started once, env's callbacks valid. */
    pthread_mutex_t run_lock;
    bool had_env;
    bool read_only;             /* as created: a swap keeps it */
};

uint64_t virtio_blk_capacity(const struct virtio_blk *b)
{
    return __atomic_load_n(&b->params.capacity, __ATOMIC_RELAXED);
}

int virtio_blk_set_limit(struct virtio_blk *b, const struct ratelimit_cfg *cfg)
{
    return ratelimit_update_locked(&b->lim, &b->lim_lock, cfg, clock_mono_ns());
}

void virtio_blk_get_limit(struct virtio_blk *b, struct ratelimit_cfg *cfg)
{
    ratelimit_get_cfg_locked(&b->lim, &b->lim_lock, cfg);
}

void virtio_blk_get_stats(struct virtio_blk *b, struct virtio_blk_stats *s)
{
    s->completed = atomic_load(&b->st_completed);
    s->failed = atomic_load(&b->st_failed);
    s->bad_chains = atomic_load(&b->st_bad);
    s->notifies = atomic_load(&b->st_notifies);
    s->batches = atomic_load(&b->st_batches);
    s->max_inflight = atomic_load(&b->st_maxinf);
    s->read_bytes = atomic_load(&b->st_rd_bytes);
    s->write_bytes = atomic_load(&b->st_wr_bytes);
    s->reads = atomic_load(&b->st_rd);
    s->writes = atomic_load(&b->st_wr);
    s->flushes = atomic_load(&b->st_flush);
    s->engine = (enum blk_engine_kind)atomic_load(&b->st_engine);
}

static int open_direct(struct virtio_blk *b, const struct virtio_blk_opts *o, char *why, size_t wlen);

/* The rate limiter's timer, at create: device start runs under the
 * runner's seccomp list (vmm/base/scfilter.c), which has no timerfd_create.
 * A failure here is retried (and reported) at start. */
static void make_timer(struct virtio_blk *b)
{
    b->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
}

/* The I/O engine's io_uring, made now, before any seccomp filter (the
 * runner's list has no io_uring_setup: a ring made later would be one
 * without restrictions), and kept for every start (devices/blk/blk_uring.h).
 * None where the thread pool is asked for or forced (a moat-format
 * overlay); none available: the thread pool at start (auto), or start
 * fails (io_uring asked for). */
static void make_ring(struct virtio_blk *b)
{
    if (b->engine_kind == BLK_ENGINE_POOL || (b->ovl && b->fd < 0))
        return;
    char w[200] = "";
    b->ring_err = blk_ring_create(VIRTIO_BLK_INFLIGHT_MAX, &b->ring, w, sizeof w);
    if (b->ring_err < 0 && b->engine_kind == BLK_ENGINE_AUTO)
        log_warn("%s: %s; using a thread pool for disk I/O", b->name, w);
    else if (b->ring_err < 0)
        log_err("%s: %s", b->name, w);
}

/* The last steps of a create, its file open: the device's parameters for a
 * drive of bytes, the timer and the ring; b is the caller's in *out. */
static int finish_create(struct virtio_blk *b, uint64_t bytes, bool read_only,
                         struct virtio_blk **out)
{
    b->params.capacity = bytes / VIRTIO_BLK_SECTOR;
    b->params.read_only = read_only;
    if (!read_only) {
        b->params.max_discard_seg = b->params.max_write_zeroes_seg = 1;
        b->params.max_discard_sectors = b->params.max_write_zeroes_sectors = VIRTIO_BLK_DISCARD_MAX;
    }
    make_timer(b);
    make_ring(b);
    *out = b;
    return 0;
}

/* path = base, o->overlay = the overlay (locks taken by ovl_open). A raw
 * (reflinked) overlay is then an ordinary image on the fast path. */
static int create_overlay(struct virtio_blk *b, const struct virtio_blk_opts *o,
                          struct virtio_blk **out, char *why, size_t wlen)
{
    if (o->direct) {
        snprintf(why, wlen, "drive %s: direct is not supported with an overlay", o->path);
        free(b);
        return -EINVAL;
    }
    unsigned f = OVL_OPEN_CREATE | (o->read_only ? OVL_OPEN_READ_ONLY : 0) |
                 (o->overlay_no_reflink ? OVL_OPEN_NO_REFLINK : 0);
    char w[384] = "";
    int r = ovl_open(o->path, o->overlay, f, &b->ovl, w, sizeof w);
    if (r < 0) {
        snprintf(why, wlen, "drive %s: %s", o->path, w[0] ? w : strerror(-r));
        free(b);
        return r;
    }
    uint64_t bytes = ovl_size(b->ovl);
    if (bytes < VIRTIO_BLK_SECTOR) {
        snprintf(why, wlen, "drive %s: smaller than one 512-byte sector", o->path);
        ovl_close(b->ovl);
        free(b);
        return -EINVAL;
    }
    b->fd = ovl_raw_fd(b->ovl);         /* -1 for moat's format */
    return finish_create(b, bytes, o->read_only, out);
}

/* A drive's file opened with its mode, with its size in bytes (a regular
 * file or a block device; empty, or at least one sector: an empty file is
 * an empty drive, as the placeholder drives orchestrators swap files into
 * later); not locked. -errno with why ("PATH: ..."). */
static int open_image(const char *path, bool ro, int *fd_out, uint64_t *bytes, struct stat *st, char *why,
                      size_t wlen)
{
    int fd = open(path, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC), r;
    if (fd < 0) {
        r = -errno;
        snprintf(why, wlen, "%s: %s", path, strerror(errno));
        return r;
    }
    if (fstat(fd, st) < 0) {
        r = -errno;
        snprintf(why, wlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (S_ISREG(st->st_mode)) {
        *bytes = (uint64_t)st->st_size;
    } else if (!S_ISBLK(st->st_mode)) {
        r = -EINVAL;
        snprintf(why, wlen, "%s: not a regular file or block device", path);
        goto fail;
    } else if (ioctl(fd, BLKGETSIZE64, bytes) < 0) {
        r = -errno;
        snprintf(why, wlen, "%s: BLKGETSIZE64: %s", path, strerror(errno));
        goto fail;
    }
    if (*bytes && *bytes < VIRTIO_BLK_SECTOR) {
        r = -EINVAL;
        snprintf(why, wlen, "%s: smaller than one 512-byte sector (and not empty)", path);
        goto fail;
    }
    *fd_out = fd;
    return 0;
fail:
    close(fd);
    return r;
}

int virtio_blk_create(const struct virtio_blk_opts *o, struct virtio_blk **out,
                      char *why, size_t wlen)
{
    *out = NULL;
    if (!o || !o->path || !*o->path) {
        snprintf(why, wlen, "no drive path");
        return -EINVAL;
    }
    if (o->id && strlen(o->id) > VIRTIO_BLK_ID_BYTES) {
        snprintf(why, wlen, "drive %s: id longer than %d bytes", o->path, VIRTIO_BLK_ID_BYTES);
        return -EINVAL;
    }
    struct virtio_blk *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    snprintf(b->name, sizeof b->name, "%s", o->name ? o->name : "blk");
    if (o->id)
        memcpy(b->id, o->id, strlen(o->id));
    b->engine_kind = o->engine;
    b->rl = LOG_LIMIT(10);
    b->dfd = -1;
    b->timer_fd = -1;
    b->read_only = o->read_only;
    pthread_mutex_init(&b->lim_lock, NULL);
    pthread_mutex_init(&b->run_lock, NULL);
    if (ratelimit_init(&b->lim, o->limit, clock_mono_ns()) < 0) {
        snprintf(why, wlen, "drive %s: rate limiter: refill time too long", o->path);
        free(b);
        return -EINVAL;
    }
    if (o->overlay)
        return create_overlay(b, o, out, why, wlen);
    struct stat st;
    uint64_t bytes = 0;
    char w[4400] = "";
    int r = open_image(o->path, o->read_only, &b->fd, &bytes, &st, w, sizeof w);
    if (r < 0) {
        snprintf(why, wlen, "drive %s", w);
        free(b);
        return r;
    }
    if ((r = disk_lock(b->fd, !o->read_only)) < 0) {
        snprintf(why, wlen, "drive %s: %s", o->path,
                 r == -EWOULDBLOCK ? "in use by another process (locked)" : strerror(-r));
        goto fail;
    }
    if (o->direct && (r = open_direct(b, o, why, wlen)) < 0)
        goto fail;
    return finish_create(b, bytes, o->read_only, out);
fail:
    close(b->fd);
    free(b);
    return r;
}

/* Open the O_DIRECT descriptor and probe its alignment with one read of a
 * 512-byte-aligned (not 4096-aligned) buffer at offset 0. */
static int open_direct(struct virtio_blk *b, const struct virtio_blk_opts *o, char *why, size_t wlen)
{
    int r;
    b->dfd = open(o->path, (o->read_only ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC);
    if (b->dfd < 0) {
        r = -errno;
        snprintf(why, wlen, "drive %s: direct: %s", o->path,
                 errno == EINVAL ? "the file system does not support O_DIRECT" : strerror(errno));
        return r;
    }
    void *buf;
    if (posix_memalign(&buf, 8192, 8192)) {
        r = -ENOMEM;
        snprintf(why, wlen, "out of memory");
        goto fail;
    }
    r = -EINVAL;
    for (unsigned a = 512; a <= 4096; a *= 8) {
        if (pread(b->dfd, (char *)buf + a, a, 0) >= 0) {
            b->dalign = a;
            r = 0;
            break;
        }
        r = -errno;
    }
    free(buf);
    if (r == 0)
        return 0;
    snprintf(why, wlen, "drive %s: direct: test read failed: %s", o->path, strerror(-r));
fail:
    close(b->dfd);
    b->dfd = -1;
    return r;
}

/* A read or write direct I/O cannot take, done now through the buffered
 * descriptor (blocking the I/O thread). 0 or -errno. */
static int rw_buffered(struct virtio_blk *b, bool rd, struct iovec *iov, unsigned niov, uint64_t off)
{
    while (niov) {
        ssize_t n = rd ? preadv(b->fd, iov, (int)niov, (off_t)off)
                       : pwritev(b->fd, iov, (int)niov, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;
        off += (uint64_t)n;
        while (niov && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++, niov--;
        }
        if (niov) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

static bool direct_ok(const struct virtio_blk *b, const struct iovec *iov, unsigned niov, uint64_t off)
{
    uint64_t m = b->dalign - 1;
    if (off & m)
        return false;
    for (unsigned i = 0; i < niov; i++)
        if (((uintptr_t)iov[i].iov_base | iov[i].iov_len) & m)
            return false;
    return true;
}

/* ---- config space ---- */

static void put16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }

static void blk_config_read(void *dev, uint32_t off, uint8_t *data, uint32_t len)
{
    struct virtio_blk *b = dev;
    uint8_t c[VIRTIO_BLK_CONFIG_SIZE];
    memset(c, 0, sizeof c);
    put64(c + 0, virtio_blk_capacity(b));
    put32(c + 12, VIRTIO_BLK_SEG_MAX);          /* seg_max */
    put32(c + 20, VIRTIO_BLK_SECTOR);           /* blk_size */
    put16(c + 34, NQUEUES);                     /* num_queues */
    put32(c + 36, b->params.max_discard_sectors);
    put32(c + 40, b->params.max_discard_seg);
    put32(c + 44, 8);                           /* discard_sector_alignment: 4 KiB */
    put32(c + 48, b->params.max_write_zeroes_sectors);
    put32(c + 52, b->params.max_write_zeroes_seg);
    c[56] = !b->params.read_only;               /* write_zeroes_may_unmap */
    memset(data, 0, len);
    if (off < sizeof c)
        memcpy(data, c + off, len < sizeof c - off ? len : sizeof c - off);
}

static void blk_config_write(void *dev, uint32_t off, const uint8_t *data, uint32_t len)
{
    (void)dev; (void)off; (void)data; (void)len;   /* nothing writable (no CONFIG_WCE) */
}

static uint32_t blk_config_size(void *dev) { (void)dev; return VIRTIO_BLK_CONFIG_SIZE; }

static uint64_t blk_features(void *dev)
{
    struct virtio_blk *b = dev;
    uint64_t f = 1ull << VIRTIO_BLK_F_SEG_MAX | 1ull << VIRTIO_BLK_F_BLK_SIZE |
                 1ull << VIRTIO_BLK_F_FLUSH | 1ull << VIRTIO_F_EVENT_IDX |
                 1ull << VIRTIO_F_INDIRECT_DESC;
    if (b->params.read_only)
        f |= 1ull << VIRTIO_BLK_F_RO;
    else
        f |= 1ull << VIRTIO_BLK_F_DISCARD | 1ull << VIRTIO_BLK_F_WRITE_ZEROES;
    return f;
}

/* ---- requests ---- */

/* A request that completed OK, in the I/O counters. */
static void count_io(struct virtio_blk *b, enum blk_io_op op, uint64_t n)
{
    if (op == BLK_IO_READ) {
        atomic_fetch_add(&b->st_rd, 1);
        atomic_fetch_add(&b->st_rd_bytes, n);
    } else if (op == BLK_IO_WRITE) {
        atomic_fetch_add(&b->st_wr, 1);
        atomic_fetch_add(&b->st_wr_bytes, n);
    } else if (op == BLK_IO_FLUSH) {
        atomic_fetch_add(&b->st_flush, 1);
    }
}

static void set_status(struct virtio_blk *b, uint64_t gpa, uint8_t st)
{
    gmem_write(b->env.mem, gpa, &st, 1);
    if (st == VIRTIO_BLK_S_OK)
        atomic_fetch_add(&b->st_completed, 1);
    else
        atomic_fetch_add(&b->st_failed, 1);
}

static void bad_request(struct virtio_blk *b, unsigned q, const struct virtq_chain *c,
                        const struct blk_req *r)
{
    atomic_fetch_add(&b->st_bad, 1);
    if (r->err != BLK_E_UNSUPP_TYPE && log_limit_ok(&b->rl))
        log_warn("%s: request (head %u, type %u) refused: %s", b->name, c->head, r->raw_type,
                 blk_req_strerror(r->err));
    if (r->has_status) {
        set_status(b, r->status_gpa, r->status);
        vqueues_push(&b->vq, q, c->head, 1);
    } else {
        atomic_fetch_add(&b->st_failed, 1);
        vqueues_push(&b->vq, q, c->head, 0);
    }
}

static void handle_chain(struct virtio_blk *b, unsigned q, const struct virtq_chain *c)
{
    struct slot *s = &b->slots[q * VIRTIO_BLK_QUEUE_MAX + c->head];
    if (s->busy) {
        /* The driver made a head available again while we still own it:
         * the request in flight completes as usual, this copy is dropped
         * (not pushed: the driver would get the head twice), and the driver
         * is told the queue needs a reset. */
        virtq_drop(&b->env.queues[q]);
        vqueues_broken(&b->vq, q, "head reused while in flight");
        return;
    }
    struct blk_req r = { .data = s->data, .data_max = CHAIN_MAX, .ranges = &s->range, .ranges_max = 1 };
    if (blk_req_parse(b->env.mem, c, &b->params, &r) < 0) {
        bad_request(b, q, c, &r);
        return;
    }
    struct blk_io *io = &s->io;
    memset(io, 0, sizeof *io);
    s->q = (uint8_t)q;
    s->head = c->head;
    s->status_gpa = r.status_gpa;
    s->written = 1;
    s->bytes = r.type == BLK_REQ_IN || r.type == BLK_REQ_OUT ? r.data_len : 0;
    switch (r.type) {
    case BLK_REQ_IN:
    case BLK_REQ_OUT:
        for (unsigned i = 0; i < r.ndata; i++) {
            void *p = gmem_ptr(b->env.mem, r.data[i].gpa, r.data[i].len);
            if (!p) {
                set_status(b, r.status_gpa, VIRTIO_BLK_S_IOERR);
                vqueues_push(&b->vq, q, c->head, 1);
                return;
            }
            s->iov[i] = (struct iovec){ p, r.data[i].len };
        }
        io->op = r.type == BLK_REQ_IN ? BLK_IO_READ : BLK_IO_WRITE;
        io->iov = s->iov;
        io->niov = r.ndata;
        io->off = r.offset;   /* checked by the parser */
        if (r.type == BLK_REQ_IN)
            s->written = r.data_len + 1;
        if (b->dfd >= 0 && !direct_ok(b, io->iov, io->niov, io->off)) {
            int e = rw_buffered(b, r.type == BLK_REQ_IN, io->iov, io->niov, io->off);
            if (e < 0 && log_limit_ok(&b->rl))
                log_warn("%s: I/O error: %s", b->name, strerror(-e));
            else
                count_io(b, io->op, r.data_len);
            set_status(b, r.status_gpa, e < 0 ? VIRTIO_BLK_S_IOERR : VIRTIO_BLK_S_OK);
            vqueues_push(&b->vq, q, c->head, e < 0 ? 1 : s->written);
            return;
        }
        break;
    case BLK_REQ_FLUSH:
        io->op = BLK_IO_FLUSH;
        break;
    case BLK_REQ_GET_ID: {
        uint32_t done = 0;
        for (unsigned i = 0; i < r.ndata; i++) {
            gmem_write(b->env.mem, r.data[i].gpa, b->id + done, r.data[i].len);
            done += r.data[i].len;
        }
        set_status(b, r.status_gpa, VIRTIO_BLK_S_OK);
        vqueues_push(&b->vq, q, c->head, VIRTIO_BLK_ID_BYTES + 1);
        return;
    }
    case BLK_REQ_DISCARD:
    case BLK_REQ_WRITE_ZEROES:
        io->op = r.type == BLK_REQ_DISCARD || (s->range.flags & VIRTIO_BLK_WZ_F_UNMAP)
                     ? BLK_IO_PUNCH : BLK_IO_ZERO;
        io->off = s->range.offset;   /* checked by the parser */
        io->len = s->range.len;
        break;
    default:
        set_status(b, r.status_gpa, VIRTIO_BLK_S_UNSUPP);
        vqueues_push(&b->vq, q, c->head, 1);
        return;
    }
    s->busy = true;
    s->gen++;
    io->slot = (uint32_t)(s - b->slots);
    io->gen = s->gen;
    if (blk_engine_submit(b->eng, io) < 0) {
        s->busy = false;
        set_status(b, r.status_gpa, VIRTIO_BLK_S_IOERR);
        vqueues_push(&b->vq, q, c->head, 1);
        return;
    }
    uint64_t inf = blk_engine_space(b->eng);
    inf = VIRTIO_BLK_INFLIGHT_MAX - inf;
    if (inf > atomic_load(&b->st_maxinf))
        atomic_store(&b->st_maxinf, inf);
}

/* Charge a popped chain to the limiter: true if it may go now; else the
 * timer is armed for when it may. */
static bool lim_charge(struct virtio_blk *b, const struct virtq_chain *c)
{
    uint64_t wait = 0;
    pthread_mutex_lock(&b->lim_lock);
    int r = ratelimit_unlimited(&b->lim) ? 0
          : ratelimit_consume(&b->lim, (uint64_t)c->read_len + c->write_len, 1, clock_mono_ns(), &wait);
    pthread_mutex_unlock(&b->lim_lock);
    if (r == 0)
        return true;
    struct itimerspec its = { .it_value = { .tv_sec = (time_t)(wait / 1000000000ull),
                                            .tv_nsec = (long)(wait % 1000000000ull) } };
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
        its.it_value.tv_nsec = 1;
    if (timerfd_settime(b->timer_fd, 0, &its, NULL) < 0)
        log_warn("%s: rate limiter timer: %s", b->name, strerror(errno));
    return false;
}

/* Keep a chain that waits for tokens (no other is popped meanwhile). */
static void hold(struct virtio_blk *b, unsigned q, const struct virtq_chain *c)
{
    b->held_c = *c;
    memcpy(b->held_seg, c->seg, c->nseg * sizeof(*c->seg));
    b->held_c.seg = b->held_seg;
    b->held_q = q;
    b->held = true;
}

static void process_queue(struct virtio_blk *b, unsigned q)
{
    struct virtq *vq = &b->env.queues[q];
    const struct gmem *m = b->env.mem;
    if (b->held)
        return;                 /* the timer brings the queue back */
    for (;;) {
        while (!b->vq.broken[q]) {
            if (!blk_engine_space(b->eng)) {
                b->backlog[q] = true;   /* resumed after completions */
                return;
            }
            struct virtq_chain c = { .seg = b->chain_seg, .max_seg = CHAIN_MAX };
            int r = virtq_pop(vq, m, &c);
            if (r == 0)
                break;
            if (r == -EIO) {
                vqueues_broken(&b->vq, q, virtq_strerror(c.err));
                return;
            }
            if (r < 0) {
                atomic_fetch_add(&b->st_bad, 1);
                atomic_fetch_add(&b->st_failed, 1);
                if (log_limit_ok(&b->rl))
                    log_warn("%s: bad descriptor chain (head %u): %s", b->name, c.head,
                             virtq_strerror(c.err));
                vqueues_push(&b->vq, q, c.head, 0);
                continue;
            }
            if (!lim_charge(b, &c)) {
                hold(b, q, &c);
                return;
            }
            handle_chain(b, q, &c);
        }
        if (b->vq.broken[q])
            return;
        /* Ask for kicks again; chains that slipped in meanwhile are ours. */
        int n = virtq_enable_notify(vq, m);
        if (n == -EIO) {
            vqueues_broken(&b->vq, q, virtq_strerror(vq->err));
            return;
        }
        if (n <= 0)
            return;
    }
}

/* ---- engine callbacks (I/O thread) ---- */

static void cb_kick(void *opaque, unsigned q)
{
    struct virtio_blk *b = opaque;
    if (q == NQUEUES && b->held) {      /* the limiter's timer */
        if (!lim_charge(b, &b->held_c))
            return;
        b->held = false;
        handle_chain(b, b->held_q, &b->held_c);
        q = b->held_q;
    }
    if (q < NQUEUES)
        process_queue(b, q);
}

static struct blk_io *cb_lookup(void *opaque, uint32_t slot, uint32_t gen)
{
    struct virtio_blk *b = opaque;
    if (slot >= NSLOTS || !b->slots[slot].busy || b->slots[slot].gen != gen)
        return NULL;
    return &b->slots[slot].io;
}

static void cb_done(void *opaque, struct blk_io *io)
{
    struct virtio_blk *b = opaque;
    struct slot *s = (struct slot *)io;
    s->busy = false;
    if (io->res < 0 && log_limit_ok(&b->rl))
        log_warn("%s: I/O error: %s", b->name, strerror(-io->res));
    if (io->res >= 0)
        count_io(b, io->op, s->bytes);
    set_status(b, s->status_gpa, io->res < 0 ? VIRTIO_BLK_S_IOERR : VIRTIO_BLK_S_OK);
    vqueues_push(&b->vq, s->q, s->head, s->written);
}

static void cb_batch(void *opaque, bool stopping)
{
    struct virtio_blk *b = opaque;
    for (unsigned q = 0; q < NQUEUES; q++) {
        if (b->backlog[q] && !stopping) {
            b->backlog[q] = false;
            process_queue(b, q);
        }
    }
    unsigned notified = 0;
    unsigned published = vqueues_publish(&b->vq, &notified);
    atomic_fetch_add(&b->st_batches, published);
    atomic_fetch_add(&b->st_notifies, notified);
}

/* Pool worker: a request on a moat-format overlay drive. */
static int ovl_exec(void *opaque, struct blk_io *io)
{
    struct ovl_disk *d = opaque;
    switch (io->op) {
    case BLK_IO_READ: return ovl_preadv(d, io->iov, io->niov, io->off);
    case BLK_IO_WRITE: return ovl_pwritev(d, io->iov, io->niov, io->off);
    case BLK_IO_FLUSH: return ovl_flush(d);
    case BLK_IO_PUNCH:
    case BLK_IO_ZERO: return ovl_zero(d, io->off, io->len);
    }
    return -EINVAL;
}

static const struct blk_engine_cb engine_cb = {
    .kick = cb_kick, .lookup = cb_lookup, .done = cb_done, .batch = cb_batch,
};

/* ---- lifecycle ---- */

static int start_locked(struct virtio_blk *b, const struct virtio_dev_env *env);
static void stop_locked(struct virtio_blk *b);

static int blk_start(void *dev, const struct virtio_dev_env *env)
{
    struct virtio_blk *b = dev;
    pthread_mutex_lock(&b->run_lock);
    int r = start_locked(b, env);
    pthread_mutex_unlock(&b->run_lock);
    return r;
}

static int start_locked(struct virtio_blk *b, const struct virtio_dev_env *env)
{
    if (b->running)
        return -EALREADY;
    if (!env || !env->mem || !env->queues || env->nqueues != NQUEUES || !env->notify_used)
        return -EINVAL;
    /* Requests live in slots indexed by head: a transport that let the
     * driver choose a larger ring would let it index past them. */
    for (unsigned q = 0; q < NQUEUES; q++)
        if (env->queues[q].size > VIRTIO_BLK_QUEUE_MAX)
            return -EINVAL;
    if (b->timer_fd < 0 &&
        (b->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0) {
        int e = errno;
        log_err("%s: rate limiter timer: %s", b->name, strerror(e));
        return -e;
    }
    if (env != &b->env)
        b->env = *env;
    b->had_env = true;
    for (unsigned q = 0; q < NQUEUES; q++)
        b->kicks[q] = env->kick_fd[q];
    b->kicks[NQUEUES] = b->timer_fd;
    b->held = false;
    for (unsigned i = 0; i < NSLOTS; i++)
        b->slots[i].busy = false;
    memset(b->backlog, 0, sizeof b->backlog);
    vqueues_init(&b->vq, &b->env, b->name);
    struct blk_engine_cfg ec = {
        .kind = b->engine_kind, .file_fd = b->dfd >= 0 ? b->dfd : b->fd, .kick_fd = b->kicks, .nkick = NQUEUES + 1,
        .max_inflight = VIRTIO_BLK_INFLIGHT_MAX, .cb = &engine_cb, .opaque = b, .name = b->name,
        .seccomp = env->seccomp,
    };
    if (b->ovl && b->fd < 0) {
        ec.exec = ovl_exec;
        ec.exec_opaque = b->ovl;
    } else if (b->ring) {
        ec.ring = b->ring;
    } else if (ec.kind == BLK_ENGINE_URING) {
        log_err("%s: no io_uring: %s", b->name, strerror(-b->ring_err));
        return b->ring_err < 0 ? b->ring_err : -ENOSYS;
    } else {
        ec.kind = BLK_ENGINE_POOL;      /* never a ring made now, under the filters */
    }
    int r = blk_engine_start(&ec, &b->eng);
    if (r < 0) {
        log_err("%s: starting the I/O engine: %s", b->name, strerror(-r));
        return r;
    }
    atomic_store(&b->st_engine, (int)blk_engine_kind_of(b->eng));
    b->running = true;
    return 0;
}

static void blk_stop(void *dev)
{
    struct virtio_blk *b = dev;
    pthread_mutex_lock(&b->run_lock);
    stop_locked(b);
    pthread_mutex_unlock(&b->run_lock);
}

static void stop_locked(struct virtio_blk *b)
{
    if (!b->running)
        return;
    blk_engine_stop(b->eng);    /* drains: every request completed and published */
    b->eng = NULL;
    b->running = false;
    if (b->held) {              /* the last chain popped: available again, for the next start */
        virtq_unpop(&b->env.queues[b->held_q], 1);
        b->held = false;
    }
    struct itimerspec off = { 0 };
    timerfd_settime(b->timer_fd, 0, &off, NULL);
    /* An overlay's bitmap is durable only after a flush: make what the guest
     * wrote so far part of the disk state a snapshot taken now refers to. */
    if (b->ovl) {
        int r = ovl_flush(b->ovl);
        if (r < 0)
            log_warn("%s: flushing the overlay: %s", b->name, strerror(-r));
    }
}

static void blk_destroy(void *dev)
{
    struct virtio_blk *b = dev;
    if (!b)
        return;
    blk_stop(b);
    blk_ring_destroy(b->ring);
    if (b->ovl) {
        int r = ovl_close(b->ovl);      /* flushes: a clean close leaves the bitmap durable */
        if (r < 0)
            log_warn("%s: closing the overlay: %s", b->name, strerror(-r));
    } else {
        /* Unlock first: the I/O engine's ring may keep a reference to the
         * file for a while after it is closed (io_uring tears down
         * asynchronously), and the lock would outlive the drive, refusing
         * the next VM on this image ("locked") for that while. */
        flock(b->fd, LOCK_UN);
        close(b->fd);
    }
    if (b->dfd >= 0)
        close(b->dfd);
    if (b->timer_fd >= 0)
        close(b->timer_fd);
    pthread_mutex_destroy(&b->lim_lock);
    pthread_mutex_destroy(&b->run_lock);
    free(b);
}

struct swap_ctx {
    struct virtio_blk *b;
    int nfd, oldfd;             /* oldfd: the replaced file, for the caller to unlock and close */
    bool same;
    uint64_t bytes;
};

/* Quiesce, put the new file in, restart if it ran: 0 or -errno. */
static int swap_apply(void *arg)
{
    struct swap_ctx *c = arg;
    struct virtio_blk *b = c->b;
    pthread_mutex_lock(&b->run_lock);
    bool was_running = b->running;
    bool broken[NQUEUES];
    memcpy(broken, b->vq.broken, sizeof broken);
    /* Quiesce: every request in flight completes on the old file. */
    stop_locked(b);
    if (!c->same) {
        c->oldfd = b->fd;
        b->fd = c->nfd;
    }
    __atomic_store_n(&b->params.capacity, c->bytes / VIRTIO_BLK_SECTOR, __ATOMIC_RELAXED);
    int r = 0;
    if (was_running && (r = start_locked(b, &b->env)) == 0)
        for (unsigned q = 0; q < NQUEUES; q++)
            if (broken[q])
                b->vq.broken[q] = true;     /* still broken: only a reset mends it */
    pthread_mutex_unlock(&b->run_lock);
    return r;
}

int virtio_blk_swap(struct virtio_blk *b, const char *path, char *why, size_t wlen)
{
    if (!path || !*path) {
        snprintf(why, wlen, "no path");
        return -EINVAL;
    }
    if (b->ovl || b->dfd >= 0) {
        snprintf(why, wlen, "a %s drive's file cannot be changed while it runs", b->ovl ? "copy-on-write" : "direct");
        return -ENOTSUP;
    }
    int nfd = -1, r;
    uint64_t bytes = 0;
    struct stat nst, ost;
    if ((r = open_image(path, b->read_only, &nfd, &bytes, &nst, why, wlen)) < 0)
        return r;
    /* The file the drive has already (Firecracker's way to make the guest
     * see a grown file): keep the descriptor and its lock, size it anew. */
    bool same = fstat(b->fd, &ost) == 0 && ost.st_dev == nst.st_dev && ost.st_ino == nst.st_ino;
    if (same) {
        close(nfd);
        nfd = -1;
    } else if ((r = disk_lock(nfd, !b->read_only)) < 0) {
        snprintf(why, wlen, "%s: %s", path, r == -EWOULDBLOCK ? "in use by another process (locked)"
                                                              : strerror(-r));
        close(nfd);
        return r;
    }
    /* The stop, swap and restart on the thread that starts the device (its
     * engine's threads and ring are made there), the open and lock above
     * on the caller's. */
    struct swap_ctx c = { b, nfd, -1, same, bytes };
    pthread_mutex_lock(&b->run_lock);
    int (*run_on)(void *, int (*)(void *), void *) = b->had_env ? b->env.run_on : NULL;
    void *opaque = b->env.opaque;
    pthread_mutex_unlock(&b->run_lock);
    r = run_on ? run_on(opaque, swap_apply, &c) : swap_apply(&c);
    if (c.oldfd >= 0) {
        flock(c.oldfd, LOCK_UN);
        close(c.oldfd);
    }
    pthread_mutex_lock(&b->run_lock);
    void (*tell)(void *) = b->had_env ? b->env.config_changed : NULL;
    pthread_mutex_unlock(&b->run_lock);
    if (r < 0) {
        snprintf(why, wlen, "restarting the drive on %s: %s", path, strerror(-r));
        return r;
    }
    /* Outside run_lock: the transport's register lock comes first where
     * both are taken (it stops the device under it). */
    if (tell)
        tell(opaque);
    log_info("%s: backing file now %s (%llu sectors)", b->name, path, (unsigned long long)(bytes / VIRTIO_BLK_SECTOR));
    return 0;
}

struct ovl_disk *virtio_blk_overlay(struct virtio_blk *b)
{
    return b ? b->ovl : NULL;
}

const struct virtio_dev_ops virtio_blk_ops = {
    .name = "blk",
    .device_id = VIRTIO_ID_BLOCK,
    .nqueues = NQUEUES,
    .queue_max = VIRTIO_BLK_QUEUE_MAX,
    .features = blk_features,
    .config_read = blk_config_read,
    .config_write = blk_config_write,
    .config_size = blk_config_size,
    .start = blk_start,
    .stop = blk_stop,
    .destroy = blk_destroy,
};
