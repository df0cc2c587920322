/* Split virtqueue core: happy paths, every malformed ring/chain case,
 * notification suppression (flags and EVENT_IDX). */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "devices/virtio/virtq.h"

#define RAM     0x10000u
#define QSZ     16u
#define DESC    0x0000u
#define AVAIL   0x1000u
#define USED    0x2000u
#define ITABLE  0x3000u     /* indirect table */
#define BUF     0x8000u

static uint8_t *ram;
static struct gmem gm;
static struct virtq q;
static struct virtq_seg segs[64];
static struct virtq_chain ch;

static void setup(void)
{
    ram = aligned_alloc(4096, RAM);
    memset(ram, 0, RAM);
    gm = (struct gmem){ .n = 1 };
    gm.r[0] = (struct gmem_region){ 0, RAM, ram };
    ck_assert_int_eq(virtq_init(&q, QSZ), 0);
    q.desc = DESC; q.avail = AVAIL; q.used = USED;
    ch = (struct virtq_chain){ .seg = segs, .max_seg = 64 };
}

static void teardown(void) { free(ram); }

static void w16(uint64_t a, uint16_t v) { v = htole16(v); memcpy(ram + a, &v, 2); }
static void w32(uint64_t a, uint32_t v) { v = htole32(v); memcpy(ram + a, &v, 4); }
static void w64(uint64_t a, uint64_t v) { v = htole64(v); memcpy(ram + a, &v, 8); }
static uint16_t r16(uint64_t a) { uint16_t v; memcpy(&v, ram + a, 2); return le16toh(v); }
static uint32_t r32(uint64_t a) { uint32_t v; memcpy(&v, ram + a, 4); return le32toh(v); }

static void desc_at(uint64_t table, unsigned i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
    uint64_t d = table + 16ull * i;
    w64(d, addr); w32(d + 8, len); w16(d + 12, flags); w16(d + 14, next);
}
static void desc(unsigned i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
    desc_at(DESC, i, addr, len, flags, next);
}

/* Driver side: put head in the next avail slot and bump avail->idx. */
static void avail_add(uint16_t head)
{
    uint16_t idx = r16(AVAIL + 2);
    w16(AVAIL + 4 + 2 * (idx % QSZ), head);
    w16(AVAIL + 2, (uint16_t)(idx + 1));
}

static void enable(uint64_t features)
{
    virtq_set_features(&q, features);
    ck_assert_int_eq(virtq_enable(&q, &gm), 0);
}

/* Expect a chain-level error with the given reason and head. */
static void expect_chain_err(enum virtq_err e, uint16_t head)
{
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), -EINVAL);
    ck_assert_int_eq(ch.err, e);
    ck_assert(ch.head_valid);
    ck_assert_uint_eq(ch.head, head);
    ck_assert(!q.broken);
    /* The device can fail just this request. */
    ck_assert_int_eq(virtq_push(&q, &gm, ch.head, 0), 0);
    ck_assert_int_eq(virtq_publish(&q, &gm), 0);
    ck_assert_uint_eq(r16(USED + 2), 1);
    ck_assert_uint_eq(r32(USED + 4), head);
    ck_assert_str_ne(virtq_strerror(e), "ok");
}

static void expect_queue_err(enum virtq_err e)
{
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), -EIO);
    ck_assert_int_eq(ch.err, e);
    ck_assert(!ch.head_valid);
    ck_assert(q.broken);
    ck_assert_int_eq(q.err, e);
    /* Sticky until reset. */
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), -EIO);
    ck_assert_int_eq(ch.err, e);
    virtq_reset(&q);
    ck_assert(!q.broken && !q.ready);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 0);
}

/* ---- setup / enable ---- */

START_TEST(init_rejects_bad_max)
{
    struct virtq x;
    ck_assert_int_eq(virtq_init(&x, 0), -EINVAL);
    ck_assert_int_eq(virtq_init(&x, 24), -EINVAL);
    ck_assert_int_eq(virtq_init(&x, 32768), 0);
    ck_assert_uint_eq(x.size, 32768);
    ck_assert(!x.ready);
}
END_TEST

START_TEST(enable_checks_size)
{
    q.size = 12;
    ck_assert_int_eq(virtq_enable(&q, &gm), -EINVAL);
    q.size = 32;   /* > max_size */
    ck_assert_int_eq(virtq_enable(&q, &gm), -EINVAL);
    q.size = 0;
    ck_assert_int_eq(virtq_enable(&q, &gm), -EINVAL);
    ck_assert(!q.ready);
    q.size = 8;
    ck_assert_int_eq(virtq_enable(&q, &gm), 0);
    ck_assert(q.ready);
}
END_TEST

START_TEST(enable_checks_alignment)
{
    q.desc = 8;
    ck_assert_int_eq(virtq_enable(&q, &gm), -EINVAL);
    q.desc = DESC; q.avail = AVAIL + 1;
    ck_assert_int_eq(virtq_enable(&q, &gm), -EINVAL);
    q.avail = AVAIL; q.used = USED + 2;
    ck_assert_int_eq(virtq_enable(&q, &gm), -EINVAL);
    ck_assert(!q.ready);
}
END_TEST

START_TEST(enable_checks_rings_in_ram)
{
    q.desc = RAM - 16 * QSZ + 16;           /* last descriptor past the end */
    ck_assert_int_eq(virtq_enable(&q, &gm), -EFAULT);
    q.desc = DESC; q.avail = RAM - 4;       /* ring and used_event outside */
    ck_assert_int_eq(virtq_enable(&q, &gm), -EFAULT);
    q.avail = AVAIL; q.used = RAM - 132;     /* aligned, 2 bytes short */
    ck_assert_int_eq(virtq_enable(&q, &gm), -EFAULT);
    q.used = UINT64_MAX - 3;                /* wraps */
    ck_assert_int_eq(virtq_enable(&q, &gm), -EFAULT);
    ck_assert(!q.ready);
    q.used = RAM - 136;                     /* aligned, fits */
    ck_assert_int_eq(virtq_enable(&q, &gm), 0);
}
END_TEST

START_TEST(not_ready_pops_nothing)
{
    desc(0, BUF, 16, 0, 0);
    avail_add(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 0);
    ck_assert_int_eq(virtq_pending(&q, &gm), 0);
    ck_assert_int_eq(virtq_push(&q, &gm, 0, 0), -EINVAL);
}
END_TEST

/* ---- happy paths ---- */

START_TEST(simple_chain)
{
    enable(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 0);
    desc(3, BUF, 16, VIRTQ_DESC_F_NEXT, 7);
    desc(7, BUF + 0x100, 512, VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE, 1);
    desc(1, BUF + 0x400, 1, VIRTQ_DESC_F_WRITE, 0);
    avail_add(3);
    ck_assert_int_eq(virtq_pending(&q, &gm), 1);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_uint_eq(ch.head, 3);
    ck_assert(ch.head_valid && !ch.indirect);
    ck_assert_uint_eq(ch.nseg, 3);
    ck_assert_uint_eq(ch.nread, 1);
    ck_assert_uint_eq(ch.read_len, 16);
    ck_assert_uint_eq(ch.write_len, 513);
    ck_assert_uint_eq(segs[0].gpa, BUF);
    ck_assert(!segs[0].writable);
    ck_assert_uint_eq(segs[1].gpa, BUF + 0x100);
    ck_assert_uint_eq(segs[1].len, 512);
    ck_assert(segs[1].writable && segs[2].writable);
    ck_assert_int_eq(ch.err, VIRTQ_OK);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 0);
    ck_assert_uint_eq(q.last_avail_idx, 1);
}
END_TEST

START_TEST(used_ring_writes)
{
    enable(0);
    for (unsigned i = 0; i < 3; i++) {
        desc(i, BUF + 64 * i, 64, VIRTQ_DESC_F_WRITE, 0);
        avail_add(i);
    }
    for (unsigned i = 0; i < 3; i++)
        ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    /* complete out of order */
    ck_assert_int_eq(virtq_push(&q, &gm, 2, 10), 0);
    ck_assert_int_eq(virtq_push(&q, &gm, 0, 20), 0);
    /* not visible before publish */
    ck_assert_uint_eq(r16(USED + 2), 0);
    ck_assert_int_eq(virtq_publish(&q, &gm), 0);
    ck_assert_uint_eq(r16(USED + 2), 2);
    ck_assert_uint_eq(r32(USED + 4), 2);
    ck_assert_uint_eq(r32(USED + 8), 10);
    ck_assert_uint_eq(r32(USED + 12), 0);
    ck_assert_uint_eq(r32(USED + 16), 20);
    ck_assert_int_eq(virtq_push(&q, &gm, 1, 30), 0);
    ck_assert_int_eq(virtq_publish(&q, &gm), 0);
    ck_assert_uint_eq(r16(USED + 2), 3);
    ck_assert_uint_eq(r32(USED + 20), 1);
    ck_assert_uint_eq(r32(USED + 24), 30);
}
END_TEST

START_TEST(push_rejects_bad_head_and_extra_push)
{
    enable(0);
    desc(0, BUF, 8, 0, 0);
    avail_add(0);
    ck_assert_int_eq(virtq_push(&q, &gm, 0, 0), -EINVAL);   /* nothing popped */
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_int_eq(virtq_push(&q, &gm, QSZ, 0), -EINVAL);
    ck_assert_int_eq(virtq_push(&q, &gm, 0, 0), 0);
    ck_assert_int_eq(virtq_push(&q, &gm, 0, 0), -EINVAL);
    ck_assert_uint_eq(q.used_idx, 1);
}
END_TEST

/* A popped chain the device refuses without a used entry: the in-flight
 * count comes back, nothing reaches the used ring, and a drop with nothing
 * in flight is a no-op. */
START_TEST(drop_gives_back_in_flight)
{
    enable(0);
    desc(0, BUF, 8, 0, 0);
    avail_add(0);
    avail_add(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_uint_eq(q.inflight, 2);
    virtq_drop(&q);
    ck_assert_uint_eq(q.inflight, 1);
    ck_assert_int_eq(virtq_push(&q, &gm, 0, 0), 0);
    ck_assert_uint_eq(q.inflight, 0);
    virtq_drop(&q);
    ck_assert_uint_eq(q.inflight, 0);
    ck_assert_uint_eq(q.used_idx, 1);
    ck_assert_int_eq(virtq_push(&q, &gm, 0, 0), -EINVAL);
}
END_TEST

START_TEST(indirect_chain)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc_at(ITABLE, 0, BUF, 16, VIRTQ_DESC_F_NEXT, 2);
    desc_at(ITABLE, 2, BUF + 0x200, 1024, VIRTQ_DESC_F_NEXT, 1);
    desc_at(ITABLE, 1, BUF + 0x1000, 1, VIRTQ_DESC_F_WRITE, 0);
    /* WRITE on the indirect descriptor itself must be ignored. */
    desc(5, ITABLE, 3 * 16, VIRTQ_DESC_F_INDIRECT | VIRTQ_DESC_F_WRITE, 0);
    avail_add(5);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert(ch.indirect);
    ck_assert_uint_eq(ch.head, 5);
    ck_assert_uint_eq(ch.nseg, 3);
    ck_assert_uint_eq(ch.nread, 2);
    ck_assert_uint_eq(ch.read_len, 1040);
    ck_assert_uint_eq(ch.write_len, 1);
    ck_assert_uint_eq(segs[1].gpa, BUF + 0x200);
    ck_assert_uint_eq(segs[2].gpa, BUF + 0x1000);
}
END_TEST

START_TEST(direct_then_indirect)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc_at(ITABLE, 0, BUF + 0x100, 4, VIRTQ_DESC_F_WRITE, 0);
    desc(0, BUF, 16, VIRTQ_DESC_F_NEXT, 1);
    desc(1, ITABLE, 16, VIRTQ_DESC_F_INDIRECT, 0);
    avail_add(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_uint_eq(ch.nseg, 2);
    ck_assert_uint_eq(ch.nread, 1);
    ck_assert_uint_eq(ch.write_len, 4);
}
END_TEST

START_TEST(many_segments)
{
    enable(0);
    /* A chain through every descriptor: the longest legal chain. */
    for (unsigned i = 0; i < QSZ; i++)
        desc(i, BUF + 32 * i, 32, (i < QSZ - 1 ? VIRTQ_DESC_F_NEXT : 0) |
             (i >= QSZ / 2 ? VIRTQ_DESC_F_WRITE : 0), (uint16_t)(i + 1));
    avail_add(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_uint_eq(ch.nseg, QSZ);
    ck_assert_uint_eq(ch.nread, QSZ / 2);
    ck_assert_uint_eq(ch.read_len + ch.write_len, 32 * QSZ);
    for (unsigned i = 0; i < QSZ; i++)
        ck_assert_uint_eq(segs[i].gpa, BUF + 32 * i);
}
END_TEST

START_TEST(zero_length_segment_allowed)
{
    enable(0);
    desc(0, BUF, 0, VIRTQ_DESC_F_NEXT, 1);
    desc(1, RAM, 0, 0, 0);    /* at the very end of RAM, empty */
    avail_add(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_uint_eq(ch.nseg, 2);
    ck_assert_uint_eq(ch.read_len, 0);
}
END_TEST

START_TEST(avail_idx_wraps)
{
    enable(0);
    desc(0, BUF, 8, 0, 0);
    desc(1, BUF + 8, 8, 0, 0);
    desc(2, BUF + 16, 8, 0, 0);
    /* Driver and device both at 65534. */
    q.last_avail_idx = 65534;
    q.used_idx = q.published_idx = 65534;
    w16(AVAIL + 2, 65534);
    avail_add(0); avail_add(1); avail_add(2);
    ck_assert_uint_eq(r16(AVAIL + 2), 1);
    ck_assert_int_eq(virtq_pending(&q, &gm), 3);
    for (unsigned i = 0; i < 3; i++) {
        ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
        ck_assert_uint_eq(ch.head, i);
        ck_assert_int_eq(virtq_push(&q, &gm, ch.head, 0), 0);
    }
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 0);
    ck_assert_uint_eq(q.last_avail_idx, 1);
    ck_assert_int_eq(virtq_publish(&q, &gm), 0);
    ck_assert_uint_eq(r16(USED + 2), 1);
    /* slot 65534 % 16 = 14, 65535 -> 15, 0 -> 0 */
    ck_assert_uint_eq(r32(USED + 4 + 8 * 14), 0);
    ck_assert_uint_eq(r32(USED + 4 + 8 * 15), 1);
    ck_assert_uint_eq(r32(USED + 4 + 8 * 0), 2);
}
END_TEST

START_TEST(full_ring_is_legal)
{
    enable(0);
    for (unsigned i = 0; i < QSZ; i++) {
        desc(i, BUF, 8, 0, 0);
        avail_add((uint16_t)i);
    }
    ck_assert_int_eq(virtq_pending(&q, &gm), QSZ);
    for (unsigned i = 0; i < QSZ; i++)
        ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 0);
}
END_TEST

/* ---- notification suppression ---- */

START_TEST(no_interrupt_flag)
{
    enable(0);
    desc(0, BUF, 8, 0, 0);
    avail_add(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_int_eq(virtq_push(&q, &gm, 0, 0), 0);
    ck_assert_int_eq(virtq_publish(&q, &gm), 0);
    ck_assert(virtq_should_notify(&q, &gm));
    w16(AVAIL, VRING_AVAIL_F_NO_INTERRUPT);
    ck_assert(!virtq_should_notify(&q, &gm));
}
END_TEST

START_TEST(event_idx_decisions)
{
    enable(1ull << VIRTIO_F_EVENT_IDX);
    for (unsigned i = 0; i < 8; i++)
        desc(i, BUF, 8, 0, 0);
    /* NO_INTERRUPT is ignored with EVENT_IDX. */
    w16(AVAIL, VRING_AVAIL_F_NO_INTERRUPT);
    /* used_event = 0: interrupt when used idx passes 0 -> 1. */
    w16(AVAIL + 4 + 2 * QSZ, 0);
    avail_add(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_int_eq(virtq_push(&q, &gm, 0, 0), 0);
    ck_assert_int_eq(virtq_publish(&q, &gm), 0);
    ck_assert(virtq_should_notify(&q, &gm));     /* first one always */
    /* Nothing new published: no interrupt. */
    ck_assert(!virtq_should_notify(&q, &gm));
    /* Driver wants an interrupt only after used idx passes 3 (i.e. reaches 4). */
    w16(AVAIL + 4 + 2 * QSZ, 3);
    uint16_t ev = 0;
    ck_assert_int_eq(virtq_read_used_event(&q, &gm, &ev), 0);
    ck_assert_uint_eq(ev, 3);
    for (unsigned i = 1; i <= 4; i++) {
        avail_add((uint16_t)i);
        ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
        ck_assert_int_eq(virtq_push(&q, &gm, ch.head, 0), 0);
        ck_assert_int_eq(virtq_publish(&q, &gm), 0);
        /* used idx becomes i + 1: notify only when crossing event 3 -> 4 */
        ck_assert_int_eq(virtq_should_notify(&q, &gm), i + 1 == 4);
    }
    /* A batch that jumps over the event index still notifies. */
    w16(AVAIL + 4 + 2 * QSZ, 6);
    for (unsigned i = 5; i <= 7; i++) {
        avail_add((uint16_t)i);
        ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
        ck_assert_int_eq(virtq_push(&q, &gm, ch.head, 0), 0);
    }
    ck_assert_int_eq(virtq_publish(&q, &gm), 0);   /* 5 -> 8 crosses 6 */
    ck_assert(virtq_should_notify(&q, &gm));
    /* need_event arithmetic, wrap included */
    ck_assert(virtq_need_event(65535, 0, 65535));
    ck_assert(!virtq_need_event(10, 5, 3));
    ck_assert(virtq_need_event(4, 5, 3));
}
END_TEST

START_TEST(notify_enable_disable)
{
    enable(0);
    ck_assert_int_eq(virtq_disable_notify(&q, &gm), 0);
    ck_assert_uint_eq(r16(USED), VRING_USED_F_NO_NOTIFY);
    ck_assert_int_eq(virtq_enable_notify(&q, &gm), 0);
    ck_assert_uint_eq(r16(USED), 0);
    desc(0, BUF, 8, 0, 0);
    avail_add(0);
    ck_assert_int_eq(virtq_enable_notify(&q, &gm), 1);   /* raced: one pending */
    ck_assert_int_eq(virtq_set_avail_event(&q, &gm, 5), -EINVAL);
}
END_TEST

START_TEST(avail_event_written)
{
    enable(1ull << VIRTIO_F_EVENT_IDX);
    desc(0, BUF, 8, 0, 0);
    avail_add(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_int_eq(virtq_enable_notify(&q, &gm), 0);
    ck_assert_uint_eq(r16(USED + 4 + 8 * QSZ), 1);   /* kick me for avail idx 1 */
    ck_assert_int_eq(virtq_set_avail_event(&q, &gm, 42), 0);
    ck_assert_uint_eq(r16(USED + 4 + 8 * QSZ), 42);
    ck_assert_int_eq(virtq_disable_notify(&q, &gm), 0);
    ck_assert_uint_eq(r16(USED), 0);     /* flag not used with EVENT_IDX */
}
END_TEST

/* ---- queue-level errors ---- */

START_TEST(err_avail_idx_jump)
{
    enable(0);
    desc(0, BUF, 8, 0, 0);
    w16(AVAIL + 2, QSZ + 1);
    ck_assert_int_eq(virtq_pending(&q, &gm), -EIO);
    q.broken = false;
    expect_queue_err(VIRTQ_E_AVAIL_IDX);
}
END_TEST

START_TEST(err_avail_idx_backwards)
{
    enable(0);
    w16(AVAIL + 2, 0xffff);     /* "moved" by 65535 */
    expect_queue_err(VIRTQ_E_AVAIL_IDX);
}
END_TEST

START_TEST(err_head_range)
{
    enable(0);
    avail_add(QSZ);
    expect_queue_err(VIRTQ_E_HEAD_RANGE);
}
END_TEST

START_TEST(err_ring_fault_after_enable)
{
    enable(0);
    avail_add(0);
    gm.r[0].size = AVAIL;       /* RAM shrank under the avail ring */
    expect_queue_err(VIRTQ_E_RING_FAULT);
}
END_TEST

START_TEST(err_used_ring_fault_on_push)
{
    enable(0);
    desc(0, BUF, 8, 0, 0);
    avail_add(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    gm.r[0].size = USED;
    ck_assert_int_eq(virtq_push(&q, &gm, 0, 0), -EIO);
    ck_assert(q.broken);
    ck_assert_int_eq(q.err, VIRTQ_E_RING_FAULT);
}
END_TEST

/* ---- chain-level errors ---- */

START_TEST(err_next_range)
{
    enable(0);
    desc(2, BUF, 8, VIRTQ_DESC_F_NEXT, QSZ);
    avail_add(2);
    expect_chain_err(VIRTQ_E_NEXT_RANGE, 2);
}
END_TEST

START_TEST(err_loop)
{
    enable(0);
    desc(0, BUF, 8, VIRTQ_DESC_F_NEXT, 1);
    desc(1, BUF, 8, VIRTQ_DESC_F_NEXT, 0);
    avail_add(0);
    expect_chain_err(VIRTQ_E_LOOP, 0);
}
END_TEST

START_TEST(err_self_loop_writable)
{
    enable(0);
    desc(4, BUF, 8, VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE, 4);
    avail_add(4);
    expect_chain_err(VIRTQ_E_LOOP, 4);
}
END_TEST

START_TEST(err_loop_in_indirect)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc_at(ITABLE, 0, BUF, 8, VIRTQ_DESC_F_NEXT, 1);
    desc_at(ITABLE, 1, BUF, 8, VIRTQ_DESC_F_NEXT, 0);
    desc(0, ITABLE, 32, VIRTQ_DESC_F_INDIRECT, 0);
    avail_add(0);
    expect_chain_err(VIRTQ_E_LOOP, 0);
}
END_TEST

START_TEST(err_indirect_next_out_of_table)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc_at(ITABLE, 0, BUF, 8, VIRTQ_DESC_F_NEXT, 2);   /* table has 2 entries */
    desc(0, ITABLE, 32, VIRTQ_DESC_F_INDIRECT, 0);
    avail_add(0);
    expect_chain_err(VIRTQ_E_NEXT_RANGE, 0);
}
END_TEST

START_TEST(err_nested_indirect)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc_at(ITABLE, 0, ITABLE + 0x100, 16, VIRTQ_DESC_F_INDIRECT, 0);
    desc(0, ITABLE, 16, VIRTQ_DESC_F_INDIRECT, 0);
    avail_add(0);
    expect_chain_err(VIRTQ_E_INDIRECT_NESTED, 0);
}
END_TEST

START_TEST(err_indirect_len_zero)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc(1, ITABLE, 0, VIRTQ_DESC_F_INDIRECT, 0);
    avail_add(1);
    expect_chain_err(VIRTQ_E_INDIRECT_LEN, 1);
}
END_TEST

START_TEST(err_indirect_len_not_multiple)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc(1, ITABLE, 24, VIRTQ_DESC_F_INDIRECT, 0);
    avail_add(1);
    expect_chain_err(VIRTQ_E_INDIRECT_LEN, 1);
}
END_TEST

START_TEST(err_indirect_len_too_big)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc(1, ITABLE, 16 * (QSZ + 1), VIRTQ_DESC_F_INDIRECT, 0);
    avail_add(1);
    expect_chain_err(VIRTQ_E_INDIRECT_LEN, 1);
}
END_TEST

START_TEST(err_indirect_without_feature)
{
    enable(0);
    desc_at(ITABLE, 0, BUF, 8, 0, 0);
    desc(1, ITABLE, 16, VIRTQ_DESC_F_INDIRECT, 0);
    avail_add(1);
    expect_chain_err(VIRTQ_E_INDIRECT_NOFEAT, 1);
}
END_TEST

START_TEST(err_indirect_with_next)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc_at(ITABLE, 0, BUF, 8, 0, 0);
    desc(1, ITABLE, 16, VIRTQ_DESC_F_INDIRECT | VIRTQ_DESC_F_NEXT, 2);
    desc(2, BUF, 8, 0, 0);
    avail_add(1);
    expect_chain_err(VIRTQ_E_INDIRECT_NEXT, 1);
}
END_TEST

START_TEST(err_indirect_table_outside_ram)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc(1, RAM - 16, 32, VIRTQ_DESC_F_INDIRECT, 0);
    avail_add(1);
    expect_chain_err(VIRTQ_E_INDIRECT_FAULT, 1);
}
END_TEST

START_TEST(err_indirect_table_wraps)
{
    enable(1ull << VIRTIO_F_INDIRECT_DESC);
    desc(1, UINT64_MAX - 15, 32, VIRTQ_DESC_F_INDIRECT, 0);
    avail_add(1);
    expect_chain_err(VIRTQ_E_INDIRECT_FAULT, 1);
}
END_TEST

START_TEST(err_seg_outside_ram)
{
    enable(0);
    desc(0, BUF, 8, VIRTQ_DESC_F_NEXT, 1);
    desc(1, RAM - 8, 9, VIRTQ_DESC_F_WRITE, 0);
    avail_add(0);
    expect_chain_err(VIRTQ_E_SEG_FAULT, 0);
}
END_TEST

START_TEST(err_seg_addr_overflow)
{
    enable(0);
    desc(0, UINT64_MAX - 7, 16, 0, 0);
    avail_add(0);
    expect_chain_err(VIRTQ_E_SEG_FAULT, 0);
}
END_TEST

START_TEST(err_seg_far_away)
{
    enable(0);
    desc(0, 0x100000000ull, 1, 0, 0);
    avail_add(0);
    expect_chain_err(VIRTQ_E_SEG_FAULT, 0);
}
END_TEST

START_TEST(err_read_after_write)
{
    enable(0);
    desc(0, BUF, 16, VIRTQ_DESC_F_NEXT, 1);
    desc(1, BUF + 16, 16, VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE, 2);
    desc(2, BUF + 32, 16, 0, 0);
    avail_add(0);
    expect_chain_err(VIRTQ_E_READ_AFTER_WRITE, 0);
}
END_TEST

START_TEST(err_too_many_segs)
{
    enable(0);
    ch.max_seg = 3;
    for (unsigned i = 0; i < 4; i++)
        desc(i, BUF, 8, i < 3 ? VIRTQ_DESC_F_NEXT : 0, (uint16_t)(i + 1));
    avail_add(0);
    expect_chain_err(VIRTQ_E_TOO_MANY_SEGS, 0);
    ck_assert_uint_le(ch.nseg, 3);
}
END_TEST

START_TEST(exactly_max_segs_ok)
{
    enable(0);
    ch.max_seg = 4;
    for (unsigned i = 0; i < 4; i++)
        desc(i, BUF, 8, i < 3 ? VIRTQ_DESC_F_NEXT : 0, (uint16_t)(i + 1));
    avail_add(0);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_uint_eq(ch.nseg, 4);
}
END_TEST

START_TEST(err_len_overflow)
{
    /* A large, never-touched region so that two 3 GiB buffers pass the
     * RAM check and their total overflows 32 bits. */
    uint64_t big = 3ull << 30;
    void *p = mmap(NULL, big, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    gm.r[1] = (struct gmem_region){ 1ull << 32, big, p };
    gm.n = 2;
    enable(0);
    desc(0, 1ull << 32, 0xC0000000u, VIRTQ_DESC_F_NEXT, 1);
    desc(1, 1ull << 32, 0xC0000000u, VIRTQ_DESC_F_WRITE, 0);
    avail_add(0);
    expect_chain_err(VIRTQ_E_LEN_OVERFLOW, 0);
    munmap(p, big);
}
END_TEST

START_TEST(bad_chain_does_not_stall_queue)
{
    enable(0);
    desc(0, BUF, 8, VIRTQ_DESC_F_NEXT, 0);    /* self loop */
    desc(1, BUF, 8, 0, 0);
    avail_add(0);
    avail_add(1);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), -EINVAL);
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_uint_eq(ch.head, 1);
    ck_assert_uint_eq(q.inflight, 2);
}
END_TEST

START_TEST(strerror_covers_all)
{
    for (int e = 0; e < VIRTQ_E__COUNT; e++)
        ck_assert_ptr_nonnull(virtq_strerror((enum virtq_err)e));
    ck_assert_str_eq(virtq_strerror((enum virtq_err)999), "unknown virtq error");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("virtq");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, init_rejects_bad_max);
    tcase_add_test(tc, enable_checks_size);
    tcase_add_test(tc, enable_checks_alignment);
    tcase_add_test(tc, enable_checks_rings_in_ram);
    tcase_add_test(tc, not_ready_pops_nothing);
    tcase_add_test(tc, simple_chain);
    tcase_add_test(tc, used_ring_writes);
    tcase_add_test(tc, push_rejects_bad_head_and_extra_push);
    tcase_add_test(tc, drop_gives_back_in_flight);
    tcase_add_test(tc, indirect_chain);
    tcase_add_test(tc, direct_then_indirect);
    tcase_add_test(tc, many_segments);
    tcase_add_test(tc, zero_length_segment_allowed);
    tcase_add_test(tc, avail_idx_wraps);
    tcase_add_test(tc, full_ring_is_legal);
    tcase_add_test(tc, no_interrupt_flag);
    tcase_add_test(tc, event_idx_decisions);
    tcase_add_test(tc, notify_enable_disable);
    tcase_add_test(tc, avail_event_written);
    tcase_add_test(tc, err_avail_idx_jump);
    tcase_add_test(tc, err_avail_idx_backwards);
    tcase_add_test(tc, err_head_range);
    tcase_add_test(tc, err_ring_fault_after_enable);
    tcase_add_test(tc, err_used_ring_fault_on_push);
    tcase_add_test(tc, err_next_range);
    tcase_add_test(tc, err_loop);
    tcase_add_test(tc, err_self_loop_writable);
    tcase_add_test(tc, err_loop_in_indirect);
    tcase_add_test(tc, err_indirect_next_out_of_table);
    tcase_add_test(tc, err_nested_indirect);
    tcase_add_test(tc, err_indirect_len_zero);
    tcase_add_test(tc, err_indirect_len_not_multiple);
    tcase_add_test(tc, err_indirect_len_too_big);
    tcase_add_test(tc, err_indirect_without_feature);
    tcase_add_test(tc, err_indirect_with_next);
    tcase_add_test(tc, err_indirect_table_outside_ram);
    tcase_add_test(tc, err_indirect_table_wraps);
    tcase_add_test(tc, err_seg_outside_ram);
    tcase_add_test(tc, err_seg_addr_overflow);
    tcase_add_test(tc, err_seg_far_away);
    tcase_add_test(tc, err_read_after_write);
    tcase_add_test(tc, err_too_many_segs);
    tcase_add_test(tc, exactly_max_segs_ok);
    tcase_add_test(tc, err_len_overflow);
    tcase_add_test(tc, bad_chain_does_not_stall_queue);
    tcase_add_test(tc, strerror_covers_all);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
