/* virtio-mmio v2 register model: identity, status state machine, feature
 * negotiation, queue setup rules, notifications, interrupts, config. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio/virtio_mmio.h"

#define RAM 0x10000u
#define F_TEST 5            /* some device feature bit */

struct rec {
    int notify[8], activates, resets, irq_calls, irq_level, activate_ret;
    uint32_t cfg_off, cfg_len; uint8_t cfg_w[8]; int cfg_reads, cfg_writes;
};

static void r_notify(void *o, unsigned q) { ((struct rec *)o)->notify[q]++; }
static int r_activate(void *o) { struct rec *r = o; r->activates++; return r->activate_ret; }
static void r_reset(void *o) { ((struct rec *)o)->resets++; }
static void r_cfg_read(void *o, uint32_t off, uint8_t *d, uint32_t len)
{
    struct rec *r = o; r->cfg_reads++; r->cfg_off = off; r->cfg_len = len;
    for (uint32_t i = 0; i < len; i++) d[i] = (uint8_t)(0xc0 + off + i);
}
static void r_cfg_write(void *o, uint32_t off, const uint8_t *d, uint32_t len)
{
    struct rec *r = o; r->cfg_writes++; r->cfg_off = off; r->cfg_len = len; memcpy(r->cfg_w, d, len);
}
static void r_irq(void *o, bool level) { struct rec *r = o; r->irq_calls++; r->irq_level = level; }
static const struct virtio_mmio_ops ops = { r_notify, r_activate, r_reset, r_cfg_read, r_cfg_write, r_irq };

static uint8_t *ram;
static struct gmem gm;
static struct virtio_mmio vm;
static struct rec rc;

static void setup(void)
{
    ram = aligned_alloc(4096, RAM);
    memset(ram, 0, RAM);
    gm = (struct gmem){ .n = 1 };
    gm.r[0] = (struct gmem_region){ 0, RAM, ram };
    memset(&rc, 0, sizeof rc);
    struct virtio_mmio_params p = { .device_id = 2, .device_features = 1ull << F_TEST,
                                    .nqueues = 2, .queue_max = 256 };
    ck_assert_int_eq(virtio_mmio_init(&vm, &p, &gm, &ops, &rc), 0);
}
static void teardown(void) { virtio_mmio_destroy(&vm); free(ram); }

static void wr(uint64_t off, uint32_t v)
{
    uint8_t d[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    virtio_mmio_write(&vm, off, d, 4);
}
static uint32_t rd(uint64_t off)
{
    uint8_t d[4];
    virtio_mmio_read(&vm, off, d, 4);
    return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
}

#define A   VIRTIO_STATUS_ACKNOWLEDGE
#define D   VIRTIO_STATUS_DRIVER
#define FO  VIRTIO_STATUS_FEATURES_OK
#define DOK VIRTIO_STATUS_DRIVER_OK

/* Walk to FEATURES_OK with VERSION_1 (+ F_TEST). */
static void to_features_ok(void)
{
    wr(VIRTIO_MMIO_STATUS, A);
    wr(VIRTIO_MMIO_STATUS, A | D);
    wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
    wr(VIRTIO_MMIO_DRIVER_FEATURES, 1u << F_TEST);
    wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
    wr(VIRTIO_MMIO_DRIVER_FEATURES, 1u << (VIRTIO_F_VERSION_1 - 32));
    wr(VIRTIO_MMIO_STATUS, A | D | FO);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A | D | FO);
}

static void setup_queue(unsigned q, uint32_t num, uint64_t desc, uint64_t avail, uint64_t used)
{
    wr(VIRTIO_MMIO_QUEUE_SEL, q);
    wr(VIRTIO_MMIO_QUEUE_NUM, num);
    wr(VIRTIO_MMIO_QUEUE_DESC_LOW, (uint32_t)desc);
    wr(VIRTIO_MMIO_QUEUE_DESC_HIGH, (uint32_t)(desc >> 32));
    wr(VIRTIO_MMIO_QUEUE_DRIVER_LOW, (uint32_t)avail);
    wr(VIRTIO_MMIO_QUEUE_DRIVER_HIGH, (uint32_t)(avail >> 32));
    wr(VIRTIO_MMIO_QUEUE_DEVICE_LOW, (uint32_t)used);
    wr(VIRTIO_MMIO_QUEUE_DEVICE_HIGH, (uint32_t)(used >> 32));
    wr(VIRTIO_MMIO_QUEUE_READY, 1);
}

static void to_driver_ok(void)
{
    to_features_ok();
    setup_queue(0, 64, 0x1000, 0x2000, 0x3000);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_READY), 1);
    wr(VIRTIO_MMIO_STATUS, A | D | FO | DOK);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A | D | FO | DOK);
}

START_TEST(identity_registers)
{
    ck_assert_uint_eq(rd(VIRTIO_MMIO_MAGIC), 0x74726976);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_VERSION), 2);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_DEVICE_ID), 2);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_VENDOR_ID), VIRTIO_MMIO_VENDOR_MOAT);
    wr(VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_DEVICE_FEATURES), 1u << F_TEST);
    wr(VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_DEVICE_FEATURES), 1u << (VIRTIO_F_VERSION_1 - 32));
    wr(VIRTIO_MMIO_DEVICE_FEATURES_SEL, 2);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_DEVICE_FEATURES), 0);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_NUM_MAX), 256);
    wr(VIRTIO_MMIO_QUEUE_SEL, 2);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_NUM_MAX), 0);
    ck_assert_uint_eq(rd(0x0f0), 0);   /* reserved */
}
END_TEST

START_TEST(init_rejects_bad_params)
{
    struct virtio_mmio x;
    struct virtio_mmio_params p = { .device_id = 2, .nqueues = 0, .queue_max = 256 };
    ck_assert_int_eq(virtio_mmio_init(&x, &p, &gm, &ops, &rc), -EINVAL);
    p.nqueues = VIRTIO_MMIO_MAX_QUEUES + 1;
    ck_assert_int_eq(virtio_mmio_init(&x, &p, &gm, &ops, &rc), -EINVAL);
    p.nqueues = 1; p.queue_max = 100;
    ck_assert_int_eq(virtio_mmio_init(&x, &p, &gm, &ops, &rc), -EINVAL);
}
END_TEST

START_TEST(full_bring_up)
{
    to_driver_ok();
    ck_assert_int_eq(rc.activates, 1);
    ck_assert(vm.q[0].ready);
    ck_assert_uint_eq(vm.q[0].size, 64);
    ck_assert_uint_eq(vm.q[0].avail, 0x2000);
    ck_assert_uint_eq(virtio_mmio_features(&vm),
                      (1ull << F_TEST) | (1ull << VIRTIO_F_VERSION_1));
    wr(VIRTIO_MMIO_QUEUE_NOTIFY, 0);
    ck_assert_int_eq(rc.notify[0], 1);
    ck_assert_uint_eq(vm.illegal_writes, 0);
}
END_TEST

START_TEST(event_idx_feature_reaches_queues)
{
    struct virtio_mmio_params p = { .device_id = 2, .nqueues = 1, .queue_max = 16,
                                    .device_features = 1ull << VIRTIO_F_EVENT_IDX };
    virtio_mmio_destroy(&vm);
    ck_assert_int_eq(virtio_mmio_init(&vm, &p, &gm, &ops, &rc), 0);
    wr(VIRTIO_MMIO_STATUS, A);
    wr(VIRTIO_MMIO_STATUS, A | D);
    wr(VIRTIO_MMIO_DRIVER_FEATURES, 1u << VIRTIO_F_EVENT_IDX);
    wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
    wr(VIRTIO_MMIO_DRIVER_FEATURES, 1);
    wr(VIRTIO_MMIO_STATUS, A | D | FO);
    ck_assert(vm.q[0].event_idx);
    ck_assert(!vm.q[0].indirect);
}
END_TEST

/* Every (from, to) pair over the driver's bits, against the rules. */
START_TEST(status_transition_table)
{
    static const uint32_t states[] = { 0, A, A | D, A | D | FO, A | D | FO | DOK };
    for (unsigned i = 0; i < 5; i++)
        for (unsigned j = 0; j < 5; j++) {
            bool want = (j == i + 1) || i == j || j == 0;
            ck_assert_msg(virtio_mmio_status_legal(states[i], states[j]) == want,
                          "%u -> %u", states[i], states[j]);
        }
    /* skipping steps */
    ck_assert(!virtio_mmio_status_legal(0, A | D));
    ck_assert(!virtio_mmio_status_legal(A, A | D | FO | DOK));
    ck_assert(!virtio_mmio_status_legal(A | D, A | D | DOK));
    /* bits out of order */
    ck_assert(!virtio_mmio_status_legal(0, D));
    ck_assert(!virtio_mmio_status_legal(A, A | FO));
    /* clearing without reset */
    ck_assert(!virtio_mmio_status_legal(A | D | FO, A | D));
    /* unknown bits */
    ck_assert(!virtio_mmio_status_legal(A, A | 0x10));
    ck_assert(!virtio_mmio_status_legal(A, A | 0x100));
    /* FAILED any time; then only reset */
    ck_assert(virtio_mmio_status_legal(A | D, A | D | VIRTIO_STATUS_FAILED));
    ck_assert(virtio_mmio_status_legal(0, VIRTIO_STATUS_FAILED));
    ck_assert(!virtio_mmio_status_legal(A | VIRTIO_STATUS_FAILED, A | D | VIRTIO_STATUS_FAILED));
    ck_assert(virtio_mmio_status_legal(A | VIRTIO_STATUS_FAILED, 0));
    /* NEEDS_RESET is the device's: ignored on both sides */
    ck_assert(virtio_mmio_status_legal(A | VIRTIO_STATUS_NEEDS_RESET, A | D));
}
END_TEST

START_TEST(illegal_status_write_ignored)
{
    wr(VIRTIO_MMIO_STATUS, D);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), 0);
    wr(VIRTIO_MMIO_STATUS, A);
    wr(VIRTIO_MMIO_STATUS, A | D | FO | DOK);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A);
    ck_assert_int_eq(rc.activates, 0);
    ck_assert_uint_eq(vm.illegal_writes, 2);
}
END_TEST

START_TEST(driver_cannot_set_needs_reset)
{
    wr(VIRTIO_MMIO_STATUS, A | VIRTIO_STATUS_NEEDS_RESET);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A);
}
END_TEST

START_TEST(failed_then_only_reset)
{
    wr(VIRTIO_MMIO_STATUS, A);
    wr(VIRTIO_MMIO_STATUS, A | VIRTIO_STATUS_FAILED);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A | VIRTIO_STATUS_FAILED);
    wr(VIRTIO_MMIO_STATUS, A | D | VIRTIO_STATUS_FAILED);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A | VIRTIO_STATUS_FAILED);
    wr(VIRTIO_MMIO_STATUS, 0);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), 0);
    ck_assert_int_eq(rc.resets, 1);
}
END_TEST

START_TEST(features_ok_needs_version_1)
{
    wr(VIRTIO_MMIO_STATUS, A);
    wr(VIRTIO_MMIO_STATUS, A | D);
    wr(VIRTIO_MMIO_DRIVER_FEATURES, 1u << F_TEST);     /* legacy driver */
    wr(VIRTIO_MMIO_STATUS, A | D | FO);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A | D);
    ck_assert_uint_eq(virtio_mmio_features(&vm), 0);
}
END_TEST

START_TEST(features_not_offered_refused)
{
    wr(VIRTIO_MMIO_STATUS, A);
    wr(VIRTIO_MMIO_STATUS, A | D);
    wr(VIRTIO_MMIO_DRIVER_FEATURES, (1u << F_TEST) | (1u << 7));   /* 7 not offered */
    wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
    wr(VIRTIO_MMIO_DRIVER_FEATURES, 1u << (VIRTIO_F_VERSION_1 - 32));
    ck_assert_uint_eq(vm.driver_features & (1u << 7), 0);           /* masked */
    wr(VIRTIO_MMIO_STATUS, A | D | FO);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A | D);                /* refused */
    /* the driver retries with a subset */
    wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
    wr(VIRTIO_MMIO_DRIVER_FEATURES, 1u << F_TEST);
    wr(VIRTIO_MMIO_STATUS, A | D | FO);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A | D | FO);
}
END_TEST

START_TEST(feature_writes_outside_window_ignored)
{
    wr(VIRTIO_MMIO_DRIVER_FEATURES, 1u << F_TEST);   /* before DRIVER */
    ck_assert_uint_eq(vm.driver_requested, 0);
    to_features_ok();
    uint64_t f = vm.driver_requested;
    wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
    wr(VIRTIO_MMIO_DRIVER_FEATURES, 0);             /* after FEATURES_OK */
    ck_assert_uint_eq(vm.driver_requested, f);
    wr(VIRTIO_MMIO_DRIVER_FEATURES_SEL, 2);
    wr(VIRTIO_MMIO_DRIVER_FEATURES, 0xffffffff);
    ck_assert_uint_eq(vm.driver_requested, f);
}
END_TEST

START_TEST(queue_writes_before_features_ok_ignored)
{
    wr(VIRTIO_MMIO_STATUS, A);
    wr(VIRTIO_MMIO_STATUS, A | D);
    setup_queue(0, 64, 0x1000, 0x2000, 0x3000);
    ck_assert(!vm.q[0].ready);
    ck_assert_uint_eq(vm.q[0].desc, 0);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_READY), 0);
}
END_TEST

START_TEST(queue_writes_after_ready_ignored)
{
    to_features_ok();
    setup_queue(0, 64, 0x1000, 0x2000, 0x3000);
    ck_assert(vm.q[0].ready);
    wr(VIRTIO_MMIO_QUEUE_DESC_LOW, 0x8000);
    wr(VIRTIO_MMIO_QUEUE_NUM, 16);
    ck_assert_uint_eq(vm.q[0].desc, 0x1000);
    ck_assert_uint_eq(vm.q[0].size, 64);
}
END_TEST

START_TEST(queue_writes_after_driver_ok_ignored)
{
    to_driver_ok();
    wr(VIRTIO_MMIO_QUEUE_SEL, 1);
    setup_queue(1, 16, 0x4000, 0x5000, 0x6000);
    ck_assert(!vm.q[1].ready);
    ck_assert_uint_eq(vm.q[1].desc, 0);
    wr(VIRTIO_MMIO_QUEUE_SEL, 0);
    wr(VIRTIO_MMIO_QUEUE_READY, 0);                 /* cannot stop a live queue */
    ck_assert(vm.q[0].ready);
}
END_TEST

START_TEST(queue_num_over_max_ignored)
{
    to_features_ok();
    wr(VIRTIO_MMIO_QUEUE_SEL, 0);
    wr(VIRTIO_MMIO_QUEUE_NUM, 512);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_NUM), 256);
    wr(VIRTIO_MMIO_QUEUE_NUM, 0x10010);             /* would truncate to 16 */
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_NUM), 256);
    wr(VIRTIO_MMIO_QUEUE_NUM, 0);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_NUM), 256);
}
END_TEST

START_TEST(queue_ready_validates_rings)
{
    to_features_ok();
    setup_queue(0, 64, 0x1008, 0x2000, 0x3000);     /* desc misaligned */
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_READY), 0);
    setup_queue(0, 64, 0x1000, 0x2000, RAM - 8);    /* used ring outside RAM */
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_READY), 0);
    setup_queue(0, 48, 0x1000, 0x2000, 0x3000);     /* not a power of two */
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_READY), 0);
    setup_queue(0, 64, 0x1000, 0x2000, 0x3000);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_READY), 1);
    ck_assert_uint_ge(vm.illegal_writes, 3);
}
END_TEST

START_TEST(queue_ready_zero_before_driver_ok)
{
    to_features_ok();
    setup_queue(0, 64, 0x1000, 0x2000, 0x3000);
    wr(VIRTIO_MMIO_QUEUE_READY, 0);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_QUEUE_READY), 0);
    wr(VIRTIO_MMIO_QUEUE_DESC_LOW, 0x4000);         /* reconfigurable again */
    ck_assert_uint_eq(vm.q[0].desc, 0x4000);
}
END_TEST

START_TEST(notify_rules)
{
    to_features_ok();
    setup_queue(0, 64, 0x1000, 0x2000, 0x3000);
    wr(VIRTIO_MMIO_QUEUE_NOTIFY, 0);                /* before DRIVER_OK */
    ck_assert_int_eq(rc.notify[0], 0);
    wr(VIRTIO_MMIO_STATUS, A | D | FO | DOK);
    wr(VIRTIO_MMIO_QUEUE_NOTIFY, 1);                /* not ready */
    wr(VIRTIO_MMIO_QUEUE_NOTIFY, 7);                /* no such queue */
    wr(VIRTIO_MMIO_QUEUE_NOTIFY, 0xffffffff);
    ck_assert_int_eq(rc.notify[1], 0);
    ck_assert_int_eq(rc.notify[7], 0);
    wr(VIRTIO_MMIO_QUEUE_NOTIFY, 0);
    ck_assert_int_eq(rc.notify[0], 1);
}
END_TEST

START_TEST(interrupts_and_ack)
{
    to_driver_ok();
    virtio_mmio_interrupt(&vm, VIRTIO_MMIO_INT_VRING);
    ck_assert_int_eq(rc.irq_level, 1);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_VRING);
    virtio_mmio_interrupt(&vm, VIRTIO_MMIO_INT_VRING);
    ck_assert_int_eq(rc.irq_calls, 1);              /* level unchanged: no call */
    virtio_mmio_config_changed(&vm);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_INTERRUPT_STATUS), 3);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_CONFIG_GENERATION), 1);
    wr(VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INT_VRING);
    ck_assert_int_eq(rc.irq_level, 1);
    wr(VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INT_CONFIG);
    ck_assert_int_eq(rc.irq_level, 0);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_INTERRUPT_STATUS), 0);
    wr(VIRTIO_MMIO_INTERRUPT_STATUS, 3);            /* read-only */
    ck_assert_uint_eq(rd(VIRTIO_MMIO_INTERRUPT_STATUS), 0);
}
END_TEST

START_TEST(needs_reset_from_device)
{
    to_driver_ok();
    virtio_mmio_set_needs_reset(&vm);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A | D | FO | DOK | VIRTIO_STATUS_NEEDS_RESET);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_CONFIG);
    /* A driver rewriting what it read keeps the bit; it cannot clear it. */
    wr(VIRTIO_MMIO_STATUS, A | D | FO | DOK);
    ck_assert(rd(VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_NEEDS_RESET);
    wr(VIRTIO_MMIO_STATUS, 0);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), 0);
    ck_assert_int_eq(rc.irq_level, 0);
}
END_TEST

/* The device side never waits for the register lock: a driver reset holds
 * it while it stops (joins) the device thread, so a device thread that
 * signals used buffers or NEEDS_RESET then must not block. (Before, both
 * took the register lock; the KVM transport spun on trylock + sched_yield
 * to avoid the deadlock.) */
static void *device_side(void *arg)
{
    (void)arg;
    virtio_mmio_interrupt(&vm, VIRTIO_MMIO_INT_VRING);
    virtio_mmio_set_needs_reset(&vm);
    return NULL;
}

START_TEST(device_side_never_waits_for_the_register_lock)
{
    to_driver_ok();
    pthread_mutex_lock(&vm.lock);              /* as a reset stopping the device does */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, device_side, NULL), 0);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    int jr = pthread_timedjoin_np(t, NULL, &dl);
    pthread_mutex_unlock(&vm.lock);
    if (jr != 0)
        pthread_join(t, NULL);
    ck_assert_msg(jr == 0, "the device thread waited for the register lock");
    ck_assert_int_eq(rc.irq_level, 1);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_VRING | VIRTIO_MMIO_INT_CONFIG);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A | D | FO | DOK | VIRTIO_STATUS_NEEDS_RESET);
    /* a reset forgets a request made before it */
    wr(VIRTIO_MMIO_STATUS, 0);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), 0);
    ck_assert_int_eq(rc.irq_level, 0);
    /* before DRIVER_OK: the bit, but no interrupt */
    virtio_mmio_set_needs_reset(&vm);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), VIRTIO_STATUS_NEEDS_RESET);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_INTERRUPT_STATUS), 0);
}
END_TEST

START_TEST(activate_failure_status)
{
    rc.activate_ret = -EIO;
    to_features_ok();
    setup_queue(0, 64, 0x1000, 0x2000, 0x3000);
    wr(VIRTIO_MMIO_STATUS, A | D | FO | DOK);
    ck_assert_int_eq(rc.activates, 1);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), A | D | FO | DOK | VIRTIO_STATUS_NEEDS_RESET);
    ck_assert_int_eq(rc.irq_level, 1);
}
END_TEST

START_TEST(reset_clears_everything)
{
    to_driver_ok();
    virtio_mmio_interrupt(&vm, VIRTIO_MMIO_INT_VRING);
    wr(VIRTIO_MMIO_STATUS, 0);
    ck_assert_int_eq(rc.resets, 1);
    ck_assert(!vm.q[0].ready);
    ck_assert_uint_eq(vm.q[0].desc, 0);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_INTERRUPT_STATUS), 0);
    ck_assert_int_eq(rc.irq_level, 0);
    ck_assert_uint_eq(virtio_mmio_features(&vm), 0);
    ck_assert_uint_eq(vm.driver_requested, 0);
    /* and it can be brought up again */
    to_driver_ok();
    ck_assert_int_eq(rc.activates, 2);
}
END_TEST

START_TEST(narrow_and_misaligned_access_ignored)
{
    uint8_t b[2] = { A, 0 };
    virtio_mmio_write(&vm, VIRTIO_MMIO_STATUS, b, 1);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), 0);
    virtio_mmio_write(&vm, VIRTIO_MMIO_STATUS + 1, b, 2);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_STATUS), 0);
    uint8_t r[2] = { 0xff, 0xff };
    virtio_mmio_read(&vm, VIRTIO_MMIO_MAGIC, r, 2);
    ck_assert_uint_eq(r[0], 0);
    ck_assert_uint_eq(r[1], 0);
    uint8_t r8[8];
    virtio_mmio_read(&vm, VIRTIO_MMIO_MAGIC, r8, 8);
    ck_assert_uint_eq(r8[0], 0);
    ck_assert_uint_eq(vm.illegal_writes, 2);
}
END_TEST

START_TEST(config_space_goes_to_device)
{
    uint8_t d[4];
    virtio_mmio_read(&vm, VIRTIO_MMIO_CONFIG + 8, d, 2);
    ck_assert_int_eq(rc.cfg_reads, 1);
    ck_assert_uint_eq(rc.cfg_off, 8);
    ck_assert_uint_eq(d[0], 0xc8);
    ck_assert_uint_eq(d[1], 0xc9);
    uint8_t w[1] = { 0x5a };
    virtio_mmio_write(&vm, VIRTIO_MMIO_CONFIG + 3, w, 1);
    ck_assert_int_eq(rc.cfg_writes, 1);
    ck_assert_uint_eq(rc.cfg_off, 3);
    ck_assert_uint_eq(rc.cfg_w[0], 0x5a);
    /* past the slot: not forwarded */
    virtio_mmio_read(&vm, VIRTIO_MMIO_SIZE - 2, d, 4);
    ck_assert_int_eq(rc.cfg_reads, 1);
    ck_assert_uint_eq(d[0], 0);
}
END_TEST

START_TEST(config_generation_bumps)
{
    uint32_t g = rd(VIRTIO_MMIO_CONFIG_GENERATION);
    virtio_mmio_config_changed(&vm);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_CONFIG_GENERATION), g + 1);
    ck_assert_uint_eq(rd(VIRTIO_MMIO_INTERRUPT_STATUS), 0);   /* not live yet */
}
END_TEST

START_TEST(two_devices_independent)
{
    struct virtio_mmio other;
    struct rec rc2 = {0};
    struct virtio_mmio_params p = { .device_id = 1, .nqueues = 1, .queue_max = 8 };
    ck_assert_int_eq(virtio_mmio_init(&other, &p, &gm, &ops, &rc2), 0);
    wr(VIRTIO_MMIO_STATUS, A);
    uint8_t d[4];
    virtio_mmio_read(&other, VIRTIO_MMIO_STATUS, d, 4);
    ck_assert_uint_eq(d[0], 0);
    virtio_mmio_read(&other, VIRTIO_MMIO_DEVICE_ID, d, 4);
    ck_assert_uint_eq(d[0], 1);
    /* through the bus ops too */
    virtio_mmio_bus_ops.read(&other, VIRTIO_MMIO_QUEUE_NUM_MAX, d, 4);
    ck_assert_uint_eq(d[0], 8);
    virtio_mmio_destroy(&other);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("virtio_mmio");
    TCase *tc = tcase_create("regs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, identity_registers);
    tcase_add_test(tc, init_rejects_bad_params);
    tcase_add_test(tc, full_bring_up);
    tcase_add_test(tc, event_idx_feature_reaches_queues);
    tcase_add_test(tc, status_transition_table);
    tcase_add_test(tc, illegal_status_write_ignored);
    tcase_add_test(tc, driver_cannot_set_needs_reset);
    tcase_add_test(tc, failed_then_only_reset);
    tcase_add_test(tc, features_ok_needs_version_1);
    tcase_add_test(tc, features_not_offered_refused);
    tcase_add_test(tc, feature_writes_outside_window_ignored);
    tcase_add_test(tc, queue_writes_before_features_ok_ignored);
    tcase_add_test(tc, queue_writes_after_ready_ignored);
    tcase_add_test(tc, queue_writes_after_driver_ok_ignored);
    tcase_add_test(tc, queue_num_over_max_ignored);
    tcase_add_test(tc, queue_ready_validates_rings);
    tcase_add_test(tc, queue_ready_zero_before_driver_ok);
    tcase_add_test(tc, notify_rules);
    tcase_add_test(tc, interrupts_and_ack);
    tcase_add_test(tc, needs_reset_from_device);
    tcase_add_test(tc, device_side_never_waits_for_the_register_lock);
    tcase_add_test(tc, activate_failure_status);
    tcase_add_test(tc, reset_clears_everything);
    tcase_add_test(tc, narrow_and_misaligned_access_ignored);
    tcase_add_test(tc, config_space_goes_to_device);
    tcase_add_test(tc, config_generation_bumps);
    tcase_add_test(tc, two_devices_independent);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
