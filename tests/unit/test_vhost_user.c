/* vmm/transport/vhost_user.c, the server, driven over its real Unix socket by a
 * minimal frontend written here, with a fake device: the backend queue count
 * and ring size options (vhost-user-vsock: the frontend keeps the device's
 * last queue), config space, start only once every backend ring is ready,
 * a ring index past the backend's queues dropping the connection, the
 * disconnect callback, and the frontend's kick fds handed to the device
 * as they are. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devices/virtio/vhost_user_msg.h"
#include "vmm/transport/vhost_user.h"

/* ---- fake device: 3 queues (like vsock), queue_max 256, 8-byte config */

struct fake {
    atomic_int starts, stops, disconnects, resets;
    atomic_int stops_at_reset;     /* stops seen by the last reset */
    /* what the last start() saw */
    unsigned env_nq;
    int kick2;
    bool q0_ready, q1_ready, q2_ready;
    uint16_t q0_size;
    uint64_t cid;
    struct virtio_dev_env env;   /* the last start()'s */
    /* stop() drains as a real device does: its thread signals used
     * buffers and NEEDS_RESET, and stop() joins it */
    bool notify_in_stop;
    atomic_int stuck_stops;      /* joins that timed out */
};

static uint64_t f_features(void *d) { (void)d; return 1ull << 28; }
static void f_config_read(void *d, uint32_t off, uint8_t *data, uint32_t len)
{
    struct fake *f = d;
    uint8_t b[8];
    memcpy(b, &f->cid, 8);
    memcpy(data, b + off, len);
}
static uint32_t f_config_size(void *d) { (void)d; return 8; }
static int f_start(void *d, const struct virtio_dev_env *env)
{
    struct fake *f = d;
    f->env_nq = env->nqueues;
    f->kick2 = env->kick_fd[2];
    f->q0_ready = env->queues[0].ready;
    f->q1_ready = env->queues[1].ready;
    f->q2_ready = env->queues[2].ready;
    f->q0_size = env->queues[0].size;
    f->env = *env;
    atomic_fetch_add(&f->starts, 1);
    return 0;
}
static void *f_draining(void *d)
{
    struct fake *f = d;
    f->env.notify_used(f->env.opaque, 0);
    f->env.needs_reset(f->env.opaque, 0);
    return NULL;
}
static void f_stop(void *d)
{
    struct fake *f = d;
    atomic_fetch_add(&f->stops, 1);
    if (!f->notify_in_stop)
        return;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, f_draining, f), 0);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 3;
    if (pthread_timedjoin_np(t, NULL, &dl) != 0) {
        atomic_fetch_add(&f->stuck_stops, 1);
        pthread_join(t, NULL);      /* hangs for good if it is a deadlock */
    }
}
static void f_reset(void *d)
{
    struct fake *f = d;
    atomic_store(&f->stops_at_reset, atomic_load(&f->stops));
    atomic_fetch_add(&f->resets, 1);
}
static void f_disconnected(void *o) { struct fake *f = o; atomic_fetch_add(&f->disconnects, 1); }

static const struct virtio_dev_ops fake_ops = {
    .name = "fake", .device_id = 19, .nqueues = 3, .queue_max = 256,
    .features = f_features, .config_read = f_config_read, .config_size = f_config_size,
    .start = f_start, .stop = f_stop, .reset = f_reset,
};

/* ---- server in a thread */

struct srv {
    struct vhu_server *s;
    pthread_t t;
    char path[108];
    int rc;
};

static void *srv_thread(void *a)
{
    struct srv *v = a;
    v->rc = vhu_server_run(v->s);
    return NULL;
}

static void srv_start(struct srv *v, struct fake *f, const struct vhu_server_opts *o)
{
    snprintf(v->path, sizeof v->path, "/tmp/moat-test-vhu-%d-%ld.sock", getpid(),
             (long)time(NULL));
    ck_assert_int_eq(vhu_server_create_opts(v->path, &fake_ops, f, o, &v->s), 0);
    ck_assert_int_eq(pthread_create(&v->t, NULL, srv_thread, v), 0);
}

static void srv_end(struct srv *v)
{
    vhu_server_stop(v->s);
    pthread_join(v->t, NULL);
    ck_assert_int_eq(v->rc, 0);
    vhu_server_destroy(v->s);
}

static int dial(const char *path)
{
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, path);
    ck_assert_int_ge(c, 0);
    ck_assert_int_eq(connect(c, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = { 5, 0 };
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return c;
}

/* ---- the frontend */

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Send one message (with NEED_REPLY if ack) and an optional fd. */
static void msg(int c, uint32_t req, const void *payload, uint32_t len, int fd, bool ack)
{
    uint8_t buf[VHU_HDR_SIZE + VHU_MAX_PAYLOAD];
    put32(buf, req);
    put32(buf + 4, VHU_VERSION | (ack ? VHU_FLAG_NEED_REPLY : 0));
    put32(buf + 8, len);
    if (len)
        memcpy(buf + VHU_HDR_SIZE, payload, len);
    struct iovec iov = { buf, VHU_HDR_SIZE + len };
    union { char b[CMSG_SPACE(sizeof(int))]; struct cmsghdr a; } ctl;
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (fd >= 0) {
        mh.msg_control = ctl.b;
        mh.msg_controllen = sizeof ctl.b;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    }
    ck_assert_int_eq(sendmsg(c, &mh, MSG_NOSIGNAL), (ssize_t)iov.iov_len);
}

/* Read a reply to req; returns its payload size, payload in out. */
static uint32_t reply(int c, uint32_t req, uint8_t *out, uint32_t cap)
{
    uint8_t h[VHU_HDR_SIZE];
    ck_assert_int_eq(recv(c, h, sizeof h, MSG_WAITALL), (ssize_t)sizeof h);
    uint32_t r, fl, sz;
    memcpy(&r, h, 4);
    memcpy(&fl, h + 4, 4);
    memcpy(&sz, h + 8, 4);
    ck_assert_uint_eq(r, req);
    ck_assert(fl & VHU_FLAG_REPLY);
    ck_assert_uint_le(sz, cap);
    if (sz)
        ck_assert_int_eq(recv(c, out, sz, MSG_WAITALL), (ssize_t)sz);
    return sz;
}

static uint64_t get_u64(int c, uint32_t req)
{
    uint8_t p[8];
    uint64_t v;
    msg(c, req, NULL, 0, -1, false);
    ck_assert_uint_eq(reply(c, req, p, sizeof p), 8);
    memcpy(&v, p, 8);
    return v;
}

/* A message with NEED_REPLY: the REPLY_ACK status (0 done). */
static uint64_t acked(int c, uint32_t req, const void *payload, uint32_t len, int fd)
{
    uint8_t p[8];
    uint64_t v;
    msg(c, req, payload, len, fd, true);
    ck_assert_uint_eq(reply(c, req, p, sizeof p), 8);
    memcpy(&v, p, 8);
    return v;
}

static uint64_t set_u64(int c, uint32_t req, uint64_t v)
{
    uint8_t p[8];
    put64(p, v);
    return acked(c, req, p, 8, -1);
}

static uint64_t set_state(int c, uint32_t req, uint32_t idx, uint32_t num)
{
    uint8_t p[8];
    put32(p, idx);
    put32(p + 4, num);
    return acked(c, req, p, 8, -1);
}

#define MEM_SIZE (1u << 20)
#define UVA0     0x7f0000000000ull

/* Features, protocol features (REPLY_ACK, CONFIG), memory table (a memfd
 * of 1 MiB at gpa 0), then vrings [0, nrings) of size num: addresses,
 * base, kick and call. Each ring gets 64 KiB at gpa ring * 64 KiB. */
static void setup_rings(int c, unsigned nrings, uint32_t num);

static void setup(int c, unsigned nrings, uint32_t num)
{
    uint64_t feat = get_u64(c, VHU_GET_FEATURES);
    ck_assert(feat & (1ull << VHU_F_PROTOCOL_FEATURES));
    ck_assert(feat & (1ull << 32));
    uint64_t pf = get_u64(c, VHU_GET_PROTOCOL_FEATURES);
    ck_assert(pf & (1ull << VHU_PROTOCOL_F_REPLY_ACK));
    uint8_t p[8];
    put64(p, (1ull << VHU_PROTOCOL_F_REPLY_ACK) | (1ull << VHU_PROTOCOL_F_CONFIG));
    msg(c, VHU_SET_PROTOCOL_FEATURES, p, 8, -1, false);
    ck_assert_uint_eq(set_u64(c, VHU_SET_FEATURES, feat), 0);
    setup_rings(c, nrings, num);
}

/* The memory table and the rings of setup(), without the features. */
static void setup_rings(int c, unsigned nrings, uint32_t num)
{
    uint8_t p[64];
    int mfd = memfd_create("guest", 0);
    ck_assert_int_ge(mfd, 0);
    ck_assert_int_eq(ftruncate(mfd, MEM_SIZE), 0);
    memset(p, 0, sizeof p);
    put32(p, 1);
    put64(p + 8, 0);            /* gpa */
    put64(p + 16, MEM_SIZE);    /* size */
    put64(p + 24, UVA0);        /* uva */
    put64(p + 32, 0);           /* mmap offset */
    ck_assert_uint_eq(acked(c, VHU_SET_MEM_TABLE, p, 40, mfd), 0);
    close(mfd);

    for (unsigned i = 0; i < nrings; i++) {
        uint64_t base = UVA0 + i * 0x10000ull;
        ck_assert_uint_eq(set_state(c, VHU_SET_VRING_NUM, i, num), 0);
        ck_assert_uint_eq(set_state(c, VHU_SET_VRING_BASE, i, 0), 0);
        memset(p, 0, 40);
        put32(p, i);
        put64(p + 8, base);             /* desc */
        put64(p + 16, base + 0x8000);   /* used */
        put64(p + 24, base + 0x4000);   /* avail */
        ck_assert_uint_eq(acked(c, VHU_SET_VRING_ADDR, p, 40, -1), 0);
        int k = eventfd(0, 0), cl = eventfd(0, 0);
        put64(p, i);
        ck_assert_uint_eq(acked(c, VHU_SET_VRING_KICK, p, 8, k), 0);
        ck_assert_uint_eq(acked(c, VHU_SET_VRING_CALL, p, 8, cl), 0);
        close(k);
        close(cl);
    }
}

static bool wait_for(atomic_int *v, int want)
{
    for (int i = 0; i < 500; i++) {
        if (atomic_load(v) == want)
            return true;
        usleep(10000);
    }
    return false;
}

/* ---- tests */

START_TEST(two_backend_queues_of_three)
{
    struct fake f = { .cid = 0x1234567890ull };
    struct srv v;
    struct vhu_server_opts o = { .nqueues = 2, .queue_max = 1024,
                                 .disconnected = f_disconnected, .opaque = &f };
    srv_start(&v, &f, &o);
    int c = dial(v.path);

    uint64_t pf = get_u64(c, VHU_GET_PROTOCOL_FEATURES);
    ck_assert(pf & (1ull << VHU_PROTOCOL_F_MQ));        /* 2 backend queues */
    ck_assert_uint_eq(get_u64(c, VHU_GET_QUEUE_NUM), 2);

    setup(c, 2, 1024);      /* 1024 > the device's 256: allowed by the option */
    /* the config space comes from the device */
    uint8_t p[12 + 8], r[12 + 8];
    put32(p, 0);
    put32(p + 4, 8);
    put32(p + 8, 0);
    memset(p + 12, 0, 8);
    msg(c, VHU_GET_CONFIG, p, sizeof p, -1, false);
    ck_assert_uint_eq(reply(c, VHU_GET_CONFIG, r, sizeof r), 20);
    uint64_t cid;
    memcpy(&cid, r + 12, 8);
    ck_assert_uint_eq(cid, f.cid);

    /* one of two rings enabled: not started */
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 0);
    /* both: started with the device's 3 queues, the third not ready */
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 1, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 1);
    ck_assert_uint_eq(f.env_nq, 3);
    ck_assert_int_eq(f.kick2, -1);
    ck_assert(f.q0_ready && f.q1_ready && !f.q2_ready);
    ck_assert_uint_eq(f.q0_size, 1024);

    /* ring 2 belongs to the frontend: using it drops the connection */
    msg(c, VHU_SET_VRING_NUM, (uint8_t[8]){ 2, 0, 0, 0, 0, 1, 0, 0 }, 8, -1, false);
    char b;
    ck_assert_int_eq(recv(c, &b, 1, 0), 0);
    ck_assert(wait_for(&f.disconnects, 1));
    ck_assert_int_ge(atomic_load(&f.stops), 1);
    /* the frontend's guest is gone: the device was reset, after its stop */
    ck_assert_int_ge(atomic_load(&f.resets), 1);
    ck_assert_int_ge(atomic_load(&f.stops_at_reset), 1);
    close(c);

    /* the next frontend is served */
    c = dial(v.path);
    ck_assert_uint_eq(get_u64(c, VHU_GET_QUEUE_NUM), 2);
    close(c);
    ck_assert(wait_for(&f.disconnects, 2));
    int resets = atomic_load(&f.resets);
    ck_assert_int_ge(resets, 2);            /* every disconnect resets */
    srv_end(&v);
}
END_TEST

/* A frontend that stops its rings (GET_VRING_BASE: the device stops) and
 * then resets the device (RESET_OWNER): the device forgets its guest
 * (ops->reset) although it was no longer running. Before, only a running
 * device was reset by the message. */
START_TEST(reset_after_the_rings_stopped)
{
    struct fake f = { .cid = 3 };
    struct srv v;
    struct vhu_server_opts o = { .nqueues = 2, .queue_max = 1024,
                                 .disconnected = f_disconnected, .opaque = &f };
    srv_start(&v, &f, &o);
    int c = dial(v.path);
    setup(c, 2, 1024);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 1, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 1);
    uint8_t p[8], r[8];
    put32(p, 0);
    put32(p + 4, 0);
    msg(c, VHU_GET_VRING_BASE, p, sizeof p, -1, false);
    ck_assert_uint_eq(reply(c, VHU_GET_VRING_BASE, r, sizeof r), 8);
    ck_assert_int_ge(atomic_load(&f.stops), 1);
    int before = atomic_load(&f.resets);
    msg(c, VHU_RESET_OWNER, NULL, 0, -1, false);
    get_u64(c, VHU_GET_QUEUE_NUM);          /* the server handled the reset */
    ck_assert_int_eq(atomic_load(&f.resets), before + 1);
    close(c);
    ck_assert(wait_for(&f.disconnects, 1));
    srv_end(&v);
}
END_TEST

START_TEST(default_ring_limit_is_the_device_max)
{
    struct fake f = { .cid = 3 };
    struct srv v;
    srv_start(&v, &f, NULL);
    int c = dial(v.path);
    ck_assert_uint_eq(get_u64(c, VHU_GET_QUEUE_NUM), 3);
    setup(c, 1, 1024);      /* above queue_max 256: the ring is refused */
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 0);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 0), 0);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_NUM, 0, 256), 0);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    /* without the option a prefix of the queues is enough */
    ck_assert_int_eq(atomic_load(&f.starts), 1);
    ck_assert_uint_eq(f.env_nq, 1);
    ck_assert_uint_eq(f.q0_size, 256);
    close(c);
    srv_end(&v);
}
END_TEST

/* A device that finds a ring broken: the server signals that ring's
 * error eventfd (SET_VRING_ERR) and GET_STATUS shows NEEDS_RESET until the
 * frontend resets the status. (Before, the error fd was stored and never
 * written, and needs_reset only logged: a broken ring stalled silently.) */
START_TEST(broken_ring_signals_the_error_fd)
{
    struct fake f = { .cid = 3 };
    struct srv v;
    srv_start(&v, &f, NULL);
    int c = dial(v.path);
    uint64_t pf = get_u64(c, VHU_GET_PROTOCOL_FEATURES);
    ck_assert(pf & (1ull << VHU_PROTOCOL_F_STATUS));
    setup(c, 1, 256);
    uint8_t p[8];
    put64(p, (1ull << VHU_PROTOCOL_F_REPLY_ACK) | (1ull << VHU_PROTOCOL_F_CONFIG) |
                 (1ull << VHU_PROTOCOL_F_STATUS));
    msg(c, VHU_SET_PROTOCOL_FEATURES, p, 8, -1, false);
    int errfd = eventfd(0, EFD_NONBLOCK);
    put64(p, 0);
    ck_assert_uint_eq(acked(c, VHU_SET_VRING_ERR, p, 8, errfd), 0);
    ck_assert_uint_eq(set_u64(c, VHU_SET_STATUS, 0x0f), 0);   /* ACK|DRIVER|DRIVER_OK|FEATURES_OK */
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 1);
    ck_assert_uint_eq(get_u64(c, VHU_GET_STATUS), 0x0f);
    struct pollfd pe = { .fd = errfd, .events = POLLIN };
    ck_assert_int_eq(poll(&pe, 1, 0), 0);
    ck_assert_ptr_nonnull(f.env.needs_reset);
    f.env.needs_reset(f.env.opaque, 0);        /* what blk/vsock do on a bad ring */
    ck_assert_int_eq(poll(&pe, 1, 1000), 1);
    uint64_t n = 0;
    ck_assert_int_eq(read(errfd, &n, sizeof n), (ssize_t)sizeof n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(get_u64(c, VHU_GET_STATUS), 0x0f | 0x40);
    /* A queue past the frontend's rings: NEEDS_RESET, no fd to signal. */
    f.env.needs_reset(f.env.opaque, 7);
    ck_assert_uint_eq(get_u64(c, VHU_GET_STATUS), 0x0f | 0x40);
    /* The frontend resets the device: whole again. */
    ck_assert_uint_eq(set_u64(c, VHU_SET_STATUS, 0), 0);
    ck_assert_uint_eq(get_u64(c, VHU_GET_STATUS), 0);
    close(errfd);
    close(c);
    srv_end(&v);
}
END_TEST

/* The frontend's kick eventfd, O_NONBLOCK as QEMU's, is the device's kick
 * fd: the same counter, its flags untouched, nothing read or written by
 * the server. (Before, the server polled it, read each kick and wrote 1
 * to a blocking eventfd of its own, which the device got instead, and
 * kicked that one once after every start.) */
START_TEST(kick_fd_goes_to_the_device)
{
    struct fake f = { .cid = 3 };
    struct srv v;
    srv_start(&v, &f, NULL);
    int c = dial(v.path);
    setup(c, 1, 256);
    int kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ck_assert_int_ge(kick, 0);
    uint8_t p[8];
    put64(p, 0);
    ck_assert_uint_eq(acked(c, VHU_SET_VRING_KICK, p, 8, kick), 0);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 1);
    int dk = f.env.kick_fd[0];
    ck_assert_int_ge(dk, 0);
    ck_assert_int_ne(dk, kick);                 /* the server's copy of it */
    int fl = fcntl(dk, F_GETFL);
    ck_assert_int_ge(fl, 0);
    ck_assert(fl & O_NONBLOCK);                 /* the frontend's description */
    /* no kick of the server's own at start */
    struct pollfd pd = { .fd = dk, .events = POLLIN };
    ck_assert_int_eq(poll(&pd, 1, 50), 0);
    /* a kick of 5 stays whole for the device: the server does not take it */
    uint64_t five = 5, got = 0;
    ck_assert_int_eq(write(kick, &five, 8), 8);
    usleep(100 * 1000);
    ck_assert_int_eq(poll(&pd, 1, 0), 1);
    ck_assert_int_eq(read(dk, &got, 8), 8);
    ck_assert_uint_eq(got, 5);
    /* one counter: the frontend's end is empty now */
    struct pollfd pk = { .fd = kick, .events = POLLIN };
    ck_assert_int_eq(poll(&pk, 1, 0), 0);
    ck_assert_int_eq(read(dk, &got, 8), -1);
    ck_assert_int_eq(errno, EAGAIN);            /* and it never blocks */
    /* stopping the ring stops the device before the fd is closed */
    uint8_t st[8], r[8];
    put32(st, 0);
    put32(st + 4, 0);
    msg(c, VHU_GET_VRING_BASE, st, sizeof st, -1, false);
    ck_assert_uint_eq(reply(c, VHU_GET_VRING_BASE, r, sizeof r), 8);
    ck_assert_int_ge(atomic_load(&f.stops), 1);
    ck_assert_int_eq(fcntl(dk, F_GETFD), -1);   /* closed after the stop */
    close(kick);
    close(c);
    srv_end(&v);
}
END_TEST

/* The server stops the device (which joins its thread) holding no lock
 * that thread needs: a device thread that signals used buffers or
 * NEEDS_RESET while it drains (call fd, error fd, under the vring's
 * call_lock) is never blocked, whether the stop comes from GET_VRING_BASE,
 * a reset or the frontend going away. */
START_TEST(stop_holds_no_lock_the_device_needs)
{
    struct fake f = { .cid = 3, .notify_in_stop = true };
    struct srv v;
    struct vhu_server_opts o = { .disconnected = f_disconnected, .opaque = &f };
    srv_start(&v, &f, &o);
    int c = dial(v.path);
    setup(c, 1, 256);
    int errfd = eventfd(0, EFD_NONBLOCK), callfd = eventfd(0, EFD_NONBLOCK);
    uint8_t p[8];
    put64(p, 0);
    ck_assert_uint_eq(acked(c, VHU_SET_VRING_ERR, p, 8, errfd), 0);
    ck_assert_uint_eq(acked(c, VHU_SET_VRING_CALL, p, 8, callfd), 0);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 1);
    /* GET_VRING_BASE */
    uint8_t st[8], r[8];
    put32(st, 0);
    put32(st + 4, 0);
    msg(c, VHU_GET_VRING_BASE, st, sizeof st, -1, false);
    ck_assert_uint_eq(reply(c, VHU_GET_VRING_BASE, r, sizeof r), 8);
    ck_assert_int_eq(atomic_load(&f.stops), 1);
    uint64_t n = 0;
    ck_assert_int_eq(read(callfd, &n, 8), 8);   /* the drain's signals got out */
    ck_assert_int_eq(read(errfd, &n, 8), 8);
    /* started again, then RESET_DEVICE ... */
    int k = eventfd(0, EFD_NONBLOCK);
    ck_assert_uint_eq(acked(c, VHU_SET_VRING_KICK, p, 8, k), 0);
    close(k);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 2);
    msg(c, VHU_RESET_OWNER, NULL, 0, -1, false);
    get_u64(c, VHU_GET_QUEUE_NUM);
    ck_assert_int_eq(atomic_load(&f.stops), 2);
    /* ... and a frontend that goes away with the device running */
    setup(c, 1, 256);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 3);
    close(c);
    ck_assert(wait_for(&f.disconnects, 1));
    ck_assert_int_eq(atomic_load(&f.stops), 3);
    ck_assert_int_eq(atomic_load(&f.stuck_stops), 0);
    close(errfd);
    close(callfd);
    srv_end(&v);
}
END_TEST

/* QEMU's vhost-user-net (7.2) negotiates protocol features, then enables
 * both rings (SET_VRING_ENABLE) before SET_FEATURES, the memory table and
 * the rings' addresses and kicks, and sends no enable after them. The
 * enables must count: before, they were refused until SET_FEATURES had
 * acked PROTOCOL_FEATURES, the rings stayed disabled and the device never
 * started (the guest's eth0 was up, and no frame went anywhere). */
START_TEST(enable_before_set_features)
{
    struct fake f = { .cid = 3 };
    struct srv v;
    struct vhu_server_opts o = { .nqueues = 2, .queue_max = 1024 };
    srv_start(&v, &f, &o);
    int c = dial(v.path);
    uint64_t feat = get_u64(c, VHU_GET_FEATURES);
    get_u64(c, VHU_GET_PROTOCOL_FEATURES);
    uint8_t p[8];
    put64(p, (1ull << VHU_PROTOCOL_F_REPLY_ACK) | (1ull << VHU_PROTOCOL_F_CONFIG));
    msg(c, VHU_SET_PROTOCOL_FEATURES, p, 8, -1, false);
    ck_assert_uint_eq(get_u64(c, VHU_GET_QUEUE_NUM), 2);
    msg(c, VHU_SET_OWNER, NULL, 0, -1, false);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 1, 1), 0);
    ck_assert_uint_eq(set_u64(c, VHU_SET_FEATURES, feat), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 0);
    setup_rings(c, 2, 1024);
    ck_assert_int_eq(atomic_load(&f.starts), 1);
    ck_assert(f.q0_ready && f.q1_ready);
    /* a disable stops it, an enable starts it again */
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 1, 0), 0);
    ck_assert_int_ge(atomic_load(&f.stops), 1);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 1, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 2);
    close(c);
    srv_end(&v);
}
END_TEST

/* nqueues given and equal to the device's (virtio-net: rx and tx): the
 * device starts only once all of them are ready, never on a prefix (which
 * virtio-net refuses: "device start failed" was logged twice at every
 * boot). Without the option a prefix still starts it (see
 * default_ring_limit_is_the_device_max). */
START_TEST(given_queues_all_needed)
{
    struct fake f = { .cid = 3 };
    struct srv v;
    struct vhu_server_opts o = { .nqueues = 3 };
    srv_start(&v, &f, &o);
    int c = dial(v.path);
    setup(c, 2, 256);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 0, 1), 0);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 1, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 0);
    /* the third ring */
    uint8_t p[40];
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_NUM, 2, 256), 0);
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_BASE, 2, 0), 0);
    memset(p, 0, sizeof p);
    put32(p, 2);
    put64(p + 8, UVA0 + 0x20000);
    put64(p + 16, UVA0 + 0x28000);
    put64(p + 24, UVA0 + 0x24000);
    ck_assert_uint_eq(acked(c, VHU_SET_VRING_ADDR, p, 40, -1), 0);
    int k = eventfd(0, 0);
    put64(p, 2);
    ck_assert_uint_eq(acked(c, VHU_SET_VRING_KICK, p, 8, k), 0);
    close(k);
    ck_assert_int_eq(atomic_load(&f.starts), 0);        /* not enabled yet */
    ck_assert_uint_eq(set_state(c, VHU_SET_VRING_ENABLE, 2, 1), 0);
    ck_assert_int_eq(atomic_load(&f.starts), 1);
    ck_assert_uint_eq(f.env_nq, 3);
    ck_assert(f.q0_ready && f.q1_ready && f.q2_ready);
    close(c);
    srv_end(&v);
}
END_TEST

START_TEST(bad_options_rejected)
{
    struct fake f = { 0 };
    struct vhu_server *s = NULL;
    char path[108];
    snprintf(path, sizeof path, "/tmp/moat-test-vhu-bad-%d.sock", getpid());
    struct vhu_server_opts o = { .nqueues = 4 };
    ck_assert_int_eq(vhu_server_create_opts(path, &fake_ops, &f, &o, &s), -EINVAL);
    o = (struct vhu_server_opts){ .queue_max = 1000 };
    ck_assert_int_eq(vhu_server_create_opts(path, &fake_ops, &f, &o, &s), -EINVAL);
    o = (struct vhu_server_opts){ .nqueues = 3, .queue_max = 32768 };
    ck_assert_int_eq(vhu_server_create_opts(path, &fake_ops, &f, &o, &s), 0);
    vhu_server_destroy(s);
    ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vhost_user");
    TCase *tc = tcase_create("server");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, two_backend_queues_of_three);
    tcase_add_test(tc, reset_after_the_rings_stopped);
    tcase_add_test(tc, default_ring_limit_is_the_device_max);
    tcase_add_test(tc, broken_ring_signals_the_error_fd);
    tcase_add_test(tc, kick_fd_goes_to_the_device);
    tcase_add_test(tc, stop_holds_no_lock_the_device_needs);
    tcase_add_test(tc, enable_before_set_features);
    tcase_add_test(tc, given_queues_all_needed);
    tcase_add_test(tc, bad_options_rejected);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
