/* FALLBACK, TEMPORARY: a minimal synchronous virtio-blk executor used by
 * `moat device blk` only while devices/virtio_blk.[ch] (the real device,
 * with its io_uring engine) is not in the tree. One thread per started
 * device polls the kick fds and executes each request with pread/pwrite/
 * fdatasync before popping the next. Requests are parsed by
 * devices/virtio_blk_req.h. Remove once the real device is wired in. */
#include "vmm/vhost_user_fbblk.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/virtio_blk_req.h"
#include "vmm/log.h"

#define FB_QUEUE_MAX 256
#define FB_SEG_MAX   128
#define VIRTIO_BLK_F_SEG_MAX  2
#define VIRTIO_BLK_F_RO       5
#define VIRTIO_BLK_F_BLK_SIZE 6
#define VIRTIO_BLK_F_FLUSH    9

struct fbblk {
    int fd;
    struct blk_params p;
    uint8_t config[60];
    struct virtio_dev_env env;
    pthread_t thread;
    int stop_fd;
    bool running;
};

static uint64_t fb_features(void *dev)
{
    struct fbblk *b = dev;
    uint64_t f = (1ull << VIRTIO_BLK_F_SEG_MAX) | (1ull << VIRTIO_BLK_F_BLK_SIZE) |
                 (1ull << VIRTIO_BLK_F_FLUSH) | (1ull << VIRTIO_F_INDIRECT_DESC) |
                 (1ull << VIRTIO_F_EVENT_IDX);
    if (b->p.read_only)
        f |= 1ull << VIRTIO_BLK_F_RO;
    return f;
}

static uint32_t fb_config_size(void *dev) { (void)dev; return sizeof(((struct fbblk *)0)->config); }

static void fb_config_read(void *dev, uint32_t off, uint8_t *data, uint32_t len)
{
    struct fbblk *b = dev;
    memset(data, 0, len);
    if (off < sizeof b->config && len <= sizeof b->config - off)
        memcpy(data, b->config + off, len);
}

static void fb_config_write(void *dev, uint32_t off, const uint8_t *data, uint32_t len) {}

/* Execute one parsed request; the status to write. */
static uint8_t fb_exec(struct fbblk *b, const struct gmem *m, struct blk_req *r)
{
    uint64_t off = r->sector * VIRTIO_BLK_SECTOR;
    switch (r->type) {
    case BLK_REQ_IN:
    case BLK_REQ_OUT:
        for (unsigned i = 0; i < r->ndata; i++) {
            uint8_t *p = gmem_ptr(m, r->data[i].gpa, r->data[i].len);
            if (!p)
                return VIRTIO_BLK_S_IOERR;
            ssize_t n = r->type == BLK_REQ_IN ? pread(b->fd, p, r->data[i].len, (off_t)off)
                                              : pwrite(b->fd, p, r->data[i].len, (off_t)off);
            if (n != (ssize_t)r->data[i].len)
                return VIRTIO_BLK_S_IOERR;
            off += r->data[i].len;
        }
        return VIRTIO_BLK_S_OK;
    case BLK_REQ_FLUSH:
        return fdatasync(b->fd) == 0 ? VIRTIO_BLK_S_OK : VIRTIO_BLK_S_IOERR;
    case BLK_REQ_GET_ID: {
        char id[VIRTIO_BLK_ID_BYTES] = "moat-vhost-fallback";
        uint64_t gpa = r->data[0].gpa;
        return gmem_write(m, gpa, id, sizeof id) ? VIRTIO_BLK_S_IOERR : VIRTIO_BLK_S_OK;
    }
    default:
        return VIRTIO_BLK_S_UNSUPP;
    }
}

static void fb_queue(struct fbblk *b, unsigned qi)
{
    const struct gmem *m = b->env.mem;
    struct virtq *q = &b->env.queues[qi];
    struct virtq_seg segs[FB_SEG_MAX], data[FB_SEG_MAX];
    struct blk_range ranges[1];

    for (;;) {
        int got = 0;
        for (;;) {
            struct virtq_chain c = { .seg = segs, .max_seg = FB_SEG_MAX };
            int r = virtq_pop(q, m, &c);
            if (r == 0)
                break;
            if (r == -EIO) {
                if (b->env.needs_reset)
                    b->env.needs_reset(b->env.opaque);
                return;
            }
            got++;
            if (r == -EINVAL) {
                virtq_push(q, m, c.head, 0);
                continue;
            }
            struct blk_req req = { .data = data, .data_max = FB_SEG_MAX,
                                   .ranges = ranges, .ranges_max = 1 };
            uint32_t written = 0;
            uint8_t st;
            if (blk_req_parse(m, &c, &b->p, &req) == 0) {
                st = fb_exec(b, m, &req);
                if (st == VIRTIO_BLK_S_OK && (req.type == BLK_REQ_IN || req.type == BLK_REQ_GET_ID))
                    written = req.data_len;
            } else {
                st = req.status;
            }
            if (req.has_status && gmem_write(m, req.status_gpa, &st, 1) == 0)
                written += 1;
            virtq_push(q, m, c.head, written);
        }
        if (got) {
            virtq_publish(q, m);
            if (virtq_should_notify(q, m))
                b->env.notify_used(b->env.opaque, qi);
        }
        int pend = virtq_enable_notify(q, m);
        if (pend <= 0)
            return;
    }
}

static void *fb_thread(void *arg)
{
    struct fbblk *b = arg;
    struct pollfd p[VIRTIO_DEV_MAX_QUEUES + 1];
    unsigned n = b->env.nqueues;

    for (unsigned i = 0; i < n; i++)
        fb_queue(b, i);
    for (;;) {
        p[0] = (struct pollfd){ .fd = b->stop_fd, .events = POLLIN };
        for (unsigned i = 0; i < n; i++)
            p[i + 1] = (struct pollfd){ .fd = b->env.kick_fd[i], .events = POLLIN };
        if (poll(p, n + 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[0].revents)
            break;
        for (unsigned i = 0; i < n; i++) {
            if (!p[i + 1].revents)
                continue;
            uint64_t v;
            ssize_t k = read(b->env.kick_fd[i], &v, sizeof v);
            (void)k;
            fb_queue(b, i);
        }
    }
    return NULL;
}

static int fb_start(void *dev, const struct virtio_dev_env *env)
{
    struct fbblk *b = dev;
    if (b->running)
        return -EBUSY;
    b->env = *env;
    uint64_t v;
    while (read(b->stop_fd, &v, sizeof v) > 0)
        ;
    int r = pthread_create(&b->thread, NULL, fb_thread, b);
    if (r)
        return -r;
    b->running = true;
    return 0;
}

static void fb_stop(void *dev)
{
    struct fbblk *b = dev;
    if (!b->running)
        return;
    uint64_t one = 1;
    ssize_t n = write(b->stop_fd, &one, sizeof one);
    (void)n;
    pthread_join(b->thread, NULL);
    b->running = false;
}

static void fb_destroy(void *dev)
{
    struct fbblk *b = dev;
    if (!b)
        return;
    fb_stop(b);
    close(b->fd);
    close(b->stop_fd);
    free(b);
}

const struct virtio_dev_ops vhu_fbblk_ops = {
    .name = "blk (fallback)",
    .device_id = VIRTIO_ID_BLOCK,
    .nqueues = 1,
    .queue_max = FB_QUEUE_MAX,
    .features = fb_features,
    .config_read = fb_config_read,
    .config_write = fb_config_write,
    .config_size = fb_config_size,
    .start = fb_start,
    .stop = fb_stop,
    .destroy = fb_destroy,
};

int vhu_fbblk_open(const char *path, bool read_only, void **out)
{
    struct fbblk *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    b->fd = open(path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (b->fd < 0) {
        int e = -errno;
        free(b);
        return e;
    }
    struct stat st;
    b->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fstat(b->fd, &st) < 0 || b->stop_fd < 0) {
        int e = -errno;
        close(b->fd);
        if (b->stop_fd >= 0)
            close(b->stop_fd);
        free(b);
        return e;
    }
    b->p.capacity = (uint64_t)st.st_size / VIRTIO_BLK_SECTOR;
    b->p.read_only = read_only;
    uint64_t cap = htole64(b->p.capacity);
    uint32_t seg_max = htole32(FB_SEG_MAX - 2), blk = htole32(512);
    memcpy(b->config, &cap, 8);
    memcpy(b->config + 12, &seg_max, 4);
    memcpy(b->config + 20, &blk, 4);
    *out = b;
    return 0;
}
