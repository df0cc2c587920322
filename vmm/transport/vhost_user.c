/* vhost-user backend server. Contracts in vhost_user.h; protocol notes in
 * docs/vhost-user.md. One thread runs the message loop; the device runs its
 * own I/O thread(s) between start() and stop(). The only state shared with
 * them is each vring's call fd, behind a mutex (notify_used). The
 * frontend's kick fds go to the device as they are (usually O_NONBLOCK:
 * devices read them without blocking); the server closes or replaces one
 * only with the device stopped. */
#include "vmm/transport/vhost_user.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "devices/virtio/vhost_user_msg.h"
#include "devices/virtio/virtio_mmio.h"   /* VIRTIO_STATUS_NEEDS_RESET */
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"

struct vhu_vring {
    uint32_t num;           /* SET_VRING_NUM (0: not set) */
    uint16_t base;          /* SET_VRING_BASE: next avail index */
    bool addr_set;
    uint64_t desc_uva, avail_uva, used_uva;
    int kick_fd;            /* the frontend's, handed to the device while it runs */
    int err_fd;             /* the frontend's, under call_lock (the device thread signals it) */
    bool enabled;           /* SET_VRING_ENABLE (implicit without PROTOCOL_FEATURES) */
    bool live;              /* struct virtq enabled and its indices valid */
    pthread_mutex_t call_lock;
    int call_fd;            /* under call_lock */
};

struct vhu_map {
    void *addr;
    size_t len;
};

struct vhu_server {
    const struct virtio_dev_ops *ops;
    void *dev;
    struct sc_runner *runner;       /* device start/stop/reset under seccomp, or NULL */
    int seccomp;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int listen_fd, conn_fd, stop_fd;
    unsigned nq;                    /* vrings we accept (the backend's queues, see vhu_server_opts) */
    unsigned dev_nq;                /* ops->nqueues (capped): > nq when the frontend keeps some */
    bool all;                       /* start only with all nq rings ready (nqueues given) */
    uint16_t queue_max;             /* largest vring size accepted */
    void (*disconnected)(void *opaque);
    void *disc_opaque;

    uint64_t offered, acked;        /* virtio features (acked includes PROTOCOL_FEATURES) */
    uint64_t proto_offered, proto_acked;
    bool proto_set;                 /* SET_PROTOCOL_FEATURES seen: rings are enabled by message */
    bool features_set;

    struct vhu_mem_table table;
    struct vhu_map maps[VHU_MAX_REGIONS];
    struct gmem mem;
    bool mem_set;

    struct virtq queues[VIRTIO_DEV_MAX_QUEUES];
    struct vhu_vring vr[VIRTIO_DEV_MAX_QUEUES];
    unsigned running;               /* queues the device was started with; 0: stopped */
    bool had_guest;                 /* started since the last reset: a guest to forget */
    uint8_t status;                 /* SET_STATUS (PROTOCOL_F_STATUS) */
    _Atomic bool broken;            /* the device found a queue broken: NEEDS_RESET until reset */
    struct log_limit rl;            /* this server's guest-triggered messages */
};

/* ---------------------------------------------------------------- device */

static void notify_used(void *opaque, unsigned q)
{
    struct vhu_server *s = opaque;
    if (q >= s->nq)
        return;
    struct vhu_vring *v = &s->vr[q];
    pthread_mutex_lock(&v->call_lock);
    if (v->call_fd >= 0) {
        uint64_t one = 1;
        ssize_t n = write(v->call_fd, &one, sizeof one);
        (void)n;    /* EAGAIN: the counter is saturated, the frontend will see it */
    }
    pthread_mutex_unlock(&v->call_lock);
}

/* The device found queue q broken: the frontend hears it on that queue's
 * error eventfd (SET_VRING_ERR; QEMU reports "vhost vring error"), and
 * GET_STATUS shows NEEDS_RESET until the device is reset or restarted. */
static void needs_reset(void *opaque, unsigned q)
{
    struct vhu_server *s = opaque;
    atomic_store(&s->broken, true);
    bool told = false;
    if (q < s->nq) {
        struct vhu_vring *v = &s->vr[q];
        pthread_mutex_lock(&v->call_lock);
        if (v->err_fd >= 0) {
            uint64_t one = 1;
            told = write(v->err_fd, &one, sizeof one) == (ssize_t)sizeof one;
        }
        pthread_mutex_unlock(&v->call_lock);
    }
    if (log_limit_ok(&s->rl))
        log_warn("vhost-user: device found queue %u broken (needs reset)%s", q,
                 told ? "; error eventfd signalled" : "; the frontend gave no error eventfd");
}

struct dev_call {
    struct vhu_server *s;
    const struct virtio_dev_env *env;
    int what;                       /* 0 start, 1 stop, 2 reset */
};

static int dev_call_fn(void *p)
{
    struct dev_call *c = p;
    if (c->what == 0)
        return c->s->ops->start(c->s->dev, c->env);
    if (c->what == 1)
        c->s->ops->stop(c->s->dev);
    else
        c->s->ops->reset(c->s->dev);
    return 0;
}

/* The device's start, stop or reset, on the seccomp runner if there is one. */
static int dev_call(struct vhu_server *s, int what, const struct virtio_dev_env *env)
{
    struct dev_call c = { s, env, what };
    return sc_runner_call(s->runner, dev_call_fn, &c);
}

static void dev_stop(struct vhu_server *s)
{
    if (!s->running)
        return;
    dev_call(s, 1, NULL);
    s->running = 0;
}

static bool ring_ready(const struct vhu_server *s, unsigned i)
{
    const struct vhu_vring *v = &s->vr[i];
    return s->mem_set && v->num && v->addr_set && v->kick_fd >= 0 && v->enabled;
}

/* Make the queue's struct virtq live: translate addresses, enable, load the
 * indices (avail from the base, used from the ring itself). */
static int ring_enable(struct vhu_server *s, unsigned i)
{
    struct vhu_vring *v = &s->vr[i];
    struct virtq *q = &s->queues[i];
    uint64_t d, a, u;

    if (virtq_init(q, s->queue_max) < 0)
        return -EINVAL;
    if (v->num > q->max_size) {
        log_err("vhost-user: vring %u size %u above the device maximum %u", i, v->num, q->max_size);
        return -EINVAL;
    }
    if (vhu_uva_to_gpa(&s->table, v->desc_uva, virtq_desc_bytes(v->num), &d) ||
        vhu_uva_to_gpa(&s->table, v->avail_uva, virtq_avail_bytes(v->num), &a) ||
        vhu_uva_to_gpa(&s->table, v->used_uva, virtq_used_bytes(v->num), &u)) {
        log_err("vhost-user: vring %u addresses are not in the memory table", i);
        return -EFAULT;
    }
    q->size = (uint16_t)v->num;
    q->desc = d;
    q->avail = a;
    q->used = u;
    virtq_set_features(q, s->acked);
    int r = virtq_enable(q, &s->mem);
    if (r < 0) {
        log_err("vhost-user: vring %u rejected: %s", i, strerror(-r));
        return r;
    }
    uint16_t used_idx;
    if (gmem_read(&s->mem, u + 2, &used_idx, 2) < 0)
        return -EFAULT;
    q->last_avail_idx = v->base;
    q->used_idx = q->published_idx = le16toh(used_idx);
    v->live = true;
    return 0;
}

/* Start the device on the longest prefix of ready queues, if any. With
 * vhu_server_opts.nqueues given, all nq must be ready; when the frontend
 * handles some of the device's queues itself (dev_nq > nq), the device gets
 * its full queue count with the frontend's queues left not ready (kick fd
 * -1): it never sees them. */
static void reconcile(struct vhu_server *s)
{
    unsigned n = 0;
    while (n < s->nq && ring_ready(s, n))
        n++;
    if (s->all && n < s->nq)
        n = 0;
    if (n == s->running)
        return;
    dev_stop(s);
    if (n == 0)
        return;
    for (unsigned i = 0; i < n; i++) {
        if (!s->vr[i].live && ring_enable(s, i) < 0)
            return;     /* stays stopped until the frontend fixes the ring */
    }
    struct virtio_dev_env env;
    memset(&env, 0, sizeof env);
    env.mem = &s->mem;
    env.queues = s->queues;
    env.nqueues = s->dev_nq > s->nq ? s->dev_nq : n;
    env.features = s->acked & ~(1ull << VHU_F_PROTOCOL_FEATURES);
    /* The frontend's kick fds themselves: the device waits on them (epoll,
     * io_uring poll) and resets them without blocking, O_NONBLOCK or not
     * (QEMU's are; we leave their flags alone: the frontend reads them
     * itself once it takes a queue back). */
    for (unsigned i = 0; i < VIRTIO_DEV_MAX_QUEUES; i++)
        env.kick_fd[i] = i < n ? s->vr[i].kick_fd : -1;
    env.notify_used = notify_used;
    env.needs_reset = needs_reset;
    env.opaque = s;
    env.seccomp = s->seccomp;
    atomic_store(&s->broken, false);   /* a fresh start: the device's queues are whole again */
    int r = dev_call(s, 0, &env);
    if (r < 0) {
        log_err("vhost-user: device start failed: %s", strerror(-r));
        return;
    }
    s->had_guest = true;
    s->running = n;     /* no kick needed: a device looks at its queues when it starts */
    log_info("vhost-user: %s device started with %u queue(s)", s->ops->name, n);
}

/* A live queue's configuration is about to change: stop the device, keep
 * the avail index as the base so a restart continues where it stopped. */
static void ring_unlive(struct vhu_server *s, unsigned i)
{
    dev_stop(s);
    if (s->vr[i].live) {
        s->vr[i].base = s->queues[i].last_avail_idx;
        s->vr[i].live = false;
    }
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void unmap_all(struct vhu_server *s)
{
    for (unsigned i = 0; i < VHU_MAX_REGIONS; i++) {
        if (s->maps[i].addr)
            munmap(s->maps[i].addr, s->maps[i].len);
        s->maps[i].addr = NULL;
        s->maps[i].len = 0;
    }
    memset(&s->mem, 0, sizeof s->mem);
    memset(&s->table, 0, sizeof s->table);
    s->mem_set = false;
}

/* Back to the state of a fresh connection (device stopped). */
/* The frontend reset the device or went away: drop its state. A device
 * that was running forgets its guest (ops->reset). */
static void reset_state(struct vhu_server *s)
{
    dev_stop(s);
    if (s->had_guest && s->ops->reset)   /* also when its rings were stopped first */
        dev_call(s, 2, NULL);
    s->had_guest = false;
    for (unsigned i = 0; i < VIRTIO_DEV_MAX_QUEUES; i++) {
        struct vhu_vring *v = &s->vr[i];
        close_fd(&v->kick_fd);
        pthread_mutex_lock(&v->call_lock);
        close_fd(&v->err_fd);
        close_fd(&v->call_fd);
        pthread_mutex_unlock(&v->call_lock);
        v->num = 0;
        v->base = 0;
        v->addr_set = false;
        v->enabled = false;
        v->live = false;
        virtq_init(&s->queues[i], s->queue_max);
    }
    unmap_all(s);
    s->acked = 0;
    s->proto_acked = 0;
    s->proto_set = false;
    s->features_set = false;
    s->status = 0;
    atomic_store(&s->broken, false);
}

/* ------------------------------------------------------------- messages */

static int set_mem_table(struct vhu_server *s, const struct vhu_mem_table *t, int *fds)
{
    if (t->nregions > GMEM_MAX_REGIONS) {
        log_err("vhost-user: %u memory regions, at most %u supported", t->nregions,
                GMEM_MAX_REGIONS);
        return -E2BIG;
    }
    struct vhu_map maps[VHU_MAX_REGIONS];
    struct gmem mem;
    long pg = sysconf(_SC_PAGESIZE);
    memset(maps, 0, sizeof maps);
    memset(&mem, 0, sizeof mem);
    for (uint32_t i = 0; i < t->nregions; i++) {
        const struct vhu_region *r = &t->r[i];
        uint64_t off = r->mmap_offset & ~(uint64_t)(pg - 1);
        uint64_t skip = r->mmap_offset - off;
        if (r->size > SIZE_MAX - skip)
            goto fault;
        size_t len = (size_t)(r->size + skip);
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                       fds[i], (off_t)off);
        if (p == MAP_FAILED) {
            log_err("vhost-user: mmap of region %u (%llu bytes at fd offset %llu) failed: %s",
                    i, (unsigned long long)r->size, (unsigned long long)r->mmap_offset,
                    strerror(errno));
            goto fault;
        }
        maps[i].addr = p;
        maps[i].len = len;
        mem.r[i].gpa = r->gpa;
        mem.r[i].size = r->size;
        mem.r[i].host = (uint8_t *)p + skip;
    }
    mem.n = t->nregions;

    /* The device must not see memory change under it. */
    for (unsigned i = 0; i < s->nq; i++)
        ring_unlive(s, i);
    unmap_all(s);
    memcpy(s->maps, maps, sizeof maps);
    s->mem = mem;
    s->table = *t;
    s->mem_set = true;
    for (uint32_t i = 0; i < t->nregions; i++)
        log_debug("vhost-user: region %u gpa 0x%llx size 0x%llx uva 0x%llx", i,
                  (unsigned long long)t->r[i].gpa, (unsigned long long)t->r[i].size,
                  (unsigned long long)t->r[i].uva);
    return 0;
fault:
    for (unsigned i = 0; i < VHU_MAX_REGIONS; i++)
        if (maps[i].addr)
            munmap(maps[i].addr, maps[i].len);
    return -EFAULT;
}

static int send_all(int fd, const uint8_t *buf, size_t len)
{
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int reply_u64(struct vhu_server *s, uint32_t req, uint64_t v)
{
    uint8_t buf[VHU_HDR_SIZE + 8];
    int n = vhu_reply_u64(buf, sizeof buf, req, v);
    return n < 0 ? n : send_all(s->conn_fd, buf, (size_t)n);
}

/* The device's config space [off, off + size) in naturally aligned
 * accesses of up to 8 bytes, up to the device's config size: read into out,
 * or (out NULL) written from in. */
static void config_access(struct vhu_server *s, uint32_t off, uint8_t *out, const uint8_t *in,
                          uint32_t size)
{
    uint32_t have = s->ops->config_size ? s->ops->config_size(s->dev) : 0;
    uint32_t pos = 0;
    while (pos < size) {
        uint32_t o = off + pos;
        if (o >= have)
            break;
        uint32_t len = 8;
        while (len > 1 && ((o % len) || pos + len > size || o + len > have))
            len /= 2;
        if (out)
            s->ops->config_read(s->dev, o, out + pos, len);
        else
            s->ops->config_write(s->dev, o, in + pos, len);
        pos += len;
    }
}

static void config_read(struct vhu_server *s, uint32_t off, uint8_t *out, uint32_t size)
{
    memset(out, 0, size);
    config_access(s, off, out, NULL, size);
}

static void config_write(struct vhu_server *s, uint32_t off, const uint8_t *in, uint32_t size)
{
    if (s->ops->config_write)
        config_access(s, off, NULL, in, size);
}

/* SET_FEATURES: the acked features (a subset of those offered, else
 * -EINVAL); every ring stops. */
static int set_features(struct vhu_server *s, uint64_t acked)
{
    if (acked & ~s->offered) {
        log_err("vhost-user: frontend acked features 0x%llx not offered (0x%llx)",
                (unsigned long long)acked, (unsigned long long)s->offered);
        return -EINVAL;
    }
    for (unsigned i = 0; i < s->nq; i++)
        ring_unlive(s, i);
    s->acked = acked;
    s->features_set = true;
    /* Without PROTOCOL_FEATURES a ring is enabled once it has a kick fd. */
    if (!(s->acked & (1ull << VHU_F_PROTOCOL_FEATURES)))
        for (unsigned i = 0; i < s->nq; i++)
            s->vr[i].enabled = s->vr[i].kick_fd >= 0;
    reconcile(s);
    return 0;
}

/* GET_VRING_BASE: stop the ring and reply with its base. */
static int get_vring_base(struct vhu_server *s, const struct vhu_msg *m)
{
    unsigned i = m->u.state.index;
    struct vhu_vring *v = &s->vr[i];
    ring_unlive(s, i);
    uint16_t base = v->base;
    /* The ring is stopped: forget its kick fd until the next start. */
    close_fd(&v->kick_fd);
    v->enabled = false;
    uint8_t buf[VHU_HDR_SIZE + 8];
    int n = vhu_reply_state(buf, sizeof buf, m->request, i, base);
    int r = n < 0 ? n : send_all(s->conn_fd, buf, (size_t)n);
    reconcile(s);   /* remaining queues, if any */
    return r;
}

/* SET_VRING_KICK: the ring's kick fd, taken from fds (1 without one:
 * polling mode is not supported). */
static int set_vring_kick(struct vhu_server *s, const struct vhu_msg *m, int *fds)
{
    struct vhu_vring *v = &s->vr[m->u.vring_fd.index];
    if (m->u.vring_fd.nofd) {
        log_err("vhost-user: vring %u: polling mode (no kick fd) not supported",
                m->u.vring_fd.index);
        return 1;
    }
    ring_unlive(s, m->u.vring_fd.index);
    close_fd(&v->kick_fd);
    v->kick_fd = fds[0];
    fds[0] = -1;
    if (!(s->acked & (1ull << VHU_F_PROTOCOL_FEATURES)))
        v->enabled = true;
    reconcile(s);
    return 0;
}

/* SET_VRING_CALL / SET_VRING_ERR: replace *fd (v's call_fd or err_fd)
 * with the message's fd, taken from fds, or none, under v's call lock. */
static void set_vring_fd(struct vhu_vring *v, int *fd, const struct vhu_msg *m, int *fds)
{
    pthread_mutex_lock(&v->call_lock);
    close_fd(fd);
    if (!m->u.vring_fd.nofd) {
        *fd = fds[0];
        fds[0] = -1;
    }
    pthread_mutex_unlock(&v->call_lock);
}

/* GET_CONFIG: reply with the device's config space bytes asked for. */
static int get_config(struct vhu_server *s, const struct vhu_msg *m)
{
    uint8_t data[VHU_MAX_CONFIG], buf[VHU_HDR_SIZE + 12 + VHU_MAX_CONFIG];
    config_read(s, m->u.config.offset, data, m->u.config.size);
    int n = vhu_reply_config(buf, sizeof buf, m->u.config.offset, m->u.config.size,
                             m->u.config.flags, data);
    return n < 0 ? n : send_all(s->conn_fd, buf, (size_t)n);
}

/* Handle one checked message. fds: the message's fds, taken (set to -1)
 * when kept. Returns 0, a positive "failure" for a REPLY_ACK, or -errno to
 * drop the connection. *replied is set when the request's own reply went. */
static int handle(struct vhu_server *s, const struct vhu_msg *m, int *fds, bool *replied)
{
    struct vhu_vring *v;
    int r;

    *replied = false;
    switch (m->request) {
    case VHU_GET_FEATURES:
        *replied = true;
        return reply_u64(s, m->request, s->offered);
    case VHU_SET_FEATURES:
        return set_features(s, m->u.u64);
    case VHU_GET_PROTOCOL_FEATURES:
        *replied = true;
        return reply_u64(s, m->request, s->proto_offered);
    case VHU_SET_PROTOCOL_FEATURES:
        if (m->u.u64 & ~s->proto_offered)
            return -EINVAL;
        s->proto_acked = m->u.u64;
        s->proto_set = true;
        return 0;
    case VHU_GET_QUEUE_NUM:
        *replied = true;
        return reply_u64(s, m->request, s->nq);
    case VHU_SET_OWNER:
        return 0;
    case VHU_RESET_OWNER:
    case VHU_RESET_DEVICE:
        reset_state(s);
        return 0;
    case VHU_SET_MEM_TABLE:
        r = set_mem_table(s, &m->u.mem, fds);
        if (r == 0)
            reconcile(s);
        return r < 0 ? 1 : 0;
    case VHU_SET_VRING_NUM:
        ring_unlive(s, m->u.state.index);
        s->vr[m->u.state.index].num = m->u.state.num;
        return 0;
    case VHU_SET_VRING_BASE:
        ring_unlive(s, m->u.state.index);
        s->vr[m->u.state.index].base = (uint16_t)m->u.state.num;
        return 0;
    case VHU_SET_VRING_ADDR:
        v = &s->vr[m->u.addr.index];
        ring_unlive(s, m->u.addr.index);
        v->desc_uva = m->u.addr.desc_uva;
        v->avail_uva = m->u.addr.avail_uva;
        v->used_uva = m->u.addr.used_uva;
        v->addr_set = true;
        reconcile(s);
        return 0;
    case VHU_GET_VRING_BASE:
        *replied = true;
        return get_vring_base(s, m);
    case VHU_SET_VRING_KICK:
        return set_vring_kick(s, m, fds);
    case VHU_SET_VRING_CALL:
        v = &s->vr[m->u.vring_fd.index];
        set_vring_fd(v, &v->call_fd, m, fds);
        return 0;
    case VHU_SET_VRING_ERR:
        v = &s->vr[m->u.vring_fd.index];
        set_vring_fd(v, &v->err_fd, m, fds);
        return 0;
    case VHU_SET_STATUS:
        if (!(s->proto_acked & (1ull << VHU_PROTOCOL_F_STATUS)))
            return 1;
        s->status = (uint8_t)m->u.u64;
        if (s->status == 0)
            atomic_store(&s->broken, false);   /* the frontend reset the device */
        return 0;
    case VHU_GET_STATUS:
        if (!(s->proto_acked & (1ull << VHU_PROTOCOL_F_STATUS)))
            return -EPROTO;   /* it expects a reply we cannot give: drop the connection */
        *replied = true;
        return reply_u64(s, m->request, s->status | (atomic_load(&s->broken) ? VIRTIO_STATUS_NEEDS_RESET : 0));
    case VHU_SET_VRING_ENABLE:
        /* Protocol features are negotiated by GET/SET_PROTOCOL_FEATURES;
         * QEMU's vhost-user-net enables the rings before its SET_FEATURES
         * (which acks PROTOCOL_FEATURES only from QEMU 7.1 on). The state
         * is kept; a SET_FEATURES without the bit enables rings by kick. */
        if (!s->proto_set && !(s->acked & (1ull << VHU_F_PROTOCOL_FEATURES)))
            return 1;
        s->vr[m->u.state.index].enabled = m->u.state.num;
        if (!m->u.state.num)
            ring_unlive(s, m->u.state.index);
        reconcile(s);
        return 0;
    case VHU_GET_CONFIG:
        *replied = true;
        return get_config(s, m);
    case VHU_SET_CONFIG:
        config_write(s, m->u.config.offset, m->u.config.data, m->u.config.size);
        return 0;
    default:
        return -ENOTSUP;
    }
}

/* Receive exactly len bytes; fds from any control message are appended to
 * fds (at most VHU_MAX_FDS; more is an error). 0, -EPIPE on EOF, -errno. */
static int recv_exact(int sock, uint8_t *buf, size_t len, int *fds, unsigned *nfds)
{
    size_t got = 0;
    while (got < len) {
        union {
            char buf[CMSG_SPACE(VHU_MAX_FDS * sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = { buf + got, len - got };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
        ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        int err = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t j = 0; j < k; j++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + j * sizeof(int), sizeof fd);
                if (*nfds < VHU_MAX_FDS)
                    fds[(*nfds)++] = fd;
                else {
                    close(fd);
                    err = -E2BIG;
                }
            }
        }
        if (mh.msg_flags & MSG_CTRUNC)
            err = -E2BIG;
        if (err)
            return err;
        if (n == 0)
            return -EPIPE;
        got += (size_t)n;
    }
    return 0;
}

/* Read, check and handle one message. 0, or -errno: drop the connection. */
static int serve_one(struct vhu_server *s)
{
    uint8_t hdrb[VHU_HDR_SIZE], payload[VHU_MAX_PAYLOAD];
    int fds[VHU_MAX_FDS];
    unsigned nfds = 0;
    struct vhu_hdr h;
    struct vhu_msg m;
    enum vhu_err e;
    bool replied = false;
    int r;

    r = recv_exact(s->conn_fd, hdrb, sizeof hdrb, fds, &nfds);
    if (r < 0)
        goto out;
    if (vhu_parse_hdr(hdrb, sizeof hdrb, &h, &e) < 0) {
        log_err("vhost-user: bad message header: %s", vhu_strerror(e));
        r = -EPROTO;
        goto out;
    }
    if (h.size) {
        r = recv_exact(s->conn_fd, payload, h.size, fds, &nfds);
        if (r < 0)
            goto out;
    }
    r = vhu_parse_msg(&h, payload, h.size, nfds, s->nq, &m, &e);
    if (r == -ENOTSUP) {
        log_err("vhost-user: unsupported request %s (%u)", vhu_request_name(h.request),
                h.request);
        goto out;
    }
    if (r < 0) {
        log_err("vhost-user: bad %s message: %s", vhu_request_name(h.request), vhu_strerror(e));
        r = -EPROTO;
        goto out;
    }
    log_debug("vhost-user: %s", vhu_request_name(m.request));
    r = handle(s, &m, fds, &replied);
    if (r >= 0 && m.need_reply && !replied &&
        (s->proto_acked & (1ull << VHU_PROTOCOL_F_REPLY_ACK)))
        r = reply_u64(s, m.request, r ? 1 : 0);
    else if (r > 0)
        log_warn("vhost-user: %s failed", vhu_request_name(m.request));
    if (r > 0)
        r = 0;
out:
    for (unsigned i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return r;
}

/* ---------------------------------------------------------------- server */

int vhu_server_create(const char *path, const struct virtio_dev_ops *ops, void *dev,
                      struct vhu_server **out)
{
    return vhu_server_create_opts(path, ops, dev, NULL, out);
}

int vhu_server_create_opts(const char *path, const struct virtio_dev_ops *ops, void *dev,
                           const struct vhu_server_opts *o, struct vhu_server **out)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (!path || !ops || !ops->start || !ops->stop || !ops->config_read || !ops->features ||
        ops->nqueues == 0)
        return -EINVAL;
    unsigned dev_nq = ops->nqueues < VHU_MAX_QUEUES ? ops->nqueues : VHU_MAX_QUEUES;
    if (dev_nq > VIRTIO_DEV_MAX_QUEUES)
        dev_nq = VIRTIO_DEV_MAX_QUEUES;
    unsigned nq = o && o->nqueues ? o->nqueues : dev_nq;
    uint16_t qmax = o && o->queue_max ? o->queue_max : ops->queue_max;
    if (nq > dev_nq || qmax == 0 || qmax > VIRTQ_MAX_SIZE || (qmax & (qmax - 1)))
        return -EINVAL;
    if (strlen(path) >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    struct vhu_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->ops = ops;
    s->dev = dev;
    s->conn_fd = -1;
    s->nq = nq;
    s->dev_nq = dev_nq;
    s->all = o && o->nqueues;
    s->queue_max = qmax;
    s->runner = o ? o->runner : NULL;
    s->seccomp = o ? o->seccomp : 0;
    if (o) {
        s->disconnected = o->disconnected;
        s->disc_opaque = o->opaque;
    }
    s->offered = ops->features(dev) | (1ull << VIRTIO_F_VERSION_1) |
                 (1ull << VHU_F_PROTOCOL_FEATURES);
    s->proto_offered = (1ull << VHU_PROTOCOL_F_REPLY_ACK) | (1ull << VHU_PROTOCOL_F_CONFIG) |
                       (1ull << VHU_PROTOCOL_F_RESET_DEVICE) | (1ull << VHU_PROTOCOL_F_STATUS);
    s->rl = LOG_LIMIT(10);
    if (s->nq > 1)
        s->proto_offered |= 1ull << VHU_PROTOCOL_F_MQ;
    for (unsigned i = 0; i < VIRTIO_DEV_MAX_QUEUES; i++) {
        s->vr[i].kick_fd = s->vr[i].err_fd = s->vr[i].call_fd = -1;
        pthread_mutex_init(&s->vr[i].call_lock, NULL);
        virtq_init(&s->queues[i], qmax);
    }
    strcpy(s->path, path);
    memcpy(sa.sun_path, path, strlen(path) + 1);

    int r;
    s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->stop_fd < 0 || s->listen_fd < 0) {
        r = -errno;
        goto fail;
    }
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
    if (bind(s->listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        listen(s->listen_fd, 1) < 0) {
        r = -errno;
        goto fail;
    }
    *out = s;
    return 0;
fail:
    if (s->stop_fd >= 0)
        close(s->stop_fd);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    for (unsigned i = 0; i < VIRTIO_DEV_MAX_QUEUES; i++)
        pthread_mutex_destroy(&s->vr[i].call_lock);
    free(s);
    return r;
}

int vhu_server_run(struct vhu_server *s)
{
    for (;;) {
        /* the frontend's messages only: its kicks go to the device */
        struct pollfd p[2] = {
            { .fd = s->stop_fd, .events = POLLIN },
            { .fd = s->conn_fd >= 0 ? s->conn_fd : s->listen_fd, .events = POLLIN },
        };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (p[0].revents)
            return 0;
        if (!p[1].revents)
            continue;
        if (s->conn_fd < 0) {
            int c = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (c < 0) {
                if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)
                    continue;
                return -errno;
            }
            s->conn_fd = c;
            log_info("vhost-user: frontend connected on %s", s->path);
            continue;
        }
        int r = serve_one(s);
        if (r < 0) {
            if (r != -EPIPE)
                log_err("vhost-user: dropping the frontend: %s", strerror(-r));
            else
                log_info("vhost-user: frontend disconnected");
            reset_state(s);
            /* its guest is gone even if its rings were stopped first */
            if (s->ops->reset)
                dev_call(s, 2, NULL);
            close_fd(&s->conn_fd);
            if (s->disconnected)
                s->disconnected(s->disc_opaque);
        }
    }
}

void vhu_server_stop(struct vhu_server *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->stop_fd, &one, sizeof one);
    (void)n;
}

void vhu_server_destroy(struct vhu_server *s)
{
    if (!s)
        return;
    reset_state(s);
    close_fd(&s->conn_fd);
    close_fd(&s->listen_fd);
    close_fd(&s->stop_fd);
    unlink(s->path);
    for (unsigned i = 0; i < VIRTIO_DEV_MAX_QUEUES; i++)
        pthread_mutex_destroy(&s->vr[i].call_lock);
    free(s);
}
