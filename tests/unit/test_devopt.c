/* Device option strings: every well-formed and malformed case. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/core/devopt.h"

static struct devopts o;
static char why[160];

START_TEST(well_formed)
{
    ck_assert_int_eq(devopt_parse(NULL, &o, why, sizeof why), 0);
    ck_assert_uint_eq(o.n, 0);
    ck_assert_int_eq(devopt_parse("", &o, why, sizeof why), 0);
    ck_assert_uint_eq(o.n, 0);
    ck_assert_int_eq(devopt_parse("uds=/tmp/v.sock,cid=7,ro,x_y-2=a=b", &o, why, sizeof why), 0);
    ck_assert_uint_eq(o.n, 4);
    ck_assert_str_eq(devopt_get(&o, "uds"), "/tmp/v.sock");
    ck_assert_str_eq(devopt_get(&o, "cid"), "7");
    ck_assert_str_eq(devopt_get(&o, "ro"), "");             /* a flag */
    ck_assert_ptr_null(o.o[2].val);
    ck_assert_str_eq(devopt_get(&o, "x_y-2"), "a=b");       /* the first '=' splits */
    ck_assert_ptr_null(devopt_get(&o, "missing"));
    const char *ok[] = { "uds", "cid", "ro", "x_y-2", NULL };
    ck_assert_int_eq(devopt_only(&o, ok, why, sizeof why), 0);
    const char *fewer[] = { "uds", "cid", NULL };
    ck_assert_int_eq(devopt_only(&o, fewer, why, sizeof why), -EINVAL);
    ck_assert_str_eq(why, "unknown option 'ro'");
}
END_TEST

START_TEST(malformed)
{
    static const struct { const char *s; int r; const char *why; } bad[] = {
        { ",", -EINVAL, "an empty option" },
        { "a,,b", -EINVAL, "an empty option" },
        { "a,", -EINVAL, "an empty option" },
        { ",a", -EINVAL, "an empty option" },
        { "=x", -EINVAL, "option '': a key is a-z, 0-9, '_' or '-'" },
        { "Uds=x", -EINVAL, "option 'Uds': a key is a-z, 0-9, '_' or '-'" },
        { "a b=x", -EINVAL, "option 'a b': a key is a-z, 0-9, '_' or '-'" },
        { "uds=", -EINVAL, "option 'uds=' without a value" },
        { "ro,ro", -EINVAL, "option 'ro' given twice" },
        { "a=1,a=2", -EINVAL, "option 'a' given twice" },
        { "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", -E2BIG, "more than 16 options" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        ck_assert_msg(devopt_parse(bad[i].s, &o, why, sizeof why) == bad[i].r, "'%s'", bad[i].s);
        ck_assert_str_eq(why, bad[i].why);
    }
    ck_assert_int_eq(devopt_parse("a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p", &o, why, sizeof why), 0);  /* 16 */
    char *big = malloc(DEVOPT_LEN_MAX + 2);
    memset(big, 'a', DEVOPT_LEN_MAX + 1);
    big[DEVOPT_LEN_MAX + 1] = 0;
    ck_assert_int_eq(devopt_parse(big, &o, why, sizeof why), -E2BIG);
    big[DEVOPT_LEN_MAX] = 0;
    ck_assert_int_eq(devopt_parse(big, &o, why, sizeof why), 0);
    free(big);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("devopt");
    TCase *tc = tcase_create("devopt");
    tcase_add_test(tc, well_formed);
    tcase_add_test(tc, malformed);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
