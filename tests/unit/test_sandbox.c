/* The sandbox library's store, simple operations, start, exec and cp
 * (vmm/sandbox/), without KVM: sandboxes laid out by hand in a temporary
 * $MOAT_HOME as moat create leaves them (docs/sandboxes.md, "Files"), a
 * fake VMM (a process whose command line names the control socket, and a
 * thread answering on it) where a live one is needed, and a fake guest
 * agent. */
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

#include "vmm/agent/agent_proto.h"
#include "vmm/sandbox/device.h"
#include "vmm/sandbox/exec.h"
#include "vmm/sandbox/sandbox.h"
#include "vmm/sandbox/fork.h"
#include "vmm/sandbox/start.h"

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

/* A socket listening at path (*lfd) and a thread running fn(arg) (*th). */
static void listen_serve(const char *path, void *(*fn)(void *), void *arg, int *lfd, pthread_t *th)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    *lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(*lfd, 0);
    ck_assert_int_eq(bind(*lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(*lfd, 8), 0);
    ck_assert_int_eq(pthread_create(th, NULL, fn, arg), 0);
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
    listen_serve(f->ctl, fake_serve, f, &f->lfd, &f->th);
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

/* ---- starting (vmm/sandbox/start.c, files.c): the VM process
 * sandbox_spawn runs is this binary, which, run as "moat restore ...
 * SNAPDIR", plays a VMM by SNAPDIR/mode: "ready" says so over its ready
 * pipe and waits, "die" writes to its log and exits 3, "mute" waits
 * without a word ---- */

/* A stopped sandbox: config and snap/state, its fake VMM's mode (NULL:
 * no snapshot at all). */
static void make_stopped(const char *name, const char *mode)
{
    make_sbx(name, "# moat sandbox\nephemeral=0\nrw_drive=0\n", mode != NULL);
    if (mode)
        put(name, "snap/mode", mode);
}

static void read_file(const char *name, const char *file, char *buf, size_t len)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s/%s", home, name, file);
    buf[0] = 0;
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = 0;
    fclose(f);
}

/* The fake VMM: argv as sandbox_spawn makes it ("restore --ready-fd 3
 * ... SNAPDIR"). */
static int fake_vmm(int argc, char **argv)
{
    char p[PATH_MAX], mode[16] = "";
    snprintf(p, sizeof p, "%s/mode", argv[argc - 1]);
    FILE *f = fopen(p, "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f))
            mode[0] = 0;
        fclose(f);
    } else if (getenv("FAKE_VMM_MODE")) {      /* a fork's child: base/ has no mode file */
        snprintf(mode, sizeof mode, "%s", getenv("FAKE_VMM_MODE"));
    }
    /* Only the ready pipe is inherited past stdin, stdout and stderr. */
    for (int fd = 4; fd < 64; fd++)
        if (fcntl(fd, F_GETFD) >= 0) {
            fprintf(stderr, "fd %d is open\n", fd);
            return 4;
        }
    if (!strcmp(mode, "ready")) {
        if (write(3, "ready 12345\n", 12) != 12)
            return 5;
        close(3);
        for (;;)
            pause();
    }
    if (!strcmp(mode, "mute")) {
        for (;;)
            pause();
    }
    fprintf(stderr, "first line\n\nthe VMM failed: %s", "no KVM");   /* no final newline */
    return 3;
}

struct steps {
    char names[256];
};

static void on_step(void *ctx, const char *name, uint64_t ns)
{
    struct steps *s = ctx;
    if (!ns)
        return;
    strcat(s->names, name);
    strcat(s->names, " ");
}

START_TEST(files)
{
    struct sbx s = { .ndrive = 2, .dfd = -1 };
    char b[256];
    s.drive[0] = "/img,ro,overlay=/h/a.overlay,direct";
    s.drive[1] = "/img2";
    ck_assert_int_eq(sandbox_drive_overlay(&s, 0, b, sizeof b), 1);
    ck_assert_str_eq(b, "/h/a.overlay");
    ck_assert_int_eq(sandbox_drive_overlay(&s, 1, b, sizeof b), 0);
    ck_assert_int_eq(sandbox_drive_overlay(&s, 2, b, sizeof b), 0);
    char *w = sandbox_spec_with_overlay(s.drive[0], "/k/disk0.overlay");
    ck_assert_str_eq(w, "/img,ro,direct,overlay=/k/disk0.overlay");
    free(w);

    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/f", home);
    ck_assert_int_eq(sandbox_write_file(p, "one\n"), 0);
    ck_assert_int_eq(sandbox_write_file(p, "two\n"), 0);
    int dfd = open(home, O_RDONLY | O_DIRECTORY);
    int fd = sandbox_open_regular_at(dfd, "f");
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(read(fd, b, sizeof b), 4);
    ck_assert_int_eq(memcmp(b, "two\n", 4), 0);
    close(fd);
    snprintf(b, sizeof b, "%s/l", home);
    ck_assert_int_eq(symlink("f", b), 0);
    errno = 0;
    ck_assert_int_eq(sandbox_open_regular_at(dfd, "l"), -1);
    ck_assert_int_eq(errno, ELOOP);
    snprintf(b, sizeof b, "%s/d", home);
    ck_assert_int_eq(mkdir(b, 0700), 0);
    ck_assert_int_eq(sandbox_open_regular_at(dfd, "d"), -1);
    ck_assert_int_eq(errno, SBX_EFTYPE_NOT_REG);
    close(dfd);
    int keep;
    ck_assert_ptr_eq(sandbox_file_via(&s, p, b, sizeof b, &keep), p);     /* unjailed: itself */
    ck_assert_int_eq(keep, -1);
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_jail_share_dir(&s, home, &e), 0);
}
END_TEST

START_TEST(log_tail)
{
    struct sbx s;
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_paths(&s, "box", &e), 0);
    ck_assert_int_eq(mkdir(s.dir, 0700), 0);
    sandbox_log_tail(&s, -EIO, &e);       /* no log: nothing */
    ck_assert_str_eq(e.msg, "");
    put("box", "moat.log", "a\n\nb");
    sandbox_log_tail(&s, -EIO, &e);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "box's log (%s/moat.log):\n\x1f" "a\n\x1f\n\x1f" "b", s.dir);
    ck_assert_str_eq(e.msg, want);
    ck_assert_int_eq(e.code, -EIO);
    sandbox_close(&s);
}
END_TEST

START_TEST(start_ready)
{
    make_stopped("box", "ready");
    struct steps st = { "" };
    struct sbx_start_opts o = { .wait = 0, .phase = on_step, .ctx = &st };
    struct sbx_err e = { 0 };
    enum sbx_state was;
    pid_t vm0 = 0;
    ck_assert_int_eq(sandbox_start("box", &o, &was, &vm0, &e), 0);
    ck_assert_int_eq(was, SBX_STOPPED);
    ck_assert_str_eq(e.msg, "");
    ck_assert_str_eq(st.names, "locked state spawned first_run ctl_ready ");
    char pid[32];
    read_file("box", "pid", pid, sizeof pid);
    pid_t p = (pid_t)atoi(pid);
    ck_assert_int_eq(p, vm0);

    ck_assert_int_eq(waitpid(p, NULL, WNOHANG), 0);      /* our child, running */
    kill(p, SIGKILL);
    ck_assert_int_eq(waitpid(p, NULL, 0), p);
}
END_TEST

/* Four threads start four sandboxes at once (serve's threads do): each
 * start spawns its own VMM, none sees another's. */
struct starter {
    char name[8];
    pid_t vm;
    int r;
    struct sbx_err e;
};

static void *start_one(void *arg)
{
    struct starter *w = arg;
    struct sbx_start_opts o = { .wait = 0 };
    enum sbx_state was;
    w->r = sandbox_start(w->name, &o, &was, &w->vm, &w->e);
    return NULL;
}

START_TEST(start_threads)
{
    enum { N = 4 };
    struct starter w[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        memset(&w[i], 0, sizeof w[i]);
        snprintf(w[i].name, sizeof w[i].name, "t%d", i);
        make_stopped(w[i].name, "ready");
    }
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, start_one, &w[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(w[i].r == 0 && w[i].vm > 0, "%s: %d %s", w[i].name, w[i].r, w[i].e.msg);
        char pid[32];
        read_file(w[i].name, "pid", pid, sizeof pid);
        ck_assert_int_eq((pid_t)atoi(pid), w[i].vm);
        for (int j = 0; j < i; j++)
            ck_assert_int_ne(w[i].vm, w[j].vm);
    }
    for (int i = 0; i < N; i++) {
        kill(w[i].vm, SIGKILL);
        ck_assert_int_eq(waitpid(w[i].vm, NULL, 0), w[i].vm);
    }
}
END_TEST

START_TEST(start_dies)
{
    make_stopped("box", "die");
    struct sbx_start_opts o = { .wait = 5 };
    struct sbx_err e = { 0 };
    enum sbx_state was;
    ck_assert_int_lt(sandbox_start("box", &o, &was, NULL, &e), 0);
    char want[PATH_MAX + 256];
    snprintf(want, sizeof want, "sandbox box: its moat process exited (status 3) while starting\n"
                                "box's log (%s/box/moat.log):\n\x1f" "first line\n\x1f\n\x1f"
                                "the VMM failed: no KVM", home);
    ck_assert_str_eq(e.msg, want);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/box/pid", home);
    ck_assert_int_ne(access(p, F_OK), 0);       /* undone */
}
END_TEST

START_TEST(start_cancelled)
{
    make_stopped("box", "mute");
    volatile sig_atomic_t stop = 1;
    struct sbx_start_opts o = { .wait = 5, .cancel = &stop };
    struct sbx_err e = { 0 };
    enum sbx_state was;
    ck_assert_int_eq(sandbox_start("box", &o, &was, NULL, &e), -EINTR);
    ck_assert_msg(!strncmp(e.msg, "sandbox box: interrupted while starting", 39), "%s", e.msg);
}
END_TEST

START_TEST(start_refused)
{
    struct sbx_start_opts o = { .wait = 0 };
    struct sbx_err e = { 0 };
    enum sbx_state was;
    ck_assert_int_eq(sandbox_start("nosuch", &o, &was, NULL, &e), -ENOENT);
    make_stopped("never", NULL);
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_start("never", &o, &was, NULL, &e), -ENOENT);
    ck_assert_str_eq(e.msg, "sandbox never has no snapshot to start from (it was never stopped); its process "
                            "has exited: moat rm it");
    make_stopped("tpl", "ready");
    put("tpl", "template", "agent=1\nfrom=\n");
    e = (struct sbx_err){ 0 };
    ck_assert_int_lt(sandbox_start("tpl", &o, &was, NULL, &e), 0);
    ck_assert_str_eq(e.msg, "tpl is a template, kept as it is for forking: moat fork tpl --name NAME");
}
END_TEST

/* Several at once, as a fork: one ready, one dead, each told apart. */
START_TEST(wait_several)
{
    make_stopped("a", "ready");
    make_stopped("b", "die");
    struct sbx s[2];
    struct sbx_starting k[2];
    struct sbx_err e[2] = { { 0 } };
    const char *names[2] = { "a", "b" };
    for (int i = 0; i < 2; i++) {
        char snap[PATH_MAX];
        ck_assert_int_eq(sandbox_open(&s[i], names[i], 1, &e[i]), 0);
        ck_assert_int_eq(sandbox_start_spawn(&s[i], sandbox_path(&s[i], "snap", snap, sizeof snap), true, &k[i],
                                             &e[i]), 0);
    }
    struct sbx_start_opts o = { .wait = 0 };
    ck_assert_uint_eq(sandbox_wait_ready_all(k, 2, &o), 1);
    ck_assert(!k[0].failed && k[0].ctl_ok);
    ck_assert(k[1].failed);
    ck_assert_str_eq(e[0].msg, "");
    ck_assert_msg(strstr(e[1].msg, "sandbox b: its moat process exited (status 3)"), "%s", e[1].msg);
    sandbox_start_undo(&k[0]);
    for (int i = 0; i < 2; i++)
        sandbox_close(&s[i]);
}
END_TEST

/* ---- forks (vmm/sandbox/fork.c) ---- */

/* A stopped parent to fork: its snapshot has state and memory. */
static void make_parent(const char *name, const char *config)
{
    make_sbx(name, config, 1);
    put(name, "snap/memory", "m");
}

START_TEST(fork_stopped)
{
    make_parent("p", "ephemeral=0\nrw_drive=0\nnet.tap=ptap\n");
    struct sbx_fork_child k[2];
    struct sbx_fork_opts o = { .count = 2, .stopped = true, .tapfmt = "t%u" };
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_fork("p", &o, k, &e), 0);
    ck_assert_str_eq(e.msg, "");
    char cfg[512];
    for (int i = 0; i < 2; i++) {
        char name[8], want[64];
        snprintf(name, sizeof name, "p-%d", i + 1);
        ck_assert_str_eq(k[i].name, name);
        ck_assert(k[i].made && k[i].code == 0 && k[i].pid == 0);
        ck_assert(exists(strcat(strcpy(want, name), "/snap/state")));
        read_file(name, "config", cfg, sizeof cfg);
        snprintf(want, sizeof want, "forked_from=p\nnet.tap=t%d\n", i + 1);
        ck_assert_msg(strstr(cfg, want) && !strstr(cfg, "ptap"), "%s", cfg);
    }
    struct sbx_info info;
    ck_assert_int_eq(sandbox_info("p-2", &info, &e), 0);
    ck_assert_int_eq(info.state, SBX_STOPPED);
    /* the names are taken now */
    ck_assert_int_eq(sandbox_fork("p", &o, k, &e), -EEXIST);
    ck_assert_str_eq(e.msg, "a sandbox named p-1 already exists");
    ck_assert(!k[0].made && k[0].code == -EEXIST);
}
END_TEST

START_TEST(fork_started)
{
    make_parent("p", "ephemeral=0\nrw_drive=0\n");
    setenv("FAKE_VMM_MODE", "ready", 1);
    struct sbx_fork_child k[3];
    struct sbx_fork_opts o = { .prefix = "kid", .count = 3 };
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_fork("p", &o, k, &e), 0);
    size_t order[3];
    ck_assert_uint_eq(sandbox_fork_told(k, 3, order), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert(k[i].made && k[i].code == 0 && k[i].pid > 0);
        ck_assert_int_eq(waitpid(k[i].pid, NULL, WNOHANG), 0);      /* our child, running */
        kill(k[i].pid, SIGKILL);
        waitpid(k[i].pid, NULL, 0);
    }
    ck_assert(exists("kid-3/base/state"));
}
END_TEST

START_TEST(fork_fails)
{
    make_parent("p", "ephemeral=0\nrw_drive=0\n");
    setenv("FAKE_VMM_MODE", "die", 1);
    struct sbx_fork_child k[2];
    struct sbx_fork_opts o = { .child = "c", .count = 1, .start = { .wait = 0 } };
    struct sbx_err e = { 0 };
    ck_assert_int_lt(sandbox_fork("p", &o, k, &e), 0);
    ck_assert(k[0].made && k[0].code < 0 && k[0].pid == 0);
    ck_assert(!exists("c"));
    size_t order[2];
    ck_assert_uint_eq(sandbox_fork_told(k, 1, order), 1);
    ck_assert_msg(strstr(k[0].err.msg, "sandbox c: its moat process exited (status 3) while starting\nc's log (") ==
                  k[0].err.msg, "%s", k[0].err.msg);
    /* refused before anything is made */
    make_parent("rw", "rw_drive=1\n");
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_fork("rw", &o, k, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "sandbox rw has a writable drive without a copy-on-write overlay"), "%s", e.msg);
    o.jail_uid = 7;
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_fork("p", &o, k, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "sandbox p is not jailed"), "%s", e.msg);
    ck_assert(!exists("c"));
    /* told in the order it was said */
    struct sbx_fork_child t[3] = { { .told_ns = 5 }, { .told_ns = 0 }, { .told_ns = 2 } };
    strcpy(t[0].err.msg, "x");
    strcpy(t[2].err.msg, "y");
    ck_assert_uint_eq(sandbox_fork_told(t, 3, order), 2);
    ck_assert(order[0] == 2 && order[1] == 0);
}
END_TEST

START_TEST(tap_names)
{
    char t[32];
    ck_assert_uint_eq(sandbox_tap_name("tap%u", 12, t, sizeof t), 5);
    ck_assert_str_eq(t, "tap12");
    ck_assert_uint_eq(sandbox_tap_name("a%ub", 7, t, sizeof t), 3);
    ck_assert_str_eq(t, "a7b");
    ck_assert(sandbox_tap_format_ok("tap%u", 1000));
    ck_assert(!sandbox_tap_format_ok("tap%d", 1));
    ck_assert(!sandbox_tap_format_ok("tap", 1));
    ck_assert(!sandbox_tap_format_ok("t%u%u", 1));
    ck_assert(!sandbox_tap_format_ok("a/%u", 1));
    ck_assert(!sandbox_tap_format_ok("a,%u", 1));
    ck_assert(sandbox_tap_format_ok("abcdefghijkl%u", 999));
    ck_assert(!sandbox_tap_format_ok("abcdefghijkl%u", 1000));
}
END_TEST

/* ---- exec and cp (vmm/sandbox/exec.c) against a fake agent (a thread
 * speaking the agent protocol on a Unix socket); a sandbox name resolved
 * to its agent in each state ---- */

/* The fake agent: answers EXEC (argv[0] "fail": an ERROR; "slow":
 * killed at its timeout; else "out\n", "err\n", exit 3), FILE_WRITE (kept
 * in got; "/ro": an ERROR) and FILE_READ ("hello", mode 0640;
 * "/missing": an ERROR). */

struct agent {
    int lfd;
    pthread_t th;
    char path[108];
    char got[64];
    size_t ngot;
    uint32_t mode;
};

static void answer(struct agent *a, struct agent_buf *b, const struct agent_hdr *h, const uint8_t *pl)
{
    if (h->type == AGENT_T_EXEC) {
        struct agent_exec e;
        ck_assert_int_eq(agent_exec_decode(pl, h->len, &e, NULL), 0);
        if (!strcmp(e.argv[0], "fail")) {
            agent_put_error(b, h->id, AGENT_E_SYS, ENOENT, "fail: not found");
        } else {
            struct agent_exit x = { AGENT_EXIT_CODE, 3, 0 };
            if (!strcmp(e.argv[0], "slow"))
                x = (struct agent_exit){ AGENT_EXIT_SIGNAL, 9, AGENT_EXIT_TIMEDOUT };
            agent_put_frame(b, AGENT_T_STDOUT, h->id, "out\n", 4);
            agent_put_frame(b, AGENT_T_STDERR, h->id, "err\n", 4);
            agent_put_exit(b, h->id, &x);
        }
        agent_exec_free(&e);
    } else if (h->type == AGENT_T_FILE_WRITE) {
        struct agent_fwrite w;
        ck_assert_int_eq(agent_fwrite_decode(pl, h->len, &w, NULL), 0);
        if (w.path_len == 3 && !memcmp(w.path, "/ro", 3)) {
            agent_put_error(b, h->id, AGENT_E_SYS, EROFS, "/ro: read-only");
            return;
        }
        size_t n = w.data_len < sizeof a->got - a->ngot ? w.data_len : sizeof a->got - a->ngot;
        memcpy(a->got + a->ngot, w.data, n);
        a->ngot += n;
        a->mode = w.mode;
        agent_put_frame(b, AGENT_T_OK, h->id, NULL, 0);
    } else if (h->type == AGENT_T_FILE_READ) {
        if (h->len == 8 && !memcmp(pl, "/missing", 8)) {
            agent_put_error(b, h->id, AGENT_E_SYS, ENOENT, "/missing: no such file");
            return;
        }
        agent_put_frame(b, AGENT_T_FILE_DATA, h->id, "hello", 5);
        agent_put_file_end(b, h->id, 0640, 5);
    }
}

static void serve_one(struct agent *a, int c)
{
    struct agent_buf b = { 0 };
    struct agent_rx rx = { 0 };
    uint8_t ver[4] = { 1, 0, 0, 0 }, buf[4096];
    agent_put_frame(&b, AGENT_T_READY, 0, ver, 4);
    for (;;) {
        if (b.len && send(c, b.p, b.len, MSG_NOSIGNAL) != (ssize_t)b.len)
            break;
        b.len = 0;
        ssize_t n = recv(c, buf, sizeof buf, 0);
        if (n <= 0 || agent_rx_push(&rx, buf, (size_t)n) < 0)
            break;
        struct agent_hdr h;
        const uint8_t *pl;
        while (agent_rx_next(&rx, &h, &pl, NULL) > 0)
            answer(a, &b, &h, pl);
    }
    agent_buf_free(&b);
    agent_rx_free(&rx);
    close(c);
}

static void *agent_thread(void *arg)
{
    struct agent *a = arg;
    int c;
    while ((c = accept(a->lfd, NULL, NULL)) >= 0)
        serve_one(a, c);
    return NULL;
}

static void agent_start(struct agent *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->path, sizeof a->path, "%s/agent.sock", home);
    listen_serve(a->path, agent_thread, a, &a->lfd, &a->th);
}

static void agent_stop(struct agent *a)
{
    shutdown(a->lfd, SHUT_RDWR);
    pthread_join(a->th, NULL);
    close(a->lfd);
}

static void target(struct sbx_agent_target *t, const char *path)
{
    sandbox_agent_target_init(t);
    t->path = path;
}

/* What fd (a pipe's read end, its write end closed) holds. */
static void drain(int fd, char *buf, size_t len)
{
    size_t n = 0;
    ssize_t k;
    while (n < len - 1 && (k = read(fd, buf + n, len - 1 - n)) > 0)
        n += (size_t)k;
    buf[n] = 0;
    close(fd);
}

static int run(const struct sbx_agent_target *t, const char *cmd, double timeout, char *out, char *errb,
               bool *timed_out, enum sbx_agent_step *step, struct sbx_err *e)
{
    int po[2], pe[2];
    ck_assert_int_eq(pipe(po), 0);
    ck_assert_int_eq(pipe(pe), 0);
    char *argv[] = { (char *)cmd, "x", NULL };
    char *env[] = { "A=1" };
    struct sbx_exec x = { .argv = argv, .argc = 2, .env = env, .envc = 1, .cwd = "/", .timeout = timeout,
                          .in_fd = -1, .out_fd = po[1], .err_fd = pe[1] };
    int r = sandbox_exec(t, &x, timed_out, step, e);
    close(po[1]);
    close(pe[1]);
    drain(po[0], out, 64);
    drain(pe[0], errb, 64);
    return r;
}

START_TEST(exec_runs)
{
    struct agent a;
    agent_start(&a);
    struct sbx_agent_target t;
    target(&t, a.path);
    char out[64], errb[64];
    bool to = true;
    enum sbx_agent_step step;
    struct sbx_err e = { 0 };
    ck_assert_int_eq(run(&t, "true", 0, out, errb, &to, &step, &e), 3);
    ck_assert_str_eq(out, "out\n");
    ck_assert_str_eq(errb, "err\n");
    ck_assert(!to);
    ck_assert_int_eq(step, SBX_AGENT_DONE);
    ck_assert_str_eq(e.msg, "");

    ck_assert_int_eq(run(&t, "slow", 0.5, out, errb, &to, &step, &e), 128 + 9);
    ck_assert(to);

    ck_assert_int_eq(run(&t, "fail", 0, out, errb, &to, &step, &e), -EREMOTEIO);
    ck_assert_int_eq(step, SBX_AGENT_REQUEST);
    ck_assert_str_eq(e.msg, "agent: fail: not found");
    ck_assert_int_eq(e.code, -EREMOTEIO);

    struct sbx_exec bad = { .argc = 0 };
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_exec(&t, &bad, NULL, &step, &e), -EINVAL);
    ck_assert_int_eq(step, SBX_AGENT_LOCAL);
    agent_stop(&a);
}
END_TEST

START_TEST(connect_fails)
{
    char nope[PATH_MAX];
    snprintf(nope, sizeof nope, "%s/nope.sock", home);
    struct sbx_agent_target t;
    target(&t, nope);
    t.hybrid = 1;
    t.wait = 0.3;
    char out[64], errb[64], want[PATH_MAX + 64];
    enum sbx_agent_step step;
    struct sbx_err e = { 0 };
    ck_assert_int_eq(run(&t, "true", 0, out, errb, NULL, &step, &e), -ENOENT);
    ck_assert_int_eq(step, SBX_AGENT_CONNECT);
    snprintf(want, sizeof want, "agent at %s (vsock): No such file or directory", nope);
    ck_assert_str_eq(e.msg, want);

    sandbox_agent_target_init(&t);      /* no path */
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_cp_in(&t, "/etc/hostname", "/x", &step, &e), -EINVAL);
}
END_TEST

START_TEST(cp_both_ways)
{
    struct agent a;
    agent_start(&a);
    struct sbx_agent_target t;
    target(&t, a.path);
    char src[PATH_MAX], dst[PATH_MAX], want[PATH_MAX + 64];
    snprintf(src, sizeof src, "%s/src", home);
    snprintf(dst, sizeof dst, "%s/dst", home);
    int fd = open(src, O_WRONLY | O_CREAT | O_EXCL, 0751);
    ck_assert_int_eq(write(fd, "data", 4), 4);
    close(fd);
    chmod(src, 0751);
    enum sbx_agent_step step;
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_cp_in(&t, src, "/tmp/f", &step, &e), 0);
    ck_assert_int_eq(step, SBX_AGENT_DONE);
    ck_assert_int_eq(a.ngot, 4);
    ck_assert_int_eq(memcmp(a.got, "data", 4), 0);
    ck_assert_int_eq(a.mode, 0751);

    ck_assert_int_eq(sandbox_cp_out(&t, "/tmp/f", dst, &step, &e), 0);
    struct stat sb;
    ck_assert_int_eq(stat(dst, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 07777, 0640);
    ck_assert_int_eq(sb.st_size, 5);

    ck_assert_int_eq(sandbox_cp_in(&t, src, "/ro", &step, &e), -EREMOTEIO);
    ck_assert_int_eq(step, SBX_AGENT_REQUEST);
    ck_assert_str_eq(e.msg, "guest: /ro: read-only");
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_cp_out(&t, "/missing", dst, &step, &e), -EREMOTEIO);
    ck_assert_str_eq(e.msg, "guest: /missing: no such file");

    e = (struct sbx_err){ 0 };
    snprintf(src, sizeof src, "%s/none", home);
    ck_assert_int_eq(sandbox_cp_in(&t, src, "/tmp/f", &step, &e), -ENOENT);
    ck_assert_int_eq(step, SBX_AGENT_LOCAL);
    snprintf(want, sizeof want, "%s: No such file or directory", src);
    ck_assert_str_eq(e.msg, want);
    e = (struct sbx_err){ 0 };
    snprintf(dst, sizeof dst, "%s/no/dir", home);
    ck_assert_int_eq(sandbox_cp_out(&t, "/tmp/f", dst, &step, &e), -ENOENT);
    ck_assert_int_eq(step, SBX_AGENT_LOCAL);
    agent_stop(&a);
}
END_TEST

START_TEST(target_by_name)
{
    struct sbx_agent_target t;
    sandbox_agent_target_init(&t);
    struct sbx_err e = { 0 };
    ck_assert_int_eq(sandbox_agent_target("nosuch", true, &t, &e), -ENOENT);
    ck_assert_ptr_null(t.path);

    make_stopped("tpl", "ready");   /* a template: not started */
    put("tpl", "template", "agent=1\nfrom=\n");
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_agent_target("tpl", false, &t, &e), -EINVAL);
    ck_assert_str_eq(e.msg, "sandbox tpl is stopped");
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_agent_target("tpl", true, &t, &e), -EPERM);
    ck_assert_str_eq(e.msg, "tpl is a template, kept as it is for forking: moat fork tpl --name NAME");

    make_stopped("never", NULL);    /* no snapshot, no process */
    put_pid("never", dead_pid());   /* a stale pid file: dead */
    e = (struct sbx_err){ 0 };
    ck_assert_int_eq(sandbox_agent_target("never", true, &t, &e), -EINVAL);
    ck_assert_str_eq(e.msg, "sandbox never is dead (its process has exited; see its moat.log and console.log)");
    ck_assert_ptr_null(t.path);
}
END_TEST

/* A stopped sandbox started (this binary as its VMM, saying "ready"):
 * its vsock socket the target, the wait raised to 10 s. */
START_TEST(target_starts)
{
    make_stopped("box", "ready");
    struct sbx_agent_target t;
    sandbox_agent_target_init(&t);
    t.wait = 2;
    struct sbx_err e = { 0 };
    ck_assert_msg(sandbox_agent_target("box", true, &t, &e) == 0, "%s", e.msg);
    ck_assert_str_eq(e.msg, "");
    char pidt[32] = "", p[PATH_MAX];
    snprintf(p, sizeof p, "%s/box/pid", home);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(pidt, sizeof pidt, f));
    fclose(f);
    pid_t vm = (pid_t)atoi(pidt);
    ck_assert_int_gt(vm, 1);
    snprintf(p, sizeof p, "%s/box/", home);
    ck_assert_ptr_eq(t.path, t.buf);
    ck_assert_int_eq(strncmp(t.path, p, strlen(p)), 0);
    ck_assert_int_eq(t.hybrid, 1);
    ck_assert(t.wait == 10);
    sandbox_agent_target_release(&t);
    kill(vm, SIGKILL);
    waitpid(vm, NULL, 0);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--control")) {   /* a fake VMM */
        for (;;)
            pause();
    }
    if (argc > 2 && !strcmp(argv[1], "restore"))        /* one sandbox_spawn started */
        return fake_vmm(argc, argv);
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
    tc = tcase_create("start");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, files);
    tcase_add_test(tc, log_tail);
    tcase_add_test(tc, start_ready);
    tcase_add_test(tc, start_dies);
    tcase_add_test(tc, start_cancelled);
    tcase_add_test(tc, start_refused);
    tcase_add_test(tc, wait_several);
    tcase_add_test(tc, start_threads);
    tcase_add_test(tc, fork_stopped);
    tcase_add_test(tc, fork_started);
    tcase_add_test(tc, fork_fails);
    tcase_add_test(tc, tap_names);
    suite_add_tcase(s, tc);
    tc = tcase_create("exec");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, exec_runs);
    tcase_add_test(tc, connect_fails);
    tcase_add_test(tc, cp_both_ways);
    tcase_add_test(tc, target_by_name);
    tcase_add_test(tc, target_starts);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
