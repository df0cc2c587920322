/* Image references (vmm/image/ref.c): Docker's normalisation, every part's
 * charset and length rules, and the canonical form. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/image/ref.h"

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

START_TEST(normalised)
{
    static const struct { const char *in, *canon, *host; } c[] = {
        { "python:3.12-slim", "docker.io/library/python:3.12-slim", "registry-1.docker.io" },
        { "python", "docker.io/library/python:latest", "registry-1.docker.io" },
        { "user/app", "docker.io/user/app:latest", "registry-1.docker.io" },
        { "docker.io/python", "docker.io/library/python:latest", "registry-1.docker.io" },
        { "index.docker.io/user/app:1", "docker.io/user/app:1", "registry-1.docker.io" },
        { "host:5000/ns/name:tag", "host:5000/ns/name:tag", "host:5000" },
        { "localhost/app", "localhost/app:latest", "localhost" },
        { "127.0.0.1:5000/a/b/c", "127.0.0.1:5000/a/b/c:latest", "127.0.0.1:5000" },
        { "ghcr.io/o/r:v1.2_3-x", "ghcr.io/o/r:v1.2_3-x", "ghcr.io" },
        { "Example.COM/x", "Example.COM/x:latest", "Example.COM" },
        { "[::1]:5000/app", "[::1]:5000/app:latest", "[::1]:5000" },
        { "name@sha256:" HEX64, "docker.io/library/name@sha256:" HEX64, "registry-1.docker.io" },
        { "name:tag@sha256:" HEX64, "docker.io/library/name:tag@sha256:" HEX64, "registry-1.docker.io" },
        { "a/b__c-d--e.f_g", "docker.io/a/b__c-d--e.f_g:latest", "registry-1.docker.io" },
        { "Host/app", "Host/app:latest", "Host" },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        struct img_ref r;
        struct img_err err = { 0 };
        char buf[IMG_REF_MAX + 100];
        ck_assert_msg(img_ref_parse(c[i].in, &r, &err) == 0, "%s: %s", c[i].in, err.msg);
        ck_assert_int_eq(img_ref_format(&r, buf, sizeof buf), 0);
        ck_assert_str_eq(buf, c[i].canon);
        ck_assert_str_eq(img_ref_api_host(&r), c[i].host);
        /* the canonical form parses to itself */
        struct img_ref r2;
        char buf2[sizeof buf];
        ck_assert_int_eq(img_ref_parse(buf, &r2, &err), 0);
        ck_assert_int_eq(img_ref_format(&r2, buf2, sizeof buf2), 0);
        ck_assert_str_eq(buf, buf2);
    }
}
END_TEST

START_TEST(parts)
{
    struct img_ref r;
    ck_assert_int_eq(img_ref_parse("python@sha256:" HEX64, &r, NULL), 0);
    ck_assert_str_eq(r.tag, "");
    ck_assert_str_eq(r.digest, "sha256:" HEX64);
    ck_assert_str_eq(r.repo, "library/python");
    ck_assert_int_eq(img_ref_parse("host:5000/x", &r, NULL), 0);
    ck_assert_str_eq(r.registry, "host:5000");
    ck_assert_str_eq(r.tag, "latest");
    char small[10];
    ck_assert_int_eq(img_ref_format(&r, small, sizeof small), -ENAMETOOLONG);
}
END_TEST

START_TEST(malformed)
{
    static const struct { const char *in, *why; } c[] = {
        { "", "empty" },
        { "Python", "lowercase" },
        { "user/App", "lowercase" },
        { "a//b", "bad path component" },
        { "a/", "ends with '/'" },
        { "-a", "bad path component" },
        { "a-", "bad path component" },
        { "a..b", "bad path component" },
        { "a___b", "bad path component" },
        { "a._b", "bad path component" },
        { "a:", "bad tag" },
        { "a:-x", "bad tag" },
        { "a:.x", "bad tag" },
        { "a:x y", "bad tag" },
        { "a@sha256:abc", "bad digest" },
        { "a@sha512:" HEX64 HEX64, "bad digest" },
        { "a@sha256:" "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef", "bad digest" },
        { "a@", "bad digest" },
        { "@sha256:" HEX64, "no repository" },
        { ":tag", "no repository" },
        { HEX64, "is an ID" },
        { "host:port/a", "bad registry host" },
        { "host:123456/a", "bad registry host" },
        { "-host.com/a", "bad registry host" },
        { "ho_st.com/a", "bad registry host" },
        { "host./a", "bad registry host" },
        { "[::1/a", "bad registry host" },
        { "a/b c", "bad path component" },
        { "a\n", "bad path component" },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        struct img_ref r;
        struct img_err err = { 0 };
        ck_assert_msg(img_ref_parse(c[i].in, &r, &err) == -EINVAL, "%s parsed", c[i].in);
        ck_assert_int_eq(err.code, -EINVAL);
        ck_assert_msg(strstr(err.msg, c[i].why), "%s: %s", c[i].in, err.msg);
    }
}
END_TEST

START_TEST(lengths)
{
    char tag[200], name[600];
    struct img_ref r;
    struct img_err err = { 0 };
    memset(tag, 'a', 128);
    snprintf(tag + 128, sizeof tag - 128, "%s", "");
    snprintf(name, sizeof name, "x:%s", tag);
    ck_assert_int_eq(img_ref_parse(name, &r, NULL), 0);
    snprintf(name, sizeof name, "x:%sa", tag);
    ck_assert_int_eq(img_ref_parse(name, &r, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad tag"));
    /* the name: 255 bytes with the registry */
    memset(name, 0, sizeof name);
    strcpy(name, "reg.io/");
    memset(name + 7, 'b', 248);
    ck_assert_int_eq(img_ref_parse(name, &r, NULL), 0);
    name[255] = 'b';
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_ref_parse(name, &r, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "longer than 255"));
    /* docker.io/library/ counts: 244 + 18 > 255 */
    memset(name, 0, sizeof name);
    memset(name, 'c', 244);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_ref_parse(name, &r, &err), -EINVAL);
    memset(name, 'c', 550);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_ref_parse(name, &r, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "longer than 512"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("image_ref");
    TCase *tc = tcase_create("ref");
    tcase_add_test(tc, normalised);
    tcase_add_test(tc, parts);
    tcase_add_test(tc, malformed);
    tcase_add_test(tc, lengths);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
