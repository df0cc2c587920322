/* Starting a sandbox's VM process (start.h): spawning `moat run|restore`
 * (jailed in the one process for a jailed sandbox), waiting for it to be ready, and
 * moat start. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devices/blk/blk_kind.h"
#include "include/moat.h"
#include "vmm/agent/agent_client.h"
#include "vmm/base/clock.h"
#include "vmm/sandbox/jail.h"
#include "vmm/sandbox/start.h"

static void step_at(const struct sbx_start_opts *o, const char *name, uint64_t ns)
{
    if (o && o->phase)
        o->phase(o->ctx, name, ns);
}

static void step(const struct sbx_start_opts *o, const char *name)
{
    step_at(o, name, clock_mono_ns());
}

static int cancelled(const struct sbx_start_opts *o)
{
    return o && o->cancel && *o->cancel;
}

int sandbox_jail_restore_paths(const struct sbx *s, struct jail_paths *l, struct sbx_err *err)
{
    char p[PATH_MAX], why[512];
    memset(l, 0, sizeof *l);
    FILE *f = fopen(sandbox_path(s, "config", p, sizeof p), "re");
    if (!f)
        return 0;
    char **av = calloc(4096, sizeof *av), *line = malloc(65536);
    int n = 0, r = 0;
    if (!av || !line)
        r = -ENOMEM;
    else
        av[n++] = "moat", av[n++] = "run";
    int skip = 0;
    while (r == 0 && n < 4095 && fgets(line, 65536, f))
        if (!strncmp(line, "arg=", 4)) {
            line[strcspn(line, "\n")] = 0;
            /* Not the --drive options create got (create writes "--drive"
             * and its value as two lines): their overlay= is the first
             * owner's (a fork's parent's); every restore gets each drive,
             * with this sandbox's own overlay, from its drive.N lines. */
            if (skip || !strcmp(line + 4, "--drive")) {
                skip = !skip;
                continue;
            }
            if (!(av[n] = strdup(line + 4)))
                r = -ENOMEM;
            else
                n++;
        }
    fclose(f);
    if (r == 0 && (r = jail_inner_paths(n, av, l, why, sizeof why)) < 0)
        sandbox_err(err, r, "sandbox %s: %s", s->name, why);
    for (int i = 2; av && i < n; i++)
        free(av[i]);
    free(av);
    free(line);
    int k = 0;
    for (int i = 0; r == 0 && i < l->n; i++)
        if (access(l->p[i].path, F_OK) == 0)
            l->p[k++] = l->p[i];
    l->n = r == 0 ? k : 0;
    return r;
}

/* What a spawn needs, all made before fork() (or the jail's clone): the
 * child only runs async-signal-safe calls. */
struct spawn_plan {
    char conslog[PATH_MAX], log[PATH_MAX];
    char **av;
    struct jail_paths *rpaths;
    struct sbx_jail_run *jail;  /* a jailed sandbox's jail, or NULL */
    long maxfd;
};

/* A jailed sandbox's jail for the command av (AC words), as moat jail ran
 * it before: the sandbox's directory (its sockets, snapshots, disks)
 * exposed writable at the same path inside, the restore's paths (rpaths),
 * the command's own files (its kernel, initrd, drives); then prepared in
 * the caller (sandbox_jail_host). 0, or -errno with why. */
static int jail_plan(const struct sbx *s, struct spawn_plan *sp, int ac, struct sbx_err *err)
{
    const struct sbx_jail *sj = &s->jail;
    struct sbx_jail_run *j = sp->jail = malloc(sizeof *sp->jail);
    if (!j)
        return sandbox_err(err, -ENOMEM, "out of memory");
    sandbox_jail_defaults(j);
    j->id = sj->id;
    j->uid = sj->uid;
    j->gid = sj->gid;
    j->tun = sj->tun;
    j->detached = 1;
    if (sj->base[0])
        j->base = sj->base;
    if (sj->netns[0])
        j->netns = sj->netns;
    if (sj->cgroot[0])
        j->cgroot = sj->cgroot;
    char why[512];
    int r = jail_paths_add(&j->paths, s->dir, 1);
    for (int i = 0; r == 0 && i < sp->rpaths->n; i++)
        r = jail_paths_add(&j->paths, sp->rpaths->p[i].path, sp->rpaths->p[i].rw);
    if (r < 0)
        return sandbox_err(err, r, "sandbox %s: its paths cannot be exposed to its jail", s->name);
    for (int i = 0; i < sj->ncg && i < SBX_JAIL_RUN_CG_MAX; i++)
        if (jail_parse_cgroup(sj->cg[i], &j->cg[j->ncg++], why, sizeof why) < 0)
            return sandbox_err(err, -EINVAL, "sandbox %s: %s", s->name, why);
    if ((r = sandbox_jail_inner(j, ac, sp->av, err)) < 0)
        return r;
    return sandbox_jail_host(j, err);
}

/* Fill sp: its paths, the jail's paths, the whole argv. 0, or -errno with
 * why (sp's allocations freed by plan_free either way). */
static int spawn_plan(const struct sbx *s, const char *verb, char *const *extra, int nextra,
                      const char *expose_ro, struct spawn_plan *sp, struct sbx_err *err)
{
    sandbox_path(s, "console.log", sp->conslog, sizeof sp->conslog);
    sandbox_path(s, "moat.log", sp->log, sizeof sp->log);
    sp->rpaths = calloc(1, sizeof *sp->rpaths);
    sp->av = calloc((size_t)nextra + 14, sizeof *sp->av);
    if (!sp->rpaths || !sp->av)
        return sandbox_err(err, -ENOMEM, "out of memory");
    int r;
    if (s->jail.on && !strcmp(verb, "restore") && (r = sandbox_jail_restore_paths(s, sp->rpaths, err)) < 0)
        return r;
    /* A fork's shared snapshot (base/), bound in read-only over the
     * sandbox's own directory. */
    if (s->jail.on && expose_ro && (r = jail_paths_add(sp->rpaths, expose_ro, 0)) < 0)
        return sandbox_err(err, r, "sandbox %s: %s cannot be exposed to its jail", s->name, expose_ro);
    size_t n = 0;
    sp->av[n++] = "moat";
    sp->av[n++] = (char *)verb;
    sp->av[n++] = "--ready-fd";
    sp->av[n++] = "3";
    sp->av[n++] = "--control";
    sp->av[n++] = (char *)s->ctl;
    sp->av[n++] = "--console-log";
    sp->av[n++] = sp->conslog;
    sp->av[n++] = "--vsock";
    sp->av[n++] = (char *)s->vsock;
    for (int i = 0; i < nextra; i++)
        sp->av[n++] = extra[i];
    sp->av[n] = NULL;
    if (s->jail.on && (r = jail_plan(s, sp, (int)n, err)) < 0)
        return r;
    sp->maxfd = sysconf(_SC_OPEN_MAX);
    if (sp->maxfd <= 0 || sp->maxfd > 65536)
        sp->maxfd = 65536;
    return 0;
}

static void plan_free(struct spawn_plan *sp)
{
    free(sp->av);
    free(sp->rpaths);
    free(sp->jail);
}

/* The forked child: async-signal-safe calls only (the caller may have
 * threads), then exec. Never returns. */
static void spawn_child(const struct spawn_plan *sp, int wfd)
{
    setsid();
    int in = open("/dev/null", O_RDONLY);
    int out = open(sp->log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
    if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
        _exit(125);
    /* The pipe's write end becomes fd 3 (inherited: no close-on-exec). */
    if (wfd == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(wfd, 3) < 0)
        _exit(125);
    /* Keep nothing else of the caller's (a pipe held open would make a
     * `$(moat create ...)` wait for the sandbox to end): one close_range()
     * call, or (before Linux 5.9) a close() of each. */
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 4u, ~0u, 0u) < 0)
#endif
    {
        for (int fd = 4; fd < sp->maxfd; fd++)
            close(fd);
    }
    /* No signal blocked (a server's threads block those it takes by
     * sigwait), SIGPIPE as the default. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl = { .sa_handler = SIG_DFL };
    sigaction(SIGPIPE, &dfl, NULL);
    if (sp->jail) {
        /* Pid 1 of the jail's namespaces: into the jail, exec there (the
         * message of a failed step into moat.log, as moat jail's was). */
        struct sbx_err e;
        sandbox_jail_enter(sp->jail, &none, &e);
        const char *pre = "moat jail: ";
        if (write(2, pre, strlen(pre)) >= 0 && write(2, e.msg, strlen(e.msg)) >= 0)
            (void)!write(2, "\n", 1);
        _exit(125);
    }
    execv("/proc/self/exe", sp->av);
    /* strerrordesc_np: a table's text, no locale (async-signal-safe). */
    const char *e = strerrordesc_np(errno), *pre = "moat: exec /proc/self/exe: ";
    if (write(2, pre, strlen(pre)) >= 0 && write(2, e ? e : "?", e ? strlen(e) : 1) >= 0)
        (void)!write(2, "\n", 1);
    _exit(125);
}

pid_t sandbox_spawn(const struct sbx *s, const char *verb, char *const *extra, int nextra, int *ready_fd,
                    const char *expose_ro, struct sbx_err *err)
{
    struct spawn_plan sp = { 0 };
    int pp[2], r = spawn_plan(s, verb, extra, nextra, expose_ro, &sp, err);
    if (r < 0) {
        plan_free(&sp);
        return r;
    }
    if (pipe2(pp, O_CLOEXEC) < 0) {
        r = -errno;
        plan_free(&sp);
        return sandbox_err(err, r, "pipe: %s", SBX_STRERROR(-r));
    }
    /* A jailed sandbox's moat: the child of a clone into the jail's
     * namespaces (pid 1 there), jailed by itself before its exec. */
    pid_t pid = sp.jail ? sandbox_jail_clone() : fork();
    if (pid == 0)
        spawn_child(&sp, pp[1]);
    plan_free(&sp);
    close(pp[1]);
    if (pid < 0) {
        r = -errno;
        close(pp[0]);
        return sandbox_err(err, r, "%s: %s", sp.jail ? "clone" : "fork", SBX_STRERROR(-r));
    }
    *ready_fd = pp[0];
    char pidf[PATH_MAX], pidtxt[32];
    snprintf(pidtxt, sizeof pidtxt, "%d\n", (int)pid);
    if (sandbox_write_file(sandbox_path(s, "pid", pidf, sizeof pidf), pidtxt) < 0)
        sandbox_err(err, 0, "warning: cannot write %s", pidf);
    return pid;
}

/* k failed (code, why; NULL: its process died, said by its exit status),
 * its log's tail after the reason. */
static void start_failed(struct sbx_starting *k, int code, const char *why)
{
    int st = 0;
    k->failed = true;
    k->failed_ns = clock_mono_ns();
    if (k->rfd >= 0)
        close(k->rfd);
    k->rfd = -1;
    if (!why && waitpid(k->pid, &st, 0) == k->pid)
        sandbox_err(k->err, code, "sandbox %s: its moat process exited (%s %d) while starting", k->s->name,
                    WIFEXITED(st) ? "status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    else
        sandbox_err(k->err, code, "sandbox %s: %s", k->s->name, why ? why : "its moat process failed while starting");
    sandbox_log_tail(k->s, code, k->err);
}

/* Read what is there on k's ready pipe: "ready NS\n" then EOF. */
static void ready_read(struct sbx_starting *k)
{
    ssize_t r = read(k->rfd, k->buf + k->len, sizeof k->buf - 1 - k->len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (r > 0) {
        k->len += (size_t)r;
        k->buf[k->len] = 0;
        if (!strchr(k->buf, '\n') && k->len < sizeof k->buf - 1)
            return;
    }
    unsigned long long ns = 0;
    if (sscanf(k->buf, "ready %llu", &ns) == 1 && strchr(k->buf, '\n')) {
        k->ctl_ok = true;
        k->ready_ns = clock_mono_ns();
        k->first_run_ns = ns;
        close(k->rfd);
        k->rfd = -1;
        return;
    }
    start_failed(k, -ECHILD, NULL);     /* EOF (or garbage) before "ready": it died */
}

/* Wait for every ready pipe of k (until limit s after t0): 0, or -ENOMEM. */
static int wait_pipes(struct sbx_starting *k, size_t n, const struct sbx_start_opts *o, double t0, double limit)
{
    struct pollfd *pf = calloc(n, sizeof *pf);
    size_t *idx = calloc(n, sizeof *idx);
    if (!pf || !idx) {
        free(pf);
        free(idx);
        return -ENOMEM;
    }
    for (;;) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (k[i].rfd >= 0) {
                pf[m] = (struct pollfd){ .fd = k[i].rfd, .events = POLLIN };
                idx[m++] = i;
            }
        if (m == 0)
            break;
        int ms = (int)((limit - ((double)clock_mono_ns() / 1e9 - t0)) * 1000);
        if (cancelled(o) || ms <= 0) {
            for (size_t j = 0; j < m; j++)
                start_failed(&k[idx[j]], cancelled(o) ? -EINTR : -ETIMEDOUT,
                             cancelled(o) ? "interrupted while starting" : "the VMM did not answer in time");
            break;
        }
        int r = poll(pf, m, ms);
        if (r < 0 && errno != EINTR)
            break;
        for (size_t j = 0; r > 0 && j < m; j++)
            if (pf[j].revents)
                ready_read(&k[idx[j]]);
    }
    free(pf);
    free(idx);
    return 0;
}

/* Ping k's guest agent until it answers (backing off up to 100 ms), k's
 * process exits, the start is cancelled or limit s after t0 pass. */
static void wait_agent(struct sbx_starting *k, const struct sbx_start_opts *o, double t0, double limit)
{
    unsigned back_ms = 2;
    while (!k->failed) {
        struct agent_client c;
        char via[64];
        int keep;
        const char *vp = sandbox_sock_via(k->s, k->s->vsock, via, sizeof via, &keep);
        int cr = vp ? agent_client_connect(&c, vp, 1, AGENT_DEFAULT_PORT) : -1;
        if (keep >= 0)
            close(keep);
        if (cr == 0) {
            int r = agent_client_ping(&c);
            agent_client_close(&c);
            if (r == 0)
                break;
        }
        if (waitpid(k->pid, NULL, WNOHANG) == k->pid) {
            start_failed(k, -ECHILD, "its moat process exited while starting");
        } else if (cancelled(o)) {
            start_failed(k, -EINTR, "interrupted while starting");
        } else if ((double)clock_mono_ns() / 1e9 - t0 > limit) {
            char why[128];
            snprintf(why, sizeof why, "the guest agent did not answer within %g s", limit);
            start_failed(k, -ETIMEDOUT, why);
        } else {
            usleep(back_ms * 1000);
            back_ms = back_ms * 2 > 100 ? 100 : back_ms * 2;
        }
    }
}

unsigned sandbox_wait_ready_all(struct sbx_starting *k, size_t n, const struct sbx_start_opts *o)
{
    double t0 = (double)clock_mono_ns() / 1e9, limit = o->wait > 0 ? o->wait : 30;
    unsigned failed = 0;
    if (wait_pipes(k, n, o, t0, limit) < 0) {
        for (size_t i = 0; i < n; i++)
            start_failed(&k[i], -ENOMEM, "out of memory");
        return (unsigned)n;
    }
    uint64_t last_ready = 0, last_run = 0;
    for (size_t i = 0; i < n; i++) {
        if (k[i].ready_ns > last_ready)
            last_ready = k[i].ready_ns;
        if (k[i].first_run_ns > last_run)
            last_run = k[i].first_run_ns;
    }
    step_at(o, "first_run", last_run);
    step_at(o, "ctl_ready", last_ready);
    if (o->wait > 0) {
        for (size_t i = 0; i < n; i++)
            wait_agent(&k[i], o, t0, limit);
        step(o, "agent_ready");
    }
    for (size_t i = 0; i < n; i++)
        failed += k[i].failed;
    return failed;
}

/* Drive n's spec ("PATH[,ro][,id=NAME][,overlay=F][,direct][,bw=..]...")
 * as a restore's device override: "blk,id=ID,path=PATH" plus the keys an
 * override may give anew (ro, overlay, direct; rate limits stay the
 * snapshot's). ID is the drive's id= or the one it got by its ordinal (a
 * sandbox's drives come before its --device ones). An override names its
 * drive, so blk devices the sandbox was made with (--device blk,...) are
 * restored as recorded: with --drive overrides, moat restore wants one per
 * recorded drive. 0, or -1 if it does not fit. */
static int drive_override(const struct sbx *s, unsigned n, char *buf, size_t len)
{
    const char *spec = s->drive[n];
    size_t pl = strcspn(spec, ",");
    char id[VIRTIO_KIND_ID_MAX + 1] = "", keep[8192] = "";
    size_t kl = 0;
    for (const char *o = spec + pl; *o == ',';) {
        o++;
        size_t l = strcspn(o, ",");
        if (l > 3 && !strncmp(o, "id=", 3))
            snprintf(id, sizeof id, "%.*s", (int)(l - 3), o + 3);
        else if ((l == 2 && !strncmp(o, "ro", 2)) || (l == 6 && !strncmp(o, "direct", 6)) ||
                 (l > 8 && !strncmp(o, "overlay=", 8)))
            kl += (size_t)snprintf(keep + kl, kl < sizeof keep ? sizeof keep - kl : 0, ",%.*s", (int)l, o);
        o += l;
    }
    if (!id[0])
        blk_default_id(n, id);
    int w = snprintf(buf, len, "blk,id=%s,path=%.*s%s", id, (int)pl, spec, keep);
    return kl < sizeof keep && w > 0 && (size_t)w < len ? 0 : -1;
}

int sandbox_start_spawn(struct sbx *s, const char *snapdir, bool fork_child, struct sbx_starting *k,
                        struct sbx_err *err)
{
    memset(k, 0, sizeof *k);
    k->s = s;
    k->rfd = -1;
    k->err = err;
    char *extra[2 * MOAT_MAX_DRIVES + 4];
    char tapopt[32];
    char (*dev)[8400] = calloc(MOAT_MAX_DRIVES, sizeof *dev);   /* 134 KiB: not on a thread's stack */
    int n = 0, r = 0;
    if (!dev)
        return sandbox_err(err, -ENOMEM, "out of memory");
    if (fork_child)         /* its devices take an identity of their own (net: a MAC) */
        extra[n++] = "--fork-child";
    if (s->tap[0]) {        /* a fork's own TAP, not its parent's */
        snprintf(tapopt, sizeof tapopt, "tap=%s", s->tap);
        extra[n++] = "--net";
        extra[n++] = tapopt;
    }
    for (unsigned i = 0; r == 0 && i < s->ndrive; i++) {
        if (drive_override(s, i, dev[i], sizeof dev[i]) < 0)
            r = sandbox_err(err, -E2BIG, "sandbox %s: drive %u: its options are too long", s->name, i);
        extra[n++] = "--device";
        extra[n++] = dev[i];
    }
    extra[n++] = (char *)snapdir;
    if (r == 0) {
        k->pid = sandbox_spawn(s, "restore", extra, n, &k->rfd, fork_child ? snapdir : NULL, err);
        r = k->pid < 0 ? (int)k->pid : 0;
    }
    free(dev);
    return r;
}

void sandbox_start_undo(struct sbx_starting *k)
{
    if (k->rfd >= 0)
        close(k->rfd);
    k->rfd = -1;
    if (k->pid > 0) {
        kill(k->pid, SIGKILL);
        waitpid(k->pid, NULL, 0);
    }
    sandbox_kill_process(k->s, 0, k->err);
}

/* sandbox_start_from, the new process's pid into *pid (when not NULL). */
static int start_from(struct sbx *s, const char *snapdir, bool fork_child, const struct sbx_start_opts *o,
                      pid_t *pid, struct sbx_err *err)
{
    struct sbx_starting k;
    int r = sandbox_start_spawn(s, snapdir, fork_child, &k, err);
    if (r < 0)
        return r;
    step(o, "spawned");
    if (sandbox_wait_ready_all(&k, 1, o)) {
        sandbox_start_undo(&k);
        return err && err->code ? err->code : -EIO;
    }
    if (pid)
        *pid = k.pid;
    return 0;
}

int sandbox_start_from(struct sbx *s, const char *snapdir, bool fork_child, const struct sbx_start_opts *o,
                       struct sbx_err *err)
{
    return start_from(s, snapdir, fork_child, o, NULL, err);
}

int sandbox_start_locked(struct sbx *s, const struct sbx_start_opts *o, enum sbx_state *was, pid_t *vm,
                         struct sbx_err *err)
{
    pid_t pid;
    double up;
    enum sbx_state st = sandbox_state(s, &pid, &up);
    if (was)
        *was = st;
    if (vm)
        *vm = 0;
    if (st == SBX_RUNNING || st == SBX_PAUSED)
        return 0;
    char snap[PATH_MAX], p[PATH_MAX];
    if (access(sandbox_path(s, "template", p, sizeof p), F_OK) == 0)
        return sandbox_err(err, -EPERM, "%s is a template, kept as it is for forking: moat fork %s --name NAME",
                           s->name, s->name);
    int r = sandbox_promote_snap_new(s, err);  /* a stop interrupted after its snapshot */
    if (r < 0)
        return r;
    if (access(sandbox_path(s, "snap/state", p, sizeof p), F_OK) != 0)
        return sandbox_err(err, -ENOENT, "sandbox %s has no snapshot to start from (it was never stopped)%s",
                           s->name, st == SBX_DEAD ? "; its process has exited: moat rm it" : "");
    if ((r = sandbox_kill_process(s, pid, err)) < 0)
        return r;
    step(o, "state");
    return start_from(s, sandbox_path(s, "snap", snap, sizeof snap), false, o, vm, err);
}

int sandbox_start(const char *name, const struct sbx_start_opts *o, enum sbx_state *was, pid_t *vm,
                  struct sbx_err *err)
{
    int r;
    struct sbx *s = sandbox_open_alloc(name, 1, &r, err);
    if (!s)
        return r;
    step(o, "locked");
    r = sandbox_start_locked(s, o, was, vm, err);
    sandbox_free(s);
    return r;
}
