/* Big-endian loads and stores (vmm/base/bytes.h) on known byte patterns,
 * at odd alignments, and round trips. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/base/bytes.h"

static const uint8_t pat[9] = { 0xaa, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef };

START_TEST(loads)
{
    ck_assert_uint_eq(be16_load(pat + 1), 0x0123);
    ck_assert_uint_eq(be32_load(pat + 1), 0x01234567u);
    ck_assert_uint_eq(be64_load(pat + 1), 0x0123456789abcdefull);
    ck_assert_uint_eq(be16_load(pat + 7), 0xcdef);           /* the high bit set */
    ck_assert_uint_eq(be32_load(pat + 5), 0x89abcdefu);
    ck_assert_uint_eq(be64_load(pat), 0xaa0123456789abcdull);
}
END_TEST

START_TEST(stores)
{
    uint8_t b[9];
    memset(b, 0x5a, sizeof b);
    be16_store(b + 1, 0x0123);
    ck_assert(memcmp(b, (const uint8_t[]){ 0x5a, 0x01, 0x23, 0x5a }, 4) == 0);
    memset(b, 0x5a, sizeof b);
    be32_store(b + 1, 0x89abcdefu);
    ck_assert(memcmp(b, (const uint8_t[]){ 0x5a, 0x89, 0xab, 0xcd, 0xef, 0x5a }, 6) == 0);
    memset(b, 0x5a, sizeof b);
    be64_store(b + 1, 0x0123456789abcdefull);
    ck_assert(memcmp(b + 1, pat + 1, 8) == 0);
    ck_assert_uint_eq(b[0], 0x5a);
}
END_TEST

START_TEST(round_trips)
{
    uint8_t b[8];
    for (uint64_t v = 1; v; v = v * 3 + 0x9e3779b97f4a7c15ull) {
        be64_store(b, v);
        ck_assert_uint_eq(be64_load(b), v);
        be32_store(b, (uint32_t)v);
        ck_assert_uint_eq(be32_load(b), (uint32_t)v);
        be16_store(b, (uint16_t)v);
        ck_assert_uint_eq(be16_load(b), (uint16_t)v);
        if (v > (1ull << 62))
            break;
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bytes");
    TCase *tc = tcase_create("bytes");
    tcase_add_test(tc, loads);
    tcase_add_test(tc, stores);
    tcase_add_test(tc, round_trips);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
