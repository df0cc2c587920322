/* virtio-rng driven through a real virtqueue in fake guest memory: the
 * pure request check (rng_req_len) for every malformed shape, random bytes
 * reaching writable buffers, refused chains (device-readable buffers, a
 * buffer outside RAM), the per-request cap, the rate limiter holding a
 * request back and a run-time change letting it go, and the kind's
 * options. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "devices/rng/rng_kind.h"
#include "devices/rng/virtio_rng.h"
#include "devices/virtio/ratelimit.h"
#include "devices/virtio/virtq.h"
#include "vmm/base/gmem.h"

#define MEM_SIZE (4u << 20)
#define QSIZE    16u
#define QBASE    0x1000u
#define BUF      0x100000u

static struct {
    uint8_t *ram;
    struct gmem mem;
    struct virtq q;
    struct virtio_dev_env env;
    struct virtio_rng *dev;
    uint16_t avail, used_seen;
} R;

static void on_notify(void *o, unsigned q) { (void)o; (void)q; }

static void put_desc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
    uint8_t *d = R.ram + QBASE + 16u * i;
    memcpy(d, &addr, 8); memcpy(d + 8, &len, 4); memcpy(d + 12, &flags, 2); memcpy(d + 14, &next, 2);
}

static void make_avail(uint16_t head)
{
    uint64_t av = QBASE + 0x1000;
    memcpy(R.ram + av + 4 + 2u * (R.avail % QSIZE), &head, 2);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    R.avail++;
    memcpy(R.ram + av + 2, &R.avail, 2);
    uint64_t one = 1;
    ck_assert_int_eq(write(R.env.kick_fd[0], &one, 8), 8);
}

static uint64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The next used entry within timeout_ms: 1 with head and len, or 0. */
static int used_wait(uint16_t *head, uint32_t *len, unsigned timeout_ms)
{
    uint64_t used = QBASE + 0x2000, end = ms_now() + timeout_ms;
    for (;;) {
        uint16_t idx = __atomic_load_n((uint16_t *)(R.ram + used + 2), __ATOMIC_ACQUIRE);
        if (idx != R.used_seen) {
            uint64_t e = used + 4 + 8u * (R.used_seen % QSIZE);
            uint32_t h;
            memcpy(&h, R.ram + e, 4);
            memcpy(len, R.ram + e + 4, 4);
            *head = (uint16_t)h;
            R.used_seen++;
            return 1;
        }
        if (ms_now() >= end)
            return 0;
        usleep(200);
    }
}

static void rig_up(const struct ratelimit_cfg *limit)
{
    memset(&R, 0, sizeof R);
    R.ram = calloc(1, MEM_SIZE);
    ck_assert_ptr_nonnull(R.ram);
    R.mem.n = 1;
    R.mem.r[0] = (struct gmem_region){ 0, MEM_SIZE, R.ram };
    struct virtio_rng_opts o = { .name = "rngtest", .limit = limit };
    char why[200];
    ck_assert_msg(virtio_rng_create(&o, &R.dev, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(virtq_init(&R.q, QSIZE), 0);
    R.q.desc = QBASE;
    R.q.avail = QBASE + 0x1000;
    R.q.used = QBASE + 0x2000;
    virtq_set_features(&R.q, 1ull << VIRTIO_F_VERSION_1);
    ck_assert_int_eq(virtq_enable(&R.q, &R.mem), 0);
    R.env.kick_fd[0] = eventfd(0, EFD_CLOEXEC);
    R.env.mem = &R.mem;
    R.env.queues = &R.q;
    R.env.nqueues = 1;
    R.env.features = 1ull << VIRTIO_F_VERSION_1;
    R.env.notify_used = on_notify;
    ck_assert_int_eq(virtio_rng_ops.start(R.dev, &R.env), 0);
}

static void rig_down(void)
{
    virtio_rng_ops.destroy(R.dev);
    close(R.env.kick_fd[0]);
    free(R.ram);
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

START_TEST(req_len_checks)
{
    struct virtq_seg s[2] = { { 0x1000, 10, false }, { 0x2000, 100, true } };
    struct virtq_chain c = { .seg = s, .max_seg = 2, .nseg = 2, .nread = 1, .read_len = 10, .write_len = 100 };
    ck_assert_int_eq(rng_req_len(&c, 1000), -EINVAL);           /* a readable buffer */
    c = (struct virtq_chain){ .seg = s + 1, .max_seg = 1, .nseg = 1, .nread = 0, .write_len = 100 };
    ck_assert_int_eq(rng_req_len(&c, 1000), 100);
    ck_assert_int_eq(rng_req_len(&c, 64), 64);                  /* capped */
    ck_assert_int_eq(rng_req_len(&c, 100), 100);
    c.write_len = 0;
    c.nseg = 0;
    ck_assert_int_eq(rng_req_len(&c, 1000), -EINVAL);           /* nothing to fill */
    c = (struct virtq_chain){ .seg = s, .max_seg = 2, .nseg = 1, .nread = 1, .read_len = 0, .write_len = 0 };
    ck_assert_int_eq(rng_req_len(&c, 1000), -EINVAL);           /* a zero-length readable one */
    c = (struct virtq_chain){ .seg = s + 1, .nseg = 1, .write_len = UINT32_MAX };
    ck_assert_int_eq(rng_req_len(&c, VIRTIO_RNG_REQ_MAX), VIRTIO_RNG_REQ_MAX);
}
END_TEST

START_TEST(fills_writable_buffers)
{
    rig_up(NULL);
    uint16_t h;
    uint32_t len;
    /* one buffer */
    put_desc(0, BUF, 256, VIRTQ_DESC_F_WRITE, 0);
    make_avail(0);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(h, 0);
    ck_assert_uint_eq(len, 256);
    ck_assert(!all_zero(R.ram + BUF, 256));
    ck_assert(all_zero(R.ram + BUF + 256, 4096));               /* nothing past it */
    /* a chain of two writable buffers: both filled */
    put_desc(1, BUF + 0x10000, 100, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2);
    put_desc(2, BUF + 0x20000, 60, VIRTQ_DESC_F_WRITE, 0);
    make_avail(1);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(h, 1);
    ck_assert_uint_eq(len, 160);
    ck_assert(!all_zero(R.ram + BUF + 0x10000, 100));
    ck_assert(!all_zero(R.ram + BUF + 0x20000, 60));
    ck_assert(memcmp(R.ram + BUF, R.ram + BUF + 0x10000, 100) != 0);
    /* more than the cap: only the cap filled */
    put_desc(3, BUF, 2 * VIRTIO_RNG_REQ_MAX, VIRTQ_DESC_F_WRITE, 0);
    memset(R.ram + BUF, 0, 2 * VIRTIO_RNG_REQ_MAX);
    make_avail(3);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(len, VIRTIO_RNG_REQ_MAX);
    ck_assert(all_zero(R.ram + BUF + VIRTIO_RNG_REQ_MAX, VIRTIO_RNG_REQ_MAX));
    struct virtio_rng_stats st;
    virtio_rng_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.requests, 3);
    ck_assert_uint_eq(st.bytes, 256 + 160 + VIRTIO_RNG_REQ_MAX);
    ck_assert_uint_eq(st.bad, 0);
    rig_down();
}
END_TEST

START_TEST(refuses_malformed_chains)
{
    rig_up(NULL);
    uint16_t h;
    uint32_t len;
    /* device-readable only */
    put_desc(0, BUF, 64, 0, 0);
    memset(R.ram + BUF, 0xaa, 64);
    make_avail(0);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(h, 0);
    ck_assert_uint_eq(len, 0);
    for (int i = 0; i < 64; i++)
        ck_assert_uint_eq(R.ram[BUF + i], 0xaa);                 /* untouched */
    /* readable then writable */
    put_desc(1, BUF, 16, VIRTQ_DESC_F_NEXT, 2);
    put_desc(2, BUF + 0x1000, 64, VIRTQ_DESC_F_WRITE, 0);
    memset(R.ram + BUF + 0x1000, 0, 64);
    make_avail(1);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(len, 0);
    ck_assert(all_zero(R.ram + BUF + 0x1000, 64));
    /* a zero-length writable buffer */
    put_desc(3, BUF, 0, VIRTQ_DESC_F_WRITE, 0);
    make_avail(3);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(len, 0);
    /* a buffer past the end of RAM, a descriptor loop */
    put_desc(4, MEM_SIZE - 16, 64, VIRTQ_DESC_F_WRITE, 0);
    make_avail(4);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(h, 4);
    ck_assert_uint_eq(len, 0);
    put_desc(5, BUF, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 6);
    put_desc(6, BUF + 8, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 5);
    make_avail(5);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(h, 5);
    ck_assert_uint_eq(len, 0);
    /* still works */
    put_desc(7, BUF, 32, VIRTQ_DESC_F_WRITE, 0);
    make_avail(7);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(len, 32);
    struct virtio_rng_stats st;
    virtio_rng_get_stats(R.dev, &st);
    ck_assert_uint_eq(st.bad, 5);
    ck_assert_uint_eq(st.requests, 1);
    rig_down();
}
END_TEST

START_TEST(rate_limit_holds_then_releases)
{
    /* one request per 100 s: the first goes, the second waits */
    struct ratelimit_cfg lc = { .ops = { .size = 1, .refill_time_ms = 100000 } };
    rig_up(&lc);
    uint16_t h;
    uint32_t len;
    put_desc(0, BUF, 32, VIRTQ_DESC_F_WRITE, 0);
    make_avail(0);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(len, 32);
    put_desc(1, BUF + 0x1000, 32, VIRTQ_DESC_F_WRITE, 0);
    make_avail(1);
    ck_assert_int_eq(used_wait(&h, &len, 300), 0);
    struct virtio_rng_stats st;
    virtio_rng_get_stats(R.dev, &st);
    ck_assert_uint_ge(st.throttled, 1);
    ck_assert_uint_eq(st.requests, 1);
    struct ratelimit_cfg got;
    virtio_rng_get_limit(R.dev, &got);
    ck_assert_uint_eq(got.ops.size, 1);
    ck_assert_uint_eq(got.ops.refill_time_ms, 100000);
    /* limit off: the waiting request goes at the next kick */
    struct ratelimit_cfg off = { 0 };
    ck_assert_int_eq(virtio_rng_set_limit(R.dev, &off), 0);
    uint64_t one = 1;
    ck_assert_int_eq(write(R.env.kick_fd[0], &one, 8), 8);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    ck_assert_uint_eq(h, 1);
    ck_assert_uint_eq(len, 32);
    rig_down();
}
END_TEST

START_TEST(bandwidth_limit_timer_releases)
{
    /* 1000 bytes per 200 ms: a 1000-byte request empties the bucket; the
     * next waits for the refill and goes by the limiter's own timer */
    struct ratelimit_cfg lc = { .bandwidth = { .size = 1000, .refill_time_ms = 200 } };
    rig_up(&lc);
    uint16_t h;
    uint32_t len;
    put_desc(0, BUF, 1000, VIRTQ_DESC_F_WRITE, 0);
    make_avail(0);
    ck_assert_int_eq(used_wait(&h, &len, 5000), 1);
    put_desc(1, BUF + 0x1000, 1000, VIRTQ_DESC_F_WRITE, 0);
    make_avail(1);
    ck_assert_int_eq(used_wait(&h, &len, 10000), 1);
    ck_assert_uint_eq(h, 1);
    ck_assert_uint_eq(len, 1000);
    struct virtio_rng_stats st;
    virtio_rng_get_stats(R.dev, &st);
    ck_assert_uint_ge(st.throttled, 1);
    rig_down();
}
END_TEST

static int kind_check(const char *opts, char *why, size_t wlen)
{
    struct devopts o;
    ck_assert_int_eq(devopt_parse(opts, &o, why, wlen), 0);
    if (devopt_only(&o, rng_kind.keys, why, wlen) < 0)
        return -EINVAL;
    return rng_kind.check(&o, why, wlen);
}

START_TEST(kind_options)
{
    char why[200];
    ck_assert_str_eq(rng_kind.type, "rng");
    ck_assert_uint_eq(rng_kind.device_id, VIRTIO_ID_RNG);
    ck_assert_uint_eq(rng_kind.max_per_vm, 1);
    ck_assert_int_eq(kind_check("", why, sizeof why), 0);
    ck_assert_int_eq(kind_check("bw=1048576/100", why, sizeof why), 0);
    ck_assert_int_eq(kind_check("bw=1048576/100/4096,ops=10/1000", why, sizeof why), 0);
    ck_assert_int_eq(kind_check("bw=x", why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "bw=x"));
    ck_assert_int_eq(kind_check("ops=0/100", why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "ops="));
    ck_assert_int_eq(kind_check("ops=5", why, sizeof why), -EINVAL);
    ck_assert_int_eq(kind_check("path=/dev/random", why, sizeof why), -EINVAL);
    char id[VIRTIO_KIND_ID_MAX + 1];
    struct devopts o;
    devopt_init(&o);
    rng_kind.id(&o, 0, id);
    ck_assert_str_eq(id, "rng");
    /* made from options, changed at run time, its state as text */
    ck_assert_int_eq(devopt_parse("ops=10/1000", &o, why, sizeof why), 0);
    struct virtio_made m;
    ck_assert_int_eq(rng_kind.create(&o, "rng", false, 0, &m, why, sizeof why), 0);
    ck_assert_ptr_eq(m.ops, &virtio_rng_ops);
    ck_assert_int_eq(rng_kind.set(m.priv, "bw", "100/10", why, sizeof why), 0);
    ck_assert_int_eq(rng_kind.set(m.priv, "ops", "bad", why, sizeof why), -EINVAL);
    struct ratelimit_cfg c;
    virtio_rng_get_limit(m.dev, &c);
    ck_assert_uint_eq(c.bandwidth.size, 100);
    ck_assert_uint_eq(c.ops.size, 10);
    ck_assert_int_eq(rng_kind.set(m.priv, "ops", "off", why, sizeof why), 0);
    virtio_rng_get_limit(m.dev, &c);
    ck_assert_uint_eq(c.ops.size, 0);
    char text[200];
    long n = rng_kind.get(m.priv, "stats", text, sizeof text);
    ck_assert_int_gt(n, 0);
    ck_assert_ptr_nonnull(strstr(text, "requests 0 bytes 0"));
    rng_kind.free(m.priv);
    m.ops->destroy(m.dev);
}
END_TEST

/* Firecracker's limiter JSON -> options -> back: what an API layer does
 * for PUT /entropy {"rate_limiter": ...}. */
START_TEST(limiter_as_options)
{
    char buf[200];
    struct ratelimit_cfg c = { .bandwidth = { .size = 1048576, .refill_time_ms = 100 },
                               .ops = { .size = 10, .one_time_burst = 5, .refill_time_ms = 1000 } };
    ck_assert_int_eq(ratelimit_cfg_to_opts(&c, "bw", "ops", buf, sizeof buf), (long)strlen("bw=1048576/100,ops=10/1000/5"));
    ck_assert_str_eq(buf, "bw=1048576/100,ops=10/1000/5");
    struct ratelimit_cfg back;
    int lim;
    char why[120];
    struct devopts o;
    ck_assert_int_eq(devopt_parse(buf, &o, why, sizeof why), 0);
    ck_assert_int_eq(ratelimit_from_named_opts("bw", devopt_get(&o, "bw"), "ops", devopt_get(&o, "ops"), &back, &lim,
                                               why, sizeof why), 0);
    ck_assert_int_eq(lim, 1);
    ck_assert_mem_eq(&back, &c, sizeof c);
    ck_assert_int_eq(rng_kind.check(&o, why, sizeof why), 0);
    /* only one bucket; none; a buffer too small (never past it) */
    struct ratelimit_cfg one = { .ops = { .size = 3, .refill_time_ms = 7 } };
    ck_assert_int_gt(ratelimit_cfg_to_opts(&one, "tx_bw", "tx_ops", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "tx_ops=3/7");
    struct ratelimit_cfg none = { .bandwidth = { .size = 5 } };     /* no refill time: unlimited */
    ck_assert_int_eq(ratelimit_cfg_to_opts(&none, "bw", "ops", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    for (size_t cap = 0; cap <= strlen("bw=1048576/100,ops=10/1000/5"); cap++) {
        char small[64];
        memset(small, 'x', sizeof small);
        ck_assert_int_eq(ratelimit_cfg_to_opts(&c, "bw", "ops", small, cap), -ENOSPC);
        ck_assert_int_eq(small[cap], 'x');
    }
    struct ratelimit_cfg far = { .ops = { .size = 1, .refill_time_ms = RATELIMIT_MAX_REFILL_MS + 1 } };
    ck_assert_int_eq(ratelimit_cfg_to_opts(&far, "bw", "ops", buf, sizeof buf), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("virtio_rng");
    TCase *tc = tcase_create("rng");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, req_len_checks);
    tcase_add_test(tc, fills_writable_buffers);
    tcase_add_test(tc, refuses_malformed_chains);
    tcase_add_test(tc, rate_limit_holds_then_releases);
    tcase_add_test(tc, bandwidth_limit_timer_releases);
    tcase_add_test(tc, kind_options);
    tcase_add_test(tc, limiter_as_options);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
