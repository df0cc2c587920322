/* The shared queue plumbing: a chain's two byte streams (virtq_chain_read
 * and _write: offsets across segments, short streams, segments outside
 * RAM), and a device's queue set (push, one publish and one interrupt
 * decision per batch, broken reported once). */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio/vqueues.h"

#define RAM   0x10000u
#define QSZ   8u

static uint8_t *ram;
static struct gmem gm;

static void setup(void)
{
    ram = calloc(1, RAM);
    gm = (struct gmem){ .n = 1 };
    gm.r[0] = (struct gmem_region){ 0, RAM, ram };
}

static void teardown(void) { free(ram); }

/* A chain with readable segments of rl[] bytes at 0x1000, 0x2000, ... and
 * writable ones of wl[] bytes at 0x8000, 0x9000, ... */
static struct virtq_seg seg[8];
static struct virtq_chain mk(const uint32_t *rl, unsigned nr, const uint32_t *wl, unsigned nw)
{
    struct virtq_chain c = { .seg = seg, .max_seg = 8 };
    for (unsigned i = 0; i < nr; i++) {
        seg[c.nseg++] = (struct virtq_seg){ 0x1000u * (i + 1), rl[i], false };
        c.read_len += rl[i];
    }
    c.nread = c.nseg;
    for (unsigned i = 0; i < nw; i++) {
        seg[c.nseg++] = (struct virtq_seg){ 0x8000u + 0x1000u * i, wl[i], true };
        c.write_len += wl[i];
    }
    return c;
}

START_TEST(read_stream_across_segments)
{
    uint32_t rl[] = { 3, 0, 5, 2 };
    uint32_t wl[] = { 4 };
    struct virtq_chain c = mk(rl, 4, wl, 1);
    memcpy(ram + 0x1000, "abc", 3);
    memcpy(ram + 0x3000, "defgh", 5);
    memcpy(ram + 0x4000, "ij", 2);
    memcpy(ram + 0x8000, "XXXX", 4);        /* the writable part is not read */
    char out[16] = { 0 };
    ck_assert_int_eq(virtq_chain_read(&gm, &c, 0, out, sizeof out), 10);
    ck_assert_str_eq(out, "abcdefghij");
    memset(out, 0, sizeof out);
    ck_assert_int_eq(virtq_chain_read(&gm, &c, 2, out, 4), 4);   /* from inside one, into the next */
    ck_assert_str_eq(out, "cdef");
    memset(out, 0, sizeof out);
    ck_assert_int_eq(virtq_chain_read(&gm, &c, 8, out, 5), 2);   /* the stream ends first */
    ck_assert_str_eq(out, "ij");
    ck_assert_int_eq(virtq_chain_read(&gm, &c, 10, out, 5), 0);
    ck_assert_int_eq(virtq_chain_read(&gm, &c, UINT64_MAX, out, 5), 0);
    ck_assert_int_eq(virtq_chain_read(&gm, &c, 0, out, 0), 0);
    /* a segment outside RAM */
    seg[2].gpa = RAM - 2;
    ck_assert_int_eq(virtq_chain_read(&gm, &c, 0, out, sizeof out), -EFAULT);
    ck_assert_int_eq(virtq_chain_read(&gm, &c, 0, out, 3), 3);   /* before it: fine */
}
END_TEST

START_TEST(write_stream_across_segments)
{
    uint32_t rl[] = { 4 };
    uint32_t wl[] = { 2, 3, 4 };
    struct virtq_chain c = mk(rl, 1, wl, 3);
    ck_assert_int_eq(virtq_chain_write(&gm, &c, 1, "hello!", 6), 0);
    ck_assert_mem_eq(ram + 0x8000, "\0h", 2);
    ck_assert_mem_eq(ram + 0x9000, "ell", 3);
    ck_assert_mem_eq(ram + 0xa000, "o!\0\0", 4);
    ck_assert_mem_eq(ram + 0x1000, "\0\0\0\0", 4);   /* the readable part is not written */
    /* exactly to the end, then one past it: -ENOSPC, what fits written */
    ck_assert_int_eq(virtq_chain_write(&gm, &c, 0, "123456789", 9), 0);
    memset(ram + 0x8000, 0, 0x3000);
    ck_assert_int_eq(virtq_chain_write(&gm, &c, 7, "abc", 3), -ENOSPC);
    ck_assert_mem_eq(ram + 0xa000, "\0\0ab", 4);
    ck_assert_int_eq(virtq_chain_write(&gm, &c, 9, "a", 1), -ENOSPC);
    ck_assert_int_eq(virtq_chain_write(&gm, &c, UINT64_MAX, "a", 1), -ENOSPC);
    ck_assert_int_eq(virtq_chain_write(&gm, &c, 9, "", 0), 0);
    /* no writable part at all */
    struct virtq_chain r = mk(rl, 1, NULL, 0);
    ck_assert_int_eq(virtq_chain_write(&gm, &r, 0, "a", 1), -ENOSPC);
    /* a segment outside RAM */
    c = mk(rl, 1, wl, 3);
    seg[2].gpa = RAM - 1;
    ck_assert_int_eq(virtq_chain_write(&gm, &c, 0, "123456789", 9), -EFAULT);
}
END_TEST

/* ---- the queue set, on one real ring ---- */

#define DESC  0x0000u
#define AVAIL 0x1000u
#define USED  0x2000u

static struct virtq q[2];
static int notifies[2], resets[2];
static void on_notify(void *o, unsigned qi) { (void)o; notifies[qi]++; }
static void on_reset(void *o, unsigned qi) { (void)o; resets[qi]++; }

static uint16_t r16(uint64_t a) { uint16_t v; memcpy(&v, ram + a, 2); return le16toh(v); }

static void rig(struct virtio_dev_env *env)
{
    memset(notifies, 0, sizeof notifies);
    memset(resets, 0, sizeof resets);
    memset(env, 0, sizeof(*env));
    for (unsigned i = 0; i < 2; i++) {
        ck_assert_int_eq(virtq_init(&q[i], QSZ), 0);
        q[i].desc = DESC + 0x4000u * i;
        q[i].avail = AVAIL + 0x4000u * i;
        q[i].used = USED + 0x4000u * i;
        ck_assert_int_eq(virtq_enable(&q[i], &gm), 0);
    }
    env->mem = &gm;
    env->queues = q;
    env->nqueues = 2;
    env->notify_used = on_notify;
    env->needs_reset = on_reset;
}

START_TEST(push_publish_once_per_batch)
{
    struct virtio_dev_env env;
    rig(&env);
    struct vqueues s;
    vqueues_init(&s, &env, "test");
    ck_assert_uint_eq(vqueues_publish(&s, NULL), 0);     /* nothing pushed: nothing published */
    ck_assert_int_eq(notifies[0] + notifies[1], 0);
    q[0].inflight = 3;              /* as if popped */
    vqueues_push(&s, 0, 1, 10);
    vqueues_push(&s, 0, 2, 20);
    vqueues_push(&s, 0, 3, 30);
    ck_assert_uint_eq(r16(USED + 2), 0);                 /* not yet visible */
    unsigned n = 99;
    ck_assert_uint_eq(vqueues_publish(&s, &n), 1);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(r16(USED + 2), 3);                 /* one publish of the batch */
    ck_assert_int_eq(notifies[0], 1);                    /* one interrupt */
    ck_assert_int_eq(notifies[1], 0);
    ck_assert_uint_eq(vqueues_publish(&s, &n), 0);       /* the batch is done */
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(notifies[0], 1);
    /* the driver asked for no interrupts (VIRTQ_AVAIL_F_NO_INTERRUPT) */
    uint16_t f = htole16(1);
    memcpy(ram + AVAIL, &f, 2);
    q[0].inflight = 1;
    vqueues_push(&s, 0, 4, 1);
    ck_assert_uint_eq(vqueues_publish(&s, &n), 1);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(notifies[0], 1);
    ck_assert_uint_eq(r16(USED + 2), 4);
}
END_TEST

START_TEST(broken_reported_once)
{
    struct virtio_dev_env env;
    rig(&env);
    struct vqueues s;
    vqueues_init(&s, &env, "test");
    vqueues_broken(&s, 1, "bad ring");
    vqueues_broken(&s, 1, "bad ring again");
    ck_assert(s.broken[1] && !s.broken[0]);
    ck_assert_int_eq(resets[1], 1);
    ck_assert_int_eq(resets[0], 0);
    vqueues_broken(&s, VIRTIO_DEV_MAX_QUEUES, "out of range");   /* ignored */
    /* a used ring that left RAM: the push breaks the queue */
    q[0].used = RAM - 4;
    q[0].inflight = 1;
    vqueues_push(&s, 0, 1, 1);
    ck_assert(s.broken[0]);
    ck_assert_int_eq(resets[0], 1);
    /* without a needs_reset callback: still marked */
    env.needs_reset = NULL;
    vqueues_init(&s, &env, "test");
    ck_assert(!s.broken[0] && !s.broken[1]);
    vqueues_broken(&s, 0, "bad");
    ck_assert(s.broken[0]);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("vqueues");
    TCase *tc = tcase_create("vqueues");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, read_stream_across_segments);
    tcase_add_test(tc, write_stream_across_segments);
    tcase_add_test(tc, push_publish_once_per_batch);
    tcase_add_test(tc, broken_reported_once);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
