/* The sandbox library's store and simple operations (vmm/sandbox/), without
 * KVM: sandboxes laid out by hand in a temporary $MOAT_HOME as moat create
 * leaves them (docs/sandboxes.md, "Files"), and a fake VMM (a process whose
 * command line names the control socket, and a thread answering on it)
 * where a live one is needed. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/sandbox/device.h"
#include "vmm/sandbox/sandbox.h"

static char home[64];

/* A fresh $MOAT_HOME (each test runs in its own process: CK_FORK). */
static void setup(void)
{
    snprintf(home, sizeof home, "/tmp/moat-sbx-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(home));
    setenv("MOAT_HOME", home, 1);
}

static void teardown(void)
{
    sandbox_rm_rf(home);
}

static void put(const char *name, const char *file, const char *text)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s/%s", home, name, file);
    FILE *f = fopen(p, "w");
    ck_assert_msg(f != NULL, "%s: %s", p, strerror(errno));
    fputs(text, f);
    fclose(f);
}

/* A sandbox directory as moat create makes it: config; stopped adds
 * snap/state (a snapshot to start from). */
static void make_sbx(const char *name, const char *config, int stopped)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", home, name);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    put(name, "config", config ? config : "drive.0=/img,overlay=/tmp/x.overlay\n");
    if (stopped) {
        snprintf(p, sizeof p, "%s/%s/snap", home, name);
        ck_assert_int_eq(mkdir(p, 0700), 0);
        put(name, "snap/state", "");
    }
}

static void put_pid(const char *name, pid_t pid)
{
    char t[32];
    snprintf(t, sizeof t, "%d\n", (int)pid);
    put(name, "pid", t);
}

static int exists(const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", home, name);
    return access(p, F_OK) == 0;
}

/* A pid that was ours and is gone (reaped). */
static pid_t dead_pid(void)
{
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return p;
}

/* ---- a fake VMM: this binary re-run as "test_sandbox --control CTL"
 * (what pid_is_ours looks for) and a thread serving CTL ---- */

struct fake {
    char ctl[108];
    pid_t pid;
    int lfd;
    pthread_t th;
    const char *status;     /* the reply to "status" */
    const char *reply;      /* to the other requests; NULL: "ok\n" */
    char got[16][64];       /* requests seen */
    int ngot;
};

static void *fake_serve(void *arg)
{
    struct fake *f = arg;
    for (;;) {
        int c = accept(f->lfd, NULL, NULL);
        if (c < 0)
            return NULL;        /* closed: the test is done */
        char line[256] = "";
        size_t len = 0;
        ssize_t n;
        while (len < sizeof line - 1 && !memchr(line, '\n', len) &&
               (n = recv(c, line + len, sizeof line - 1 - len, 0)) > 0)
            len += (size_t)n;       /* a whole line: the client sends it in two */
        line[len] = 0;
        line[strcspn(line, "\n")] = 0;
        if (f->ngot < 16)
            snprintf(f->got[f->ngot++], sizeof f->got[0], "%s", line);
        const char *reply = !strcmp(line, "status") ? f->status : f->reply ? f->reply : "ok\n";
        if (!strncmp(line, "stop-snapshot ", 14)) {     /* a snapshot: its state file last */
            char st[300];
            snprintf(st, sizeof st, "%s/state", line + 14);
            FILE *sf = mkdir(line + 14, 0700) == 0 ? fopen(st, "w") : NULL;
            if (!sf)
                reply = "error: cannot write the snapshot\n";
            else
                fclose(sf);
        }
        if (send(c, reply, strlen(reply), MSG_NOSIGNAL) < 0) { /* the client left */ }
        close(c);
        if (!strcmp(line, "stop") || !strncmp(line, "stop-snapshot ", 14)) {
            kill(f->pid, SIGKILL);
            waitpid(f->pid, NULL, 0);
            return NULL;
        }
    }
}

/* Start a fake VMM for sandbox name (its pid file written); serve
 * answers its socket when set, else nothing listens there. */
static void fake_start(struct fake *f, const char *name, int serve)
{
    memset(f, 0, sizeof *f);
    f->lfd = -1;
    f->status = "ok running uptime=42.4\n";
    snprintf(f->ctl, sizeof f->ctl, "%s/%s/ctl.sock", home, name);
    f->pid = fork();
    ck_assert_int_ge(f->pid, 0);
    if (f->pid == 0) {
        execl("/proc/self/exe", "test_sandbox", "--control", f->ctl, (char *)NULL);
        _exit(127);
    }
    /* wait for the exec: its command line names the socket */
    char p[64], buf[512];
    snprintf(p, sizeof p, "/proc/%d/cmdline", (int)f->pid);
    for (int i = 0; i < 400; i++) {
        int fd = open(p, O_RDONLY);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n > 0 && memmem(buf, (size_t)n, "--control", 9))
            break;
        usleep(5000);
    }
    put_pid(name, f->pid);
    if (!serve)
        return;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", f->ctl);
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(f->lfd, 0);
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(f->lfd, 8), 0);
    ck_assert_int_eq(pthread_create(&f->th, NULL, fake_serve, f), 0);
}

static void fake_stop(struct fake *f)
{
    if (f->lfd >= 0) {
        shutdown(f->lfd, SHUT_RDWR);
        pthread_join(f->th, NULL);
        close(f->lfd);
    }
    if (kill(f->pid, SIGKILL) == 0)
        waitpid(f->pid, NULL, 0);
}

/* ---- tests ---- */

START_TEST(names_and_home)
{
    const char *good[] = { "a", "A-1", "x_y.z", "0" };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(sandbox_valid_name(good[i]), "'%s' refused", good[i]);
    char big[SBX_NAME_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    const char *bad[] = { "", ".", "..", "../x", "a/b", "-a", ".a", "a b", "a\n", big };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!sandbox_valid_name(bad[i]), "'%s' accepted", bad[i]);
    big[SBX_NAME_MAX] = 0;
    ck_assert(sandbox_valid_name(big));

    char buf[SBX_HOME_MAX + 1];
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_home(buf, sizeof buf, &e), 0);
    ck_assert_str_eq(buf, home);
    ck_assert_int_eq(chdir(home), 0);
    setenv("MOAT_HOME", "rel", 1);
    ck_assert_int_eq(sandbox_home(buf, sizeof buf, &e), 0);
    char want[PATH_MAX];
    ck_assert_ptr_nonnull(getcwd(want, sizeof want - 8));
    strcat(want, "/rel");
    ck_assert_str_eq(buf, want);
    setenv("MOAT_HOME", "/tmp/a\tb", 1);
    ck_assert_int_eq(sandbox_home(buf, sizeof buf, &e), -EINVAL);
    ck_assert_int_eq(e.code, -EINVAL);
    ck_assert_str_eq(e.msg, "$MOAT_HOME contains control characters");
}
END_TEST

START_TEST(list_states)
{
    make_sbx("a-stopped", NULL, 1);
    make_sbx("b-dead", NULL, 0);
    make_sbx("c-stale", NULL, 1);
    put_pid("c-stale", dead_pid());             /* its VMM is gone */
    make_sbx("d-foreign", NULL, 0);
    put_pid("d-foreign", getpid());             /* a live pid, not its VMM */
    make_sbx("e-jail", "jail=1\njail.id=e1\njail.uid=1000\njail.gid=1001\n", 1);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/notasbx", home);  /* no config: no sandbox */
    ck_assert_int_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/.hidden", home);  /* not a valid name */
    ck_assert_int_eq(mkdir(p, 0700), 0);
    put(".hidden", "config", "");

    struct sbx_info *v;
    size_t n;
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_list("", &v, &n, &e), 0);
    ck_assert_int_eq(e.code, 0);
    ck_assert_uint_eq(n, 5);
    const char *names[] = { "a-stopped", "b-dead", "c-stale", "d-foreign", "e-jail" };
    const enum sbx_state st[] = { SBX_STOPPED, SBX_DEAD, SBX_DEAD, SBX_DEAD, SBX_STOPPED };
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_eq(v[i].name, names[i]);
        ck_assert_msg(v[i].state == st[i], "%s: %s", names[i], sandbox_state_str(v[i].state));
        ck_assert(v[i].uptime < 0);
    }
    ck_assert_int_eq(v[3].pid, getpid());       /* the pid file's, shown as dead */
    ck_assert(!v[0].jailed && v[4].jailed);
    ck_assert_uint_eq(v[4].jail_uid, 1000);
    ck_assert_uint_eq(v[4].jail_gid, 1001);
    free(v);

    ck_assert_int_eq(sandbox_list("c-", &v, &n, &e), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(v[0].name, "c-stale");
    free(v);

    /* an empty $MOAT_HOME, and one that does not exist */
    sandbox_rm_rf(home);
    ck_assert_int_eq(sandbox_list("", &v, &n, &e), 0);
    ck_assert_uint_eq(n, 0);
    free(v);
}
END_TEST

START_TEST(state_of_one)
{
    make_sbx("s", NULL, 1);
    struct sbx_info in;
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_info("s", &in, &e), 0);
    ck_assert_int_eq(in.state, SBX_STOPPED);
    ck_assert_int_eq(in.pid, 0);
    char st[32];
    ck_assert_int_eq(sandbox_state_name("s", st, sizeof st), 0);
    ck_assert_str_eq(st, "stopped");

    ck_assert_int_eq(sandbox_info("nope", &in, &e), -ENOENT);
    ck_assert_str_eq(e.msg, "no sandbox named nope (moat ls)");
    ck_assert_int_eq(sandbox_state_name("nope", st, sizeof st), -ENOENT);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(sandbox_info("../x", &in, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "invalid sandbox name '../x'"));
    ck_assert_int_eq(sandbox_state_name("", st, sizeof st), -EINVAL);

    /* a process that is its VMM by its command line, with nobody on the
     * socket: unresponsive, never running */
    make_sbx("h", NULL, 0);
    struct fake f;
    fake_start(&f, "h", 0);
    ck_assert_int_eq(sandbox_info("h", &in, &e), 0);
    ck_assert_int_eq(in.state, SBX_HUNG);
    ck_assert_int_eq(in.pid, f.pid);
    fake_stop(&f);
    ck_assert_int_eq(sandbox_info("h", &in, &e), 0);
    ck_assert_int_eq(in.state, SBX_DEAD);       /* its pid is gone */

    /* a VMM answering: running with its uptime, then paused */
    make_sbx("r", NULL, 0);
    fake_start(&f, "r", 1);
    ck_assert_int_eq(sandbox_info("r", &in, &e), 0);
    ck_assert_int_eq(in.state, SBX_RUNNING);
    ck_assert(in.uptime > 42.3 && in.uptime < 42.5);
    f.status = "ok paused uptime=1\n";
    ck_assert_int_eq(sandbox_state_name("r", st, sizeof st), 0);
    ck_assert_str_eq(st, "paused");
    fake_stop(&f);
}
END_TEST

START_TEST(pause_resume)
{
    make_sbx("s", NULL, 1);
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_pause("s", &e), -EINVAL);
    ck_assert_str_eq(e.msg, "sandbox s is stopped: cannot pause it (moat start it first)");
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(sandbox_resume("gone", &e), -ENOENT);
    ck_assert_str_eq(e.msg, "no sandbox named gone (moat ls)");

    make_sbx("r", NULL, 0);
    struct fake f;
    fake_start(&f, "r", 1);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(sandbox_pause("r", &e), 0);
    ck_assert_int_eq(sandbox_resume("r", &e), 0);
    ck_assert_int_eq(e.code, 0);
    fake_stop(&f);
    /* status, pause, status, resume: each after a look at the state */
    ck_assert_int_eq(f.ngot, 4);
    ck_assert_str_eq(f.got[1], "pause");
    ck_assert_str_eq(f.got[3], "resume");
}
END_TEST

/* set, get and net of a live sandbox's devices (vmm/sandbox/device.c):
 * the requests sent, the reply's text unescaped, the errors. */
START_TEST(devices)
{
    make_sbx("s", NULL, 1);
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_device_set("s", "net", "policy", "default deny", &e), -EINVAL);
    ck_assert_str_eq(e.msg, "sandbox s is stopped: cannot change a device of it (moat start it first)");
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(sandbox_device_get("s", "net", "policy", NULL, 0, &e), -EINVAL);
    ck_assert_str_eq(e.msg, "sandbox s is stopped: cannot read a device of it (moat start it first)");
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(sandbox_device_get("gone", "net", "stats", NULL, 0, &e), -ENOENT);
    ck_assert_str_eq(e.msg, "no sandbox named gone (moat ls)");
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(sandbox_device_set("s", "net", "policy", "a\nb", &e), -E2BIG);
    ck_assert_str_eq(e.msg, "set: the value must be one line of at most 3936 bytes");
    char key[300];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = 0;
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(sandbox_device_get("s", "net", key, NULL, 0, &e), -E2BIG);
    ck_assert_str_eq(e.msg, "get: too long");
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(sandbox_net_policy_add("s", "permit", "x", &e), -EINVAL);

    make_sbx("r", NULL, 0);
    struct fake f;
    fake_start(&f, "r", 1);
    f.reply = "ok a\\nb\\\\c\n";    /* escaped: a, newline, b, backslash, c */
    char out[64];
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(sandbox_device_get("r", "net", "policy", out, sizeof out, &e), 0);
    ck_assert_str_eq(out, "a\nb\\c");
    f.reply = "ok allow 1.2.3.4\n";
    ck_assert_int_eq(sandbox_net_policy_add("r", "deny", "10.0.0.0/8", &e), 0);
    ck_assert_int_eq(sandbox_net_metadata("r", "{\n \"a\": 1\t}\n  ", &e), 0);
    f.reply = "error set: no key x\n";
    ck_assert_int_eq(sandbox_device_set("r", "net", "x", "1", &e), -EPROTO);
    ck_assert_str_eq(e.msg, "sandbox r: error set: no key x");
    fake_stop(&f);
    /* each after a status: get, get and set (the policy add), set, set */
    ck_assert_int_eq(f.ngot, 10);
    ck_assert_str_eq(f.got[1], "get net policy");
    ck_assert_str_eq(f.got[3], "get net policy");
    ck_assert_str_eq(f.got[5], "set net policy allow 1.2.3.4; deny 10.0.0.0/8");
    ck_assert_str_eq(f.got[7], "set net metadata {  \"a\": 1 }");
    ck_assert_str_eq(f.got[9], "set net x 1");
}
END_TEST

START_TEST(removing)
{
    make_sbx("a", NULL, 1);
    make_sbx("b", NULL, 0);
    put_pid("b", dead_pid());
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_remove("a", 0, &e), 0);
    ck_assert_int_eq(e.code, 0);
    ck_assert(!exists("a"));
    ck_assert(exists("b"));
    ck_assert_int_eq(sandbox_remove("b", 0, &e), 0);
    ck_assert(!exists("b"));

    ck_assert_int_eq(sandbox_remove("a", 0, &e), -ENOENT);
    ck_assert_int_eq(e.code, -ENOENT);
    ck_assert_str_eq(e.msg, "no sandbox named a (moat ls)");
    const char *bad[] = { "../x", "", "..", "a/b" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        ck_assert_int_eq(sandbox_remove(bad[i], 1, &e), -EINVAL);
        ck_assert_msg(strstr(e.msg, "invalid sandbox name"), "'%s': %s", bad[i], e.msg);
    }

    /* a link inside is removed, not followed */
    make_sbx("l", NULL, 1);
    char p[PATH_MAX], keep[PATH_MAX];
    snprintf(keep, sizeof keep, "%s/keep", home);
    ck_assert_int_eq(mkdir(keep, 0700), 0);
    snprintf(p, sizeof p, "%s/keep/file", home);
    fclose(fopen(p, "w"));
    snprintf(p, sizeof p, "%s/l/link", home);
    ck_assert_int_eq(symlink(keep, p), 0);
    ck_assert_int_eq(sandbox_remove("l", 0, &e), 0);
    ck_assert(!exists("l"));
    ck_assert(exists("keep/file"));

    /* a jailed one: its jail's root goes too */
    char cfg[PATH_MAX + 64];
    snprintf(cfg, sizeof cfg, "jail=1\njail.id=j1\njail.uid=7\njail.gid=8\njail.chroot_base=%s/jb\n", home);
    make_sbx("j", cfg, 1);
    snprintf(p, sizeof p, "%s/jb/moat/j1/dev", home);
    ck_assert_int_eq(sandbox_mkdir_p(p, 0700), 0);
    ck_assert_int_eq(sandbox_remove("j", 0, &e), 0);
    ck_assert(!exists("j"));
    ck_assert(!exists("jb/moat/j1"));
    ck_assert(exists("jb/moat"));

    /* a running one: told to stop, then removed */
    make_sbx("r", NULL, 0);
    struct fake f;
    fake_start(&f, "r", 1);
    ck_assert_int_eq(sandbox_remove("r", 0, &e), 0);
    pthread_join(f.th, NULL);
    close(f.lfd);
    ck_assert(!exists("r"));
    ck_assert_int_eq(f.ngot, 1);
    ck_assert_str_eq(f.got[0], "stop");
}
END_TEST

static void record(void *ctx, const char *step)
{
    strcat(ctx, step);
    strcat(ctx, " ");
}

START_TEST(stopping)
{
    /* running, with an older snapshot: the new one takes its place */
    make_sbx("r", NULL, 1);
    put("r", "snap/old", "");
    struct fake f;
    fake_start(&f, "r", 1);
    char steps[256] = "";
    enum sbx_state was = SBX_HUNG;
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_stop("r", record, steps, &was, &e), 0);
    ck_assert_msg(e.code == 0 && !e.msg[0], "%s", e.msg);
    pthread_join(f.th, NULL);
    close(f.lfd);
    ck_assert_int_eq(was, SBX_RUNNING);
    ck_assert_str_eq(steps, "locked state snapshot promoted exited ");
    ck_assert_int_eq(f.ngot, 2);
    ck_assert_ptr_nonnull(strstr(f.got[1], "stop-snapshot "));
    ck_assert_ptr_nonnull(strstr(f.got[1], "/r/snap.new"));
    ck_assert(exists("r/snap/state"));
    ck_assert(!exists("r/snap/old"));
    ck_assert(!exists("r/snap.new"));
    ck_assert(!exists("r/pid"));
    char st[32];
    ck_assert_int_eq(sandbox_state_name("r", st, sizeof st), 0);
    ck_assert_str_eq(st, "stopped");

    /* again: already stopped, nothing done */
    steps[0] = 0;
    ck_assert_int_eq(sandbox_stop("r", record, steps, &was, &e), 0);
    ck_assert_int_eq(was, SBX_STOPPED);
    ck_assert_str_eq(steps, "locked state ");
    ck_assert(exists("r/snap/state"));

    /* an interrupted stop's incomplete snap.new is dropped, snap kept */
    struct sbx s;
    ck_assert_int_eq(sandbox_open(&s, "r", 1, &e), 0);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/r/snap.new", home);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    ck_assert_int_eq(sandbox_promote_snap_new(&s, &e), 0);
    sandbox_close(&s);
    ck_assert(!exists("r/snap.new"));
    ck_assert(exists("r/snap/state"));

    /* dead, never stopped: refused */
    make_sbx("d", NULL, 0);
    put_pid("d", dead_pid());
    ck_assert_int_eq(sandbox_stop("d", NULL, NULL, &was, &e), -EINVAL);
    ck_assert_str_eq(e.msg, "sandbox d is dead: cannot stop it (its process has exited; moat rm it)");
    ck_assert(exists("d/config"));

    /* ephemeral: destroyed */
    make_sbx("eph", "ephemeral=1\n", 0);
    fake_start(&f, "eph", 1);
    memset(&e, 0, sizeof e);
    ck_assert_int_eq(sandbox_stop("eph", NULL, NULL, &was, &e), 0);
    pthread_join(f.th, NULL);
    close(f.lfd);
    ck_assert_int_eq(was, SBX_RUNNING);
    ck_assert(!exists("eph"));
    ck_assert_str_eq(f.got[f.ngot - 1], "stop");
}
END_TEST

struct worker {
    char prefix[8];
    int n, failed;
    char why[256];
};

static void *remove_all(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < w->n; i++) {
        char name[32];
        struct sbx_err e = { 0 };
        struct sbx_info *v;
        size_t n;
        snprintf(name, sizeof name, "%s%d", w->prefix, i);
        if (sandbox_list(w->prefix, &v, &n, &e) < 0 || n != (size_t)(w->n - i) ||
            sandbox_remove(name, 0, &e) < 0) {
            snprintf(w->why, sizeof w->why, "%s: %.200s (listed %zu)", name, e.msg, n);
            w->failed++;
        }
        if (e.code == 0)
            free(v);
    }
    return NULL;
}

START_TEST(two_threads)
{
    enum { N = 40 };
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "x%d", i);
        make_sbx(name, NULL, i % 2);
        snprintf(name, sizeof name, "y%d", i);
        make_sbx(name, "jail=1\njail.id=y\njail.uid=1\njail.gid=2\n", i % 2);
    }
    struct worker w[2] = { { .prefix = "x", .n = N }, { .prefix = "y", .n = N } };
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, remove_all, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(w[i].failed == 0, "%s: %d failed: %s", w[i].prefix, w[i].failed, w[i].why);
    struct sbx_info *v;
    size_t n;
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_list("", &v, &n, &e), 0);
    ck_assert_uint_eq(n, 0);
    free(v);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--control")) {   /* a fake VMM */
        for (;;)
            pause();
    }
    Suite *s = suite_create("sandbox");
    TCase *tc = tcase_create("store");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, names_and_home);
    tcase_add_test(tc, list_states);
    tcase_add_test(tc, state_of_one);
    tcase_add_test(tc, pause_resume);
    tcase_add_test(tc, devices);
    tcase_add_test(tc, removing);
    tcase_add_test(tc, stopping);
    tcase_add_test(tc, two_threads);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
