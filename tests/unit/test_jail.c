/* moat jail's pure parts (vmm/sandbox/jail_spec.c): the id, --cgroup and
 * --resource-limit specs, the paths it exposes. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "vmm/sandbox/jail_spec.h"

START_TEST(ids)
{
    ck_assert_int_eq(jail_check_id("vm-1_A"), 0);
    char long_ok[JAIL_ID_MAX + 2];
    memset(long_ok, 'a', JAIL_ID_MAX);
    long_ok[JAIL_ID_MAX] = 0;
    ck_assert_int_eq(jail_check_id(long_ok), 0);
    long_ok[JAIL_ID_MAX] = 'a';
    long_ok[JAIL_ID_MAX + 1] = 0;
    ck_assert_int_eq(jail_check_id(long_ok), -EINVAL);
    const char *bad[] = { "", "a/b", "..", ".", "a b", "a\n", "ü", "a.b" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(jail_check_id(bad[i]) == -EINVAL, "id '%s' accepted", bad[i]);
    ck_assert_int_eq(jail_check_id(NULL), -EINVAL);
}
END_TEST

START_TEST(cgroup_specs)
{
    struct jail_cg cg;
    char why[256];
    ck_assert_int_eq(jail_parse_cgroup("pids.max=64", &cg, why, sizeof why), 0);
    ck_assert_str_eq(cg.key, "pids.max");
    ck_assert_str_eq(cg.val, "64");
    ck_assert_int_eq(jail_parse_cgroup("cpu.max=max 100000", &cg, why, sizeof why), 0);
    ck_assert_str_eq(cg.key, "cpu.max");
    ck_assert_str_eq(cg.val, "max 100000");
    ck_assert_int_eq(jail_parse_cgroup("memory.max=268435456", &cg, why, sizeof why), 0);
    ck_assert_int_eq(jail_parse_cgroup("memory.max=max", &cg, why, sizeof why), 0);
    const char *bad[] = {
        "pids.max", "=5", "pids.max=", "pids.maxx=5", "pids=5", "cgroup.procs=1",
        "../pids.max=5", "memory.max=1/2", "memory.max=1\n", "cpu.max= 100", "cpu.max=100 ",
        "cpu.max=max  100", "memory.max=ONE", "cgroup.subtree_control=+memory",
        "memory.max=1234567890123456789012345678901234567890123456789012345678901234",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        ck_assert_msg(jail_parse_cgroup(bad[i], &cg, why, sizeof why) == -EINVAL,
                      "cgroup spec '%s' accepted", bad[i]);
        ck_assert_msg(why[0], "no reason for '%s'", bad[i]);
    }
    ck_assert_int_eq(jail_parse_cgroup("bogus=1", &cg, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "unknown key 'bogus'"));
}
END_TEST

START_TEST(rlimit_specs)
{
    int res = -1;
    uint64_t v = 0;
    char why[256];
    ck_assert_int_eq(jail_parse_rlimit("no-file=1024", &res, &v, why, sizeof why), 0);
    ck_assert_int_eq(res, RLIMIT_NOFILE);
    ck_assert_uint_eq(v, 1024);
    ck_assert_int_eq(jail_parse_rlimit("nproc=0", &res, &v, why, sizeof why), 0);
    ck_assert_int_eq(res, RLIMIT_NPROC);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(jail_parse_rlimit("fsize=9223372036854775807", &res, &v, why, sizeof why), 0);
    ck_assert_int_eq(res, RLIMIT_FSIZE);
    ck_assert_uint_eq(v, UINT64_C(9223372036854775807));
    ck_assert_int_eq(jail_parse_rlimit("as=1073741824", &res, &v, why, sizeof why), 0);
    ck_assert_int_eq(res, RLIMIT_AS);
    const char *bad[] = { "no-file", "no-file=", "no-file=-1", "no-file=1k", "nofile=5",
                          "=5", "fsize=9223372036854775808", "fsize=99999999999999999999999",
                          "as= 1", "cpu=5" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        ck_assert_msg(jail_parse_rlimit(bad[i], &res, &v, why, sizeof why) == -EINVAL,
                      "rlimit spec '%s' accepted", bad[i]);
        ck_assert_msg(why[0], "no reason for '%s'", bad[i]);
    }
}
END_TEST

START_TEST(paths)
{
    ck_assert_int_eq(jail_check_path("/a/b.img"), 0);
    ck_assert_int_eq(jail_check_path("/a/b/"), 0);
    ck_assert_int_eq(jail_check_path("/a/.hidden/..x"), 0);
    const char *bad[] = { "", "/", "a/b", "./a", "/a/../b", "/a/./b", "/..", "/a//b", "/a/..",
                          "/a/." };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(jail_check_path(bad[i]) == -EINVAL, "path '%s' accepted", bad[i]);
    ck_assert_int_eq(jail_check_path(NULL), -EINVAL);
    char *huge = malloc(PATH_MAX + 1);
    memset(huge, 'a', PATH_MAX);
    huge[0] = '/';
    huge[PATH_MAX] = 0;
    ck_assert_int_eq(jail_check_path(huge), -EINVAL);
    free(huge);

    static struct jail_paths l;
    memset(&l, 0, sizeof l);
    ck_assert_int_eq(jail_paths_add(&l, "/k", 0), 0);
    ck_assert_int_eq(jail_paths_add(&l, "/k", 1), 0);
    ck_assert_int_eq(jail_paths_add(&l, "/k", 0), 0);
    ck_assert_int_eq(l.n, 1);
    ck_assert_int_eq(l.p[0].rw, 1);                 /* writable if either was */
    ck_assert_int_eq(jail_paths_add(&l, "/a/../etc/passwd", 0), -EINVAL);
    ck_assert_int_eq(l.n, 1);
    char p[32];
    for (int i = 1; i < JAIL_PATHS_MAX; i++) {
        snprintf(p, sizeof p, "/p%d", i);
        ck_assert_int_eq(jail_paths_add(&l, p, 0), 0);
    }
    ck_assert_int_eq(jail_paths_add(&l, "/one-too-many", 0), -E2BIG);
    ck_assert_int_eq(l.n, JAIL_PATHS_MAX);
}
END_TEST

START_TEST(sort_parents_first)
{
    static struct jail_paths l;
    memset(&l, 0, sizeof l);
    ck_assert_int_eq(jail_paths_add(&l, "/a/b/c.img", 1), 0);
    ck_assert_int_eq(jail_paths_add(&l, "/zz", 0), 0);
    ck_assert_int_eq(jail_paths_add(&l, "/a/b", 1), 0);
    ck_assert_int_eq(jail_paths_add(&l, "/yy", 1), 0);
    ck_assert_int_eq(jail_paths_add(&l, "/a", 0), 0);
    jail_paths_sort(&l);
    const char *want[] = { "/a", "/zz", "/yy", "/a/b", "/a/b/c.img" };
    ck_assert_int_eq(l.n, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(l.p[i].path, want[i]);
    ck_assert_int_eq(l.p[1].rw, 0);         /* entries move whole */
    ck_assert_int_eq(l.p[2].rw, 1);
    jail_paths_sort(&l);                    /* sorted stays as it is */
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(l.p[i].path, want[i]);
}
END_TEST

static int find(const struct jail_paths *l, const char *path)
{
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->p[i].path, path))
            return l->p[i].rw;
    return -1;
}

/* The ready pipe the jail keeps open: the inner command's --ready-fd. */
START_TEST(inner_ready_fd)
{
    char why[256];
    char *none[] = { "moat", "run", "--kernel", "/k" };
    ck_assert_int_eq(jail_inner_ready_fd(4, none, why, sizeof why), -1);
    char *sep[] = { "moat", "run", "--ready-fd", "7", "--control", "/c" };
    ck_assert_int_eq(jail_inner_ready_fd(6, sep, why, sizeof why), 7);
    char *eq[] = { "moat", "restore", "--ready-fd=1048576", "/s" };
    ck_assert_int_eq(jail_inner_ready_fd(4, eq, why, sizeof why), 1048576);
    char *last[] = { "moat", "run", "--ready-fd", "3", "--ready-fd", "4" };
    ck_assert_int_eq(jail_inner_ready_fd(6, last, why, sizeof why), 4);
    char *guest[] = { "moat", "run", "--", "--ready-fd", "5" };   /* the guest's */
    ck_assert_int_eq(jail_inner_ready_fd(5, guest, why, sizeof why), -1);
    static char *bad[] = { "2", "0", "-3", "", "3x", "x", "1048577", "99999999999", " 3" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *v[] = { "moat", "run", "--ready-fd", bad[i] };
        why[0] = 0;
        ck_assert_int_eq(jail_inner_ready_fd(4, v, why, sizeof why), -EINVAL);
        ck_assert_ptr_nonnull(strstr(why, "--ready-fd"));
    }
    char *missing[] = { "moat", "run", "--ready-fd" };
    why[0] = 0;
    ck_assert_int_eq(jail_inner_ready_fd(3, missing, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "needs a value"));
}
END_TEST

START_TEST(inner_command)
{
    static struct jail_paths l;
    memset(&l, 0, sizeof l);
    char why[256];
    char *argv[] = { "moat", "run", "--kernel", "/g/k.elf", "--initrd=/g/i.cpio", "--mem", "64",
                     "--drive", "/d/root.img,ro,id=r",
                     "--device=blk,id=x,overlay=/d/x.ovl,path=/d/base.img",
                     "--device", "net,tap=tap0", "--drive=/d/rw.img", "--device", "blk,path=/d/r2,ro",
                     "--", "--kernel", "/not/this" };
    int argc = (int)(sizeof argv / sizeof argv[0]);
    ck_assert_int_eq(jail_inner_paths(argc, argv, &l, why, sizeof why), 0);
    ck_assert_int_eq(l.n, 7);
    ck_assert_int_eq(find(&l, "/d/r2"), 0);
    ck_assert_int_eq(find(&l, "/g/k.elf"), 0);
    ck_assert_int_eq(find(&l, "/g/i.cpio"), 0);
    ck_assert_int_eq(find(&l, "/d/root.img"), 0);   /* ,ro */
    ck_assert_int_eq(find(&l, "/d/base.img"), 1);
    ck_assert_int_eq(find(&l, "/d/x.ovl"), 1);
    for (int i = 0; i < l.n; i++)
        ck_assert_int_eq(l.p[i].may_create, !strcmp(l.p[i].path, "/d/x.ovl"));
    ck_assert_int_eq(find(&l, "/d/rw.img"), 1);
    ck_assert_int_eq(find(&l, "/not/this"), -1);    /* after "--": the guest's */

    char *rel[] = { "moat", "run", "--kernel", "build/k.elf" };
    memset(&l, 0, sizeof l);
    why[0] = 0;
    ck_assert_int_eq(jail_inner_paths(4, rel, &l, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "absolute"));
    char *dots[] = { "moat", "run", "--device", "blk,path=/d/../etc/shadow" };
    ck_assert_int_eq(jail_inner_paths(4, dots, &l, why, sizeof why), -EINVAL);
    char *dots2[] = { "moat", "run", "--drive", "/d/x.img,overlay=/d/../../etc/x" };
    ck_assert_int_eq(jail_inner_paths(4, dots2, &l, why, sizeof why), -EINVAL);
    char *reldrive[] = { "moat", "run", "--drive", "x.img,ro" };
    ck_assert_int_eq(jail_inner_paths(4, reldrive, &l, why, sizeof why), -EINVAL);
    char *ro_first[] = { "moat", "run", "--drive", "/ro" };   /* a file named "ro" */
    memset(&l, 0, sizeof l);
    ck_assert_int_eq(jail_inner_paths(4, ro_first, &l, why, sizeof why), 0);
    ck_assert_int_eq(find(&l, "/ro"), 1);
    /* image mode: --image-config's file read-only, the root as a drive */
    char *image[] = { "moat", "run", "--drive", "/i/root.ext4,overlay=/s/disk0.overlay", "--image-root",
                      "--image-config", "/i/blobs/cfg", "-e", "A=1", "--", "--image-config", "/not/this" };
    memset(&l, 0, sizeof l);
    ck_assert_int_eq(jail_inner_paths(12, image, &l, why, sizeof why), 0);
    ck_assert_int_eq(l.n, 3);
    ck_assert_int_eq(find(&l, "/i/blobs/cfg"), 0);
    ck_assert_int_eq(find(&l, "/s/disk0.overlay"), 1);
    ck_assert_int_eq(find(&l, "/not/this"), -1);
    char *relcfg[] = { "moat", "run", "--image-config=cfg.json" };
    ck_assert_int_eq(jail_inner_paths(3, relcfg, &l, why, sizeof why), -EINVAL);
    char *missing[] = { "moat", "run", "--initrd" };
    why[0] = 0;
    ck_assert_int_eq(jail_inner_paths(3, missing, &l, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "needs a value"));
    char *none[] = { "moat", "restore", "/snap" };
    memset(&l, 0, sizeof l);
    ck_assert_int_eq(jail_inner_paths(3, none, &l, why, sizeof why), 0);
    ck_assert_int_eq(l.n, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jail");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, ids);
    tcase_add_test(tc, cgroup_specs);
    tcase_add_test(tc, rlimit_specs);
    tcase_add_test(tc, paths);
    tcase_add_test(tc, inner_command);
    tcase_add_test(tc, sort_parents_first);
    tcase_add_test(tc, inner_ready_fd);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
