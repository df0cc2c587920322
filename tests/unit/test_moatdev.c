/* Unit tests for the moat control device (devices/legacy/moatdev.c); the
 * i8042 has its own (test_i8042.c). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devices/legacy/moatdev.h"
#include "vmm/base/bus.h"
#include "vmm/base/layout.h"

struct rec {
    uint8_t status[64], ev[64];
    unsigned nstatus, nev, resets;
};

static void rec_status(void *o, uint8_t st)
{
    struct rec *r = o;
    r->status[r->nstatus++ % 64] = st;
}
static void rec_event(void *o, uint8_t ev)
{
    struct rec *r = o;
    r->ev[r->nev++ % 64] = ev;
}

static const struct moatdev_ops mops = { rec_status, rec_event };

static struct moatdev D;
static struct rec R;
static struct bus pio, mmio;

static void setup(void)
{
    memset(&R, 0, sizeof(R));
    moatdev_init(&D, &mops, &R);
    bus_init(&pio);
    bus_init(&mmio);
    ck_assert_int_eq(bus_register(&pio, PORT_MOATDEV, MOATDEV_PIO_LEN, &moatdev_pio_ops, &D), 0);
    ck_assert_int_eq(bus_register(&mmio, LAYOUT_MOATDEV_MMIO, MOATDEV_MMIO_LEN, &moatdev_mmio_ops, &D), 0);
}
static void teardown(void) { moatdev_destroy(&D); }

static uint64_t le(const uint8_t *b, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}
static void put_le(uint8_t *b, unsigned n, uint64_t v)
{
    for (unsigned i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static void pio_out(uint16_t port, unsigned len, uint64_t v)
{
    uint8_t b[8];
    put_le(b, len, v);
    ck_assert_int_eq(bus_access(&pio, port, b, len, true), 0);
}
static uint64_t pio_in(uint16_t port, unsigned len)
{
    uint8_t b[8];
    memset(b, 0xcc, sizeof(b));
    ck_assert_int_eq(bus_access(&pio, port, b, len, false), 0);
    return le(b, len);
}
static void mmio_w(uint64_t off, unsigned len, uint64_t v)
{
    uint8_t b[8];
    put_le(b, len, v);
    ck_assert_int_eq(bus_access(&mmio, LAYOUT_MOATDEV_MMIO + off, b, len, true), 0);
}
static uint64_t mmio_r(uint64_t off, unsigned len)
{
    uint8_t b[8];
    memset(b, 0xcc, sizeof(b));
    ck_assert_int_eq(bus_access(&mmio, LAYOUT_MOATDEV_MMIO + off, b, len, false), 0);
    return le(b, len);
}

START_TEST(exit_status_port)
{
    pio_out(PORT_MOATDEV + MOATDEV_PORT_STATUS, 1, 3);
    pio_out(PORT_MOATDEV + MOATDEV_PORT_STATUS, 2, 0x1234);   /* low byte */
    pio_out(PORT_MOATDEV + MOATDEV_PORT_STATUS, 4, 0xdeadbeef);
    ck_assert_uint_eq(R.nstatus, 3);
    ck_assert_uint_eq(R.status[0], 3);
    ck_assert_uint_eq(R.status[1], 0x34);
    ck_assert_uint_eq(R.status[2], 0xef);
    ck_assert_uint_eq(R.nev, 0);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_STATUS, 1), 0);   /* write-only */
    ck_assert_uint_eq(R.nstatus, 3);
}
END_TEST

START_TEST(event_port)
{
    pio_out(PORT_MOATDEV + MOATDEV_PORT_EVENT, 1, MOATDEV_EV_INIT);
    pio_out(PORT_MOATDEV + MOATDEV_PORT_EVENT, 1, MOATDEV_EV_CMD);
    pio_out(PORT_MOATDEV + MOATDEV_PORT_EVENT, 1, 0x77);       /* passed on as is */
    ck_assert_uint_eq(R.nev, 3);
    ck_assert_uint_eq(R.ev[0], MOATDEV_EV_INIT);
    ck_assert_uint_eq(R.ev[1], MOATDEV_EV_CMD);
    ck_assert_uint_eq(R.ev[2], 0x77);
    ck_assert_uint_eq(R.nstatus, 0);
    /* only 8-bit writes (a 16-bit one at +1 is misaligned anyway) */
    pio_out(PORT_MOATDEV + MOATDEV_PORT_EVENT, 2, 0x0101);
    ck_assert_uint_eq(R.nev, 3);
    ck_assert_uint_eq(R.nstatus, 0);
}
END_TEST

START_TEST(pio_scratch_and_magic)
{
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_MAGIC, 4), MOATDEV_MAGIC);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 4), 0);
    pio_out(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 4, 0x89abcdef);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 4), 0x89abcdef);
    /* byte lanes: 8 and 16 bit pieces */
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_SCRATCH + 1, 1), 0xcd);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_SCRATCH + 2, 2), 0x89ab);
    pio_out(PORT_MOATDEV + MOATDEV_PORT_SCRATCH + 3, 1, 0x11);
    pio_out(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 2, 0x2233);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 4), 0x11ab2233);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_MAGIC + 2, 2), MOATDEV_MAGIC >> 16);
    /* magic is read-only */
    pio_out(PORT_MOATDEV + MOATDEV_PORT_MAGIC, 4, 0);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_MAGIC, 4), MOATDEV_MAGIC);
    ck_assert_uint_eq(D.pio_scratch, 0x11ab2233);
    ck_assert_uint_eq(D.mmio_scratch, 0);     /* separate registers */
    ck_assert_uint_eq(R.nstatus + R.nev, 0);
}
END_TEST

START_TEST(pio_junk_ignored)
{
    pio_out(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 4, 0x01020304);
    /* misaligned */
    pio_out(PORT_MOATDEV + MOATDEV_PORT_SCRATCH + 1, 2, 0xffff);
    pio_out(PORT_MOATDEV + MOATDEV_PORT_SCRATCH + 2, 4, 0xffffffff);
    pio_out(PORT_MOATDEV + 2, 2, 0xffff);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_SCRATCH + 1, 2), 0);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_MAGIC + 1, 4), 0);
    /* 8-byte port access does not exist on x86 */
    pio_out(PORT_MOATDEV + 8, 8, ~0ull);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + 8, 8), 0);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 4), 0x01020304);
    /* unassigned ports */
    for (unsigned p = 12; p < MOATDEV_PIO_LEN; p++) {
        pio_out(PORT_MOATDEV + p, 1, 0xff);
        ck_assert_uint_eq(pio_in(PORT_MOATDEV + p, 1), 0);
    }
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + 2, 1), 0);
    /* odd widths and offsets straight into the ops */
    uint8_t b[16];
    memset(b, 0xaa, sizeof(b));
    moatdev_pio_ops.read(&D, 4, b, 3);
    ck_assert_uint_eq(b[0], 0);
    ck_assert_uint_eq(b[2], 0);
    moatdev_pio_ops.write(&D, 4, b + 3, 3);
    moatdev_pio_ops.write(&D, 16, b, 1);
    moatdev_pio_ops.write(&D, UINT64_MAX, b, 1);
    moatdev_pio_ops.read(&D, UINT64_MAX - 3, b, 4);
    ck_assert_uint_eq(le(b, 4), 0);
    moatdev_pio_ops.write(&D, 0, b, 0);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 4), 0x01020304);
    ck_assert_uint_eq(R.nstatus, 0);
    ck_assert_uint_eq(R.nev, 0);
}
END_TEST

START_TEST(mmio_magic_and_scratch_each_width)
{
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_MAGIC, 4), MOATDEV_MAGIC);
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_MAGIC, 8), MOATDEV_MAGIC);   /* upper half 0 */
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_MAGIC, 1), MOATDEV_MAGIC & 0xff);
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_MAGIC + 2, 2), MOATDEV_MAGIC >> 16);
    static const unsigned widths[] = { 1, 2, 4, 8 };
    for (unsigned w = 0; w < 4; w++) {
        unsigned len = widths[w];
        uint64_t mask = len == 8 ? ~0ull : (1ull << (8 * len)) - 1;
        for (unsigned off = 0; off < 8; off += len) {
            uint64_t pattern = 0x0123456789abcdefull ^ ((uint64_t)(w * 8 + off) * 0x1111111111111111ull);
            mmio_w(MOATDEV_MMIO_SCRATCH, 8, 0);
            mmio_w(MOATDEV_MMIO_SCRATCH + off, len, pattern);
            ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_SCRATCH + off, len), pattern & mask);
            ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_SCRATCH, 8), (pattern & mask) << (8 * off));
        }
    }
    mmio_w(MOATDEV_MMIO_SCRATCH, 8, 0xfeedfacecafef00dull);
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_SCRATCH + 4, 4), 0xfeedfaceull);
    ck_assert_uint_eq(D.pio_scratch, 0);      /* separate from the port one */
    /* magic read-only */
    mmio_w(MOATDEV_MMIO_MAGIC, 8, 0);
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_MAGIC, 4), MOATDEV_MAGIC);
}
END_TEST

START_TEST(mmio_junk_ignored)
{
    mmio_w(MOATDEV_MMIO_SCRATCH, 8, 0x1122334455667788ull);
    /* misaligned */
    mmio_w(MOATDEV_MMIO_SCRATCH + 1, 2, 0xffff);
    mmio_w(MOATDEV_MMIO_SCRATCH + 4, 8, ~0ull);
    mmio_w(MOATDEV_MMIO_SCRATCH + 2, 4, ~0ull);
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_SCRATCH + 1, 2), 0);
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_SCRATCH + 4, 8), 0);
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_MAGIC + 1, 4), 0);
    /* the rest of the page */
    for (uint64_t off = 16; off < MOATDEV_MMIO_LEN; off += 8) {
        mmio_w(off, 8, ~0ull);
        ck_assert_uint_eq(mmio_r(off, 8), 0);
    }
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_LEN - 1, 1), 0);
    /* odd widths, out-of-window offsets straight into the ops */
    uint8_t b[16];
    memset(b, 0xaa, sizeof(b));
    moatdev_mmio_ops.read(&D, 8, b, 3);
    ck_assert_uint_eq(le(b, 3), 0);
    moatdev_mmio_ops.write(&D, 8, b + 3, 3);
    moatdev_mmio_ops.write(&D, 8, b, 16);
    moatdev_mmio_ops.read(&D, 8, b, 16);
    ck_assert_uint_eq(le(b, 8), 0);
    moatdev_mmio_ops.write(&D, MOATDEV_MMIO_LEN, b, 8);
    moatdev_mmio_ops.write(&D, UINT64_MAX - 7, b, 8);
    moatdev_mmio_ops.read(&D, UINT64_MAX - 7, b, 8);
    ck_assert_uint_eq(le(b, 8), 0);
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_SCRATCH, 8), 0x1122334455667788ull);
    ck_assert_uint_eq(R.nstatus + R.nev, 0);
}
END_TEST

START_TEST(two_instances_independent)
{
    struct moatdev d2;
    struct rec r2;
    memset(&r2, 0, sizeof(r2));
    moatdev_init(&d2, &mops, &r2);
    struct bus pio2;
    bus_init(&pio2);
    ck_assert_int_eq(bus_register(&pio2, PORT_MOATDEV, MOATDEV_PIO_LEN, &moatdev_pio_ops, &d2), 0);
    pio_out(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 4, 111);
    uint8_t b[4];
    put_le(b, 4, 222);
    ck_assert_int_eq(bus_access(&pio2, PORT_MOATDEV + MOATDEV_PORT_SCRATCH, b, 4, true), 0);
    b[0] = 9;
    ck_assert_int_eq(bus_access(&pio2, PORT_MOATDEV + MOATDEV_PORT_STATUS, b, 1, true), 0);
    ck_assert_uint_eq(pio_in(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 4), 111);
    ck_assert_int_eq(bus_access(&pio2, PORT_MOATDEV + MOATDEV_PORT_SCRATCH, b, 4, false), 0);
    ck_assert_uint_eq(le(b, 4), 222);
    ck_assert_uint_eq(R.nstatus, 0);
    ck_assert_uint_eq(r2.nstatus, 1);
    ck_assert_uint_eq(r2.status[0], 9);
    moatdev_mmio_ops.write(&d2, MOATDEV_MMIO_SCRATCH, (const uint8_t *)"\1\2\3\4\5\6\7\10", 8);
    ck_assert_uint_eq(mmio_r(MOATDEV_MMIO_SCRATCH, 8), 0);
    ck_assert_uint_eq(d2.mmio_scratch, 0x0807060504030201ull);
    moatdev_destroy(&d2);
}
END_TEST

START_TEST(null_ops_are_fine)
{
    struct moatdev d2;
    moatdev_init(&d2, NULL, NULL);
    uint8_t b[4] = { 1, 2, 3, 4 };
    moatdev_pio_ops.write(&d2, MOATDEV_PORT_STATUS, b, 1);
    moatdev_pio_ops.write(&d2, MOATDEV_PORT_EVENT, b, 1);
    moatdev_pio_ops.write(&d2, MOATDEV_PORT_SCRATCH, b, 4);
    ck_assert_uint_eq(d2.pio_scratch, 0x04030201);
    moatdev_destroy(&d2);
}
END_TEST

/* Snapshots (SNAP_DEV_MOATDEV): the scratch registers save and load into
 * a fresh device exactly (what the guest reads back), and a record with
 * its padding set is refused with a reason. */
START_TEST(snapshot_state)
{
    pio_out(PORT_MOATDEV + MOATDEV_PORT_SCRATCH, 4, 0xdeadbeef);
    mmio_w(MOATDEV_MMIO_SCRATCH, 8, 0x0123456789abcdefull);
    struct moatdev_state a, b;
    memset(&b, 0xcc, sizeof b);
    moatdev_save(&D, &a);
    const char *why = NULL;
    ck_assert_int_eq(moatdev_state_check(&a, &why), 0);
    ck_assert_uint_eq(a.pio_scratch, 0xdeadbeef);
    ck_assert_uint_eq(a.mmio_scratch, 0x0123456789abcdefull);
    ck_assert_uint_eq(a.pad, 0);
    struct moatdev d2;
    struct rec r2;
    memset(&r2, 0, sizeof r2);
    moatdev_init(&d2, &mops, &r2);
    moatdev_load(&d2, &a);
    moatdev_save(&d2, &b);
    ck_assert_mem_eq(&a, &b, sizeof a);
    /* what the guest reads back from the loaded one */
    uint8_t v[8];
    moatdev_pio_ops.read(&d2, MOATDEV_PORT_SCRATCH, v, 4);
    ck_assert_uint_eq(le(v, 4), 0xdeadbeef);
    moatdev_mmio_ops.read(&d2, MOATDEV_MMIO_SCRATCH, v, 8);
    ck_assert_uint_eq(le(v, 8), 0x0123456789abcdefull);
    ck_assert_uint_eq(r2.nstatus + r2.nev, 0);
    moatdev_destroy(&d2);
    /* malformed: the padding */
    static const uint32_t pads[] = { 1, 0x80000000u, ~0u };
    for (size_t i = 0; i < sizeof pads / sizeof pads[0]; i++) {
        struct moatdev_state m = a;
        m.pad = pads[i];
        why = NULL;
        ck_assert_int_eq(moatdev_state_check(&m, &why), -EINVAL);
        ck_assert_ptr_nonnull(why);
        ck_assert_msg(strstr(why, "padding"), "%s", why);
    }
    /* any register value is fine */
    struct moatdev_state ok = { .pio_scratch = ~0u, .mmio_scratch = ~0ull };
    ck_assert_int_eq(moatdev_state_check(&ok, NULL), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("moatdev");
    TCase *tc = tcase_create("moatdev");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, exit_status_port);
    tcase_add_test(tc, event_port);
    tcase_add_test(tc, pio_scratch_and_magic);
    tcase_add_test(tc, pio_junk_ignored);
    tcase_add_test(tc, mmio_magic_and_scratch_each_width);
    tcase_add_test(tc, mmio_junk_ignored);
    tcase_add_test(tc, two_instances_independent);
    tcase_add_test(tc, null_ops_are_fine);
    tcase_add_test(tc, snapshot_state);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
