/* The run loop of moat run/restore (vmm/api/control/vmrun.c): what it
 * gives back when it cannot begin (no KVM needed: the control socket fails
 * before the VM is touched), and restore's snapshot directory. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/api/control/vmrun.h"

static int notes;

static void count_note(void *arg, const char *line)
{
    (void)arg, (void)line;
    notes++;
}

/* A control socket that cannot be opened: -errno with why, the VM never
 * started, the ready pipe left open and untold for the caller to close. */
static void check_control_fails(const char *path, int want)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    struct vmrun_opts o = { .control = path, .sig_fd = -1, .ready_fd = p[1], .timeout = 1,
                            .note = count_note };
    struct vmrun r;
    struct sbx_err e = { 0 };
    notes = 0;
    int rc = vmrun(NULL, &o, &r, &e);
    ck_assert_int_eq(rc, want);
    ck_assert_int_eq(e.code, want);
    ck_assert_ptr_nonnull(strstr(e.msg, path));
    ck_assert_int_eq(r.end, VMRUN_FAILED);
    ck_assert_int_eq(r.ready_fd, p[1]);
    ck_assert_int_eq(r.ctl.fd, -1);
    ck_assert_int_eq(notes, 0);
    vmrun_close(NULL, &r);
    close(r.ready_fd);
    char c;
    ck_assert_int_eq(read(p[0], &c, 1), 0);     /* EOF: nothing was sent */
    close(p[0]);
}

START_TEST(control_too_long)
{
    char path[200];
    memset(path, 'a', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = 0;
    check_control_fails(path, -ENAMETOOLONG);
}
END_TEST

START_TEST(control_no_dir)
{
    check_control_fails("/nonexistent-moat-dir/c.sock", -ENOENT);
}
END_TEST

/* A file DIR/SUB/state (SUB "": DIR/state). */
static void touch_state(const char *dir, const char *sub)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s%s%s", dir, sub[0] ? "/" : "", sub);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s%s%s/state", dir, sub[0] ? "/" : "", sub);
    int fd = open(p, O_WRONLY | O_CREAT, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static void check_dir(const char *dir, const char *want_sub)
{
    char st[PATH_MAX], mm[PATH_MAX], want[PATH_MAX];
    struct sbx_err e = { 0 };
    ck_assert_int_eq(vmrun_snapshot_dir(dir, st, mm, &e), 0);
    snprintf(want, sizeof want, "%s%s%s/state", dir, want_sub[0] ? "/" : "", want_sub);
    ck_assert_str_eq(st, want);
    snprintf(want, sizeof want, "%s%s%s/memory", dir, want_sub[0] ? "/" : "", want_sub);
    ck_assert_str_eq(mm, want);
}

START_TEST(snapshot_dir_plain_and_chain)
{
    char dir[] = "/tmp/moat-vmrun-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    check_dir(dir, "");                 /* nothing there: DIR/state, DIR/memory */
    touch_state(dir, "0");
    check_dir(dir, "0");
    touch_state(dir, "1");
    touch_state(dir, "3");              /* a gap (a failed snapshot) is stepped over */
    check_dir(dir, "3");
    touch_state(dir, "");               /* DIR/state itself wins */
    check_dir(dir, "");
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(snapshot_dir_too_long)
{
    char dir[PATH_MAX];
    memset(dir, 'a', PATH_MAX - 31);
    dir[PATH_MAX - 31] = 0;
    char st[PATH_MAX], mm[PATH_MAX];
    struct sbx_err e = { 0 };
    ck_assert_int_eq(vmrun_snapshot_dir(dir, st, mm, &e), -ENAMETOOLONG);
    ck_assert_str_eq(e.msg, "snapshot directory path too long");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vmrun");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, control_too_long);
    tcase_add_test(tc, control_no_dir);
    tcase_add_test(tc, snapshot_dir_plain_and_chain);
    tcase_add_test(tc, snapshot_dir_too_long);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
