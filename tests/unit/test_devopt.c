/* Device option strings: every well-formed and malformed case. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "devices/virtio/devopt.h"

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
    /* a quoted value holds ',' */
    ck_assert_int_eq(devopt_parse("tap=t0,policy=\"default deny; allow 10.0.0.0/8,port=80\",mmds", &o, why, sizeof why), 0);
    ck_assert_uint_eq(o.n, 3);
    ck_assert_str_eq(devopt_get(&o, "policy"), "default deny; allow 10.0.0.0/8,port=80");
    ck_assert_str_eq(devopt_get(&o, "mmds"), "");
    ck_assert_int_eq(devopt_parse("a=x\"y,b=\"z\"", &o, why, sizeof why), 0);   /* a '"' inside is literal */
    ck_assert_str_eq(devopt_get(&o, "a"), "x\"y");
    ck_assert_str_eq(devopt_get(&o, "b"), "z");
}
END_TEST

START_TEST(malformed)
{
    static const struct { const char *s; int r; const char *why; } bad[] = {
        { ",", -EINVAL, "an empty option" },
        { "a,,b", -EINVAL, "an empty option" },
        { "a,", -EINVAL, "an empty option" },
        { ",a", -EINVAL, "an empty option" },
        { "p=\"a,b", -EINVAL, "option 'p=\"a,b': a quoted value must end with '\"' before ',' or the end" },
        { "p=\"a\"b", -EINVAL, "option 'p=\"a\"b': a quoted value must end with '\"' before ',' or the end" },
        { "p=\"\"", -EINVAL, "option 'p=' without a value" },
        { "=x", -EINVAL, "option '': a key is 1 to 32 of a-z, 0-9, '_' or '-'" },
        { "Uds=x", -EINVAL, "option 'Uds': a key is 1 to 32 of a-z, 0-9, '_' or '-'" },
        { "a b=x", -EINVAL, "option 'a b': a key is 1 to 32 of a-z, 0-9, '_' or '-'" },
        { "uds=", -EINVAL, "option 'uds=' without a value" },
        { "ro,ro", -EINVAL, "option 'ro' given twice" },
        { "a=1,a=2", -EINVAL, "option 'a' given twice" },
        { "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", -E2BIG, "more than 16 options" },
        { "abcdefghijabcdefghijabcdefghijabc=1", -EINVAL,
          "option 'abcdefghijabcdefghijabcdefghijabc': a key is 1 to 32 of a-z, 0-9, '_' or '-'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        ck_assert_msg(devopt_parse(bad[i].s, &o, why, sizeof why) == bad[i].r, "'%s'", bad[i].s);
        ck_assert_str_eq(why, bad[i].why);
    }
    ck_assert_int_eq(devopt_parse("a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p", &o, why, sizeof why), 0);  /* 16 */
    char *big = malloc(DEVOPT_LEN_MAX + 2);
    memset(big, 'a', DEVOPT_LEN_MAX + 1);
    big[1] = '=';
    big[DEVOPT_LEN_MAX + 1] = 0;
    ck_assert_int_eq(devopt_parse(big, &o, why, sizeof why), -E2BIG);
    big[DEVOPT_LEN_MAX] = 0;
    ck_assert_int_eq(devopt_parse(big, &o, why, sizeof why), 0);
    free(big);
}
END_TEST

START_TEST(set_del_copy)
{
    devopt_init(&o);
    ck_assert_int_eq(devopt_set(&o, "path", "/a,b/c.img"), 0);     /* ',' is fine here */
    ck_assert_int_eq(devopt_set(&o, "ro", NULL), 0);
    ck_assert_int_eq(devopt_set(&o, "id", "x"), 0);
    ck_assert_str_eq(devopt_get(&o, "path"), "/a,b/c.img");
    ck_assert_str_eq(devopt_get(&o, "ro"), "");
    ck_assert_int_eq(devopt_set(&o, "path", "/other"), 0);         /* replaced, not added */
    ck_assert_uint_eq(o.n, 3);
    ck_assert_str_eq(devopt_get(&o, "path"), "/other");
    devopt_del(&o, "ro");
    devopt_del(&o, "missing");
    ck_assert_uint_eq(o.n, 2);
    ck_assert_ptr_null(devopt_get(&o, "ro"));
    ck_assert_str_eq(devopt_get(&o, "id"), "x");
    static struct devopts c;
    ck_assert_int_eq(devopt_copy(&c, &o), 0);
    ck_assert_uint_eq(c.n, 2);
    ck_assert_str_eq(devopt_get(&c, "path"), "/other");
    ck_assert_ptr_ne(devopt_get(&c, "path"), devopt_get(&o, "path"));   /* its own bytes */
    /* refusals */
    ck_assert_int_eq(devopt_set(&o, "Bad", "1"), -EINVAL);
    ck_assert_int_eq(devopt_set(&o, "", "1"), -EINVAL);
    ck_assert_int_eq(devopt_set(&o, NULL, "1"), -EINVAL);
    ck_assert_int_eq(devopt_set(&o, "k", ""), -EINVAL);
    char *big = malloc(DEVOPT_LEN_MAX + 2);
    memset(big, 'v', DEVOPT_LEN_MAX + 1);
    big[DEVOPT_LEN_MAX + 1] = 0;
    ck_assert_int_eq(devopt_set(&o, "k", big), -EINVAL);
    big[DEVOPT_LEN_MAX] = 0;
    /* the buffer fills: replacing a value over and over ends in -E2BIG, never an overrun */
    int r = 0;
    for (int k = 0; k < 10 && r == 0; k++)
        r = devopt_set(&o, "k", big);
    ck_assert_int_eq(r, -E2BIG);
    free(big);
    devopt_init(&o);
    char key[8];
    for (int k = 0; k < DEVOPT_MAX; k++) {
        snprintf(key, sizeof key, "k%d", k);
        ck_assert_int_eq(devopt_set(&o, key, NULL), 0);
    }
    ck_assert_int_eq(devopt_set(&o, "one-more", NULL), -E2BIG);
}
END_TEST

/* The snapshot form: a round trip, then every malformed record refused. */
START_TEST(record)
{
    static struct devopts a, b;
    static uint8_t buf[DEVOPT_BUF + 256];
    const char *w = NULL;
    devopt_init(&a);
    ck_assert_int_eq(devopt_set(&a, "path", "/img,with,commas"), 0);
    ck_assert_int_eq(devopt_set(&a, "ro", NULL), 0);
    ck_assert_int_eq(devopt_set(&a, "overlay", "/o"), 0);
    long n = devopt_encode(&a, buf, sizeof buf);
    ck_assert_int_eq(n, 1 + (4 + 4 + 16) + (4 + 2 + 0) + (4 + 7 + 2));
    ck_assert_int_eq(devopt_decode(buf, (size_t)n, &b, &w), 0);
    ck_assert_uint_eq(b.n, 3);
    ck_assert_str_eq(devopt_get(&b, "path"), "/img,with,commas");
    ck_assert_str_eq(devopt_get(&b, "ro"), "");
    ck_assert_ptr_null(b.o[1].val);
    ck_assert_str_eq(devopt_get(&b, "overlay"), "/o");
    /* no options at all is a record too */
    devopt_init(&a);
    ck_assert_int_eq(devopt_encode(&a, buf, sizeof buf), 1);
    ck_assert_int_eq(devopt_decode(buf, 1, &b, &w), 0);
    ck_assert_uint_eq(b.n, 0);
    ck_assert_int_eq(devopt_encode(&a, buf, 0), -ENOSPC);
    /* every truncation and a byte too many of a good record */
    devopt_init(&a);
    ck_assert_int_eq(devopt_set(&a, "uds", "/tmp/v.sock"), 0);
    ck_assert_int_eq(devopt_set(&a, "cid", "7"), 0);
    n = devopt_encode(&a, buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(devopt_encode(&a, buf, (size_t)n - 1), -ENOSPC);
    for (long k = 0; k < n; k++) {
        w = NULL;
        ck_assert_int_eq(devopt_decode(buf, (size_t)k, &b, &w), -EINVAL);
        ck_assert_ptr_nonnull(w);
    }
    buf[n] = 0;
    ck_assert_int_eq(devopt_decode(buf, (size_t)n + 1, &b, &w), -EINVAL);
    ck_assert_str_eq(w, "device options: bytes after the last option");
    /* forged fields, one at a time: option 0 is "uds" at offset 1 */
    static const struct { size_t off; uint8_t val; const char *why; } bad[] = {
        { 0, DEVOPT_MAX + 1, "device options: more options than a device takes" },
        { 0, 3, "device options: an option past the end of the record" },
        { 1, 0, "device options: a malformed key" },               /* key length 0 */
        { 1, 40, "device options: an option past the end of the record" },
        { 2, 2, "device options: unknown option flags" },
        { 2, 0, "device options: a flag with a value" },
        { 3, 0, "device options: an empty, over-long or NUL-holding value" },   /* value length 11 -> 0 */
        { 3, 0xff, "device options: an option past the end of the record" },
        { 5, 'U', "device options: a malformed key" },
        { 8, 0, "device options: an empty, over-long or NUL-holding value" },   /* NUL in the value */
    };
    static uint8_t f[256];
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memcpy(f, buf, (size_t)n);
        f[bad[k].off] = bad[k].val;
        w = NULL;
        ck_assert_msg(devopt_decode(f, (size_t)n, &b, &w) == -EINVAL, "case %zu", k);
        ck_assert_msg(w && !strcmp(w, bad[k].why), "case %zu: %s", k, w ? w : "(none)");
    }
    /* a key given twice: the second option renamed to the first */
    memcpy(f, buf, (size_t)n);
    size_t second = 1 + 4 + 3 + 11;
    f[second] = 3;
    memcpy(f + second + 4, "uds", 3);
    ck_assert_int_eq(devopt_decode(f, (size_t)n, &b, &w), -EINVAL);
    ck_assert_str_eq(w, "device options: a key given twice");
    /* an empty value with the value flag */
    uint8_t e[] = { 1, 1, 1, 0, 0, 'k' };
    ck_assert_int_eq(devopt_decode(e, sizeof e, &b, &w), -EINVAL);
    ck_assert_str_eq(w, "device options: an empty, over-long or NUL-holding value");
    /* a value over DEVOPT_LEN_MAX */
    static uint8_t huge[8 + DEVOPT_LEN_MAX + 1];
    huge[0] = 1; huge[1] = 1; huge[2] = 1;
    huge[3] = (uint8_t)((DEVOPT_LEN_MAX + 1) & 0xff); huge[4] = (uint8_t)((DEVOPT_LEN_MAX + 1) >> 8);
    huge[5] = 'k';
    memset(huge + 6, 'v', DEVOPT_LEN_MAX + 1);
    ck_assert_int_eq(devopt_decode(huge, 6 + DEVOPT_LEN_MAX + 1, &b, &w), -EINVAL);
    ck_assert_str_eq(w, "device options: an empty, over-long or NUL-holding value");
    ck_assert_int_eq(devopt_decode(NULL, 0, &b, &w), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("devopt");
    TCase *tc = tcase_create("devopt");
    tcase_add_test(tc, well_formed);
    tcase_add_test(tc, malformed);
    tcase_add_test(tc, set_del_copy);
    tcase_add_test(tc, record);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
