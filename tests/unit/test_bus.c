#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/base/bus.h"
#include "vmm/base/gmem.h"

struct rec { uint64_t off; uint8_t data[8]; uint32_t len; int writes, reads; };

static void rec_read(void *o, uint64_t off, uint8_t *d, uint32_t len)
{
    struct rec *r = o; r->reads++; r->off = off;
    for (uint32_t i = 0; i < len; i++) d[i] = (uint8_t)(0x10 + off + i);
}
static void rec_write(void *o, uint64_t off, const uint8_t *d, uint32_t len)
{
    struct rec *r = o; r->writes++; r->off = off; r->len = len; memcpy(r->data, d, len);
}
static const struct bus_ops rec_ops = { rec_read, rec_write };

START_TEST(dispatch_by_range)
{
    struct bus b; struct rec a = {0}, c = {0};
    bus_init(&b);
    ck_assert_int_eq(bus_register(&b, 0x3f8, 8, &rec_ops, &a), 0);
    ck_assert_int_eq(bus_register(&b, 0x60, 1, &rec_ops, &c), 0);
    uint8_t v = 0x41;
    ck_assert_int_eq(bus_access(&b, 0x3f8, &v, 1, true), 0);
    ck_assert_int_eq(a.writes, 1); ck_assert_uint_eq(a.off, 0); ck_assert_uint_eq(a.data[0], 0x41);
    uint8_t r[2];
    ck_assert_int_eq(bus_access(&b, 0x3fd, r, 2, false), 0);
    ck_assert_uint_eq(a.off, 5); ck_assert_uint_eq(r[0], 0x15); ck_assert_uint_eq(r[1], 0x16);
    ck_assert_int_eq(bus_access(&b, 0x60, &v, 1, false), 0);
    ck_assert_int_eq(c.reads, 1);
}
END_TEST

START_TEST(unmapped_and_straddling)
{
    struct bus b; struct rec a = {0};
    bus_init(&b);
    ck_assert_int_eq(bus_register(&b, 0x100, 4, &rec_ops, &a), 0);
    uint8_t r[4] = {0};
    ck_assert_int_eq(bus_access(&b, 0x200, r, 2, false), -ENOENT);
    ck_assert_uint_eq(r[0], 0xff);
    /* straddles the end of the range */
    ck_assert_int_eq(bus_access(&b, 0x103, r, 2, true), -ENOENT);
    ck_assert_int_eq(bus_access(&b, 0xff, r, 1, true), -ENOENT);
    ck_assert_int_eq(a.writes, 0);
    ck_assert_int_eq(bus_access(&b, 0x100, r, 0, true), -ENOENT);
}
END_TEST

START_TEST(register_rejects_overlap_and_overflow)
{
    struct bus b; struct rec a = {0};
    bus_init(&b);
    ck_assert_int_eq(bus_register(&b, 0x100, 0x10, &rec_ops, &a), 0);
    ck_assert_int_eq(bus_register(&b, 0x10f, 1, &rec_ops, &a), -EEXIST);
    ck_assert_int_eq(bus_register(&b, 0xf0, 0x11, &rec_ops, &a), -EEXIST);
    ck_assert_int_eq(bus_register(&b, 0x110, 1, &rec_ops, &a), 0);
    ck_assert_int_eq(bus_register(&b, UINT64_MAX, 2, &rec_ops, &a), -EINVAL);
    ck_assert_int_eq(bus_register(&b, 0x200, 0, &rec_ops, &a), -EINVAL);
    ck_assert_int_eq(bus_register(&b, 0x200, 1, NULL, &a), -EINVAL);
    for (unsigned i = b.n; i < BUS_MAX_DEVS; i++)
        ck_assert_int_eq(bus_register(&b, 0x1000 + i * 16, 16, &rec_ops, &a), 0);
    ck_assert_int_eq(bus_register(&b, 0x9000, 1, &rec_ops, &a), -ENOSPC);
}
END_TEST

START_TEST(two_buses_are_independent)
{
    struct bus b1, b2; struct rec a = {0}, c = {0};
    bus_init(&b1); bus_init(&b2);
    ck_assert_int_eq(bus_register(&b1, 0x3f8, 8, &rec_ops, &a), 0);
    ck_assert_int_eq(bus_register(&b2, 0x3f8, 8, &rec_ops, &c), 0);
    uint8_t v = 1;
    bus_access(&b2, 0x3f8, &v, 1, true);
    ck_assert_int_eq(a.writes, 0); ck_assert_int_eq(c.writes, 1);
}
END_TEST

START_TEST(gmem_bounds)
{
    uint8_t lo[4096], hi[4096];
    struct gmem m = { .n = 2 };
    m.r[0] = (struct gmem_region){ 0, sizeof lo, lo };
    m.r[1] = (struct gmem_region){ 0x100000000ull, sizeof hi, hi };
    ck_assert_ptr_eq(gmem_ptr(&m, 0, 4096), lo);
    ck_assert_ptr_null(gmem_ptr(&m, 1, 4096));
    ck_assert_ptr_null(gmem_ptr(&m, 4096, 1));
    ck_assert_ptr_eq(gmem_ptr(&m, 0x100000010ull, 16), hi + 16);
    ck_assert_ptr_null(gmem_ptr(&m, UINT64_MAX - 1, 4));
    ck_assert_ptr_null(gmem_ptr(&m, 0xfff, 0x100000000ull));
    uint32_t x = 0xdeadbeef, y = 0;
    ck_assert_int_eq(gmem_write(&m, 100, &x, 4), 0);
    ck_assert_int_eq(gmem_read(&m, 100, &y, 4), 0);
    ck_assert_uint_eq(y, 0xdeadbeef);
    ck_assert_int_eq(gmem_read(&m, 4094, &y, 4), -EFAULT);
    ck_assert_uint_eq(gmem_total(&m), 8192);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bus");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, dispatch_by_range);
    tcase_add_test(tc, unmapped_and_straddling);
    tcase_add_test(tc, register_rejects_overlap_and_overflow);
    tcase_add_test(tc, two_buses_are_independent);
    tcase_add_test(tc, gmem_bounds);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
