/* moat jail's mechanism (vmm/sandbox/jail.c) where it runs without root or
 * KVM: the defaults, the inner command's checks, the jail root's path, and
 * the parent's wait (the status passed on, the ready fd closed, the per-VM
 * cgroup directory removed or the failure told); the one-spawn steps'
 * caller side (sandbox_jail_host: the caller's fds and environment kept,
 * the jail directory, a leftover cgroup) and clone (pid 1 of a new pid
 * namespace), where run as root. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/sandbox/jail.h"

static struct sbx_jail_run j;   /* large (the paths) */

START_TEST(defaults)
{
    memset(&j, 0x5a, sizeof j);
    sandbox_jail_defaults(&j);
    ck_assert_str_eq(j.base, "/srv/jail");
    ck_assert_str_eq(j.cgroot, "/sys/fs/cgroup");
    ck_assert_int_eq(j.ready_fd, -1);
    ck_assert_ptr_null(j.id);
    ck_assert_ptr_null(j.netns);
    ck_assert_ptr_null(j.preload);
    ck_assert_int_eq(j.paths.n + j.ncg + j.nrl + j.tun, 0);
    ck_assert_str_eq(j.cgdir, "");
}
END_TEST

START_TEST(inner)
{
    struct sbx_err e = { 0 };
    sandbox_jail_defaults(&j);
    char *run[] = { "moat", "run", "--kernel", "/g/k.elf", "--ready-fd", "7", "--", "x" };
    ck_assert_int_eq(sandbox_jail_inner(&j, 8, run, &e), 0);
    ck_assert_int_eq(e.code, 0);
    ck_assert_int_eq(j.argc, 8);
    ck_assert_ptr_eq(j.argv, run);
    ck_assert_int_eq(j.ready_fd, 7);
    ck_assert_int_eq(j.paths.n, 1);
    ck_assert_str_eq(j.paths.p[0].path, "/g/k.elf");

    /* "moat" alone: nothing to expose, no ready fd */
    sandbox_jail_defaults(&j);
    char *bare[] = { "moat" };
    ck_assert_int_eq(sandbox_jail_inner(&j, 1, bare, &e), 0);
    ck_assert_int_eq(j.ready_fd, -1);
    ck_assert_int_eq(j.paths.n, 0);

    char *nested[] = { "moat", "jail", "--id", "x" };
    ck_assert_int_eq(sandbox_jail_inner(&j, 4, nested, &e), -EINVAL);
    ck_assert_int_eq(e.code, -EINVAL);
    ck_assert_str_eq(e.msg, "a jail inside a jail is not supported");

    struct sbx_err e2 = { 0 };
    char *rel[] = { "moat", "run", "--kernel", "k.elf" };
    ck_assert_int_eq(sandbox_jail_inner(&j, 4, rel, &e2), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e2.msg, "absolute"));
    ck_assert_ptr_null(strchr(e2.msg, '\n'));

    struct sbx_err e3 = { 0 };
    char *badfd[] = { "moat", "run", "--ready-fd", "1" };
    ck_assert_int_eq(sandbox_jail_inner(&j, 4, badfd, &e3), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e3.msg, "--ready-fd"));
}
END_TEST

START_TEST(root_path)
{
    struct sbx_err e = { 0 };
    sandbox_jail_defaults(&j);
    j.id = "vm1";
    snprintf(j.realbase, sizeof j.realbase, "/srv/jail");
    ck_assert_int_eq(sandbox_jail_root_path(&j, &e), 0);
    ck_assert_str_eq(j.root, "/srv/jail/moat/vm1/root");
    ck_assert_str_eq(e.msg, "");

    /* BASE + "/moat/" + ID + "/root" one byte too long */
    size_t n = PATH_MAX - 1 - strlen("/moat/vm1/root") + 1;
    memset(j.realbase, 'b', n);
    j.realbase[0] = '/';
    j.realbase[n] = 0;
    ck_assert_int_eq(sandbox_jail_root_path(&j, &e), -ENAMETOOLONG);
    ck_assert_str_eq(e.msg, "--chroot-base is too long");
    /* one byte shorter fits */
    struct sbx_err e2 = { 0 };
    j.realbase[n - 1] = 0;
    ck_assert_int_eq(sandbox_jail_root_path(&j, &e2), 0);
    ck_assert_uint_eq(strlen(j.root), PATH_MAX - 1);
}
END_TEST

/* Fork a child that runs what, as cmd_jail forks the jailed moat. */
static pid_t child(int what)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (what < 0) {
            signal(-what, SIG_DFL);     /* Check's own handler is SIGALRM's */
            raise(-what);
        }
        if (what == 1000)
            pause();
        _exit(what);
    }
    return pid;
}

START_TEST(parent_status)
{
    struct sbx_err e = { 0 };
    sandbox_jail_defaults(&j);
    sigset_t old;
    sandbox_jail_block_signals(&old);
    int st = -1;
    ck_assert_int_eq(sandbox_jail_parent(&j, child(42), &st, &e), 0);
    ck_assert_int_eq(st, 42);
    ck_assert_int_eq(sandbox_jail_parent(&j, child(-SIGALRM), &st, &e), 0);
    ck_assert_int_eq(st, 128 + SIGALRM);
    /* SIGTERM to the parent: the child is killed, the status 128 + 15 */
    pid_t pid = child(1000);
    kill(getpid(), SIGTERM);
    ck_assert_int_eq(sandbox_jail_parent(&j, pid, &st, &e), 0);
    ck_assert_int_eq(st, 128 + SIGTERM);
    ck_assert_str_eq(e.msg, "");
    sigprocmask(SIG_SETMASK, &old, NULL);
}
END_TEST

START_TEST(parent_ready_fd_and_cgroup)
{
    struct sbx_err e = { 0 };
    char dir[] = "/tmp/moat-jailrun-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    sandbox_jail_defaults(&j);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    j.ready_fd = p[1];
    snprintf(j.cgdir, sizeof j.cgdir, "%s/cg", dir);
    ck_assert_int_eq(mkdir(j.cgdir, 0755), 0);
    sigset_t old;
    sandbox_jail_block_signals(&old);
    int st = -1;
    ck_assert_int_eq(sandbox_jail_parent(&j, child(3), &st, &e), 0);
    ck_assert_int_eq(st, 3);
    ck_assert_int_eq(fcntl(p[1], F_GETFD), -1);     /* its copy closed */
    ck_assert_int_eq(access(j.cgdir, F_OK), -1);    /* removed */
    /* gone already: no failure */
    j.ready_fd = -1;
    ck_assert_int_eq(sandbox_jail_parent(&j, child(0), &st, &e), 0);
    ck_assert_int_eq(st, 0);
    /* not empty: told, the status still passed on */
    ck_assert_int_eq(mkdir(j.cgdir, 0755), 0);
    char f[PATH_MAX + 8];
    snprintf(f, sizeof f, "%s/x", j.cgdir);
    close(open(f, O_WRONLY | O_CREAT, 0600));
    ck_assert_int_eq(sandbox_jail_parent(&j, child(5), &st, &e), -ENOTEMPTY);
    ck_assert_int_eq(st, 5);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "removing cgroup %s: %s", j.cgdir, strerror(ENOTEMPTY));
    ck_assert_str_eq(e.msg, want);
    sigprocmask(SIG_SETMASK, &old, NULL);
    unlink(f);
    rmdir(j.cgdir);
    rmdir(dir);
    close(p[0]);
}
END_TEST

/* A stand-in cgroup v2 tree under dir: CG/cgroup.controllers and the
 * subtree_control files (the kernel makes the limit files: here made by
 * hand, where wanted). */
static void fake_cgroot(const char *dir, char *cg, size_t len)
{
    char f[PATH_MAX + 64];
    snprintf(cg, len, "%s/cg", dir);
    ck_assert_int_eq(mkdir(cg, 0755), 0);
    snprintf(f, sizeof f, "%s/moat", cg);
    ck_assert_int_eq(mkdir(f, 0755), 0);
    const char *files[] = { "cgroup.controllers", "cgroup.subtree_control", "moat/cgroup.subtree_control" };
    for (int i = 0; i < 3; i++) {
        snprintf(f, sizeof f, "%s/%s", cg, files[i]);
        close(open(f, O_WRONLY | O_CREAT, 0644));
    }
}

START_TEST(host_side)
{
    struct sbx_err e = { 0 };
    sandbox_jail_defaults(&j);
    char dir[] = "/tmp/moat-jailhost-XXXXXX", cg[PATH_MAX], p[PATH_MAX + 64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(chmod(dir, 0755), 0);
    j.id = "h1";
    j.base = dir;
    if (geteuid() != 0) {
        ck_assert_int_eq(sandbox_jail_host(&j, &e), -EPERM);
        rmdir(dir);
        return;
    }
    fake_cgroot(dir, cg, sizeof cg);
    j.cgroot = cg;
    char spec[] = "pids.max=5", why[256];
    ck_assert_int_eq(jail_parse_cgroup(spec, &j.cg[j.ncg++], why, sizeof why), 0);
    /* A leftover cgroup of this id holding its limit file: kept (not
     * empty), joined again, its limit written. */
    snprintf(p, sizeof p, "%s/moat/h1", cg);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/moat/h1/pids.max", cg);
    close(open(p, O_WRONLY | O_CREAT, 0644));
    setenv("MOAT_JAILRUN_KEPT", "1", 1);
    int fd = open("/dev/null", O_RDONLY);
    ck_assert_int_ge(fd, 3);
    ck_assert_int_eq(sandbox_jail_host(&j, &e), 0);
    ck_assert_str_eq(getenv("MOAT_JAILRUN_KEPT"), "1");     /* the caller's */
    ck_assert_int_ne(fcntl(fd, F_GETFD), -1);
    struct stat st;
    snprintf(p, sizeof p, "%s/moat/h1/root", dir);
    ck_assert_str_eq(j.root, p);
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_eq(st.st_mode & 07777, 0755);
    ck_assert(j.exe[0] == '/' && j.paths.n >= 2);
    FILE *f = fopen(strcat(strcpy(p, j.cgdir), "/pids.max"), "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(why, sizeof why, f));
    fclose(f);
    ck_assert_str_eq(why, "5");
    /* An empty leftover goes, then is made again: its limit file (the
     * kernel's) missing here, which is told. */
    unlink(p);
    ck_assert_int_eq(sandbox_jail_host(&j, &e), -ENOENT);
    ck_assert_ptr_nonnull(strstr(e.msg, "pids.max"));
    close(fd);
    unsetenv("MOAT_JAILRUN_KEPT");
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(clone_pid1)
{
    if (geteuid() != 0)
        return;
    pid_t pid = sandbox_jail_clone();
    if (pid == 0)
        _exit(getpid() == 1 ? 0 : 1);
    ck_assert_int_gt(pid, 0);
    int st = -1;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jail_run");
    TCase *tc = tcase_create("run");
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, inner);
    tcase_add_test(tc, root_path);
    tcase_add_test(tc, parent_status);
    tcase_add_test(tc, parent_ready_fd_and_cgroup);
    tcase_add_test(tc, host_side);
    tcase_add_test(tc, clone_pid1);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
