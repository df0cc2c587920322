/* Image mode's run config: the host's writer (vmm/image/runcfg.c, Docker's
 * rules for the command and environment, the cpio archive) and the
 * guest's parser and user lookup (guest/init/imgcfg.c, compiled in here:
 * guest code, not part of libmoat), round trips between them, and every
 * malformed config and passwd/group case the guest must refuse. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "guest/init/imgcfg.c"
#include "vmm/image/runcfg.h"

static struct imgcfg cfg;

static char pbuf[4096];     /* cfg points into it */

static int parse(const char *s)
{
    size_t n = strlen(s);
    char why[256] = "";
    ck_assert_uint_lt(n, sizeof pbuf);
    memcpy(pbuf, s, n + 1);
    int r = imgcfg_parse(pbuf, n, &cfg, why, sizeof why);
    ck_assert_int_eq(r == 0, why[0] == 0);     /* a reason exactly when refused */
    return r;
}

START_TEST(parse_good)
{
    ck_assert_int_eq(parse("moat-image 1\nexplicit=1\nworkdir=/w d\nuser=app:grp\narg=sh\narg=-c\n"
                           "arg=echo a\\nb \\\\x\nenv=A=1\nenv=B==2\n"), 0);
    ck_assert_int_eq(cfg.argc, 3);
    ck_assert_str_eq(cfg.argv[0], "sh");
    ck_assert_str_eq(cfg.argv[2], "echo a\nb \\x");
    ck_assert_ptr_null(cfg.argv[3]);
    ck_assert_int_eq(cfg.nenv, 2);
    ck_assert_str_eq(cfg.env[1], "B==2");
    ck_assert_str_eq(cfg.workdir, "/w d");
    ck_assert_str_eq(cfg.user, "app:grp");
    ck_assert_int_eq(cfg.explicit_cmd, 1);
    ck_assert_int_eq(parse("moat-image 1\n"), 0);
    ck_assert_int_eq(cfg.argc, 0);
    ck_assert_ptr_null(cfg.workdir);
    ck_assert_ptr_null(cfg.user);
    ck_assert_int_eq(cfg.explicit_cmd, 0);
    ck_assert_int_eq(parse("moat-image 1\narg=\n"), 0);     /* an empty word is a word */
    ck_assert_int_eq(cfg.argc, 1);
    ck_assert_str_eq(cfg.argv[0], "");
}
END_TEST

START_TEST(parse_bad)
{
    static const char *bad[] = {
        "", "moat-image 1", "moat-image 2\n", "moat-image 1 \n", "xmoat-image 1\n",
        "moat-image 1\narg=a",                      /* no final newline */
        "moat-image 1\n\n",                         /* empty line */
        "moat-image 1\narg\n",                      /* no '=' */
        "moat-image 1\nfoo=1\n",                    /* unknown key */
        "moat-image 1\nARG=x\n",
        "moat-image 1\narg=a\\tb\n",                /* unknown escape */
        "moat-image 1\narg=a\\\n",                  /* trailing backslash */
        "moat-image 1\nenv=NOEQ\n", "moat-image 1\nenv==v\n",
        "moat-image 1\nworkdir=rel\n", "moat-image 1\nworkdir=\n",
        "moat-image 1\nworkdir=/a\nworkdir=/b\n",
        "moat-image 1\nuser=a\nuser=b\n",
        "moat-image 1\nexplicit=2\n", "moat-image 1\nexplicit=1\nexplicit=1\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(parse(bad[i]) == -EINVAL, "accepted: %s", bad[i]);
    /* A NUL inside, and the size limit. */
    char b[32] = "moat-image 1\narg=a\0b\n", why[256];
    ck_assert_int_eq(imgcfg_parse(b, 22, &cfg, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "NUL"));
    ck_assert_int_eq(imgcfg_parse(b, IMGCFG_MAX_BYTES + 1, &cfg, why, sizeof why), -EINVAL);
}
END_TEST

START_TEST(parse_limits)
{
    size_t cap = 16 + (IMGCFG_MAX_ARGS + 1) * 6;
    char *b = malloc(cap + 1), why[256];
    size_t n = (size_t)sprintf(b, "moat-image 1\n");
    for (int i = 0; i < IMGCFG_MAX_ARGS; i++)
        n += (size_t)sprintf(b + n, "arg=x\n");
    ck_assert_int_eq(imgcfg_parse(b, n, &cfg, why, sizeof why), 0);
    ck_assert_int_eq(cfg.argc, IMGCFG_MAX_ARGS);
    n = (size_t)sprintf(b, "moat-image 1\n");
    for (int i = 0; i <= IMGCFG_MAX_ARGS; i++)
        n += (size_t)sprintf(b + n, "arg=x\n");
    ck_assert_int_eq(imgcfg_parse(b, n, &cfg, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "too many arguments"));
    free(b);
}
END_TEST

static const char passwd[] =
    "root:x:0:0:root:/root:/bin/sh\n"
    "broken line\n"
    "bad:x:abc:1::/x:/bin/sh\n"
    "app:x:1000:1000:App:/home/app:/bin/sh\n"
    "nohome:x:1001:1001:::/bin/sh\n"
    "big:x:4294967295:1::/:/bin/sh\n";
static const char group[] =
    "root:x:0:\n"
    "app:x:1000:\n"
    "wheel:x:10:root,app\n"
    "audio:x:29:other,app\n"
    "junk:x:zz:app\n"
    "docker:x:999:\n";

START_TEST(user_resolve)
{
    struct imguser u;
    char why[300];
    ck_assert_int_eq(imgcfg_user(NULL, passwd, group, &u, why, sizeof why), 0);
    ck_assert_uint_eq(u.uid, 0);
    ck_assert_uint_eq(u.gid, 0);
    ck_assert_str_eq(u.home, "/root");
    ck_assert_int_eq(u.ngroups, 2);     /* 0, wheel */
    ck_assert_uint_eq(u.groups[1], 10);
    ck_assert_int_eq(imgcfg_user("app", passwd, group, &u, why, sizeof why), 0);
    ck_assert_uint_eq(u.uid, 1000);
    ck_assert_uint_eq(u.gid, 1000);
    ck_assert_str_eq(u.home, "/home/app");
    ck_assert_int_eq(u.ngroups, 3);
    ck_assert_uint_eq(u.groups[0], 1000);
    ck_assert_uint_eq(u.groups[1], 10);
    ck_assert_uint_eq(u.groups[2], 29);
    ck_assert_int_eq(imgcfg_user("1000", passwd, group, &u, why, sizeof why), 0);   /* by uid: the same */
    ck_assert_uint_eq(u.gid, 1000);
    ck_assert_int_eq(u.ngroups, 3);
    ck_assert_int_eq(imgcfg_user("app:docker", passwd, group, &u, why, sizeof why), 0);
    ck_assert_uint_eq(u.uid, 1000);
    ck_assert_uint_eq(u.gid, 999);
    ck_assert_int_eq(u.ngroups, 1);
    ck_assert_int_eq(imgcfg_user("4242:4343", passwd, group, &u, why, sizeof why), 0);   /* unknown ids */
    ck_assert_uint_eq(u.uid, 4242);
    ck_assert_uint_eq(u.gid, 4343);
    ck_assert_str_eq(u.home, "/");
    ck_assert_int_eq(imgcfg_user("4242", passwd, group, &u, why, sizeof why), 0);
    ck_assert_uint_eq(u.gid, 0);
    ck_assert_int_eq(u.ngroups, 1);
    ck_assert_int_eq(imgcfg_user("nohome", passwd, group, &u, why, sizeof why), 0);
    ck_assert_str_eq(u.home, "/");
    ck_assert_int_eq(imgcfg_user("app", NULL, NULL, &u, why, sizeof why), -ENOENT);  /* no passwd */
    ck_assert_int_eq(imgcfg_user("0", NULL, NULL, &u, why, sizeof why), 0);
    ck_assert_str_eq(u.home, "/");
}
END_TEST

START_TEST(user_bad)
{
    struct imguser u;
    char why[300];
    ck_assert_int_eq(imgcfg_user("nobody", passwd, group, &u, why, sizeof why), -ENOENT);
    ck_assert_ptr_nonnull(strstr(why, "user nobody: no such user"));
    ck_assert_int_eq(imgcfg_user("app:nogroup", passwd, group, &u, why, sizeof why), -ENOENT);
    ck_assert_ptr_nonnull(strstr(why, "group nogroup"));
    ck_assert_int_eq(imgcfg_user("app:", passwd, group, &u, why, sizeof why), -ENOENT);
    ck_assert_int_eq(imgcfg_user("bad", passwd, group, &u, why, sizeof why), -ENOENT);  /* malformed entry */
    ck_assert_int_eq(imgcfg_user("big", passwd, group, &u, why, sizeof why), -ENOENT);  /* uid out of range */
    ck_assert_int_eq(imgcfg_user("4294967295", passwd, group, &u, why, sizeof why), -ENOENT);
    ck_assert_int_eq(imgcfg_user("app:junk", passwd, group, &u, why, sizeof why), -ENOENT);
}
END_TEST

START_TEST(env_finish)
{
    char space[128];
    ck_assert_int_eq(parse("moat-image 1\nenv=A=1\n"), 0);
    imgcfg_env_finish(&cfg, "moat", "/home/app", space, sizeof space);
    ck_assert_int_eq(cfg.nenv, 4);
    ck_assert_str_eq(cfg.env[1], "PATH=" IMGCFG_DEFAULT_PATH);
    ck_assert_str_eq(cfg.env[2], "HOSTNAME=moat");
    ck_assert_str_eq(cfg.env[3], "HOME=/home/app");
    ck_assert_ptr_null(cfg.env[4]);
    ck_assert_int_eq(parse("moat-image 1\nenv=PATH=/x\nenv=HOME=/h\nenv=HOSTNAME=h\n"), 0);
    imgcfg_env_finish(&cfg, "moat", "/home/app", space, sizeof space);
    ck_assert_int_eq(cfg.nenv, 3);
    ck_assert_str_eq(cfg.env[0], "PATH=/x");
}
END_TEST

/* ---- the host's side ---- */

static char *ep_img[] = { "/entry", "--flag", NULL };
static char *cmd_img[] = { "run", "me", NULL };
static char *env_img[] = { "PATH=/img/bin", "LANG=C.UTF-8", NULL };

static struct img_config image(void)
{
    struct img_config c;
    memset(&c, 0, sizeof c);
    c.entrypoint = ep_img;
    c.cmd = cmd_img;
    c.env = env_img;
    c.workdir = "/srv";
    c.user = "app";
    return c;
}

static void argv_is(const char **got, int n, const char *const *want)
{
    int k = 0;
    while (want[k])
        k++;
    ck_assert_int_eq(n, k);
    for (int i = 0; i < k; i++)
        ck_assert_str_eq(got[i], want[i]);
    ck_assert_ptr_null(got[k]);
}

START_TEST(docker_argv)
{
    struct img_config c = image();
    const char *argv[IMG_RUN_MAX_ARGS + 1];
    struct img_run_over o = { 0 };
    const char *cmd[] = { "other", "x" }, *ep[] = { "/bin/sh" }, *none[] = { "" };

    argv_is(argv, img_run_argv(&c, &o, argv), (const char *[]){ "/entry", "--flag", "run", "me", NULL });
    o.cmd = cmd, o.ncmd = 2;    /* -- CMD replaces Cmd, keeps Entrypoint */
    argv_is(argv, img_run_argv(&c, &o, argv), (const char *[]){ "/entry", "--flag", "other", "x", NULL });
    o.entrypoint = ep, o.nentrypoint = 1;   /* both given */
    argv_is(argv, img_run_argv(&c, &o, argv), (const char *[]){ "/bin/sh", "other", "x", NULL });
    o.cmd = NULL, o.ncmd = 0;   /* --entrypoint alone drops the image's Cmd */
    argv_is(argv, img_run_argv(&c, &o, argv), (const char *[]){ "/bin/sh", NULL });
    o.entrypoint = none;        /* --entrypoint "": none at all */
    argv_is(argv, img_run_argv(&c, &o, argv), (const char *[]){ NULL });
    o.cmd = cmd, o.ncmd = 2;
    argv_is(argv, img_run_argv(&c, &o, argv), (const char *[]){ "other", "x", NULL });
    c.entrypoint = NULL;        /* no Entrypoint: Cmd alone */
    memset(&o, 0, sizeof o);
    argv_is(argv, img_run_argv(&c, &o, argv), (const char *[]){ "run", "me", NULL });
    argv_is(argv, img_run_argv(NULL, &o, argv), (const char *[]){ NULL });
}
END_TEST

START_TEST(docker_env)
{
    struct img_config c = image();
    const char *env[IMG_RUN_MAX_ENV + 1];
    const char *ov[] = { "LANG=fr_FR", "NEW=1", "PATH=/p" };
    struct img_run_over o = { .env = ov, .nenv = 3 };
    struct img_err e = { 0 };
    ck_assert_int_eq(img_run_env(&c, &o, env, &e), 3);
    ck_assert_str_eq(env[0], "PATH=/p");
    ck_assert_str_eq(env[1], "LANG=fr_FR");
    ck_assert_str_eq(env[2], "NEW=1");
    ck_assert_ptr_null(env[3]);
    const char *badov[] = { "=x" };
    o.env = badov, o.nenv = 1;
    ck_assert_int_eq(img_run_env(&c, &o, env, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "not NAME=VALUE"));
    char *badimg[] = { "NOEQ", NULL };
    c.env = badimg;
    memset(&o, 0, sizeof o);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(img_run_env(&c, &o, env, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "the image's Env"));
}
END_TEST

/* The host's config, read back by the guest's parser: the same values,
 * escapes included. */
START_TEST(round_trip)
{
    struct img_config c = image();
    const char *cmd[] = { "sh", "-c", "printf 'a\\nb\\\\'\nnext" }, *ov[] = { "X=line1\nline2" };
    struct img_run_over o = { .cmd = cmd, .ncmd = 3, .env = ov, .nenv = 1, .workdir = "/w" };
    struct img_err e = { 0 };
    char *text;
    size_t len;
    ck_assert_int_eq(img_runcfg_make(&c, &o, &text, &len, &e), 0);
    ck_assert_uint_eq(strlen(text), len);
    char why[256];
    ck_assert_int_eq(imgcfg_parse(text, len, &cfg, why, sizeof why), 0);
    ck_assert_int_eq(cfg.argc, 5);
    ck_assert_str_eq(cfg.argv[0], "/entry");
    ck_assert_str_eq(cfg.argv[4], cmd[2]);
    ck_assert_int_eq(cfg.nenv, 3);
    ck_assert_str_eq(cfg.env[2], ov[0]);
    ck_assert_str_eq(cfg.workdir, "/w");
    ck_assert_str_eq(cfg.user, "app");
    ck_assert_int_eq(cfg.explicit_cmd, 1);
    free(text);
    memset(&o, 0, sizeof o);
    ck_assert_int_eq(img_runcfg_make(&c, &o, &text, &len, &e), 0);
    ck_assert_int_eq(imgcfg_parse(text, len, &cfg, why, sizeof why), 0);
    ck_assert_int_eq(cfg.explicit_cmd, 0);
    ck_assert_str_eq(cfg.workdir, "/srv");
    free(text);
    c.workdir = "relative";
    ck_assert_int_eq(img_runcfg_make(&c, &o, &text, &len, &e), -EINVAL);
    ck_assert_ptr_null(text);
    ck_assert_ptr_nonnull(strstr(e.msg, "not an absolute path"));
}
END_TEST

/* The archive: two newc entries and the trailer, each 4-byte aligned,
 * the file's bytes where its header says. */
START_TEST(cpio)
{
    const char *text = "moat-image 1\narg=true\n";
    uint8_t *a;
    size_t n;
    ck_assert_int_eq(img_runcfg_cpio(text, strlen(text), &a, &n), 0);
    ck_assert_uint_eq(n % 4, 0);
    ck_assert_int_eq(memcmp(a, "070701", 6), 0);
    size_t off = 0;
    const char *names[] = { "moat", IMG_RUN_CFG_PATH, "TRAILER!!!" };
    for (int i = 0; i < 3; i++) {
        char f[9] = "";
        ck_assert_int_eq(memcmp(a + off, "070701", 6), 0);
        memcpy(f, a + off + 6 + 6 * 8, 8);
        size_t fsize = strtoul(f, NULL, 16);
        memcpy(f, a + off + 6 + 11 * 8, 8);
        size_t nsize = strtoul(f, NULL, 16);
        ck_assert_str_eq((const char *)a + off + 110, names[i]);
        off = (off + 110 + nsize + 3) & ~(size_t)3;
        if (i == 1)
            ck_assert_int_eq(memcmp(a + off, text, fsize), 0);
        ck_assert_uint_eq(fsize, i == 1 ? strlen(text) : 0);
        off = (off + fsize + 3) & ~(size_t)3;
    }
    ck_assert_uint_eq(off, n);
    free(a);
    ck_assert_int_eq(img_runcfg_cpio(text, IMG_RUN_MAX_BYTES + 1, &a, &n), -E2BIG);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("guest_imgcfg");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, parse_good);
    tcase_add_test(tc, parse_bad);
    tcase_add_test(tc, parse_limits);
    tcase_add_test(tc, user_resolve);
    tcase_add_test(tc, user_bad);
    tcase_add_test(tc, env_finish);
    tcase_add_test(tc, docker_argv);
    tcase_add_test(tc, docker_env);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, cpio);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
