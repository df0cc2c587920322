/* Signed /files URLs (vmm/api/e2b/envd_sign.c): the signatures the e2b
 * SDK's getSignature makes (vectors from sha256 + base64 computed apart),
 * and the check's answers: good, expired, wrong, malformed expiration. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "vmm/api/e2b/envd_sign.h"

START_TEST(sign_vectors)
{
    char s[ENVD_SIG_MAX];
    envd_sign("/home/user/a.txt", "read", "", "tok-a", -1, s);
    ck_assert_str_eq(s, "v1_2zDeUVYyWGvrRkE/yPripZIVw+MR1uY/PNokmuROGIY");
    envd_sign("/x", "write", "user", "secret", 1700000000, s);
    ck_assert_str_eq(s, "v1_eFYylADX6YqQK5Bm5/JiUm56hF7NvsqeXUiVG5ohoj4");
    envd_sign("", "", "", "", 0, s);     /* "::::0": an expiration of 0 is one */
    ck_assert_str_eq(s, "v1_EdqbOL+s66OyMaMCsmH4hnn1FpJ3wXv466i+DFs8F1o");
}
END_TEST

START_TEST(check_answers)
{
    const char *good = "v1_eFYylADX6YqQK5Bm5/JiUm56hF7NvsqeXUiVG5ohoj4";
    ck_assert_int_eq(envd_sign_check(good, "1700000000", "/x", "write", "user", "secret", 1700000000), 0);
    ck_assert_int_eq(envd_sign_check(good, "1700000000", "/x", "write", "user", "secret", 1700000001), -ETIMEDOUT);
    /* leading zeros name the same second, as envd's integer parse does */
    ck_assert_int_eq(envd_sign_check(good, "01700000000", "/x", "write", "user", "secret", 1), 0);
    ck_assert_int_eq(envd_sign_check(good, "1700000000", "/x", "read", "user", "secret", 1), -EACCES);
    ck_assert_int_eq(envd_sign_check(good, "1700000000", "/y", "write", "user", "secret", 1), -EACCES);
    ck_assert_int_eq(envd_sign_check(good, "1700000000", "/x", "write", "", "secret", 1), -EACCES);
    ck_assert_int_eq(envd_sign_check(good, "1700000000", "/x", "write", "user", "other", 1), -EACCES);
    ck_assert_int_eq(envd_sign_check(good, NULL, "/x", "write", "user", "secret", 1), -EACCES);
    ck_assert_int_eq(envd_sign_check(good, "1700000001", "/x", "write", "user", "secret", 1), -EACCES);
    const char *noexp = "v1_2zDeUVYyWGvrRkE/yPripZIVw+MR1uY/PNokmuROGIY";
    ck_assert_int_eq(envd_sign_check(noexp, NULL, "/home/user/a.txt", "read", "", "tok-a", 4000000000), 0);
    ck_assert_int_eq(envd_sign_check("v1_2zDeUVYyWGvrRkE/yPripZIVw+MR1uY/PNokmuROGIZ", NULL, "/home/user/a.txt",
                                     "read", "", "tok-a", 0), -EACCES);
    ck_assert_int_eq(envd_sign_check("v1_2zDeUVYyWGvrRkE/yPripZIVw+MR1uY/PNokmuROGIY=", NULL, "/home/user/a.txt",
                                     "read", "", "tok-a", 0), -EACCES);        /* padded: not what the SDK sends */
    ck_assert_int_eq(envd_sign_check("v1_", NULL, "/home/user/a.txt", "read", "", "tok-a", 0), -EACCES);
    char longsig[200];
    memset(longsig, 'A', sizeof longsig - 1);
    longsig[sizeof longsig - 1] = 0;
    ck_assert_int_eq(envd_sign_check(longsig, NULL, "/a", "read", "", "t", 0), -EACCES);
    ck_assert_int_eq(envd_sign_check(NULL, NULL, "/a", "read", "", "t", 0), -EINVAL);
    ck_assert_int_eq(envd_sign_check("", NULL, "/a", "read", "", "t", 0), -EINVAL);
    static const char *const bad_exp[] = { "", "-1", "1e9", " 1", "1 ", "0x10", "1234567890123456789" };
    for (size_t i = 0; i < sizeof bad_exp / sizeof bad_exp[0]; i++)
        ck_assert_msg(envd_sign_check(good, bad_exp[i], "/x", "write", "user", "secret", 1) == -EINVAL, "%s",
                      bad_exp[i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("envd_sign");
    TCase *tc = tcase_create("sign");
    tcase_add_test(tc, sign_vectors);
    tcase_add_test(tc, check_answers);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
