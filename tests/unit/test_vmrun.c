/* The run loop of moat run/restore (vmm/api/control/vmrun.c): what it
 * gives back when it cannot begin (no KVM needed: the control socket fails
 * before the VM is touched). */
#include <check.h>
#include <errno.h>
#include <string.h>
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

int main(void)
{
    Suite *s = suite_create("vmrun");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, control_too_long);
    tcase_add_test(tc, control_no_dir);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
