/* virtio-rng device. Contracts in virtio_rng.h. */
#include "devices/rng/virtio_rng.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "devices/virtio/evloop.h"
#include "devices/virtio/vqueues.h"
#include "vmm/base/clock.h"
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"

#define NQUEUES 1
#define CHAIN_MAX 64            /* segments of one chain we take */
#define BATCH 64                /* chains per pass before looking at the rest */

struct virtio_rng {
    char name[48];
    struct log_limit rl;        /* guest-triggered messages */
    struct virtio_dev_env env;
    struct vqueues vq;
    struct evloop *loop;
    pthread_t thread;
    bool running;
    pthread_mutex_t lim_lock;   /* run-time changes come from other threads */
    struct ratelimit lim;
    struct evloop_timer lim_timer;   /* tokens again, or the next batch */
    uint8_t buf[VIRTIO_RNG_REQ_MAX];
    struct virtq_seg seg[CHAIN_MAX];
    _Atomic uint64_t st_req, st_bytes, st_bad, st_throttled, st_err;
};

#define STAT_ADD(r, f, v) atomic_fetch_add_explicit(&(r)->f, (v), memory_order_relaxed)

long rng_req_len(const struct virtq_chain *c, uint32_t cap)
{
    if (c->nread || c->read_len || !c->write_len)
        return -EINVAL;
    return c->write_len < cap ? c->write_len : cap;
}

static uint64_t rng_features(void *dev) { (void)dev; return 0; }
static void rng_config_read(void *dev, uint32_t off, uint8_t *data, uint32_t len)
{
    (void)dev;
    (void)off;
    memset(data, 0, len);       /* no config space */
}
static void rng_config_write(void *dev, uint32_t off, const uint8_t *data, uint32_t len)
{
    (void)dev; (void)off; (void)data; (void)len;
}
static uint32_t rng_config_size(void *dev) { (void)dev; return 0; }

/* n random bytes into buf: 0 or -errno (getrandom may return fewer bytes
 * than asked, or be interrupted by a signal). */
static int fill_random(uint8_t *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = getrandom(buf + done, n - done, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        done += (size_t)k;
    }
    return 0;
}

/* May a request of len bytes go now? Else the timer is armed for then. */
static bool lim_take(struct virtio_rng *r, uint64_t len)
{
    uint64_t now = clock_mono_ns(), wait = 0;
    pthread_mutex_lock(&r->lim_lock);
    int k = ratelimit_unlimited(&r->lim) ? 0 : ratelimit_consume(&r->lim, len, 1, now, &wait);
    pthread_mutex_unlock(&r->lim_lock);
    if (k == 0)
        return true;
    STAT_ADD(r, st_throttled, 1);
    if (!evloop_timer_armed(&r->lim_timer) || evloop_timer_deadline(&r->lim_timer) > now + wait)
        evloop_timer_arm(r->loop, &r->lim_timer, wait > UINT64_MAX - now ? UINT64_MAX : now + wait);
    return false;
}

static void work(struct virtio_rng *r)
{
    struct virtq *q = &r->env.queues[0];
    const struct gmem *m = r->env.mem;
    unsigned k;
    for (k = 0; k < BATCH && !r->vq.broken[0]; k++) {
        struct virtq_chain c = { .seg = r->seg, .max_seg = CHAIN_MAX };
        int p = virtq_pop(q, m, &c);
        if (p == 0) {
            int more = virtq_enable_notify(q, m);
            if (more == 0)
                break;
            if (more < 0) {
                vqueues_broken(&r->vq, 0, virtq_strerror(q->err));
                break;
            }
            continue;
        }
        if (p == -EIO) {
            vqueues_broken(&r->vq, 0, virtq_strerror(c.err));
            break;
        }
        if (p == -EINVAL) {
            STAT_ADD(r, st_bad, 1);
            log_guest(&r->rl, "%s: bad request chain: %s", r->name, virtq_strerror(c.err));
            vqueues_push(&r->vq, 0, c.head, 0);
            continue;
        }
        long len = rng_req_len(&c, VIRTIO_RNG_REQ_MAX);
        if (len < 0) {
            STAT_ADD(r, st_bad, 1);
            log_guest(&r->rl, "%s: request chain with device-readable or no buffers refused", r->name);
            vqueues_push(&r->vq, 0, c.head, 0);
            continue;
        }
        if (!lim_take(r, (uint64_t)len)) {
            virtq_unpop(q, 1);  /* taken again when the timer fires */
            break;
        }
        uint32_t put = 0;
        int e = fill_random(r->buf, (size_t)len);
        if (e < 0) {
            STAT_ADD(r, st_err, 1);
            log_guest(&r->rl, "%s: getrandom: %s", r->name, strerror(-e));
        } else if (virtq_chain_write(m, &c, 0, r->buf, (uint64_t)len) == 0) {
            put = (uint32_t)len;
            STAT_ADD(r, st_req, 1);
            STAT_ADD(r, st_bytes, (uint64_t)len);
        } else {
            STAT_ADD(r, st_bad, 1);
        }
        vqueues_push(&r->vq, 0, c.head, put);
    }
    vqueues_publish(&r->vq, NULL);
    if (k == BATCH && !evloop_timer_armed(&r->lim_timer))
        evloop_timer_arm(r->loop, &r->lim_timer, 0);
}

static void on_kick(void *opaque, int fd, uint32_t events)
{
    struct virtio_rng *r = opaque;
    uint64_t v;
    (void)events;
    if (evloop_eventfd_take(fd, &v) < 0)
        log_debug("%s: kick eventfd: %s", r->name, strerror(errno));
    work(r);
}

static void on_timer(void *opaque) { work(opaque); }

static void *io_thread(void *arg)
{
    struct virtio_rng *r = arg;
    if (sc_install(SC_RNG, (enum sc_mode)r->env.seccomp) < 0) {
        log_err("%s: seccomp filter failed: device stopped", r->name);
        return NULL;
    }
    work(r);                    /* what the driver queued while stopped */
    int e = evloop_run(r->loop);
    if (e < 0)
        log_err("%s: event loop: %s: device stopped", r->name, strerror(-e));
    return NULL;
}

static int rng_start(void *dev, const struct virtio_dev_env *env)
{
    struct virtio_rng *r = dev;
    if (r->running)
        return -EALREADY;
    if (!env || !env->mem || !env->queues || env->nqueues != NQUEUES || !env->notify_used)
        return -EINVAL;
    r->env = *env;
    vqueues_init(&r->vq, &r->env, r->name);
    int e = evloop_add(r->loop, env->kick_fd[0], EVLOOP_IN, on_kick, r);
    if (e == 0 && (e = -pthread_create(&r->thread, NULL, io_thread, r)) == 0) {
        r->running = true;
        return 0;
    }
    log_err("%s: starting the I/O thread: %s", r->name, strerror(-e));
    if (env->kick_fd[0] >= 0)
        evloop_del(r->loop, env->kick_fd[0]);
    return e;
}

static void rng_stop(void *dev)
{
    struct virtio_rng *r = dev;
    if (!r->running)
        return;
    evloop_stop(r->loop);
    pthread_join(r->thread, NULL);
    r->running = false;
    if (r->env.kick_fd[0] >= 0)
        evloop_del(r->loop, r->env.kick_fd[0]);
    evloop_clear_stop(r->loop);
    evloop_timer_cancel(r->loop, &r->lim_timer);
    vqueues_publish(&r->vq, NULL);
}

static void rng_destroy(void *dev)
{
    struct virtio_rng *r = dev;
    if (!r)
        return;
    rng_stop(r);
    evloop_destroy(r->loop);
    pthread_mutex_destroy(&r->lim_lock);
    free(r);
}

int virtio_rng_create(const struct virtio_rng_opts *o, struct virtio_rng **out, char *why, size_t wlen)
{
    struct virtio_rng *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    snprintf(r->name, sizeof(r->name), "%s", o->name ? o->name : "rng");
    r->rl = LOG_LIMIT(10);
    pthread_mutex_init(&r->lim_lock, NULL);
    evloop_timer_init(&r->lim_timer, on_timer, r);
    int e = ratelimit_init(&r->lim, o->limit, clock_mono_ns());
    if (e < 0) {
        snprintf(why, wlen, "rng: rate limiter: refill time too long");
        rng_destroy(r);
        return e;
    }
    if ((e = evloop_create(&r->loop)) < 0) {
        snprintf(why, wlen, "rng: event loop: %s", strerror(-e));
        rng_destroy(r);
        return e;
    }
    *out = r;
    return 0;
}

int virtio_rng_set_limit(struct virtio_rng *r, const struct ratelimit_cfg *cfg)
{
    return ratelimit_update_locked(&r->lim, &r->lim_lock, cfg, clock_mono_ns());
}

void virtio_rng_get_limit(struct virtio_rng *r, struct ratelimit_cfg *cfg)
{
    ratelimit_get_cfg_locked(&r->lim, &r->lim_lock, cfg);
}

void virtio_rng_get_stats(struct virtio_rng *r, struct virtio_rng_stats *s)
{
    s->requests = atomic_load(&r->st_req);
    s->bytes = atomic_load(&r->st_bytes);
    s->bad = atomic_load(&r->st_bad);
    s->throttled = atomic_load(&r->st_throttled);
    s->errors = atomic_load(&r->st_err);
}

const struct virtio_dev_ops virtio_rng_ops = {
    .name = "rng",
    .device_id = VIRTIO_ID_RNG,
    .nqueues = NQUEUES,
    .queue_max = VIRTIO_RNG_QUEUE_MAX,
    .features = rng_features,
    .config_read = rng_config_read,
    .config_write = rng_config_write,
    .config_size = rng_config_size,
    .start = rng_start,
    .stop = rng_stop,
    .destroy = rng_destroy,
};
