/* Diff snapshots: the host's own writes into guest memory are tracked in
 * struct gmem's dirty bitmap (vmm/base/gmem.h) — gmem_write, gmem_mark_dirty,
 * and the virtqueue: every device-writable buffer of a popped chain and
 * the used-ring stores — while device-readable buffers and the driver's
 * rings stay clean. Without a bitmap nothing is marked. Pure; no KVM. */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio/virtq.h"
#include "vmm/base/gmem.h"

#define PG     4096u
#define NPG    64u
#define RAM    (NPG * PG)
#define QSZ    8u
#define DESC   (1 * PG)
#define AVAIL  (2 * PG)
#define USED   (3 * PG)

static uint8_t *ram;
static uint64_t bm[1];
static struct gmem gm;

static void setup(void)
{
    ram = aligned_alloc(PG, RAM);
    memset(ram, 0, RAM);
    bm[0] = 0;
    gm = (struct gmem){ .n = 1, .dirty = bm, .dirty_base = ram, .dirty_pages = NPG };
    gm.r[0] = (struct gmem_region){ 0, RAM, ram };
}

static void teardown(void) { free(ram); }

static int is_dirty(unsigned page) { return (int)((bm[0] >> page) & 1); }

static void w16(uint64_t a, uint16_t v) { v = htole16(v); memcpy(ram + a, &v, 2); }
static void w32(uint64_t a, uint32_t v) { v = htole32(v); memcpy(ram + a, &v, 4); }
static void w64(uint64_t a, uint64_t v) { v = htole64(v); memcpy(ram + a, &v, 8); }

static void desc(unsigned i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
    uint64_t d = DESC + 16ull * i;
    w64(d, addr); w32(d + 8, len); w16(d + 12, flags); w16(d + 14, next);
}

START_TEST(gmem_write_and_mark)
{
    uint8_t b[16] = { 1 };
    ck_assert_int_eq(gmem_write(&gm, 10 * PG + 5, b, sizeof(b)), 0);
    ck_assert_uint_eq(bm[0], 1ull << 10);
    /* a range over a page boundary marks both pages */
    gmem_mark_dirty(&gm, 20 * PG - 1, 2);
    ck_assert(is_dirty(19) && is_dirty(20));
    ck_assert(!is_dirty(21) && !is_dirty(18));
    /* length 0, outside RAM, overflowing: nothing */
    uint64_t before = bm[0];
    gmem_mark_dirty(&gm, 30 * PG, 0);
    gmem_mark_dirty(&gm, RAM, 1);
    gmem_mark_dirty(&gm, UINT64_MAX - 1, 8);
    ck_assert_int_eq(gmem_write(&gm, RAM - 4, b, 8), -EFAULT);
    ck_assert_uint_eq(bm[0], before);
    /* the last page */
    gmem_mark_dirty(&gm, RAM - 1, 1);
    ck_assert(is_dirty(NPG - 1));
    /* reads never mark */
    bm[0] = 0;
    ck_assert_int_eq(gmem_read(&gm, 40 * PG, b, sizeof(b)), 0);
    ck_assert_uint_eq(bm[0], 0);
}
END_TEST

START_TEST(no_bitmap_no_marks)
{
    gm.dirty = NULL;
    uint8_t b[4] = { 7 };
    ck_assert_int_eq(gmem_write(&gm, 10 * PG, b, sizeof(b)), 0);
    gmem_mark_dirty(&gm, 11 * PG, 4);
    ck_assert_uint_eq(bm[0], 0);
    ck_assert_uint_eq(ram[10 * PG], 7);
}
END_TEST

/* A chain: 1 readable page (8), 2 writable buffers (10..11 straddled, 14). */
START_TEST(virtq_marks_writable_and_used)
{
    struct virtq q;
    struct virtq_seg segs[8];
    struct virtq_chain ch = { .seg = segs, .max_seg = 8 };
    ck_assert_int_eq(virtq_init(&q, QSZ), 0);
    q.desc = DESC; q.avail = AVAIL; q.used = USED;
    virtq_set_features(&q, 0);
    ck_assert_int_eq(virtq_enable(&q, &gm), 0);
    desc(0, 8 * PG, 512, VIRTQ_DESC_F_NEXT, 1);
    desc(1, 11 * PG - 100, 200, VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE, 2);
    desc(2, 14 * PG, 1, VIRTQ_DESC_F_WRITE, 0);
    w16(AVAIL + 4, 0);
    w16(AVAIL + 2, 1);
    bm[0] = 0;                       /* the driver's own setup is the guest's */
    ck_assert_int_eq(virtq_pop(&q, &gm, &ch), 1);
    ck_assert_uint_eq(ch.nseg, 3);
    ck_assert(is_dirty(10) && is_dirty(11) && is_dirty(14));
    ck_assert(!is_dirty(8));         /* device-readable: not written by the device */
    ck_assert(!is_dirty(DESC / PG) && !is_dirty(AVAIL / PG) && !is_dirty(USED / PG));
    ck_assert_int_eq(virtq_push(&q, &gm, ch.head, 201), 0);
    ck_assert(is_dirty(USED / PG));  /* the used element */
    bm[0] = 0;
    ck_assert_int_eq(virtq_publish(&q, &gm), 0);
    ck_assert_uint_eq(bm[0], 1ull << (USED / PG));  /* used->idx, nothing else */
    ck_assert(!is_dirty(AVAIL / PG));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gmem_dirty");
    TCase *tc = tcase_create("dirty");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, gmem_write_and_mark);
    tcase_add_test(tc, no_bitmap_no_marks);
    tcase_add_test(tc, virtq_marks_writable_and_used);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
