/* Creating a sandbox (vmm/sandbox/create.c) without KVM: the VM process
 * sandbox_create starts is this binary, which, run as "moat run ...
 * MODE" (MODE the last argument, the guest's command), plays a VMM:
 * "ready" says so over its ready pipe and waits, "die" writes to its log
 * and exits 3. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/sandbox/create.h"
#include "vmm/sandbox/snapshot.h"
#include "vmm/sandbox/template.h"

static char home[64];

static void setup(void)
{
    snprintf(home, sizeof home, "/tmp/moat-sbxc-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(home));
    setenv("MOAT_HOME", home, 1);
}

static void teardown(void)
{
    sandbox_rm_rf(home);
}

static int fake_vmm(int argc, char **argv)
{
    char mode[16] = "";
    if (!strcmp(argv[1], "restore")) {     /* the mode in SNAPDIR/mode */
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/mode", argv[argc - 1]);
        FILE *f = fopen(p, "r");
        if (f && !fgets(mode, sizeof mode, f))
            mode[0] = 0;
        if (f)
            fclose(f);
    }
    if (!strcmp(argv[argc - 1], "ready") || !strcmp(mode, "ready")) {
        if (write(3, "ready 12345\n", 12) != 12)
            return 5;
        close(3);
        for (;;)
            pause();
    }
    fprintf(stderr, "the VMM failed: no KVM\n");
    return 3;
}

static void read_file(const char *path, char *buf, size_t len)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = 0;
    fclose(f);
}

START_TEST(run_options)
{
    int v = -1;
    ck_assert_str_eq(sandbox_run_opt("--kernel", &v), "kernel");
    ck_assert_int_eq(v, 1);
    ck_assert_str_eq(sandbox_run_opt("--pv", &v), "pvh");
    ck_assert_int_eq(v, 0);
    ck_assert_str_eq(sandbox_run_opt("--mem=5", &v), "mem");
    ck_assert_str_eq(sandbox_run_opt("--net", &v), "net");     /* exact, though a prefix of net-allow */
    ck_assert_ptr_null(sandbox_run_opt("--net-a", &v));       /* net-allow or net-allow-domain */
    ck_assert_ptr_null(sandbox_run_opt("--bogus", &v));
    ck_assert_ptr_null(sandbox_run_opt("-k", &v));
    ck_assert_ptr_null(sandbox_run_opt("--", &v));
}
END_TEST

START_TEST(drive_specs)
{
    struct sbx s;
    struct sbx_err e = { 0 };
    char out[PATH_MAX * 2], want[PATH_MAX * 2], cwd[PATH_MAX];
    int rw = 0;
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(sandbox_paths(&s, "box", &e), 0);
    ck_assert_int_eq(sandbox_drive_spec(&s, 1, "/img,id=d", out, sizeof out, &rw, &e), 0);
    snprintf(want, sizeof want, "/img,id=d,overlay=%s/box/disk1.overlay", home);
    ck_assert_str_eq(out, want);
    ck_assert_int_eq(sandbox_drive_spec(&s, 0, "a.img,ro,direct", out, sizeof out, &rw, &e), 0);
    snprintf(want, sizeof want, "%s/a.img,ro,direct", cwd);
    ck_assert_str_eq(out, want);
    ck_assert_int_eq(rw, 0);
    ck_assert_int_eq(sandbox_drive_spec(&s, 0, "/img,overlay=none", out, sizeof out, &rw, &e), 0);
    ck_assert_str_eq(out, "/img");
    ck_assert_int_eq(rw, 1);
    ck_assert_int_eq(sandbox_drive_spec(&s, 0, "/img,overlay=o.ovl", out, sizeof out, &rw, &e), 0);
    snprintf(want, sizeof want, "/img,overlay=%s/o.ovl", cwd);
    ck_assert_str_eq(out, want);
    ck_assert_str_eq(e.msg, "");
    ck_assert_int_eq(sandbox_drive_spec(&s, 0, "/img,bad", out, sizeof out, &rw, &e), -EINVAL);
    ck_assert_str_eq(e.msg, "\x1fmoat create: invalid --drive '/img,bad': unknown option 'bad'");
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_drive_spec(&s, 0, ",ro", out, sizeof out, &rw, &e), -EINVAL);
    ck_assert_str_eq(e.msg, "\x1fmoat create: invalid --drive ',ro': no path");
}
END_TEST

START_TEST(create_ready)
{
    char *args[] = { "--mem", "256", "--drive", "/img,overlay=/o", "--", "ready" };
    char *drives[] = { "/img,overlay=/o" };
    struct sbx_create_opts o = { .args = args, .nargs = 6, .drive = drives, .ndrive = 1, .ephemeral = 1,
                                 .start = { .wait = 0 } };
    struct sbx_create_res res;
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_create("box", &o, &res, &e), 0);
    ck_assert_str_eq(e.msg, "");
    ck_assert_int_gt(res.pid, 0);
    ck_assert_int_eq(waitpid(res.pid, NULL, WNOHANG), 0);     /* our child, running */
    char p[PATH_MAX], cfg[1024];
    snprintf(p, sizeof p, "%s/box/config", home);
    read_file(p, cfg, sizeof cfg);
    ck_assert_str_eq(cfg, "# moat sandbox box\nephemeral=1\nrw_drive=0\ndrive.0=/img,overlay=/o\n"
                          "arg=--mem\narg=256\narg=--drive\narg=/img,overlay=/o\narg=--\narg=ready\n");
    struct sbx_info in;
    ck_assert_int_eq(sandbox_info("box", &in, &e), 0);
    ck_assert_int_eq(in.pid, res.pid);
    /* A second one of the same name is refused; the first stays. */
    ck_assert_int_eq(sandbox_create("box", &o, &res, &e), -EEXIST);
    ck_assert_str_eq(e.msg, "a sandbox named box already exists (moat ls; moat rm box)");
    ck_assert(!res.usage);
    ck_assert_int_eq(access(p, F_OK), 0);
    kill(in.pid, SIGKILL);
    ck_assert_int_eq(waitpid(in.pid, NULL, 0), in.pid);
}
END_TEST

START_TEST(create_fails)
{
    char *args[] = { "--", "die" };
    struct sbx_create_opts o = { .args = args, .nargs = 2, .start = { .wait = 0 } };
    struct sbx_create_res res;
    struct sbx_err e = { 0 };
    ck_assert_int_lt(sandbox_create("box", &o, &res, &e), 0);
    ck_assert_msg(strstr(e.msg, "sandbox box: its moat process exited (status 3) while starting\n"), "%s", e.msg);
    ck_assert_msg(strstr(e.msg, "\x1fthe VMM failed: no KVM"), "%s", e.msg);
    ck_assert(!res.usage);
    ck_assert_int_ne(access(home, F_OK), 0);        /* nothing left, not even an empty $MOAT_HOME */
}
END_TEST

START_TEST(create_refused)
{
    char *nl[] = { "--cmdline", "a\nb" };
    struct sbx_create_opts o = { .args = nl, .nargs = 2 };
    struct sbx_create_res res;
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_create("box", &o, &res, &e), -EINVAL);
    ck_assert(res.usage);
    ck_assert_str_eq(e.msg, "\x1fmoat create: arguments cannot contain newlines");
    char *rel[] = { "--kernel", "rel/k" };
    o = (struct sbx_create_opts){ .args = rel, .nargs = 2, .jail = { .on = 1 } };
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_create("box", &o, &res, &e), -EINVAL);
    ck_assert(res.usage);
    ck_assert_str_eq(e.msg, "\x1fmoat create --jail: --kernel 'rel/k': the jail needs an absolute path "
                            "without '.', '..' or '//'");
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_create("no/pe", &o, &res, &e), -EINVAL);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/box", home);
    ck_assert_int_ne(access(p, F_OK), 0);
}
END_TEST

/* A template's sandbox as template create leaves it: config, marker. */
static void make_tpl(const char *name, const char *marker)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/template.%s", home, name);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/template.%s/config", home, name);
    ck_assert_int_eq(sandbox_write_file(p, "# moat sandbox\n"), 0);
    snprintf(p, sizeof p, "%s/template.%s/template", home, name);
    if (marker)
        ck_assert_int_eq(sandbox_write_file(p, marker), 0);
}

START_TEST(templates)
{
    char t[SBX_NAME_MAX + 1];
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_template_name("base", t, sizeof t, &e), 0);
    ck_assert_str_eq(t, "template.base");
    ck_assert_int_eq(sandbox_template_name("a/b", t, sizeof t, &e), -EINVAL);
    ck_assert_str_eq(e.msg, "template name 'a/b': 1-54 of A-Z a-z 0-9 - _ ., starting with a letter or digit");
    make_tpl("b", "agent=0\nfrom=box\n");
    make_tpl("a", "agent=1\nfrom=\n");
    make_tpl("c", NULL);                    /* no marker: not listed */
    struct sbx_template_info *v;
    size_t n;
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_template_list(&v, &n, &e), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(v[0].name, "a");
    ck_assert(v[0].agent);
    ck_assert_str_eq(v[0].from, "");
    ck_assert_str_eq(v[1].name, "b");
    ck_assert(!v[1].agent);
    ck_assert_str_eq(v[1].from, "box");
    free(v);
    ck_assert_int_eq(sandbox_template_remove("b", &e), 0);
    ck_assert_int_eq(sandbox_template_remove("b", &e), -ENOENT);
    ck_assert_str_eq(e.msg, "no template named b (moat template ls)");
    ck_assert_int_eq(sandbox_template_list(&v, &n, &e), 0);
    ck_assert_uint_eq(n, 1);
    free(v);
    /* From a sandbox that is not there: nothing made, no marker. */
    struct sbx_template_opts o = { .from = "nosuch", .agent = true };
    struct sbx_template_res res;
    e = (struct sbx_err){ 0 };
    ck_assert_int_lt(sandbox_template_create("x", &o, &res, &e), 0);
    ck_assert(!res.made);
    ck_assert_msg(strstr(e.msg, "no sandbox named nosuch"), "%s", e.msg);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/template.x", home);
    ck_assert_int_ne(access(p, F_OK), 0);
}
END_TEST

static void put(const char *path, const char *text)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", home, path);
    ck_assert_int_eq(sandbox_write_file(p, text), 0);
}

/* Tags of a stopped sandbox without disks: taken, reset to, compared. */
START_TEST(tags)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/box/snap", home);
    ck_assert_int_eq(sandbox_mkdir_p(p, 0700), 0);
    put("box/config", "# moat sandbox box\nephemeral=0\nrw_drive=0\n");
    put("box/snap/state", "s");
    put("box/snap/memory", "m");
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_snapshot_tag("box", "t", &e), 0);
    ck_assert_str_eq(e.msg, "");
    snprintf(p, sizeof p, "%s/box/tags/t/state", home);
    ck_assert_int_eq(access(p, F_OK), 0);
    ck_assert_int_eq(sandbox_snapshot_tag("box", "t", &e), -EEXIST);
    ck_assert_str_eq(e.msg, "sandbox box already has a tag t");
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_snapshot_tag("box", "a/b", &e), -EINVAL);
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_snapshot_tag("nosuch", "t", &e), -ENOENT);

    struct sbx_diff *d = malloc(sizeof *d);
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_diff_begin("box", "t", d, &e), -ENOENT);
    ck_assert_str_eq(e.msg, "sandbox box has no copy-on-write drive: nothing to compare");
    free(d);

    struct sbx_start_opts o = { .wait = 0 };
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_reset("box", "u", &o, &e), -ENOENT);
    ck_assert_str_eq(e.msg, "sandbox box has no tag u (moat snapshot box --tag u)");
    put("box/tags/t/mode", "ready");
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_reset("box", "t", &o, &e), 0);
    ck_assert_str_eq(e.msg, "");
    struct sbx_info in;
    ck_assert_int_eq(sandbox_info("box", &in, &e), 0);
    ck_assert_int_gt(in.pid, 0);
    ck_assert_int_eq(waitpid(in.pid, NULL, WNOHANG), 0);     /* our child, running */
    kill(in.pid, SIGKILL);
    ck_assert_int_eq(waitpid(in.pid, NULL, 0), in.pid);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 2 && (!strcmp(argv[1], "run") || !strcmp(argv[1], "restore")))   /* one we started */
        return fake_vmm(argc, argv);
    Suite *s = suite_create("sandbox_create");
    TCase *tc = tcase_create("create");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, run_options);
    tcase_add_test(tc, drive_specs);
    tcase_add_test(tc, create_ready);
    tcase_add_test(tc, create_fails);
    tcase_add_test(tc, create_refused);
    tcase_add_test(tc, templates);
    tcase_add_test(tc, tags);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
