/* virtio-mmio snapshot state: save/load round trip (a live device with a
 * ready queue moves to a fresh one and keeps working), and every malformed
 * field is refused with the device left unchanged. Also the drive section
 * codec of the state file (vmm/snapshot/snapfmt.h). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio/virtio_mmio.h"
#include "vmm/snapshot/snapfmt.h"

#define RAM 0x10000u
#define F_TEST 5
#define A   VIRTIO_STATUS_ACKNOWLEDGE
#define D   VIRTIO_STATUS_DRIVER
#define FO  VIRTIO_STATUS_FEATURES_OK
#define DOK VIRTIO_STATUS_DRIVER_OK

struct rec { int notify, activates, resets, irq_calls; };
static void r_notify(void *o, unsigned q) { (void)q; ((struct rec *)o)->notify++; }
static int r_activate(void *o) { ((struct rec *)o)->activates++; return 0; }
static void r_reset(void *o) { ((struct rec *)o)->resets++; }
static void r_irq(void *o, bool level) { (void)level; ((struct rec *)o)->irq_calls++; }
static const struct virtio_mmio_ops ops = { r_notify, r_activate, r_reset, NULL, NULL, r_irq };

static uint8_t *ram;
static struct gmem gm;
static struct virtio_mmio src, dst;
static struct rec rsrc, rdst;

static void mk(struct virtio_mmio *v, struct rec *r, uint32_t devid, uint64_t feat, unsigned nq)
{
    memset(r, 0, sizeof *r);
    struct virtio_mmio_params p = { .device_id = devid, .device_features = feat, .nqueues = nq, .queue_max = 256 };
    ck_assert_int_eq(virtio_mmio_init(v, &p, &gm, &ops, r), 0);
}

static void setup(void)
{
    ram = aligned_alloc(4096, RAM);
    memset(ram, 0, RAM);
    gm = (struct gmem){ .n = 1 };
    gm.r[0] = (struct gmem_region){ 0, RAM, ram };
    mk(&src, &rsrc, 2, 1ull << F_TEST, 2);
    mk(&dst, &rdst, 2, 1ull << F_TEST, 2);
}
static void teardown(void) { virtio_mmio_destroy(&src); virtio_mmio_destroy(&dst); free(ram); }

static void wr(struct virtio_mmio *v, uint64_t off, uint32_t x)
{
    uint8_t d[4] = { (uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24) };
    virtio_mmio_write(v, off, d, 4);
}
static uint32_t rd(struct virtio_mmio *v, uint64_t off)
{
    uint8_t d[4];
    virtio_mmio_read(v, off, d, 4);
    return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
}

/* Drive src to DRIVER_OK with queue 0 ready (size 16 at 0x1000/0x2000/0x3000),
 * EVENT_IDX offered or not. */
static void bring_up(struct virtio_mmio *v)
{
    wr(v, VIRTIO_MMIO_STATUS, A);
    wr(v, VIRTIO_MMIO_STATUS, A | D);
    wr(v, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
    wr(v, VIRTIO_MMIO_DRIVER_FEATURES, 1u << F_TEST);
    wr(v, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
    wr(v, VIRTIO_MMIO_DRIVER_FEATURES, 1u << (VIRTIO_F_VERSION_1 - 32));
    wr(v, VIRTIO_MMIO_STATUS, A | D | FO);
    wr(v, VIRTIO_MMIO_QUEUE_SEL, 0);
    wr(v, VIRTIO_MMIO_QUEUE_NUM, 16);
    wr(v, VIRTIO_MMIO_QUEUE_DESC_LOW, 0x1000);
    wr(v, VIRTIO_MMIO_QUEUE_DRIVER_LOW, 0x2000);
    wr(v, VIRTIO_MMIO_QUEUE_DEVICE_LOW, 0x3000);
    wr(v, VIRTIO_MMIO_QUEUE_READY, 1);
    wr(v, VIRTIO_MMIO_STATUS, A | D | FO | DOK);
    ck_assert_uint_eq(rd(v, VIRTIO_MMIO_STATUS), A | D | FO | DOK);
}

/* Put one chain (one 16-byte readable buffer at 0x4000) on the avail ring. */
static void offer(uint16_t slot_idx)
{
    uint8_t *desc = ram + 0x1000 + 16u * (slot_idx % 16);
    uint64_t addr = 0x4000;
    uint32_t len = 16;
    memcpy(desc, &addr, 8);
    memcpy(desc + 8, &len, 4);
    memset(desc + 12, 0, 4);
    uint16_t head = slot_idx % 16, idx = (uint16_t)(slot_idx + 1);
    memcpy(ram + 0x2000 + 4 + 2u * (slot_idx % 16), &head, 2);
    memcpy(ram + 0x2000 + 2, &idx, 2);
}

static struct virtio_mmio_state good;

static void saved_live(void)
{
    bring_up(&src);
    struct virtq *q = &src.q[0];
    struct virtq_seg seg[2];
    for (uint16_t i = 0; i < 3; i++) {
        offer(i);
        struct virtq_chain c = { .seg = seg, .max_seg = 2 };
        ck_assert_int_eq(virtq_pop(q, &gm, &c), 1);
        ck_assert_int_eq(virtq_push(q, &gm, c.head, 0), 0);
        ck_assert_int_eq(virtq_publish(q, &gm), 0);
    }
    virtio_mmio_interrupt(&src, VIRTIO_MMIO_INT_VRING);
    wr(&src, VIRTIO_MMIO_QUEUE_SEL, 1);
    ck_assert_int_eq(virtio_mmio_save(&src, &good), 0);
}

START_TEST(round_trip)
{
    saved_live();
    ck_assert_uint_eq(good.q[0].last_avail_idx, 3);
    ck_assert_uint_eq(good.q[0].used_idx, 3);
    const char *why = "x";
    ck_assert_int_eq(virtio_mmio_load(&dst, &good, &why), 0);
    ck_assert_ptr_null(why);
    /* Loading calls no device callback. */
    ck_assert_int_eq(rdst.activates + rdst.resets + rdst.irq_calls + rdst.notify, 0);
    /* Registers read back as on the source. */
    static const uint64_t regs[] = { VIRTIO_MMIO_STATUS, VIRTIO_MMIO_INTERRUPT_STATUS, VIRTIO_MMIO_CONFIG_GENERATION,
                                     VIRTIO_MMIO_DEVICE_FEATURES };
    for (size_t i = 0; i < sizeof regs / sizeof regs[0]; i++)
        ck_assert_uint_eq(rd(&dst, regs[i]), rd(&src, regs[i]));
    ck_assert_uint_eq(dst.queue_sel, 1);
    wr(&dst, VIRTIO_MMIO_QUEUE_SEL, 0);
    wr(&src, VIRTIO_MMIO_QUEUE_SEL, 0);
    static const uint64_t qregs[] = { VIRTIO_MMIO_QUEUE_NUM, VIRTIO_MMIO_QUEUE_READY, VIRTIO_MMIO_QUEUE_DESC_LOW,
                                      VIRTIO_MMIO_QUEUE_DRIVER_LOW, VIRTIO_MMIO_QUEUE_DEVICE_LOW };
    for (size_t i = 0; i < sizeof qregs / sizeof qregs[0]; i++)
        ck_assert_uint_eq(rd(&dst, qregs[i]), rd(&src, qregs[i]));
    ck_assert_uint_eq(virtio_mmio_features(&dst), virtio_mmio_features(&src));
    /* The restored queue continues where the old one stopped. */
    struct virtq *q = &dst.q[0];
    struct virtq_seg seg[2];
    struct virtq_chain c = { .seg = seg, .max_seg = 2 };
    ck_assert_int_eq(virtq_pop(q, &gm, &c), 0);   /* nothing new */
    offer(3);
    ck_assert_int_eq(virtq_pop(q, &gm, &c), 1);
    ck_assert_uint_eq(c.head, 3);
    ck_assert_int_eq(virtq_push(q, &gm, c.head, 0), 0);
    ck_assert_int_eq(virtq_publish(q, &gm), 0);
    uint16_t used_idx;
    memcpy(&used_idx, ram + 0x3000 + 2, 2);
    ck_assert_uint_eq(used_idx, 4);
    /* Save of the loaded device gives the same bytes back, after the new request. */
    struct virtio_mmio_state again;
    ck_assert_int_eq(virtio_mmio_save(&dst, &again), 0);
    ck_assert_uint_eq(again.q[0].used_idx, 4);
}
END_TEST

START_TEST(round_trip_reset_state)
{
    struct virtio_mmio_state s;
    ck_assert_int_eq(virtio_mmio_save(&src, &s), 0);
    ck_assert_int_eq(virtio_mmio_load(&dst, &s, NULL), 0);
    ck_assert_uint_eq(rd(&dst, VIRTIO_MMIO_STATUS), 0);
    ck_assert_uint_eq(rd(&dst, VIRTIO_MMIO_QUEUE_NUM), 256);
    /* And the driver can bring it up from there. */
    bring_up(&dst);
}
END_TEST

START_TEST(save_busy_with_inflight)
{
    bring_up(&src);
    offer(0);
    struct virtq_seg seg[2];
    struct virtq_chain c = { .seg = seg, .max_seg = 2 };
    ck_assert_int_eq(virtq_pop(&src.q[0], &gm, &c), 1);
    struct virtio_mmio_state s;
    ck_assert_int_eq(virtio_mmio_save(&src, &s), -EBUSY);
}
END_TEST

/* One malformed field each: refused, with a reason, and dst unchanged. */
static void mut_devid(struct virtio_mmio_state *s)    { s->device_id = 1; }
static void mut_nq(struct virtio_mmio_state *s)       { s->nqueues = 1; }
static void mut_offered(struct virtio_mmio_state *s)  { s->device_features |= 1ull << 7; }
static void mut_status_bits(struct virtio_mmio_state *s) { s->status |= 16; }
static void mut_status_skip(struct virtio_mmio_state *s) { s->status = A | FO | DOK; }
static void mut_status_dok_no_fo(struct virtio_mmio_state *s) { s->status = A | D | DOK; }
static void mut_drv_inconsistent(struct virtio_mmio_state *s) { s->driver_features |= 1ull << 9; }
static void mut_drv_not_offered(struct virtio_mmio_state *s)
{
    s->driver_requested |= 1ull << 9;   /* masked value stays consistent */
}
static void mut_no_version1(struct virtio_mmio_state *s)
{
    s->driver_requested &= ~(1ull << VIRTIO_F_VERSION_1);
    s->driver_features &= ~(1ull << VIRTIO_F_VERSION_1);
}
static void mut_isr(struct virtio_mmio_state *s)      { s->interrupt_status |= 4; }
static void mut_extra_queue(struct virtio_mmio_state *s) { s->q[5].num = 16; }
static void mut_ready_flag(struct virtio_mmio_state *s)  { s->q[0].ready = 2; }
static void mut_sig_flag(struct virtio_mmio_state *s)    { s->q[0].signalled_valid = 7; }
static void mut_broken_flag(struct virtio_mmio_state *s) { s->q[0].broken = 3; }
static void mut_pad(struct virtio_mmio_state *s)      { s->q[0].pad = 1; }
static void mut_err(struct virtio_mmio_state *s)      { s->q[0].err = VIRTQ_E__COUNT; }
static void mut_broken_noerr(struct virtio_mmio_state *s) { s->q[0].broken = 1; s->q[0].err = 0; }
static void mut_num0(struct virtio_mmio_state *s)     { s->q[0].num = 0; }
static void mut_num_big(struct virtio_mmio_state *s)  { s->q[0].num = 512; }
static void mut_num_pow2(struct virtio_mmio_state *s) { s->q[0].num = 12; }
static void mut_desc_align(struct virtio_mmio_state *s) { s->q[0].desc = 0x1008; }
static void mut_avail_align(struct virtio_mmio_state *s) { s->q[0].driver = 0x2001; }
static void mut_used_align(struct virtio_mmio_state *s) { s->q[0].device = 0x3002; }
static void mut_desc_out(struct virtio_mmio_state *s) { s->q[0].desc = RAM - 0x10; }
static void mut_avail_out(struct virtio_mmio_state *s) { s->q[0].driver = 0x100000000ull; }
static void mut_used_wrap(struct virtio_mmio_state *s) { s->q[0].device = ~0ull - 3; }
static void mut_idx_apart(struct virtio_mmio_state *s) { s->q[0].last_avail_idx = 100; }
static void mut_ready_pre_fo(struct virtio_mmio_state *s) { s->status = A | D; }
static void mut_broken_not_ready(struct virtio_mmio_state *s)
{
    s->q[1].broken = 1;
    s->q[1].err = 1;
}

static void (*const muts[])(struct virtio_mmio_state *) = {
    mut_devid, mut_nq, mut_offered, mut_status_bits, mut_status_skip, mut_status_dok_no_fo,
    mut_drv_inconsistent, mut_drv_not_offered, mut_no_version1, mut_isr, mut_extra_queue,
    mut_ready_flag, mut_sig_flag, mut_broken_flag, mut_pad, mut_err, mut_broken_noerr,
    mut_num0, mut_num_big, mut_num_pow2, mut_desc_align, mut_avail_align, mut_used_align,
    mut_desc_out, mut_avail_out, mut_used_wrap, mut_idx_apart, mut_ready_pre_fo, mut_broken_not_ready,
};

START_TEST(rejects_malformed)
{
    saved_live();
    struct virtio_mmio_state s = good;
    muts[_i](&s);
    ck_assert_int_ne(memcmp(&s, &good, sizeof s), 0);
    struct virtio_mmio before = dst;
    const char *why = NULL;
    ck_assert_int_eq(virtio_mmio_load(&dst, &s, &why), -EINVAL);
    ck_assert_ptr_nonnull(why);
    ck_assert_int_eq(memcmp(dst.q, before.q, sizeof dst.q), 0);
    ck_assert_uint_eq(dst.status, before.status);
    ck_assert_uint_eq(dst.driver_features, before.driver_features);
    ck_assert_int_eq(rdst.activates + rdst.resets + rdst.irq_calls, 0);
    /* The unmutated state still loads. */
    ck_assert_int_eq(virtio_mmio_load(&dst, &good, NULL), 0);
}
END_TEST

/* Every status reachable by legal steps (with FAILED / NEEDS_RESET) loads
 * when its queues fit; unreachable ones do not. */
START_TEST(status_table)
{
    struct virtio_mmio_state s;
    ck_assert_int_eq(virtio_mmio_save(&src, &s), 0);
    int ok = 0;
    for (uint32_t st = 0; st < 256; st++) {
        s.status = st;
        bool fo = st & FO;
        s.driver_requested = s.driver_features = fo ? (1ull << VIRTIO_F_VERSION_1) : 0;
        int r = virtio_mmio_load(&dst, &s, NULL);
        uint32_t base = st & ~(VIRTIO_STATUS_NEEDS_RESET | VIRTIO_STATUS_FAILED);
        bool legal = !(st & 0x30) && (base == 0 || base == A || base == (A | D) || base == (A | D | FO) ||
                                      base == (A | D | FO | DOK));
        ck_assert_int_eq(r, legal ? 0 : -EINVAL);
        ok += r == 0;
    }
    ck_assert_int_eq(ok, 5 * 4);
}
END_TEST



int main(void)
{
    Suite *s = suite_create("virtio_mmio_state");
    TCase *tc = tcase_create("state");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, round_trip_reset_state);
    tcase_add_test(tc, save_busy_with_inflight);
    tcase_add_loop_test(tc, rejects_malformed, 0, (int)(sizeof muts / sizeof muts[0]));
    tcase_add_test(tc, status_table);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
